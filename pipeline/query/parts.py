"""Which part files a reader may open: the settled manifest's parts, whether their schemas
differ, and the retry a reader needs when a compaction retires parts under it. Shared by
local and fleet connections."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from ..store.columns import EVENT_COLUMNS, PARTITION_COLUMNS, typed_nulls
from ..store.manifest import StoreError, read_manifest


# Reading races a writer: a part listed in the manifest can move (staging -> events/) or be
# garbage-collected after compaction just before DuckDB opens it. Retry with a fresh manifest.
READ_RETRIES = 10  # a compaction retires parts at once (pipeline/store/layout.py): a reader may be overtaken by several merges
VANISHED = ("No files found", "No such file")


def mixed_schemas(parts: Sequence[str | Path], current: bool = False) -> bool:
    """True unless every part has the same columns and types (reading the footers only: a
    few ms for hundreds of parts, seconds for thousands); with `current`, unless they also
    have this servelens' schema.

    `run` reads only the first part's footer: when it has today's schema, DuckDB reads the
    others by its columns and stops with "schema mismatch" on a part missing one (then `run`
    connects again with union_by_name)."""
    import pyarrow.parquet as pq

    from ..store.layout import FILE_SCHEMA

    first = FILE_SCHEMA.remove_metadata() if current else None
    for p in parts:
        try:
            schema = pq.read_schema(p).remove_metadata()
        except (OSError, ValueError):  # vanished or unreadable: let DuckDB say so
            return True
        if first is None:
            first = schema
        elif not schema.equals(first):
            return True
    return False


def is_current(con, part: str | Path) -> bool:
    """True when `part` holds this servelens' columns (as DuckDB reads them), in order: what
    `mixed_schemas([part], True)` tells, read by DuckDB on `con` (not yet locked down) instead
    of pyarrow, which a query's process then need not import."""
    def described(sql: str, params: list | None = None) -> list[tuple[str, str]]:
        return [tuple(r[:2]) for r in con.execute(f"describe {sql}", params).fetchall()]

    try:
        got = described("select * from read_parquet(?, hive_partitioning = false)", [str(part)])
    except Exception:  # noqa: BLE001 - vanished or unreadable: let the query's own read say so
        return False
    want = tuple(c for c in EVENT_COLUMNS if c[0] not in PARTITION_COLUMNS)
    return got == described(typed_nulls(want))


def settled_manifest(store: Path) -> dict:
    """The manifest, preferably read when no commit is half-way through its moves (parts
    still in staging are about to move: a reader given those paths would race)."""
    for _ in range(50):
        try:
            manifest = read_manifest(store)
        except StoreError:
            break
        if not manifest.get("pending"):
            return manifest
        time.sleep(0.01)
    return read_manifest(store)  # still pending after half a second (or unreadable: say why)


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def vanished(e: BaseException) -> bool:
    return any(s in str(e) for s in VANISHED)

