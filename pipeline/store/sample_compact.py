"""Merging the small sample parts a live scrape leaves behind.

`servelens scrape` commits a part per round: every 5 s for a day is thousands of parts of a
few hundred rows, each listed in the manifest (rewritten at every commit) and opened by every
query. After a commit, the small parts of a day (fewer than `SMALL_ROWS` rows) are merged
into one once there are `MIN_PARTS` of them, through the store's commit protocol: the merged
part is staged and fsynced, one manifest write swaps it in for the parts it replaces (those go
to the garbage, deleted after the grace time, as events compaction does), then the moves.
Every row is kept as it is (the samples are already unique), so nothing is marked dirty.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Callable

import polars as pl
import pyarrow.parquet as pq

from ..sources.samples import POLARS_SCHEMA, to_arrow
from .commit import Store, new_txid
from .manifest import write_json_atomic
from .samples import MANIFEST_KEY, SAMPLE_PARQUET_OPTIONS, SAMPLES_DIR, sample_entries, undo_staged

SMALL_ROWS = 200_000
MIN_PARTS = 32


def small_parts_by_day(manifest: dict, small_rows: int = SMALL_ROWS) -> dict[str, list[str]]:
    entry = sample_entries(manifest)
    out: dict[str, list[str]] = {}
    for rel in entry["parts"]:
        rows = (entry.get("info", {}).get(rel) or {}).get("rows")
        if isinstance(rows, int) and rows < small_rows:
            out.setdefault(Path(rel).parent.name, []).append(rel)
    return out


def merge_small_parts(store: Store, *, min_parts: int = MIN_PARTS, small_rows: int = SMALL_ROWS) -> int:
    """Merge each day's small sample parts when there are at least `min_parts`. Returns the
    parts merged away (0: nothing to do, or a write failed and the store is as it was)."""
    if store.manifest.get("pending"):
        return 0
    merged = 0
    for day, rels in small_parts_by_day(store.manifest, small_rows).items():
        if len(rels) < min_parts or not all((store.root / r).exists() for r in rels):
            continue
        merged += _merge(store, day, rels)
    return merged


def _merge(store: Store, day: str, rels: list[str], transform: Callable[[pl.DataFrame], pl.DataFrame] | None = None) -> int:
    txid = new_txid()
    stage = store.root / "_staging" / txid
    m = store.manifest
    before = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in m.items()}
    try:
        part = pl.concat([pl.read_parquet(store.root / r) for r in rels], how="vertical_relaxed")
        part = part.select([pl.col(c).cast(t) for c, t in POLARS_SCHEMA.items()])
        if transform is not None:
            part = transform(part)
        part = part.sort("instance", "name", "labels", "le", "quantile", "ts", nulls_last=True)
        final = f"{SAMPLES_DIR}/{day}/part-{txid}-0000.parquet"
        staged = stage / final
        staged.parent.mkdir(parents=True, exist_ok=True)
        with open(staged, "wb") as f:
            pq.write_table(to_arrow(part), f, **SAMPLE_PARQUET_OPTIONS)
            f.flush()
            os.fsync(f.fileno())
        entry = sample_entries(m)
        removed = set(rels)
        info = {p: v for p, v in entry.get("info", {}).items() if p not in removed}
        info[final] = {
            "rows": part.height,
            "lo": part["ts"].min().isoformat(),
            "hi": part["ts"].max().isoformat(),
            "instances": sorted(part["instance"].unique().to_list()),
        }
        m[MANIFEST_KEY] = {"parts": [p for p in entry["parts"] if p not in removed] + [final], "info": info}
        now = time.time()
        m["garbage"] = m.get("garbage", []) + [[p, now] for p in sorted(removed)]
        moves = [(str(staged.relative_to(store.root)), final)]
        m["pending"] = [list(mv) for mv in moves]
        write_json_atomic(store.root / "manifest.json", m)  # the commit
    except OSError:
        # merging is housekeeping: a full disk leaves the small parts as they were
        undo_staged(store, m, before, stage)
        return 0
    store.settle(moves, removed, now)
    shutil.rmtree(stage, ignore_errors=True)
    return len(rels)


def rename_instances(store: Store, names: dict[str, str]) -> int:
    """Rewrite the sample parts holding instances of `names` (old -> new) under the new names,
    a day's such parts into one, through the same commit as a merge. Returns the parts
    rewritten (0: nothing to do, or a write failed and the store is as it was)."""
    entry = sample_entries(store.manifest)
    by_day: dict[str, list[str]] = {}
    for rel in entry["parts"]:
        held = set((entry.get("info", {}).get(rel) or {}).get("instances") or [])
        if held & set(names) and (store.root / rel).exists():
            by_day.setdefault(Path(rel).parent.name, []).append(rel)
    if store.manifest.get("pending"):
        return 0
    rename = pl.col("instance").replace(names)
    return sum(_merge(store, day, rels, lambda df: df.with_columns(rename)) for day, rels in by_day.items())
