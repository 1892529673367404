"""The whole-process CPU of `servelens sql "select 1"` (user + sys of the process tree, the
children it waited for included: what /usr/bin/time -f "%U %S" reports, read from wait4()
by bench/measure.py to the microsecond rather than to its hundredths), for builds run
alternately in the same minutes.

    python bench/sqlfloor.py --store S --runs 15 A=/path/to/venvA/bin/servelens B=...
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import run_cmd  # noqa: E402


def one(exe: str, store: str, query: str) -> float:
    return run_cmd([exe, "sql", query, "--store", store]).cpu_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+", help="NAME=path/to/servelens")
    ap.add_argument("--store", required=True)
    ap.add_argument("--query", default="select 1")
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    builds = dict(b.split("=", 1) for b in a.builds)
    env_note = "PYTHONDONTWRITEBYTECODE set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "byte code written"
    times: dict[str, list[float]] = {n: [] for n in builds}
    for exe in builds.values():  # warm the page cache and byte code
        one(exe, a.store, a.query)
    for _ in range(a.runs):
        for name, exe in builds.items():
            times[name].append(one(exe, a.store, a.query))
    print(f"{time.strftime('%H:%M UTC', time.gmtime())}, {a.runs} runs each, alternating; {env_note}")
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.4f} CPU-s, min {min(ts):.4f}, max {max(ts):.4f}")


if __name__ == "__main__":
    main()
