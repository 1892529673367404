"""Ingest of a directory of many tiny files (a fleet's pods, one or two lines each): the first
ingest and a second one that finds nothing new, in wall and CPU seconds, with a same-run
baseline: the first ingest without the per-shape detection memo (pipeline/detect_memo.py),
over a subset (it costs tens of milliseconds per file). Not part of `make bench`.

    python bench/manyfiles.py [--files 20000] [--baseline-files 1000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from servelens.pipeline import ingest as ingest_mod


def make(d: Path, n: int, seed: int = 7) -> None:
    rnd = random.Random(seed)
    for i in range(n):
        sub = d / f"d{i // 1000:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"pod-{i:05d}.log").write_text(
            f"INFO 06-10 14:{rnd.randint(0, 59):02d}:{rnd.randint(0, 59):02d} metrics.py:341] Avg prompt "
            f"throughput: {rnd.randint(0, 999)}.0 tokens/s, Avg generation throughput: {rnd.randint(0, 99)}.0 "
            f"tokens/s, Running: {rnd.randint(0, 9)} reqs, Swapped: 0 reqs, Pending: {rnd.randint(0, 9)} reqs, "
            f"GPU KV cache usage: {rnd.randint(0, 99)}.0%, CPU KV cache usage: 0.0%.\n")


def timed(src: Path, store: Path, memo: bool = True) -> tuple[float, float, int, int]:
    real = ingest_mod.DetectMemo
    if not memo:
        ingest_mod.DetectMemo = lambda detect: detect  # every file detected on its own
    try:
        c0, w0 = time.process_time(), time.perf_counter()
        s = ingest_mod.ingest([src], store, rollups=False)
        return time.perf_counter() - w0, time.process_time() - c0, len(s.files), s.events
    finally:
        ingest_mod.DetectMemo = real


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--baseline-files", type=int, default=1_000)
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    a = p.parse_args(argv)
    work = Path(a.dir or tempfile.mkdtemp(prefix="manyfiles-"))
    try:
        make(work / "logs", a.files)
        make(work / "subset", a.baseline_files)
        rows = [
            ("baseline: first ingest, no memo", *timed(work / "subset", work / "st0", memo=False)),
            ("first ingest, same subset", *timed(work / "subset", work / "st1")),
            ("first ingest, all files", *timed(work / "logs", work / "st2")),
            ("second ingest, nothing new", *timed(work / "logs", work / "st2")),
        ]
        for name, wall, cpu, files, events in rows:
            print(f"{name:34s} {files:7,d} files  wall {wall:7.1f} s  CPU {cpu:7.1f} s  "
                  f"{1000 * wall / files:6.2f} ms/file  ({events:,} events)", flush=True)
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
    finally:
        if a.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
