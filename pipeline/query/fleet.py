"""Querying a remote store, or a fleet of stores as one (`--store 's3://bucket/fleet/*'`, a
local glob such as `'stores/*'`, or a fleet list file with one store per line).

`events` is the union of every store's committed parts: local stores are read by DuckDB's
read_parquet over exactly their parts (as query.connect does), remote ones through one
pyarrow dataset registered into the connection (pipeline/store/remote.py says why). The connection
is sandboxed the same way (sandbox.lock_down): user SQL reaches the registered parts and the
listed local parts, no other file, no network, no extension, no setting. Each node's tailer
writes its own store with its own `instance` names, so the union holds every row once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb


from ..store.layout import events_select, no_events_sql, read_parquet_sql
from .views import closure, load_views
from ..store.remote import dataset, expand, store_url
from .parts import READ_RETRIES, mixed_schemas, one_line, settled_manifest, vanished
from .sandbox import Limits, QueryError, connection_config, lock_down
from ..store.manifest import StoreError
from ..store.integrity import readable_files


def connect(
    store: Path | str,
    variables: dict[str, Any] | None = None,
    limits: Limits | None = None,
    *,
    readable: tuple[Path | str, ...] = (),
    views: set[str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """query.connect for a remote store or a fleet of stores. `views`: bind only these and
    the views they read (None: all), as query.connect does for one query's connection."""
    stores = expand(store)
    if not stores:
        raise StoreError(f"no store matches {store} (a store is a directory or prefix holding manifest.json)")
    local = [Path(s) for s in stores if store_url(s) is None]
    remote = [s for s in stores if store_url(s) is not None]
    for s in local:
        if not (s / "manifest.json").exists():
            name = str(s) if len(str(s)) <= 80 else str(s)[:79] + "…"
            if Path(store).is_file():
                raise StoreError(
                    f"--store {store} is a file, read as a list of stores, and its line {name!r} is not a store; "
                    f"to read a log, ingest it first: servelens ingest {store} --store DIR, then --store DIR")
            raise StoreError(f"store {name} (in {store}) is not a servelens store (no manifest.json)")
    limits = limits or Limits.from_env()
    for attempt in range(READ_RETRIES):
        parts: list[str] = []
        for s in local:
            parts += readable_files(s, settled_manifest(s))
        try:
            remote_ds = dataset(remote) if remote else None
        except OSError as e:
            # a part deleted by a compaction published after we read the manifest: read it again
            if attempt + 1 < READ_RETRIES and ("not exist" in str(e) or "NoSuchKey" in str(e)):
                continue
            raise StoreError(f"cannot read {store}: {one_line(e)}") from None
        con = duckdb.connect(":memory:", config=connection_config(limits))
        try:
            sources = []
            if parts:
                sources.append(read_parquet_sql(parts, mixed_schemas(parts)))
            if remote_ds is not None:
                con.register("_events_remote", remote_ds)
                sources.append(events_select("_events_remote"))
            if not sources:
                sources.append(no_events_sql())
            con.execute("create or replace view events as " + " union all ".join(sources))
            load_views(con, variables=variables, only=None if views is None else closure(views))
            lock_down(con, [*parts, *readable])
            return con
        except (duckdb.IOException, RuntimeError) as e:
            con.close()
            if attempt + 1 == READ_RETRIES or not vanished(e):
                if isinstance(e, duckdb.IOException):
                    raise QueryError(one_line(e)) from None
                raise
        except BaseException:
            con.close()
            raise
    raise AssertionError("unreachable")
