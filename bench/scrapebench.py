"""Scrape latency of `servelens serve` while a tailer writes (issue 19: p99 < 50 ms).

1. Simulate vLLM logs (`servelens simulate`, REQUESTS requests in total over the instances)
   and ingest all but the last part of each log into a fresh store (the history);
2. start `servelens tail --serve-port` on a copy of the logs' directory, then append the held
   back lines at a steady rate, so the tailer commits (and the exporter re-evaluates its
   snapshot after each commit) during the whole measurement;
3. scrape GET /metrics SCRAPES times, one every INTERVAL_S, and report p50 / p99 / max of the
   scrape latency, plus how long the snapshot's evaluations took (from the exposition).

With --store DIR the history is that store (e.g. the 10M-request query store of
`bench/run.py --only query`, bench/data/stores/query) and every simulated line is appended live.
With --mode serve the exporter is a separate `servelens serve` process beside the tailer (the
deployment docs/prometheus.md suggests); with --mode tail it runs inside `servelens tail
--serve-port`, sharing the tailer's interpreter.

Usage: python bench/scrapebench.py [--requests N] [--store DIR] [--mode serve|tail] [--scrapes N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent / "servelens"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(requests: int, scrapes: int, interval_s: float, work: Path, store: Path | None = None,
        mode: str = "serve") -> dict:
    sim = work / "sim"
    rate, instances = 20.0, 2
    duration_s = 120 if store is not None else max(60, int(requests / (rate * instances)))
    subprocess.run([str(BIN), "simulate", "--engine", "vllm", "--variant", "v0", "--scenario", "steady",
                    "--duration", f"{duration_s}s", "--rate", str(rate), "--instances", str(instances),
                    "--out", str(sim), "--start", "2026-05-12T23:00:00Z"], check=True, capture_output=True)
    logs = sorted(sim.glob("*.log"))
    live = work / "live"
    live.mkdir()
    held: dict[Path, list[bytes]] = {}
    for log in logs:
        lines = log.read_bytes().splitlines(keepends=True)
        cut = 0 if store is not None else int(len(lines) * 0.9)
        (live / log.name).write_bytes(b"".join(lines[:cut]))
        held[live / log.name] = lines[cut:]
    ingest_s = None
    if store is None:
        store = work / "store"
        t0 = time.perf_counter()
        subprocess.run([str(BIN), "ingest", str(live), "--store", str(store), "-q"], check=True, capture_output=True)
        ingest_s = round(time.perf_counter() - t0, 1)
    port = free_port()
    procs = []
    if mode == "tail":
        procs.append(subprocess.Popen([str(BIN), "tail", str(live), "--store", str(store), "--from-end", "-q",
                                       "--serve-port", str(port)], stderr=subprocess.DEVNULL))
    else:
        procs.append(subprocess.Popen([str(BIN), "tail", str(live), "--store", str(store), "--from-end", "-q"],
                                      stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen([str(BIN), "serve", "--store", str(store), "--port", str(port)],
                                      stderr=subprocess.DEVNULL))
    url = f"http://127.0.0.1:{port}/metrics"
    stop = threading.Event()

    def writer() -> None:
        # append the held-back lines over the measurement: a commit every flush interval
        total = sum(len(v) for v in held.values())
        per_tick = max(1, total // max(1, int(scrapes * interval_s / 0.1)))
        while not stop.is_set() and any(held.values()):
            for path, rest in held.items():
                chunk, held[path] = rest[:per_tick], rest[per_tick:]
                if chunk:
                    with open(path, "ab") as f:
                        f.write(b"".join(chunk))
            time.sleep(0.1)

    try:
        deadline = time.monotonic() + 600
        while True:  # the first snapshot
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if b"servelens_requests_waiting{" in r.read():
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the exporter did not publish a snapshot within 600 s")
            time.sleep(0.5)
        w = threading.Thread(target=writer, daemon=True)
        w.start()
        lat, refresh = [], []
        for _ in range(scrapes):
            t = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as r:
                body = r.read()
            lat.append(time.perf_counter() - t)
            for line in body.decode().splitlines():
                if line.startswith("servelens_exporter_refresh_duration_seconds "):
                    refresh.append(float(line.split()[1]))
            time.sleep(interval_s)
        stop.set()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                # the tailer commits a compaction it started before exiting: minutes on a big store
                p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
    n_req = int(subprocess.run([str(BIN), "sql", "select count(*) from requests", "--store", str(store), "--format", "csv"],
                               check=True, capture_output=True, text=True).stdout.splitlines()[1])
    ms = np.array(lat) * 1000
    return {"mode": mode, "requests_in_store": n_req, "ingest_s": ingest_s, "scrapes": scrapes,
            "scrape_ms_p50": round(float(np.percentile(ms, 50)), 2), "scrape_ms_p99": round(float(np.percentile(ms, 99)), 2),
            "scrape_ms_max": round(float(ms.max()), 2), "exposition_bytes": len(body),
            "snapshot_refresh_s_max": round(max(refresh), 2) if refresh else None}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between scrapes")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    ap.add_argument("--store", type=Path, help="an existing store as the history (it receives the live lines)")
    ap.add_argument("--mode", choices=("serve", "tail"), default="serve",
                    help="serve: a servelens serve process beside the tailer; tail: servelens tail --serve-port")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="servelens-scrapebench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = run(args.requests, args.scrapes, args.interval, work, args.store, args.mode)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
