"""Read-only SQL over the store: DuckDB with `events` (a view over the committed Parquet
parts) and every view defined in `sql/*.sql`.

`servelens sql`, `servelens report` and the dashboard all come through `connect`, so a metric
is defined once. Every connection is sandboxed once its views are bound (pipeline/sandbox.py):
it can open only the committed part files, load no extension and change no setting, and it
runs with a memory limit and a private spill directory. `run` is the guarded path for SQL a
user typed: the statement check first, then a fresh connection of its own (nothing one query
does is seen by the next), a time limit, and a result that renders whatever its types.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow.parquet as pq

from servelens.parsers.schema import EVENT_SCHEMA

from .layout import read_parquet_sql
from .metrics import load_views
from .sandbox import REFUSED_HINT, Limits, QueryError, check_statement, clean_message, connection_config, execute, lock_down
from .store import StoreError, committed_parts, read_manifest, readable_parts

# Reading races a writer: a part listed in the manifest can move (staging -> events/) or be
# garbage-collected after compaction just before DuckDB opens it. Retry with a fresh manifest.
READ_RETRIES = 10  # a compaction retires parts at once (pipeline/layout.py): a reader may be overtaken by several merges
VANISHED = ("No files found", "No such file")

__all__ = ["QueryError", "REFUSED_HINT", "Limits", "connect", "run", "run_on", "check_read_only", "one_line"]


def connect(
    store: Path | str,
    variables: dict[str, Any] | None = None,
    limits: Limits | None = None,
    *,
    readable: tuple[Path | str, ...] = (),
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with `events` over the store and the views of sql/,
    sandboxed (see pipeline/sandbox.py): it reads the committed parts (and `readable`, files a
    trusted caller adds) and nothing else, and its settings are locked."""
    from . import remote

    if remote.store_url(store) is not None or remote.is_fleet(store):  # s3://..., a fleet
        from .fleet import connect as connect_fleet

        return connect_fleet(store, variables, limits, readable=readable)
    store = remote.local_store(store)
    if not store.exists():
        raise StoreError(
            f"store {store} does not exist; ingest logs first (servelens ingest PATH --store {store})"
        )
    limits = limits or Limits.from_env()
    for attempt in range(READ_RETRIES):
        parts = _settled_parts(store)
        parts = readable_parts(store, parts)  # a missing or damaged part is an error, not fewer rows
        # spill to the user's private temp dir, not `.tmp/` in the user's working directory
        con = duckdb.connect(":memory:", config=connection_config(limits))
        try:
            if parts:
                # union_by_name costs a pass over every part's metadata each time a view that
                # reads `events` is bound (about 2 s of CPU over 150 parts with all views):
                # ask for it only when the parts' schemas differ (a store older than a schema
                # change)
                by_name = _mixed_schemas(parts)
                # the partition columns (engine) come from the parts' paths (pipeline/layout.py)
                con.execute(f"create or replace view events as {read_parquet_sql([str(p) for p in parts], by_name)}")
            else:
                con.register("_events_empty", EVENT_SCHEMA.empty_table())
                con.execute("create or replace view events as select * from _events_empty")
            load_views(con, variables=variables)  # binding a view over `events` opens the parts too
            # DuckDB checks the allowed paths each time a file is opened, at query time too:
            # the view keeps working over exactly these parts
            lock_down(con, [*parts, *readable])
            return con
        except (duckdb.IOException, RuntimeError) as e:
            con.close()
            # a writer (tail, compaction) moved a part between our reading the manifest and
            # opening it: read the manifest again
            if attempt + 1 == READ_RETRIES or not _vanished(e):
                if isinstance(e, duckdb.IOException):
                    raise QueryError(one_line(e)) from None
                raise
        except BaseException:
            con.close()
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


def check_read_only(con: duckdb.DuckDBPyConnection | None, sql: str) -> None:
    """Raise QueryError unless `sql` only reads (see sandbox.check_statement); `con` is unused,
    kept for callers that pass one."""
    check_statement(sql)


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def run(
    store: Path | str,
    sql: str,
    params: list[Any] | dict[str, Any] | None = None,
    variables: dict[str, Any] | None = None,
    limits: Limits | None = None,
) -> pl.DataFrame:
    """Run one read-only query over the store and return its result: the guarded path for SQL
    a user typed. The statement is checked before anything is opened, then runs on a fresh
    sandboxed connection of its own within `limits` (default: Limits.from_env())."""
    check_statement(sql)
    limits = limits or Limits.from_env()
    for attempt in range(READ_RETRIES):
        con = connect(store, variables, limits)
        try:
            return execute(con, sql, params, limits)
        except QueryError as e:
            # a part moved by a concurrent commit after the view was made: start again
            if attempt + 1 == READ_RETRIES or not _vanished(e):
                raise
        finally:
            con.close()
    raise AssertionError("unreachable")


def _vanished(e: BaseException) -> bool:
    return any(s in str(e) for s in VANISHED)


def run_on(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: list[Any] | dict[str, Any] | None = None,
    limits: Limits | None = None,
) -> pl.DataFrame:
    """Run one read-only query on a connection from `connect` (shared by trusted callers such
    as the dashboard's loaders; user text goes through `run`, which gives it a connection of
    its own)."""
    check_statement(sql)
    return execute(con, sql, params, limits or Limits(timeout_s=None))
