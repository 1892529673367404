"""Read-only SQL over the store: DuckDB with `events` (a view over the committed Parquet
parts) and every view defined in `sql/*.sql`.

`servelens sql`, `servelens report` and the dashboard all come through `connect`, so a metric
is defined once. Only reading statements are accepted; the Parquet files are never opened for
writing.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow.parquet as pq

from servelens.parsers.schema import EVENT_SCHEMA

from .metrics import load_views
from .store import StoreError, committed_parts, read_manifest, readable_parts

# Reading races a writer: a part listed in the manifest can move (staging -> events/) or be
# garbage-collected after compaction just before DuckDB opens it. Retry with a fresh manifest.
READ_RETRIES = 5
VANISHED = ("No files found", "No such file")
READ_ONLY_TYPES = {"SELECT", "EXPLAIN", "PRAGMA"}
# statements whose first keyword shows they only read (DuckDB types DESCRIBE/SHOW/SUMMARIZE
# as SELECT already)
REFUSED_HINT = "servelens sql is read-only: use SELECT (or WITH ... SELECT, DESCRIBE, SHOW, EXPLAIN)"


TEMP_DIR = os.path.join(tempfile.gettempdir(), "servelens-duckdb")


class QueryError(Exception):
    """A query DuckDB or servelens refused; the message is one line."""


def connect(store: Path | str, variables: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with `events` over the store and the views of sql/."""
    store = Path(store)
    if not store.exists():
        raise StoreError(
            f"store {store} does not exist; ingest logs first (servelens ingest PATH --store {store})"
        )
    for attempt in range(READ_RETRIES):
        parts = _settled_parts(store)
        parts = readable_parts(store, parts)  # i15: a missing or damaged part is an error, not fewer rows
        # spill to the system's temp dir, not `.tmp/` in the user's working directory
        con = duckdb.connect(":memory:", config={"temp_directory": TEMP_DIR})
        try:
            if parts:
                files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in parts)
                # union_by_name costs a pass over every part's metadata each time a view that
                # reads `events` is bound (about 2 s of CPU over 150 parts with all views):
                # ask for it only when the parts' schemas differ (a store older than a schema
                # change)
                by_name = "true" if _mixed_schemas(parts) else "false"
                con.execute(
                    f"create or replace view events as select * from read_parquet([{files}], union_by_name = {by_name})"
                )
            else:
                con.register("_events_empty", EVENT_SCHEMA.empty_table())
                con.execute("create or replace view events as select * from _events_empty")
            load_views(con, variables=variables)  # binding a view over `events` opens the parts too
            return con
        except (duckdb.IOException, RuntimeError) as e:
            con.close()
            # a writer (tail, compaction) moved a part between our reading the manifest and
            # opening it: read the manifest again
            if attempt + 1 == READ_RETRIES or not _vanished(e):
                if isinstance(e, duckdb.IOException):
                    raise QueryError(one_line(e)) from None
                raise
    raise AssertionError("unreachable")


def _mixed_schemas(parts: list[Path]) -> bool:
    """True unless every part has the same columns and types (reading the footers only: a
    few ms for hundreds of parts)."""
    first = None
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


def _settled_parts(store: Path) -> list[Path]:
    """The committed parts, preferably read when no commit is half-way through its moves
    (parts still in staging are about to move: a reader given those paths would race)."""
    for _ in range(50):
        try:
            if not read_manifest(store).get("pending"):
                break
        except StoreError:
            break
        time.sleep(0.01)
    return committed_parts(store)


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(one_line(e)) from None
    if not statements:
        raise QueryError("empty query: give a SELECT statement")
    for st in statements:
        kind = st.type.name if hasattr(st.type, "name") else str(st.type)
        if kind.upper() not in READ_ONLY_TYPES:
            raise QueryError(f"{REFUSED_HINT} (got {kind.upper()})")


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def run(
    store: Path | str,
    sql: str,
    params: list[Any] | dict[str, Any] | None = None,
    variables: dict[str, Any] | None = None,
) -> pl.DataFrame:
    """Run one read-only query over the store and return its result."""
    for attempt in range(READ_RETRIES):
        con = connect(store, variables)
        try:
            return run_on(con, sql, params)
        except QueryError as e:
            # a part moved by a concurrent commit after the view was made: start again
            if attempt + 1 == READ_RETRIES or not _vanished(e):
                raise
        finally:
            con.close()
    raise AssertionError("unreachable")


def _vanished(e: BaseException) -> bool:
    return any(s in str(e) for s in VANISHED)


def run_on(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | dict[str, Any] | None = None) -> pl.DataFrame:
    check_read_only(con, sql)
    try:
        rel = con.sql(sql, params=params) if params is not None else con.sql(sql)
        if rel is None:  # a statement with no result (e.g. PRAGMA with no output)
            return pl.DataFrame()
        table = rel.to_arrow_table()
    except duckdb.Error as e:
        raise QueryError(one_line(e)) from None
    return pl.from_arrow(table)  # type: ignore[return-value]
