"""Read-only SQL over the store: DuckDB with `events` (a view over the committed Parquet
parts) and every view defined in `sql/*.sql`.

`servelens sql`, `servelens report` and the dashboard all come through `connect`, so a metric
is defined once. Every connection is sandboxed once its views are bound (pipeline/query/sandbox.py):
it can open only the committed part files, load no extension and change no setting, and it
runs with a memory limit and a private spill directory. `run` is the guarded path for SQL a
user typed: the statement check first, then a fresh connection of its own (nothing one query
does is seen by the next), a time limit, and a result that renders whatever its types.

Two things keep a connection cheap on a big store:

- `run` binds only the views its query reads (metrics.views_for): binding the deep views
  costs seconds over thousands of parts, and `select count(*) from events` needs none.
- a time range (`since` / `until`, pipeline/query/timerange.py) reaches the Parquet scans: parts of
  days outside it are not listed at all, and the range is a filter on `ts` inside the scan
  (row groups whose statistics miss it are skipped). The views are computed over the range
  widened by a margin (requests that began before it, windows cut by its edges) and show only
  the rows that fall in it.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import duckdb

if TYPE_CHECKING:
    import polars as pl

from . import stored as stored_rollups
from ..store.layout import instances_predicate, no_events_sql, partition_values, read_parquet_sql
from .views import StandIns, closure, define_view, load_views, named_views, reads_variables
from .shared import materialise, to_share
from .sandbox import (
    REFUSED_HINT,
    Limits,
    QueryError,
    check_statement,
    connection_config,
    execute,
    lock_down,
)
from ..store.sample_parts import bind_samples
from ..store.manifest import StoreError, read_manifest
from ..store.integrity import readable_files
from .parts import READ_RETRIES, is_current, mixed_schemas, one_line, settled_manifest, vanished
from .timerange import TimeRange, bind_range_views, parts_in, row_filter, standing_events_sql

MISMATCH = "schema mismatch"

__all__ = ["QueryError", "REFUSED_HINT", "Limits", "connect", "run", "run_on", "check_read_only", "one_line"]


def connect(
    store: Path | str,
    variables: dict[str, Any] | None = None,
    limits: Limits | None = None,
    *,
    readable: tuple[Path | str, ...] = (),
    views: set[str] | None = None,
    time_range: TimeRange | None = None,
    union_by_name: bool | None = None,
    rollups: bool | tuple[str, ...] | None = None,
    instances: list[tuple[str, str]] | None = None,
    shared: bool | None = None,
    stored: dict[str, Path] | None = None,
    fresh: duckdb.DuckDBPyConnection | None = None,
    variables_read: bool = True,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with `events` over the store and the views of sql/,
    sandboxed (see pipeline/query/sandbox.py): it reads the committed parts (and `readable`, files a
    trusted caller adds) and nothing else, and its settings are locked.

    `views`: bind only these and the views they read (metrics.closure); None binds all.
    `rollups`: bind each stored view (stored_rollups.VIEWS: requests, request_state, window_metrics)
    over the store's rollup when it is fresh and of these variables (pipeline/query/rollups.py), so
    the views over it read no event; a tuple of view names: only those; False forces the raw
    SQL; None: yes unless SERVELENS_NO_ROLLUPS is set.
    `instances`: only the events (and `stored` rows) of these (engine, instance) pairs (a
    rollup refresh).
    `stored`: view -> a rollup file to bind it over, whatever the manifest says (a refresh
    binds the views beneath the one it computes over the files it has just written).
    `shared`: compute the views that the queries read through several others (`requests`,
    `engine_stats`) once, into temporary tables (pipeline/query/shared.py), unless bound over
    a rollup; True: yes, False: each reference derives them anew, None: yes with `views` (one
    query's connection). Not for a caller that repoints `events` after connecting: the
    tables hold what the views read at connect time.
    `time_range`: only events in it, and view rows that fall in it (see pipeline/query/timerange.py).
    `union_by_name`: None decides by reading every part's schema, unless `views` is given
    (one query's connection, `run`): then only the first part's, which `run` backs up.
    `fresh`: a new connection made with connection_config(`limits`), nothing run on it yet,
    to bind instead of making one (`run` has parsed the query on it).
    `variables_read`: False when nothing run on the connection but its views reads a variable
    (`run`, for a query that does not: views.reads_variables); with no view bound, none is set.
    A store URL (s3://...) or a fleet goes to pipeline/query/fleet.py."""
    from ..store import remote

    if remote.store_url(store) is not None or remote.is_fleet(store):  # s3://..., a fleet
        from .fleet import connect as connect_fleet

        return connect_fleet(store, variables, limits, readable=readable, views=views)
    store = remote.local_store(store)
    if not store.exists():
        raise StoreError(
            f"store {store} does not exist; ingest logs first (servelens ingest PATH --store {store})"
        )
    problem = not_a_store(store)
    if problem:
        raise StoreError(problem)
    limits = limits or Limits.from_env()
    if rollups is None:
        rollups = not stored_rollups.disabled()
    elif rollups is not True and rollups is not False and stored_rollups.disabled():
        rollups = False
    for attempt in range(READ_RETRIES):
        # the manifest is read (and its every path checked) once per attempt: the parts, their
        # check and the rollups all come from this one (at 3,000 parts it is 600 KB)
        manifest = settled_manifest(store)
        # where each part is and that it is whole, in one pass; the files as strings, which is
        # all DuckDB and the sandbox take: a missing or damaged part is an error, not fewer rows
        parts = readable_files(store, manifest)
        overrides: dict[str, str] = {}
        if stored is not None:
            rolls = dict(stored)
        elif rollups and instances is None and (views is None or views):  # a query naming no view reads no rollup
            rolls = _usable_rollups(store, variables, None if rollups is True else tuple(rollups), manifest)
        else:
            rolls = {}
        bind = None if views is None else closure(views, leaves=set(rolls))
        rolls = {v: p for v, p in rolls.items() if bind is None or v in bind}
        if instances is not None:
            engines = {e for e, _ in instances}
            parts = [p for p in parts if partition_values(p).get("engine") in (None, *engines)]
        scan = time_range.widened(variables) if time_range else None
        if scan:
            standing = parts_in(parts, TimeRange(None, scan.until))  # announcements from before the range (and every part read)
            parts = parts_in(parts, scan)
        # spill to the user's private temp dir, not `.tmp/` in the user's working directory
        con = fresh if fresh is not None else duckdb.connect(":memory:", config=connection_config(limits))
        fresh = None
        try:
            if rolls:
                # a rollup's footer (large on a big store) is otherwise read again by
                # every statement that binds a view over it: the range check, each view, the
                # query. Not for the event parts alone: caching thousands of small footers
                # costs more than it saves
                con.execute("set parquet_metadata_cache = true")
            if scan:
                # the views are bound in a schema of their own over the widened range; `main`
                # then holds same-named views keeping the rows in the range
                con.execute("create schema scan")
                con.execute("use scan")
            where = f" where {scan.predicate('ts')}" if scan else ""
            if instances is not None:
                where += (" and " if where else " where ") + instances_predicate(instances)
            for view, path in rolls.items():
                overrides[view] = stored_rollups.view_sql(path, _rollup_where(con, path, scan, instances), view)
            if scan and standing:
                mixed = union_by_name if union_by_name is not None else _mixed(con, standing, views is not None)
                where += " union all " + standing_events_sql(read_parquet_sql(standing, mixed), scan)
            if parts:
                # union_by_name costs a pass over every part's metadata each time a view that
                # reads `events` is bound (about 2 s of CPU over 150 parts with all views):
                # ask for it only when the parts' schemas differ (a store older than a schema
                # change)
                if union_by_name is None:
                    union_by_name = _mixed(con, parts, views is not None)
                # the partition columns (engine) come from the parts' paths (pipeline/store/layout.py)
                con.execute(f"create or replace view events as {read_parquet_sql(parts, union_by_name)}{where}")
            else:
                con.execute(f"create or replace view events as {no_events_sql()}")
            sparts = bind_samples(con, store, manifest, scan, instances)
            sharing: set[str] = set()
            if shared or (shared is None and views is not None):
                every = load_view_names() if views is None else []  # all views named, all bound
                sharing = to_share(views if views is not None else every, bind if bind is not None else every, rolls)
            schema = "scan" if scan else "main"
            names = load_views(con, variables=variables, only=bind, overrides=overrides, samples_bound=True,  # binding a view over `events` opens the parts too
                               compute=lambda name, select: materialise(con, name, schema, limits, select),
                               computed=sharing, variables_read=variables_read)
            if scan:
                con.execute("use memory.main")
                ranged = ["events", "samples", *names]
                # each view of main is created over empty tables standing in for the views it
                # reads (of scan, and of main before it): binding `scan.X` or a summary
                # defined again in main would otherwise bind X's whole derivation each time
                with StandIns(con) as stand:
                    stand.aside("scan", *ranged)
                    bind_range_views(con, ranged, time_range, lambda name: define_view(con, name),
                                     after=lambda name: stand.aside("main", name))
            # DuckDB checks the allowed paths each time a file is opened, at query time too:
            # the view keeps working over exactly these parts
            lock_down(con, [*(standing if scan else parts), *sparts, *rolls.values(), *readable])
            return con
        except QueryError as e:  # computing a shared view (pipeline/query/shared.py)
            con.close()
            if attempt + 1 == READ_RETRIES or not vanished(e):
                raise
        except (duckdb.IOException, RuntimeError) as e:
            con.close()
            # a writer (tail, compaction) moved a part between our reading the manifest and
            # opening it: read the manifest again
            if attempt + 1 == READ_RETRIES or not vanished(e):
                if isinstance(e, duckdb.IOException):
                    raise QueryError(one_line(e)) from None
                raise
        except duckdb.BinderException as e:  # the parts do not bind as `events` (not the user's SQL: that runs later)
            con.close()
            raise QueryError(f"the store's parts cannot be read as events: {one_line(e)} "
                             "(run `servelens check`; `servelens compact` rewrites old parts)") from None
        except BaseException:
            con.close()
            raise
    raise AssertionError("unreachable")


def not_a_store(path: Path) -> str | None:
    """Why an existing `path` is not a store (a log file, a directory of something else), in
    one line with what to do; None for a store (or a store directory still empty)."""
    if not path.is_dir():
        return (f"{path} is a file, not a store directory; to read it, ingest it first: "
                f"servelens ingest {path} --store DIR, then --store DIR")
    if (path / "manifest.json").exists() or (path / "events").is_dir():
        return None
    try:
        entries = sorted(p.name for p in path.iterdir())
    except OSError as e:
        return f"cannot read {path}: {e.strerror}"
    if not entries:
        return None  # made for a store that has had nothing committed yet
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3:,} more" if len(entries) > 3 else "")
    return (f"{path} is not a servelens store (no manifest.json; it holds {shown}); give --store "
            f"the directory ingest wrote, or ingest logs into it first (servelens ingest PATH --store {path})")


def _usable_rollups(store: Path, variables: dict[str, Any] | None, views: tuple[str, ...] | None,
                    manifest: dict | None = None) -> dict[str, Path]:
    try:
        return stored_rollups.usable(store, read_manifest(store) if manifest is None else manifest, variables, views)
    except (StoreError, ValueError):
        return {}


def _mixed(con: duckdb.DuckDBPyConnection, parts: list[str], first_only: bool) -> bool:
    """Whether `parts` need union_by_name: one query's connection (`first_only`) asks DuckDB
    about the first part's columns, `run` backing it up (parts.mixed_schemas)."""
    return not is_current(con, parts[0]) if first_only else mixed_schemas(parts)


def _rollup_where(con: duckdb.DuckDBPyConnection, path: Path, scan: TimeRange | None, instances: list[tuple[str, str]] | None) -> str | None:
    """The rows of a rollup a connection reads: those of `instances`, and under a time range
    those of the widened range by the view's own time columns (timerange.row_filter), as the
    raw view computed over the widened events keeps."""
    conds = []
    if instances is not None:
        conds.append(instances_predicate(instances))
    if scan is not None and (scan.since or scan.until):
        cols = [r[0] for r in con.execute("describe select * from read_parquet(?, hive_partitioning = false)", [str(path)]).fetchall()]
        where = row_filter(cols, scan)
        if where:
            conds.append(where)
        if where and "coalesce(finish_ts, arrival_ts)" in where:
            # implied by it, and a filter DuckDB checks against the row groups' statistics
            # (the requests rollup is sorted by finish time within each instance)
            conds.append(scan.predicate("finish_ts"))
    return " and ".join(conds) or None


def check_read_only(con: duckdb.DuckDBPyConnection | None, sql: str) -> None:
    """Raise QueryError unless `sql` only reads (see sandbox.check_statement); `con` is unused,
    kept for callers that pass one."""
    check_statement(sql)


def run(
    store: Path | str,
    sql: str,
    params: list[Any] | dict[str, Any] | None = None,
    variables: dict[str, Any] | None = None,
    limits: Limits | None = None,
    time_range: TimeRange | None = None,
    rollups: bool | None = None,
    fetch: Callable[[duckdb.DuckDBPyRelation | None, Limits], Any] | None = None,
) -> pl.DataFrame | Any:
    """Run one read-only query over the store and return its result: the guarded path for SQL
    a user typed. The statement is checked before anything is opened, then runs on a fresh
    sandboxed connection of its own within `limits` (default: Limits.from_env()), with only
    the views it reads bound, over `time_range` when one is given. The result is a DataFrame,
    or what `fetch` makes of it (sandbox.execute; `servelens sql` writes it as text without
    polars: pipeline/query/textresult.py)."""
    limits = limits or Limits.from_env()
    first = duckdb.connect(":memory:", config=connection_config(limits))
    try:
        check_statement(sql, parser=first)
        views = named_views(sql)  # connect adds the views they read (not those beneath a rollup)
        by_name = None
        for attempt in range(READ_RETRIES):
            con = connect(store, variables, limits, views=views, time_range=time_range, union_by_name=by_name,
                          rollups=rollups, fresh=first if attempt == 0 else None,
                          variables_read=reads_variables(sql))
            try:
                return execute(con, sql, params, limits, fetch)
            except QueryError as e:
                # parts of several schemas, told by DuckDB rather than by reading every footer
                if by_name is None and MISMATCH in str(e):
                    by_name = True
                    continue
                # a part moved by a concurrent commit after the view was made: start again
                if attempt + 1 == READ_RETRIES or not vanished(e):
                    unknown = _UNKNOWN_TABLE.search(str(e))
                    if unknown:
                        raise QueryError(_no_such_view(unknown.group(1))) from None
                    raise
            finally:
                con.close()
    finally:
        first.close()  # unused (a fleet's connection, an error before binding) or closed above
    raise AssertionError("unreachable")


# DuckDB's own suggestion looks among the views bound for this query only, and so names
# catalog tables ("Did you mean sqlite_temp_master?"): suggest among the store's views instead
_UNKNOWN_TABLE = re.compile(r"Table with name (\S+) does not exist")


def _no_such_view(name: str) -> str:
    import difflib

    known = sorted({"events", *load_view_names()})
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (f"no table or view named {name}; {hint}the views are listed by "
            f"servelens sql \"select view_name from duckdb_views() where not internal\"")


def load_view_names() -> list[str]:
    from .views import view_dependencies

    return list(view_dependencies())


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


def range_note(store: Path | str, rng: TimeRange) -> str:
    """What to say when a time range holds no events: the range asked and the store's own
    (min and max `ts`, read from the parts' statistics: cheap)."""
    def fmt(t: dt.datetime) -> str:
        return t.strftime("%Y-%m-%d %H:%M:%S UTC")

    def fetch(rel: duckdb.DuckDBPyRelation | None, _limits: Limits) -> tuple:
        return rel.fetchall()[0] if rel is not None else (None, None)

    # written in UTC by DuckDB, whatever the session's zone
    first, last = run(store, "select strftime(timezone('UTC', min(ts)), '%Y-%m-%d %H:%M:%S UTC') as first_ts, "
                             "strftime(timezone('UTC', max(ts)), '%Y-%m-%d %H:%M:%S UTC') as last_ts from events",
                      fetch=fetch) or (None, None)
    asked = f"{fmt(rng.since) if rng.since else 'the start'} -> {fmt(rng.until) if rng.until else 'the end'}"
    if first is None:
        return f"no events in {asked}: the store holds no timed events"
    return (f"no events in {asked}; the store holds events from {first} to {last}: "
            f"choose --since / --until within it")

