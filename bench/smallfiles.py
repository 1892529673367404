"""Ingest of a directory of many small files (one read block each, one instance each: a
fleet's pods), timed in CPU and wall seconds: what parsing the next small file on a second
thread (pipeline/ingest.py `_files_in_order`) buys. Not part of `make bench`.

    python bench/smallfiles.py DIR [--runs N] [--sequential]

`--sequential` reads the files one by one (as before the change), for a same-run pair.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from servelens.pipeline import ingest as ingest_mod


def run(src: Path, sequential: bool) -> tuple[float, float, int]:
    store = Path(tempfile.mkdtemp(prefix="smallfiles-"))
    real = ingest_mod._small
    if sequential:
        ingest_mod._small = lambda *a: False
    try:
        c0, w0 = time.process_time(), time.perf_counter()
        s = ingest_mod.ingest([src], store / "store", rollups=False)
        return time.process_time() - c0, time.perf_counter() - w0, s.events
    finally:
        ingest_mod._small = real
        shutil.rmtree(store, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--runs", type=int, default=2)
    a = p.parse_args(argv)
    files = [f for f in a.dir.rglob("*") if f.is_file()]
    mb = sum(f.stat().st_size for f in files) / 1e6
    print(f"{len(files)} files, {mb:,.0f} MB")
    for i in range(a.runs):  # interleaved: both modes see the same load
        for sequential in (True, False):
            cpu, wall, n = run(a.dir, sequential)
            print(f"  {'one by one' if sequential else 'two at once'}: wall {wall:6.2f} s  CPU {cpu:6.2f} s  "
                  f"{mb / wall:6.1f} MB/s  ({n:,} events)", flush=True)
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
