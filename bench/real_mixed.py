"""Ingest cost of a vLLM log of half stats lines, half uvicorn access lines: the real lines of
sample_logs/vllm/real-0.32-overload (a recorded vLLM 0.32 server under a benchmark client and a
Prometheus scraper), its `Engine 000:` stats lines and its access lines alternated, one stats
line a second, until the log has `--lines` lines (about 155 bytes a line). What a server that
logs no requests, only stats and its HTTP front end, writes all day. The stats lines' figures
are drawn anew for every line (seeded), as a busy server's are: a parser that read each
distinct line once would otherwise look faster here than on a real log.

Examples:
    python bench/real_mixed.py --lines 1000000 --out /tmp/mixed.log
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import random
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "sample_logs" / "vllm" / "real-0.32-overload" / "vllm-cpu.log.gz"
STATS = re.compile(r"^(\(APIServer pid=\d+\) INFO )\d\d-\d\d \d\d:\d\d:\d\d( \[loggers\.py:\d+\] Engine 000: Avg prompt throughput: .*)$")
ACCESS = re.compile(r'^(?:\(APIServer pid=\d+\) )?INFO: +[\d.]+:\d+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}')
START = dt.datetime(2026, 5, 12, 8, 0, 0)
FIGURE = re.compile(r"(throughput: |Running: |Waiting: |usage: |hit rate: )[0-9.]+")


@dataclass(frozen=True)
class Built:
    lines: int
    stats_lines: int
    access_lines: int


def build(out: Path, n_lines: int) -> Built:
    """Write the log; the counts are the builder's own (what the ingest must find)."""
    text = gzip.decompress(SOURCE.read_bytes()).decode().splitlines()
    stats = [m.groups() for m in map(STATS.match, text) if m]
    access = [t for t in text if ACCESS.match(t)]
    if not stats or not access:
        raise SystemExit(f"bench: {SOURCE} holds no stats or no access lines")
    pairs = n_lines // 2
    rng = random.Random(11)

    def figure(m: re.Match) -> str:
        key = m.group(1)
        if key in ("Running: ", "Waiting: "):
            return f"{key}{rng.randrange(256)}"
        return f"{key}{rng.uniform(0, 100 if key in ('usage: ', 'hit rate: ') else 9000):.1f}"

    with out.open("w") as f:
        for i in range(pairs):
            head, body = stats[i % len(stats)]
            t = START + dt.timedelta(seconds=i)
            f.write(f"{head}{t:%m-%d %H:%M:%S}{FIGURE.sub(figure, body)}\n{access[i % len(access)]}\n")
    return Built(2 * pairs, pairs, pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__[__doc__.index("Examples:"):],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    b = build(a.out, a.lines)
    print(f"{a.out}: {b.lines:,} lines ({b.stats_lines:,} stats, {b.access_lines:,} access), "
          f"{a.out.stat().st_size / 1e6:,.0f} MB")


if __name__ == "__main__":
    main()
