"""Compaction: merge the many small Parquet parts a long tail leaves into few large ones.

Runs under the store's writer lock (the tailer calls it between polls; `servelens compact`
for a store nobody is writing). Each merge is one Store.commit that adds the merged part and
removes its inputs from the manifest in the same atomic rename, so a reader sees either the
old parts or the new one, never both and never neither. The inputs are deleted only after
the store's grace period (store.GARBAGE_GRACE_S), so a query that took the old part list a
moment ago can still read them.

A merge streams (a k-way merge of parts that are each sorted by time): batches are read
from the part whose unread rows start earliest, and rows earlier than every part's unread
rows are final and written out in row groups. Memory is a batch per part plus the rows whose
times overlap, not the whole merge (which held up to 128 MiB of compressed parts decoded).
The tailer writes the merged part on a background thread (`merge`), and commits it
between polls (`commit_merge`): the store and its manifest stay on the tailer's thread.
"""

from __future__ import annotations

import heapq
import os
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from servelens.parsers.schema import events_from_arrow, events_to_arrow

from .layout import (
    LEGACY_UNKNOWN_DAY,
    FILE_SCHEMA,
    file_table,
    is_legacy,
    part_dir,
    partition_values,
    with_partition_columns,
)
from .commit import PARQUET_OPTIONS, Store, new_txid
from .manifest import StoreError, fsync_dir
from .integrity import require_intact

SMALL_PART_BYTES = 16 * 1024 * 1024  # parts below this are worth merging
TARGET_BYTES = 128 * 1024 * 1024  # input bytes merged into one part at most
# Row groups of the merged part: smaller than Store.stage_events' 256,000 because one is
# held in memory several times over while written (as polars, Arrow, encoded pages):
# ~40 MiB of TGI events, not ~150 MiB. Queries read either the same way.
ROW_GROUP_ROWS = 64_000
BATCH_ROWS = 32_768  # rows read from one input part at a time


@dataclass
class CompactResult:
    parts_before: int = 0
    parts_after: int = 0
    merged: int = 0  # input parts replaced
    written: int = 0  # merged parts written
    rows: int = 0
    rollup: Any = None  # what `refresh` returned (pipeline/query/rollups.Refreshed)
    rollup_error: str | None = None  # why they could not be (the merges are committed)


@dataclass
class Merged:
    """A group merged into a staged part, ready for Store.commit."""

    group: list[str]
    moves: list[tuple[str, str]]
    rows: int


def plan(store: Store, min_parts: int = 2, small_bytes: int = SMALL_PART_BYTES,
         target_bytes: int = TARGET_BYTES, migrate: bool = False) -> list[list[str]]:
    """Groups of small parts, each from one partition, to merge into one part. With
    `migrate`, also every part written in the layout before pipeline/store/layout.py's (it repeats
    `engine`, or sits under `day=unknown`), whatever its size or its partition's count: each
    is rewritten in today's layout (reads every part's footer: `servelens compact` does it,
    the tailer's periodic compaction does not)."""
    by_dir: dict[str, list[tuple[str, int]]] = defaultdict(list)
    legacy_dirs: set[str] = set()
    for rel in store.manifest["parts"]:
        try:
            size = (store.root / rel).stat().st_size
        except OSError:
            continue  # not moved into place yet: leave it alone
        legacy = migrate and is_legacy(rel, pq.read_schema(store.root / rel))
        if size < small_bytes or legacy:
            values = partition_values(rel)
            key = part_dir(values.get("engine"), _day(values.get("day")))
            by_dir[key].append((rel, size))
            if legacy:
                legacy_dirs.add(key)
    groups = []
    for key, parts in by_dir.items():
        if key in legacy_dirs:  # rewritten even alone
            groups.extend(_chunks(parts, target_bytes, min_len=1))
            continue
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


def _day(day: str | None) -> str | None:
    return None if day == LEGACY_UNKNOWN_DAY else day


def _chunks(parts: list[tuple[str, int]], target_bytes: int, min_len: int) -> list[list[str]]:
    out: list[list[str]] = []
    group: list[str] = []
    total = 0
    for rel, size in parts:
        if group and total + size > target_bytes:
            out.append(group)
            group, total = [], 0
        group.append(rel)
        total += size
    if group:
        out.append(group)
    return [g for g in out if len(g) >= min_len]


def compact(store: Store, min_parts: int = 2, small_bytes: int = SMALL_PART_BYTES,
            target_bytes: int = TARGET_BYTES, migrate: bool = False,
            refresh: Callable[[Store], Any] | None = None) -> CompactResult:
    """Merge small parts partition by partition; one atomic commit per merged part (with
    `migrate`, also rewrite every part of the older layout: see plan). With `refresh`
    (`servelens compact` passes the rollups' refresh, pipeline/query/rollups.py: the store
    does not import the readers), then bring the rollups up to date."""
    result = CompactResult(parts_before=len(store.manifest["parts"]))
    require_intact(store)
    for group in plan(store, min_parts, small_bytes, target_bytes, migrate=migrate):
        commit_merge(store, merge(store.root, group), result)
    result.parts_after = len(store.manifest["parts"])
    if refresh is not None:
        try:
            result.rollup = refresh(store)
        except (StoreError, RuntimeError, OSError) as e:
            # the merges are committed and right; stale rollups cost only speed (readers
            # compute those views from the events until the next refresh)
            result.rollup_error = " ".join(str(e).split())[:200]
    return result


def commit_merge(store: Store, merged: Merged, result: CompactResult | None = None) -> None:
    """Commit a merge, unless one of its inputs is no longer the part its commit wrote
    (StoreError, the merged part removed): merged, damaged rows would look whole."""
    try:
        require_intact(store, merged.group, always=True)
    except StoreError:
        for staged, _final in merged.moves:
            shutil.rmtree(store.root / Path(staged).parts[0] / Path(staged).parts[1], ignore_errors=True)
        raise
    store.commit(merged.moves, remove_parts=merged.group, dirty=[])  # the same rows: rollups stay fresh
    if result is not None:
        result.merged += len(merged.group)
        result.written += len(merged.moves)
        result.rows += merged.rows


def merge(root: Path, group: list[str]) -> Merged:
    """Write the rows of the group's parts (one partition) as one staged part, sorted like
    Store.stage_events sorts (ts, line; null times last). Touches only files, never the
    manifest, so it may run on another thread than the store's owner."""
    txid = new_txid()
    stage_dir = root / "_staging" / txid
    for _ in range(3):  # a commit on the owner's thread may remove an empty _staging
        try:
            stage_dir.mkdir(parents=True, exist_ok=True)
            break
        except FileNotFoundError:
            continue
    name = f"part-{txid}-0000.parquet"
    values = partition_values(group[0])
    final = f"{part_dir(values.get('engine'), _day(values.get('day')))}/{name}"
    staged = stage_dir / final  # under its partition path, like Store.stage_events
    staged.parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            out = _write_merged(root, group, staged, streaming=True)
        except _Unsorted:  # parts not written by the store: merge them in memory
            out = _write_merged(root, group, staged, streaming=False)
        if out.rows == 0:
            staged.unlink()
            shutil.rmtree(stage_dir, ignore_errors=True)
            return Merged(group, [], 0)
        fsync_dir(staged.parent)
    except BaseException:
        shutil.rmtree(stage_dir, ignore_errors=True)
        raise
    return Merged(group, [(str(staged.relative_to(root)), final)], out.rows)


def _write_merged(root: Path, group: list[str], staged: Path, streaming: bool) -> "_Out":
    with open(staged, "wb") as f:
        out = _Out(f)
        _merge_into(root, group, out, streaming)
        out.close()
        f.flush()
        os.fsync(f.fileno())
    return out


class _Out:
    """Sorted rows in, row groups of ROW_GROUP_ROWS out."""

    def __init__(self, f: Any):
        self.f = f
        self.writer: pq.ParquetWriter | None = None
        self.held: list[pl.DataFrame] = []
        self.held_rows = 0
        self.rows = 0

    def add(self, df: pl.DataFrame) -> None:
        if df.height == 0:
            return
        self.held.append(df)
        self.held_rows += df.height
        if self.held_rows >= ROW_GROUP_ROWS:
            buf = pl.concat(self.held, rechunk=False)
            full = buf.height // ROW_GROUP_ROWS * ROW_GROUP_ROWS
            for start in range(0, full, ROW_GROUP_ROWS):
                self._write(buf.slice(start, ROW_GROUP_ROWS))
            rest = buf.slice(full)
            self.held, self.held_rows = ([rest] if rest.height else []), rest.height

    def close(self) -> None:
        if self.held_rows:
            self._write(pl.concat(self.held, rechunk=False))
        self.held, self.held_rows = [], 0
        if self.writer is not None:
            self.writer.close()

    def _write(self, df: pl.DataFrame) -> None:
        table = file_table(events_to_arrow(df))  # the partition values are in the path
        if self.writer is None:
            options = {k: v for k, v in PARQUET_OPTIONS.items() if k != "row_group_size"}
            self.writer = pq.ParquetWriter(self.f, FILE_SCHEMA, **options)
        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += df.height


class _Unsorted(Exception):
    """An input part is not sorted by time: the streaming merge cannot be used."""


def _merge_into(root: Path, group: list[str], out: _Out, streaming: bool = True) -> None:
    """A k-way merge of the group's parts, each sorted by (ts, line) like the store writes
    them: batches are read from the part whose unread rows start earliest, and the rows
    before every part's unread rows are final. Memory: a batch per part plus the rows
    whose times overlap, not the whole group."""
    files = [pq.ParquetFile(root / rel) for rel in group]
    if not streaming:
        rows = pl.concat([_frame(pf.read(), rel) for pf, rel in zip(files, group)], how="diagonal_relaxed")
        out.add(rows.sort("ts", "line", nulls_last=True))
        return
    heap: list[tuple[Any, int]] = []  # (no unread row of part i is earlier, i)
    untimed: list[pl.DataFrame] = []
    for i, pf in enumerate(files):
        low = _min_ts(pf)
        if low is None:
            untimed.append(_frame(pf.read(), group[i]))  # no time anywhere in it
        else:
            heapq.heappush(heap, (low, i))
    batches = {i: files[i].iter_batches(batch_size=BATCH_ROWS) for _, i in heap}
    pending: list[pl.DataFrame] = []
    kept = fresh = 0  # rows held back at the last emit, rows read since
    while heap:
        low, i = heapq.heappop(heap)
        batch = next(batches[i], None)
        if batch is not None:
            df = _frame(batch, group[i])
            has_ts = df["ts"].is_not_null()
            timed = df.filter(has_ts)
            if timed.height < df.height:
                untimed.append(df.filter(~has_ts))
            if timed.height:
                if timed["ts"].min() < low:
                    raise _Unsorted
                pending.append(timed)
                fresh += timed.height
                low = timed["ts"].max()
            heapq.heappush(heap, (low, i))
        # emit when the rows read since outnumber those held (sorting stays n log n)
        if heap and fresh < max(BATCH_ROWS, kept):
            continue
        rows = pl.concat(pending).sort("ts", "line", nulls_last=True) if pending else None
        if rows is None:
            continue
        if heap:
            final = rows["ts"] < heap[0][0]
            out.add(rows.filter(final))
            pending = [rows.filter(~final)]
            kept, fresh = pending[0].height, 0
        else:
            out.add(rows)
            pending = []
    if untimed:
        out.add(pl.concat(untimed, how="diagonal_relaxed").sort("ts", "line", nulls_last=True))


def _frame(data: Any, rel: str) -> pl.DataFrame:
    """A part's rows (a table or a batch) as `events` rows: the partition columns from its
    path; a column appended to the schema after the part was written, null."""
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    return events_from_arrow(with_partition_columns(table, rel))


def _min_ts(pf: pq.ParquetFile) -> Any:
    """The earliest time in the part from its statistics; None when no row has a time.
    Raises _Unsorted when a row group has no statistics (the merge then works in memory)."""
    md = pf.metadata
    col = next((c for c in range(md.num_columns) if md.schema.column(c).path == "ts"), None)
    low = None
    for rg in range(md.num_row_groups):
        meta = md.row_group(rg)
        stats = meta.column(col).statistics if col is not None else None
        if stats is not None and stats.has_min_max:
            low = stats.min if low is None else min(low, stats.min)
        elif stats is None or not stats.has_null_count or stats.null_count != meta.num_rows:
            raise _Unsorted
    return low
