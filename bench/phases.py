"""Where ingest time goes, phase by phase, on one thread: split into lines, record starts,
parse, finalize, staging (Arrow + Parquet as the store writes it). CPU seconds per phase (all
threads: polars has its own pool) and MB/s, so a parser change can be measured even on a busy machine.

    python bench/phases.py ENGINE FILE... [--repeat N] [--ingest]

--ingest: then the whole `servelens ingest` of the files into a new store (without the rollup
refresh), and the rollup refresh that `servelens ingest` runs at its end, as two more phases:
what the refresh costs against the ingest it follows.

Not part of `make bench`: a tool for working on the parsers (bench/RESULTS.md cites it).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from servelens.parsers import get_parser
from servelens.parsers.base import ParseContext, finalize
from servelens.parsers.schema import events_to_arrow
from servelens.pipeline.sources import lines as L
from servelens.pipeline.store.commit import PARQUET_OPTIONS, by_time


class Clock:
    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}

    def run(self, phase: str, fn, *args, **kw):
        # process time: polars runs expressions on its own thread pool
        t0 = time.process_time()
        out = fn(*args, **kw)
        self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - t0
        return out


def profile(engine: str, files: list[Path]) -> tuple[dict[str, float], int, int, int]:
    """Phase CPU seconds over the files, with bytes, lines and events."""
    parser = get_parser(engine)
    clock = Clock()
    nbytes = nlines = nevents = 0
    for path in files:
        ctx = ParseContext(engine=engine, source=str(path), instance=path.stem, year=2026)
        with open(path, "rb") as f:
            data_iter = _blocks(f)
            for block, last in data_iter:
                nbytes += len(block)
                lines, _ = clock.run("split", L.decode_lines, block, nlines + 1)
                nlines += lines.height
                if not last:
                    clock.run("record_starts", _tail_starts, parser, lines)
                raw = clock.run("parse", parser.parse, lines, ctx)
                ev = clock.run("finalize", finalize, raw, ctx, getattr(parser, "CARRY_FORWARD", ()))
                nevents += ev.height
                ev = clock.run("finalize", L.trim_messages, ev)
                clock.run("staging", _stage, ev)
    return clock.cpu, nbytes, nlines, nevents


def _blocks(f):
    """8 MiB blocks cut at a newline (record hold-back is timed, not applied)."""
    rest = b""
    while True:
        block = f.read(L.DEFAULT_BLOCK_BYTES)
        buf = rest + block
        if not block:
            if buf:
                yield buf, True
            return
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            rest = buf
            continue
        rest = buf[cut:]
        yield buf[:cut], False


def _tail_starts(parser, lines):
    return L.last_record_start(parser, lines["text"])


def _stage(events) -> None:
    table = events_to_arrow(by_time(events))  # sorted as the store sorts a batch
    pq.write_table(table, io.BytesIO(), **PARQUET_OPTIONS)


def ingest_then_refresh(engine: str, files: list[Path]) -> dict[str, float]:
    """CPU seconds of the ingest (no refresh) and of the rollup refresh after it."""
    import shutil
    import tempfile

    from servelens.pipeline.ingest import ingest
    from servelens.pipeline.store.commit import Store

    tmp = Path(tempfile.mkdtemp(prefix="servelens-phases-"))
    try:
        clock = Clock()
        clock.run("ingest (store)", ingest, files, tmp / "store", engine=engine, year=2026, rollups=False)
        t0 = time.process_time()
        # what the refresh adds to an ingest process, its imports (DuckDB) too
        from servelens.pipeline.query import rollups

        with Store.open(tmp / "store", purpose="bench") as st:
            rollups.refresh(st)
        clock.cpu["rollup refresh"] = time.process_time() - t0
        return clock.cpu
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("engine")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--repeat", type=int, default=1, help="runs; the fastest total is shown")
    p.add_argument("--ingest", action="store_true", help="also the whole ingest and the rollup refresh after it")
    a = p.parse_args(argv)
    best = None
    for _ in range(a.repeat):
        cpu, nbytes, nlines, nevents = profile(a.engine, a.files)
        if best is None or sum(cpu.values()) < sum(best[0].values()):
            best = (cpu, nbytes, nlines, nevents)
    cpu, nbytes, nlines, nevents = best
    total = sum(cpu.values())
    mb = nbytes / 1e6
    print(f"{a.engine}: {mb:,.0f} MB, {nlines:,} lines, {nevents:,} events; CPU {total:.2f} s "
          f"= {mb / total:,.0f} MB per CPU-second")
    for phase, s in cpu.items():
        print(f"  {phase:<14} {s:6.2f} s  {100 * s / total:4.0f}%  {mb / s if s else 0:8,.0f} MB/s")
    if a.ingest:
        whole = ingest_then_refresh(a.engine, a.files)
        ing, ref = whole["ingest (store)"], whole["rollup refresh"]
        print(f"  {'ingest (store)':<14} {ing:6.2f} s  (the whole ingest, in process, without the refresh)")
        print(f"  {'rollup refresh':<14} {ref:6.2f} s  {100 * ref / ing:4.0f}% of the ingest it follows")


if __name__ == "__main__":
    sys.exit(main())
