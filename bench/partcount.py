"""Connect cost against the store's part count: `select count(*) from events` on a store of N
small parts, through the guarded path (`query.run`, which binds only the views a query
reads) and, in the same run, through the old path (every view bound at connect).

    python bench/partcount.py [--parts 3000] [--source STORE] [--runs 3] [--dir DIR]

The store is built by writing N parts directly (the events of `--source`, by default the
sample incident ingested afresh, cut into N slices in time order, each a valid committed part
of the engine/day layout, about N in all), so building it takes seconds, not N ingests. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "sample_logs"


def build(store: Path, source: Path, n_parts: int) -> int:
    """A store of about `n_parts` committed parts holding the events of `source`; returns the
    number of events. Written through the store's own staging (`Store.stage_events`, one
    part per (engine, day) of each slice) and one commit, so the parts have whatever layout
    and manifest entries the store writes."""
    import polars as pl

    from servelens.pipeline.query.connect import run
    from servelens.pipeline.store.commit import Store, new_txid

    events = run(source, "select * from events", limits=None)
    events = events.sort("engine", "ts", "line", nulls_last=True)
    # N contiguous slices in (engine, time) order, each cut again at (engine, day) boundaries
    events = events.with_columns((pl.int_range(pl.len()) * n_parts // pl.len()).alias("_part"))
    with Store.open(store, purpose="bench partcount") as st:
        moves = []
        for (_,), rows in events.group_by(["_part"], maintain_order=True):
            moves += st.stage_events(rows.drop("_part"), new_txid())
        st.commit(moves)
    return events.height


def _time(code: str, store: Path, runs: int) -> list[float]:
    """Seconds per run of `code` in a fresh process (nothing cached between runs)."""
    out = []
    for _ in range(runs):
        r = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True, check=True)
        out.append(float(r.stdout.strip().splitlines()[-1]))
    return out


PRELUDE = "import sys, time\nfrom servelens.pipeline.query import connect as query\nstore = sys.argv[1]\nt0 = time.perf_counter()\n"
EAGER = PRELUDE + ("con = query.connect(store)\n"
                   "con.sql('select count(*) from events').fetchall()\n"
                   "print(time.perf_counter() - t0)\n")
LAZY = PRELUDE + ("query.run(store, 'select count(*) from events')\n"
                  "print(time.perf_counter() - t0)\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", type=int, default=3000)
    p.add_argument("--source", type=Path, default=None, help="store whose events fill the parts (default: the sample incident)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", type=Path, default=None, help="where to build (default: a temporary directory)")
    p.add_argument("--store", type=Path, default=None, help="time this store as it is (built by an earlier run) instead of building one")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="servelens-partcount-") as tmp:
        base = a.dir or Path(tmp)
        source = a.source
        if source is None and a.store is None:
            source = base / "sample"
            subprocess.run([str(Path(sys.executable).with_name("servelens")), "ingest", str(SAMPLE), "--store", str(source), "-q"],
                           check=True, capture_output=True)
        store = a.store or base / f"parts-{a.parts}"
        n = build(store, source, a.parts) if a.store is None else None
        parts = len(json.loads((store / "manifest.json").read_text())["parts"])
        eager = _time(EAGER, store, a.runs)
        lazy = _time(LAZY, store, a.runs)
    print(json.dumps({
        "parts": parts, "events": n,
        "count_all_views_bound_s": statistics.median(eager),
        "count_run_s": statistics.median(lazy),
        "target_s": 1.0,
        "runs": {"all_views_bound": eager, "run": lazy},
    }, indent=1))


if __name__ == "__main__":
    main()
