"""Compaction: merge the many small Parquet parts a long tail leaves into few large ones.

Runs under the store's writer lock (the tailer calls it between polls; `servelens compact`
for a store nobody is writing). Each merge is one Store.commit that adds the merged part and
removes its inputs from the manifest in the same atomic rename, so a reader sees either the
old parts or the new one, never both and never neither. The inputs are deleted only after
the store's grace period (store.GARBAGE_GRACE_S), so a query that took the old part list a
moment ago can still read them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import PurePosixPath

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from .store import Store, new_txid

SMALL_PART_BYTES = 16 * 1024 * 1024  # parts below this are worth merging
TARGET_BYTES = 128 * 1024 * 1024  # input bytes merged into one part at most


@dataclass
class CompactResult:
    parts_before: int = 0
    parts_after: int = 0
    merged: int = 0  # input parts replaced
    written: int = 0  # merged parts written
    rows: int = 0


def plan(store: Store, min_parts: int = 2, small_bytes: int = SMALL_PART_BYTES,
         target_bytes: int = TARGET_BYTES) -> list[list[str]]:
    """Groups of small parts, each from one partition directory, to merge into one part."""
    by_dir: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for rel in store.manifest["parts"]:
        try:
            size = (store.root / rel).stat().st_size
        except OSError:
            continue  # not moved into place yet: leave it alone
        if size < small_bytes:
            by_dir[str(PurePosixPath(rel).parent)].append((rel, size))
    groups = []
    for parts in by_dir.values():
        if len(parts) < min_parts:
            continue
        group: list[str] = []
        total = 0
        for rel, size in parts:
            if group and total + size > target_bytes:
                if len(group) > 1:
                    groups.append(group)
                group, total = [], 0
            group.append(rel)
            total += size
        if len(group) > 1:
            groups.append(group)
    return groups


def compact(store: Store, min_parts: int = 2, small_bytes: int = SMALL_PART_BYTES,
            target_bytes: int = TARGET_BYTES) -> CompactResult:
    """Merge small parts partition by partition; one atomic commit per merged part."""
    result = CompactResult(parts_before=len(store.manifest["parts"]))
    for group in plan(store, min_parts, small_bytes, target_bytes):
        tables = [pq.ParquetFile(store.root / rel).read() for rel in group]
        events = pl.from_arrow(pa.concat_tables(tables, promote_options="default"))
        assert isinstance(events, pl.DataFrame)
        moves = store.stage_events(events, new_txid())
        store.commit(moves, remove_parts=group)
        result.merged += len(group)
        result.written += len(moves)
        result.rows += events.height
    result.parts_after = len(store.manifest["parts"])
    return result
