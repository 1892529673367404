"""Ingest of a delta-heavy vLLM V1 log (issue 17): `--enable-log-outputs` prints one
`Generated response X (streaming delta)` line per streamed chunk, ~75 lines per request.

Simulates one vLLM V1 server with output logging (variant `v1_outputs`, `steady` traffic at
--rate requests/s for --duration), ingests it with `servelens ingest` in a child process
(--runs times, fresh store each run, median time, maximum RSS from wait4) and prints a
Markdown section for bench/RESULTS.md: lines, requests, stored events, time, lines/s, RSS.

    .venv/bin/python bench/outputs.py --rate 8.5 --duration 10m --runs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servelens.pipeline.query.connect import run as query
from servelens.pipeline.simulate import simulate


def timed(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"{' '.join(cmd)} failed ({status})")
    return time.perf_counter() - t0, usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=8.5)
    ap.add_argument("--duration", default="10m")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servelens-outputs-bench-"))
    try:
        exe = str(Path(sys.executable).with_name("servelens"))
        rows = []
        for variant in ("v1_outputs", "v1"):
            out = work / variant
            summary = simulate("vllm", "steady", args.duration, seed=args.seed, out_dir=out, rate=args.rate,
                               instances=1, variant=variant)
            log = out / summary["files"][0]
            raw = log.read_bytes()
            n_lines = raw.count(b"\n")
            n_delta = raw.count(b"(streaming delta)")
            times, rss = [], []
            for _ in range(args.runs):
                shutil.rmtree(out / "store", ignore_errors=True)
                t, r = timed([exe, "ingest", str(log), "--store", str(out / "store"), "--year", "2026"])
                times.append(t)
                rss.append(r)
            ev = query(out / "store", "select count(*) as n, count(*) filter (where event = 'request_output') as folded "
                                      "from events").row(0)
            req = query(out / "store", "select count(*) filter (where status = 'finished') as fin, count(ttft_s) as ttft "
                                       "from requests").row(0)
            rows.append((variant, len(raw), n_lines, n_delta, sum(summary["requests"].values()), ev, req, times, rss))
        print("## Delta-heavy vLLM V1 log (output logging)\n")
        print(f"`bench/outputs.py --rate {args.rate} --duration {args.duration} --runs {args.runs}`: one simulated "
              "vLLM V1 server (`steady`), with `--enable-log-outputs` (`v1_outputs`) and without (`v1`, the same "
              "requests), ingested by `servelens ingest` in a child process; median of the runs, peak RSS from wait4.\n")
        print("| variant | input | lines | delta lines | requests | stored events (request_output) | finished / with TTFT "
              "| ingest | lines/s | peak RSS |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for variant, size, n_lines, n_delta, n_req, ev, req, times, rss in rows:
            t = statistics.median(times)
            print(f"| {variant} | {size / 1e6:,.1f} MB | {n_lines:,} | {n_delta:,} | {n_req:,} | {ev[0]:,} ({ev[1]:,}) "
                  f"| {req[0]:,} / {req[1]:,} | {t:.2f} s | {n_lines / t:,.0f} | {max(rss) // 1024} MiB |")
        print("\nRuns (s): " + "; ".join(f"{r[0]} " + ", ".join(f"{t:.2f}" for t in r[7]) for r in rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
