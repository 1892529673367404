"""Ingest cost of a delta-heavy log in vLLM 0.32's real format: the recorded server log of
sample_logs/vllm/real-0.32-b (output logging on; its `streaming delta` lines carry no token
ids), its request part repeated with fresh request ids and times until the log has
`--lines` lines, ingested by `servelens ingest` in a child process.

Examples:
    python bench/real_delta.py --lines 400000 --runs 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "sample_logs" / "vllm" / "real-0.32-b" / "vllm-cpu.log.gz"
HEADER_TIME = re.compile(r"^(\(\w+ pid=\d+\) \w+ )(\d\d-\d\d \d\d:\d\d:\d\d)")
REQUEST_ID = re.compile(r"\b(chatcmpl|cmpl)-")


def build(out: Path, n_lines: int) -> int:
    lines = gzip.decompress(SOURCE.read_bytes()).decode().splitlines()
    start = next(i for i, t in enumerate(lines) if "Application startup complete." in t) + 1
    end = next(i for i, t in enumerate(lines) if "shutdown triggered" in t)
    head, body, tail = lines[:start], lines[start:end], lines[end:]
    span = 120  # seconds each copy of the body is shifted by (the body lasts less)
    written = 0
    with out.open("w") as f:
        f.write("\n".join(head) + "\n")
        written += len(head)
        copy = 0
        while written + len(tail) < n_lines:
            shift = dt.timedelta(seconds=span * copy)

            def retime(m: re.Match) -> str:
                t = dt.datetime.strptime("2026-" + m.group(2), "%Y-%m-%d %H:%M:%S") + shift
                return m.group(1) + t.strftime("%m-%d %H:%M:%S")

            for t in body[: n_lines - len(tail) - written]:
                t = HEADER_TIME.sub(retime, t)
                f.write(REQUEST_ID.sub(rf"\1-r{copy}-", t) + "\n")
                written += 1
            copy += 1
        f.write("\n".join(tail) + "\n")
        written += len(tail)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__[__doc__.index("Examples:"):],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    exe = str(Path(sys.executable).with_name("servelens"))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "vllm-cpu-delta.log"
        n = build(log, a.lines)
        deltas = sum(1 for t in log.open() if "(streaming delta)" in t)
        times = []
        for i in range(a.runs):
            store = Path(tmp) / f"store{i}"
            t0 = time.perf_counter()
            subprocess.run([exe, "ingest", str(log), "--store", str(store)], check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        q = subprocess.run([exe, "sql", "--store", str(Path(tmp) / "store0"), "--format", "json",
                            "select count(*) as events, count(*) filter (where event = 'request_output') as outputs, "
                            "(select count(*) from requests where e2e_s is not null) as finished, "
                            "(select count(*) from requests where ttft_s is not null) as with_ttft from events"],
                           check=True, capture_output=True, text=True)
        row = json.loads(q.stdout)[0]
        print(json.dumps({"lines": n, "bytes": log.stat().st_size, "delta_lines": deltas, **row,
                          "ingest_s": sorted(times), "median_s": sorted(times)[len(times) // 2]}))


if __name__ == "__main__":
    main()
