"""Retention: drop the events older than a date from the store, consistently.

Parts wholly before the date are removed; parts that straddle it are rewritten with the rows
that stay (at or after the date, and rows without a time: their age is unknown). It all
happens in ONE manifest commit, as compaction does (store.commit with `remove_parts`), so a
reader sees either the store before the prune or after it, never half, and a crash leaves the
store as it was. The ingest offsets stay: re-ingesting the same logs does not bring the pruned
lines back (nothing doubled).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl
import pyarrow.parquet as pq

from .layout import with_partition_columns
from .commit import Store, new_txid
from .integrity import require_intact


@dataclass
class PruneResult:
    parts_before: int = 0
    parts_removed: int = 0   # parts wholly before the date
    parts_rewritten: int = 0  # parts straddling the date
    rows_removed: int = 0
    rows_kept_in_rewritten: int = 0
    dry_run: bool = False


def prune(store: Store, before: dt.datetime, dry_run: bool = False) -> PruneResult:
    """Remove the events with ts < `before` (UTC). With `dry_run`, only count them."""
    before = before.astimezone(dt.timezone.utc)
    result = PruneResult(parts_before=len(store.manifest["parts"]), dry_run=dry_run)
    require_intact(store)
    remove: list[str] = []
    keep_frames: list[pl.DataFrame] = []
    for rel in list(store.manifest["parts"]):
        path = store.root / rel
        if not path.exists():
            continue  # a move not done yet (rolled forward on the next open): leave it
        ts = pl.from_arrow(pq.read_table(path, columns=["ts"]))["ts"]  # type: ignore[index]
        old = int((ts.dt.convert_time_zone("UTC") < before).sum())
        if old == 0:
            continue
        remove.append(rel)
        result.rows_removed += old
        if old == len(ts):
            result.parts_removed += 1
            continue
        result.parts_rewritten += 1
        if not dry_run:
            part = pl.from_arrow(with_partition_columns(pq.read_table(path), rel))
            kept = part.filter(pl.col("ts").is_null() | (pl.col("ts").dt.convert_time_zone("UTC") >= before))  # type: ignore[union-attr]
            result.rows_kept_in_rewritten += kept.height
            keep_frames.append(kept)
        else:
            result.rows_kept_in_rewritten += len(ts) - old
    if dry_run or not remove:
        return result
    moves = store.stage_events(pl.concat(keep_frames), new_txid()) if keep_frames else []
    store.commit(moves, remove_parts=remove)
    return result
