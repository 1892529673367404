"""Everything the dashboard reads, and the only dashboard module that queries the store.

Every read goes through `servelens.pipeline.query.connect` (read-only DuckDB with the views of
`sql/`), so the dashboard shows the same numbers as `servelens sql` and `servelens report`.
User choices (time range, engines, instances, models) are bound parameters, never pasted into
SQL. Results are cached per store version (the manifest's size and mtime), so a live store
shows new data on the next refresh while an unchanged store is not queried twice. Time series
are bucketed in DuckDB so that the browser never receives more than a few hundred points per
series, whatever the size of the store. Nothing here connects at import time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import streamlit as st
from servelens.pipeline.query.connect import QueryError, one_line, run_on
from servelens.pipeline.query.connect import connect
from servelens.pipeline.query.sandbox import Limits
from servelens.pipeline.query.stored import literal
from servelens.pipeline.store.manifest import StoreError
from servelens.pipeline.query.timerange import RANGE_MARGIN_S, TimeRange

# The views the dashboard's own pages read (with the views they read, bound at connect): the
# rest of sql/ (the autoscaler's, calibration, metric_series...) is left unbound.
PAGE_VIEWS = ("scaling_signals", "windows", "incident_summary", "metric_availability", "queue_depth", "batch_fill",
              "kv_cache", "latency_percentiles", "throughput", "errors", "requests", "event_catalog")
# Views that several others read (requests by six of them, request_state's per-second
# reconstruction by three) or that cost seconds, and that do not depend on the window width:
# read from their rollups when the store's are fresh (WIDTH_FREE_ROLLUPS), else evaluated
# once per store version into tables of the dashboard's connection, in this (dependency)
# order. The tables are kept compressed (PACKED): the per-second samples of a big store take a
# fraction of a plain temp table's memory that way, and a query over them reads less.
SHARED = ("requests", "request_state", "engine_stats", "queue_depth", "batch_fill", "kv_cache")
# The in-memory database of the dashboard's connection that holds the SHARED tables and the
# PER_WINDOW tables of the widths kept, compressed: DuckDB compresses an in-memory
# database's tables when it is checkpointed.
PACKED = "packed"
# Views that read the `window_s` variable: evaluated once per window width the page is
# showing, over the SHARED tables, in dependency order. A window change replaces them.
PER_WINDOW = ("windows", "throughput", "errors", "latency_percentiles", "window_metrics", "scaling_signals")
# The widest window the sidebar offers (sidebar.WINDOWS).
LARGEST_WINDOW_S = 900.0
# Window widths whose PER_WINDOW tables the connection keeps (a few MB each on a store of
# millions of events): going back to one of them costs nothing.
WIDTHS_KEPT = 5
# Points per series a chart is bucketed down to.
MAX_POINTS = 400
CACHE_TTL_S = 600
# Query results kept (st.cache_data): each is at most a few hundred points per series, so a
# few kB to a few hundred kB; the bound keeps memory flat however many filter combinations
# visitors try (the least recently used goes first).
CACHE_ENTRIES = 128
UTC = dt.timezone.utc
# Set once a page has been drawn in this process (`page_drawn`): the server's warm-up
# (dashboards/serve.py) leaves the widths the first page does not show until then.
FIRST_PAGE_DRAWN = threading.Event()


# When a visitor last asked for something (time.monotonic()): the warm-up of the widths not
# shown waits for a pause in the visits, so as not to hold the connection while a visitor
# changes filters.
_last_visit = [0.0]


def page_drawn() -> None:
    """The Overview page calls this when it has drawn everything."""
    _last_visit[0] = time.monotonic()
    FIRST_PAGE_DRAWN.set()


# visitors' queries waiting for the shared connection's lock (a thread releasing a Python lock
# may take it again before a waiting thread wakes: the warm-up must not)
_waiting = [0]
_waiting_lock = threading.Lock()


def _wait_idle(idle_s: float) -> None:
    """Return once no visitor has asked for anything for `idle_s` seconds and none waits."""
    while True:
        with _waiting_lock:
            if _waiting[0]:
                _last_visit[0] = time.monotonic()
        left = idle_s - (time.monotonic() - _last_visit[0])
        if left <= 0:
            return
        time.sleep(min(left, 0.25) if _waiting[0] else left)


@contextlib.contextmanager
def _visitor_holds(conn: "_Connection"):
    """A visitor's hold of the connection's lock, known to the warm-up while it waits."""
    with _waiting_lock:
        _waiting[0] += 1
    try:
        conn.lock.acquire()
    finally:
        with _waiting_lock:
            _waiting[0] -= 1
            _last_visit[0] = time.monotonic()
    try:
        yield
    finally:
        _last_visit[0] = time.monotonic()
        conn.lock.release()


@dataclass(frozen=True)
class Settings:
    store: str
    thresholds: str | None = None
    # `servelens dashboard --since/--until`: the only time the dashboard reads (ISO text)
    since: str | None = None
    until: str | None = None

    @property
    def time_range(self) -> TimeRange | None:
        return TimeRange.parse(self.since, self.until)


def settings(argv: list[str] | None = None) -> Settings:
    """The store and thresholds file: `-- --store DIR --thresholds FILE` (as passed by
    `servelens dashboard`), else $SERVELENS_STORE, else the default store."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--store")
    parser.add_argument("--thresholds")
    parser.add_argument("--since")
    parser.add_argument("--until")
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    store = args.store or os.environ.get("SERVELENS_STORE")
    if not store:
        from servelens.pipeline.store.manifest import default_store

        store = str(default_store())
    thresholds = args.thresholds or os.environ.get("SERVELENS_THRESHOLDS") or None
    return Settings(store=str(Path(store).resolve()), thresholds=thresholds, since=args.since, until=args.until)


def store_version(store: str) -> str:
    """Changes whenever an ingest commits (the manifest is rewritten atomically)."""
    try:
        s = (Path(store) / "manifest.json").stat()
    except FileNotFoundError:
        return "empty"
    return f"{s.st_size}:{s.st_mtime_ns}"


class _Connection:
    """One read-only connection per store version, shared by every visitor and every window
    width: the page's views bound, the SHARED views evaluated once into tables, and the
    PER_WINDOW views of the window width last asked for (`use_window`). A lock: Streamlit
    serves sessions from several threads and a DuckDB connection must not run two queries at
    once (nor change the window under another's query).

    A temp view (over a table of PACKED) shadows the view of the same name for every query
    of this connection, the views reading it included (DuckDB looks in `temp` first): the views
    that read `batch_fill` read the table, not `request_state` again. Same definitions as `servelens sql`, evaluated once."""

    def __init__(self, store: str, variables: dict[str, Any], time_range: TimeRange | None = None) -> None:
        from servelens.pipeline.query.views import views_for

        views = views_for("select * from " + ", ".join(PAGE_VIEWS))
        if time_range is not None:
            # the margin read past the range's edges is at least two windows (timerange.py):
            # wide enough for the widest window the sidebar offers, as one connection serves all
            variables = {**variables, "range_margin_s": max(float(variables.get("range_margin_s", RANGE_MARGIN_S)),
                                                            2 * LARGEST_WINDOW_S)}
        # the PER_WINDOW views as stored at the base width (the variables' window_s), when
        # fresh and of these variables: the default width's rows are read (tens of thousands),
        # not derived again from the requests and the per-second state
        self.variables = variables
        self.stored_width: float | None = None
        self.stored_per_window: dict[str, Path] = {}
        # the store-wide summaries stored with them (SUMMARY_ROLLUPS): the whole store's rows
        # of incident_summary and metric_availability at the base width
        self.stored_summaries: dict[str, Path] = {}
        if time_range is None:
            found = _stored_rollups(store, variables)
            self.stored_per_window = {v: path for v, path in found.items() if v in PER_WINDOW}
            self.stored_summaries = {v: path for v, path in found.items() if v not in PER_WINDOW}
            if self.stored_per_window:
                self.stored_width = float(variables["window_s"])
        # bound over rollups: only the width-independent ones (WIDTH_FREE_ROLLUPS:
        # pipeline/query/rollups.py), as this one connection evaluates the per-window views at
        # every width the sidebar offers; the base width's files are only made readable.
        # shared=False: this class copies the views every chart reads into tables itself
        # (SHARED, below)
        readable = (*self.stored_per_window.values(), *self.stored_summaries.values())
        try:
            self.con = connect(store, variables, page_limits(), time_range=time_range, views=views, rollups=WIDTH_FREE_ROLLUPS,
                               shared=False, readable=readable)
        except QueryError as e:
            # `views` makes connect read only the first part's schema: parts of older schemas
            # need union_by_name (what query.run does on the same error)
            if "schema mismatch" not in str(e):
                raise
            self.con = connect(store, variables, page_limits(), time_range=time_range, views=views, union_by_name=True,
                               rollups=WIDTH_FREE_ROLLUPS, shared=False, readable=readable)
        self.lock = threading.Lock()
        # with a time range the views are bound in schema `scan` over the widened range (and
        # `main` keeps the rows in the range): the tables take the widened rows, as the views
        # reading them would
        self.schema = "main" if time_range is None else "scan"
        self.window_s: float | None = None
        self.widths: list[float] = []  # widths whose PER_WINDOW tables are kept, least recent first
        # (view, window width or None, seconds): what was computed, in order
        self.evaluated: list[tuple[str, float | None, float]] = []
        # a view bound over a stored rollup is read as it is: copying it into a table would
        # cost what reading it costs (and the memory)
        rolled = {name for name, sql in self.con.execute(
            "select view_name, sql from duckdb_views() where not internal").fetchall() if "/rollups/" in sql}
        self.shared = [view for view in SHARED if view not in rolled]
        if "metric_availability" in self.stored_summaries:
            # which metrics the logs give does not change with the width the page shows: the
            # stored rows (computed at the base width) answer for every width
            self.con.execute("create or replace temp view metric_availability as select * from "
                             f"read_parquet({literal(self.stored_summaries['metric_availability'])})")
        self.con.execute(f"attach ':memory:' as {PACKED} (compress)")
        for view in self.shared:
            self._evaluate(view)

    def _evaluate(self, view: str, window_s: float | None = None) -> None:
        """A SHARED view into the PACKED table of its name; a PER_WINDOW view into a PACKED
        table of its width (`w60_throughput`), or at the width stored, its rollup file as it
        is; either under a temp view of its name."""
        # the database's own view, named with its catalog: a bare `main.X` would find the
        # temp view of the same name (temp objects live in schema `main` of catalog `temp`)
        t0 = time.perf_counter()
        source = f"memory.{self.schema}.{view}"
        if window_s is None:
            # a table of the compressed database, compressed once written (checkpoint: each
            # table in turn, so that no two lie uncompressed in memory at once), and a temp
            # view of the view's name over it (temp objects shadow the views' own names)
            self.con.execute(f"create or replace table {PACKED}.main.{view} as select * from {source}")
            self.con.execute(f"checkpoint {PACKED}")
            self.con.execute(f"create or replace temp view {view} as select * from {PACKED}.main.{view}")
        else:
            if not self._stored(view, window_s):
                source = self._coarser(view, window_s) or source
                self.con.execute(f"create or replace table {_packed(_window_table(view, window_s))} as select * from {source}")
                self.con.execute(f"checkpoint {PACKED}")
            self.con.execute(f"create or replace temp view {view} as select * from {self._width_rows(view, window_s)}")
        self.evaluated.append((view, window_s, time.perf_counter() - t0))

    def _coarser(self, view: str, window_s: float) -> str | None:
        """The rows of a PER_WINDOW view at a multiple of the stored width, derived from the
        stored width's rows where they sum (pipeline/query/coarser.py): tens of thousands of
        rows read instead of the events and requests. None: computed by the view's SQL."""
        from servelens.pipeline.query import coarser

        path = self.stored_per_window.get(view)
        if path is None or self.stored_width is None or not coarser.derivable(view, self.stored_width, window_s,
                                                                              self.variables):
            return None
        return f"({coarser.derive_sql(view, str(path), self.stored_width, window_s)})"

    def _stored(self, view: str, window_s: float) -> bool:
        return window_s == self.stored_width and view in self.stored_per_window

    def _width_rows(self, view: str, window_s: float) -> str:
        """Where the rows of a PER_WINDOW view at `window_s` are: the store's rollup file when
        stored at that width (made readable at connect; read in place, as a copy into a table
        would cost what reading it costs, and the page's queries read it as fast), else the
        PACKED table evaluated for that width."""
        if self._stored(view, window_s):
            return f"read_parquet({literal(self.stored_per_window[view])})"
        return _packed(_window_table(view, window_s))

    def use_window(self, window_s: float) -> None:
        """Make the PER_WINDOW names read the tables of `window_s` (hold the lock): evaluated
        the first time a width is asked for, kept for the next time (the sidebar offers five
        widths; the least recently used beyond WIDTHS_KEPT are dropped)."""
        if self.window_s == window_s:
            return
        self.window_s = None  # half-switched names are no window's
        self.con.execute("set variable window_s = ?", [window_s])  # incident_summary reads it at query time
        if window_s in self.widths:
            self.widths.remove(window_s)
            for view in PER_WINDOW:
                self.con.execute(f"create or replace temp view {view} as select * from {self._width_rows(view, window_s)}")
        else:
            try:
                self._evaluate_width(window_s)
            except duckdb.OutOfMemoryException:
                # the widths kept fill the page's memory on a big store: keep only this one
                self.forget_widths()
                try:
                    self._evaluate_width(window_s)
                except duckdb.OutOfMemoryException:
                    raise QueryError(MEMORY_HINT) from None
        self.widths.append(window_s)
        while len(self.widths) > WIDTHS_KEPT:
            self._drop_width(self.widths.pop(0))
        self.window_s = window_s

    def _evaluate_width(self, window_s: float) -> None:
        for view in PER_WINDOW:  # in dependency order: window_metrics reads this width's throughput
            self._evaluate(view, window_s)

    def _drop_width(self, window_s: float) -> None:
        for view in PER_WINDOW:
            self.con.execute(f"drop table if exists {_packed(_window_table(view, window_s))}")
        self.con.execute(f"checkpoint {PACKED}")  # gives the dropped tables' blocks back

    def forget_widths(self) -> None:
        """Drop the tables of every width kept (hold the lock): what to give up first when
        the page's memory runs out."""
        for old in self.widths:
            self._drop_width(old)
        self.widths.clear()
        self.window_s = None


# The stored views (pipeline/query/stored.py) that do not read the window width: the connection
# binds them over their rollups (when fresh) for every width, and copies none into a table.
# event_catalog is no SHARED view: read once per store version by the catalog's query (and
# under a time range, the view over the range's events, not a table of the widened range).
WIDTH_FREE_ROLLUPS = ("requests", "request_state", "engine_stats", "queue_depth", "batch_fill", "kv_cache",
                      "event_catalog")


# The store-wide summaries (pipeline/query/stored.py SUMMARIES) the page reads besides the
# PER_WINDOW views: the whole store's incident_summary, metric_availability.
SUMMARY_ROLLUPS = ("incident_summary", "metric_availability")


def _stored_rollups(store: str, variables: dict[str, Any]) -> dict[str, Path]:
    """view -> the store's rollup, for each PER_WINDOW view and summary (SUMMARY_ROLLUPS)
    stored at the base width that a reader may use with these variables (fresh, of today's
    SQL, of the same window width and thresholds: pipeline/query/rollups.py)."""
    from servelens.pipeline.query import stored
    from servelens.pipeline.store.manifest import read_manifest

    if stored.disabled():
        return {}
    try:
        root = Path(store)
        manifest = read_manifest(root)
        out = {}
        for view in (*PER_WINDOW, *SUMMARY_ROLLUPS):
            path = stored.current(root, manifest, variables, view)
            if path is not None:
                out[view] = path
        return out
    except (StoreError, ValueError, OSError):
        return {}
MEMORY_HINT = ("the dashboard's views do not fit in its memory (1 GB by default): restart it with "
               "SERVELENS_DASHBOARD_MEMORY=4GB, or choose a shorter time range (--since/--until)")


def _packed(table: str) -> str:
    """A table of the connection's compressed database (PACKED)."""
    return f"{PACKED}.main.{table}"


def _window_table(view: str, window_s: float) -> str:
    return f"w{window_s:g}_{view}".replace(".", "_")


# The dashboard's shared connection: DuckDB keeps the evaluated views within this memory and
# writes what does not fit to its private spill directory (the default of `servelens sql`, 4
# GB, let a dashboard on a 5M-event store grow past 4 GB). $SERVELENS_DASHBOARD_MEMORY,
# _THREADS raise or lower it; no time limit (the first evaluation of a big store takes long).
# 1 GB: at 512 MB a 10M-request store (make bench) ran out computing one window width alone
PAGE_LIMITS = Limits(timeout_s=None, memory_bytes=2**30, raise_memory="$SERVELENS_DASHBOARD_MEMORY")


def page_limits() -> Limits:
    return Limits.from_env(prefix="SERVELENS_DASHBOARD_", base=PAGE_LIMITS)


# One: the store version only moves forward, and each connection holds its own copy of the
# evaluated views (a new ingest evicts the previous version's). No time limit: an unchanged
# store is not computed again because nobody looked at it for a while.
@st.cache_resource(max_entries=1, show_spinner=False)
def _connection(store: str, version: str, variables: tuple[tuple[str, Any], ...], time_range: TimeRange | None = None) -> _Connection:
    return _Connection(store, dict(variables), time_range)


@st.cache_data(ttl=CACHE_TTL_S, max_entries=CACHE_ENTRIES, show_spinner=False)
def _cached(store: str, version: str, sql: str, params: dict[str, Any] | None, variables: tuple[tuple[str, Any], ...],
            time_range: TimeRange | None = None, window_s: float | None = None) -> pl.DataFrame:
    conn = _connection(store, version, variables, time_range)
    with _visitor_holds(conn):
        if window_s is not None:
            conn.use_window(window_s)
        try:
            return run_on(conn.con, sql, params)
        except QueryError as e:
            if "memory limit" not in str(e) or not conn.widths:
                raise
            # give the other widths' tables back, then once more
            current = conn.window_s
            conn.forget_widths()
            if current is not None:
                conn.use_window(current)
            return run_on(conn.con, sql, params)


def _variables(cfg: Settings) -> tuple[tuple[str, Any], ...]:
    """The connection's variables (the thresholds); the window width is set per query."""
    variables = dict(thresholds(cfg.thresholds))
    variables["window_s"] = float(variables.get("window_s", 60.0))
    return tuple(sorted(variables.items()))


def query(cfg: Settings, sql: str, params: dict[str, Any] | None = None, window_s: float | None = None) -> pl.DataFrame:
    """Run one read-only query (cached). `window_s`: the query reads views of that window
    width (PER_WINDOW); None: it reads none of them, so a window change does not run it
    again. Raises QueryError / StoreError."""
    _last_visit[0] = time.monotonic()
    # normalise the type so that the default 60 and the sidebar's 60.0 share a cache entry
    window = float(window_s) if window_s is not None else None
    return _cached(cfg.store, store_version(cfg.store), sql, params, _variables(cfg), cfg.time_range, window)


def warm(cfg: Settings, widths: tuple[float, ...] = (), idle_s: float = 0.0) -> _Connection:
    """The shared connection of the store as it is now, with the default window width's
    per-window views evaluated: what the first visitor's page would build; then those of
    `widths` (at most WIDTHS_KEPT), in this order, one width per hold of the lock so that a
    visitor's query waits for one width at most, and each only once no visitor has asked for
    anything for `idle_s` seconds; the default width the one shown at the end. `servelens
    dashboard` calls this while its server starts (dashboards/serve.py), so that the first
    visitor and the first change of width do not pay it."""
    # numpy fully imported on this thread first: Altair refers to it lazily, and the chart
    # the server's warm-up validates next (dashboards/serve.py) found it half-imported when
    # the first visitor's script was importing it on another thread (a connection read from
    # rollups is ready that early)
    import numpy  # noqa: F401

    variables = _variables(cfg)
    default = float(dict(variables)["window_s"])
    conn = _connection(cfg.store, store_version(cfg.store), variables, cfg.time_range)
    with conn.lock:
        conn.use_window(default)
    others = [float(w) for w in widths if float(w) != default][:WIDTHS_KEPT - 1]
    for w in others:
        _wait_idle(idle_s)
        with conn.lock:
            conn.use_window(w)
    if others:
        with conn.lock:
            conn.use_window(default)
    return conn


def warm_page(cfg: Settings, f: Filters) -> None:
    """Every query result the Overview page reads for the filters `f`, into the caches the
    page reads, in the order the page asks for them: the server's warm-up calls this with the
    filters a new visitor starts from (sidebar.default_spec), so that a visitor arriving once
    it is done draws the first page from them (one arriving earlier waits for the result being
    computed, under the cache's per-entry lock, or computes the next one itself)."""
    signals(cfg, f)
    _summary_for(cfg, f)
    peaks(cfg, f)  # the request counts, and the queue, KV-cache, latency and errors frames
    availability(cfg)
    batch_fill(cfg, f)
    if kv_cache(cfg, f)["kv_usage"].drop_nulls().len():  # the page reads them only for a KV chart
        kv_devices(cfg, f)
    throughput(cfg, f)
    slowest_requests(cfg, f)


# A visitor's query: less time and memory than on the command line (several visitors share the
# machine), two threads; `servelens dashboard --query-timeout/--query-memory` set the env.
USER_SQL_LIMITS = Limits(
    timeout_s=15.0,
    memory_bytes=2 * 10**9,
    threads=2,
    raise_timeout="servelens dashboard --query-timeout SECONDS (or $SERVELENS_DASHBOARD_QUERY_TIMEOUT)",
    raise_memory="servelens dashboard --query-memory SIZE (or $SERVELENS_DASHBOARD_QUERY_MEMORY)",
)


def user_sql_limits() -> Limits:
    return Limits.from_env(prefix="SERVELENS_DASHBOARD_QUERY_", base=USER_SQL_LIMITS)


def run_user_sql(cfg: Settings, sql: str) -> pl.DataFrame:
    """The SQL page: the visitor's own query through the guarded path (query.run): checked,
    then on a sandboxed connection of its own (nothing it does reaches the dashboard's shared
    connection or another visitor), within the dashboard's limits. Not cached across visitors."""
    from servelens.pipeline.query import worker as query_worker

    variables = dict(thresholds(cfg.thresholds))
    variables["window_s"] = float(variables.get("window_s", 60.0))
    # in a process of its own, watched and killed from here (pipeline/query/worker.py): one
    # visitor's huge value cannot take the dashboard down for everyone
    return query_worker.run(cfg.store, sql, variables=variables, limits=user_sql_limits(),
                            time_range=cfg.time_range, max_workers=user_sql_workers())


def user_sql_workers() -> int:
    """How many visitors' queries run at once ($SERVELENS_DASHBOARD_QUERY_WORKERS, default 2):
    each may take the query memory limit."""
    try:
        return max(1, int(os.environ.get("SERVELENS_DASHBOARD_QUERY_WORKERS", "2")))
    except ValueError:
        return 2


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def thresholds(path: str | None = None) -> dict[str, Any]:
    """The signal thresholds (packaged defaults, overridden by the user's file)."""
    from servelens.pipeline.query.views import resolve_variables

    return resolve_variables(thresholds=path)


# --- the store's contents: what can be filtered on -------------------------------------------


def catalog(cfg: Settings) -> pl.DataFrame:
    """One row per (engine, instance, model): first and last event time, event count. A
    benchmark client's results file is not an instance (its requests join the servers')."""
    return query(
        cfg,
        "select engine, instance, model, first_ts, last_ts, n_events "
        "from event_catalog where engine <> 'client' order by engine, instance, model",
    )


@dataclass(frozen=True)
class Filters:
    start: dt.datetime
    end: dt.datetime
    engines: tuple[str, ...] = ()
    instances: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    window_s: float = 60.0
    # (engine, instance) pairs the selection resolves to; empty means none matched
    targets: tuple[tuple[str, str], ...] = field(default=())
    # the targets are every server instance of the store (no engine / instance / model filter
    # narrows them: the default view): the queries then test no pair per row
    every: bool = False

    @property
    def target(self) -> str:
        """The SQL condition keeping the rows of the selected instances."""
        return _EVERY if self.every else _TARGET

    def keeps(self, engine: str | None, instance: str | None) -> bool:
        """`target`'s condition for one (engine, instance) already read into Python."""
        if self.every:
            return engine != "unknown" and instance is not None
        return (engine, instance) in self.targets

    @property
    def span_s(self) -> float:
        return max(1.0, (self.end - self.start).total_seconds())

    def bucket_s(self, minimum: float = 1.0) -> float:
        """Bucket width that keeps a series under MAX_POINTS points."""
        return float(max(minimum, math.ceil(self.span_s / MAX_POINTS)))

    def window_bucket_s(self) -> float:
        """Bucket width of the per-window series: a whole number of windows keeping a series
        under MAX_POINTS points (one window while the range holds fewer)."""
        return float(self.window_s * max(1, math.ceil(self.span_s / (MAX_POINTS * self.window_s))))

    def params(self, **extra: Any) -> dict[str, Any]:
        p = {"start": self.start, "end": self.end}
        if not self.every:
            p["targets"] = [f"{e}\x1f{i}" for e, i in self.targets]
            p["instances"] = sorted({i for _e, i in self.targets})
        p.update(extra)
        return p


def resolve_targets(cat: pl.DataFrame, engines: tuple[str, ...], instances: tuple[str, ...], models: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The (engine, instance) pairs matching the filters: a model selects the instances that
    served it (instance-level views have no model column). Files no parser recognised
    (engine `unknown`) are no server, so they get no verdict."""
    df = cat.filter(pl.col("engine") != "unknown")
    if engines:
        df = df.filter(pl.col("engine").is_in(list(engines)))
    if instances:
        df = df.filter(pl.col("instance").is_in(list(instances)))
    if models:
        # an instance whose lines name no model (TGI) may serve it: keep it
        df = df.filter(pl.col("model").is_in(list(models)) | pl.col("model").is_null())
    pairs = df.select("engine", "instance").unique().sort("engine", "instance").rows()
    return tuple((e, i) for e, i in pairs)


# A row belongs to the selection when its (engine, instance) pair is one of the targets; the
# pairs arrive as one bound list of "engine<US>instance" keys (US = chr(31), never in a name).
# The instances' names first: a condition on the column alone, which DuckDB takes into the
# scan of a rollup (sorted by engine and instance), so that the row groups of the other
# instances are skipped rather than each row's key built and looked up.
_TARGET = ("list_contains(cast($instances as varchar[]), instance)"
           " and list_contains(cast($targets as varchar[]), engine || chr(31) || instance)")
# every instance (Filters.every): the rows of every server, without a string built and looked
# up per row (a measurable cost over the 10M requests of a big store)
_EVERY = "(engine <> 'unknown' and instance is not null)"
# requests that carry no model (TGI's lines name none) are kept by any model filter
_MODEL = "(len(cast($models as varchar[])) = 0 or model is null or list_contains(cast($models as varchar[]), model))"


def _bucket(col: str) -> str:
    return f"to_timestamp(floor(epoch({col}) / $bucket) * $bucket)"


# --- the verdict -----------------------------------------------------------------------------


def signals(cfg: Settings, f: Filters) -> pl.DataFrame:
    """Signal episodes that overlap the selected time range, per instance."""
    return query(
        cfg,
        f"""
        select s.engine, s.instance, s.signal, s.severity, s.window_start, s.window_end,
               s.duration_s, s.n_windows, s.value, s.threshold, s.unit, s.estimated,
               s.recommendation,
               s.window_end >= last.last_end as ongoing
        from scaling_signals as s
        join (select engine, instance, max(window_end) as last_end from windows group by all) as last
            using (engine, instance)
        where {f.target} and s.window_end > $start and s.window_start < $end
        order by s.instance, s.window_start, s.signal
        """,
        f.params(),
        f.window_s,
    )


@st.cache_data(ttl=CACHE_TTL_S, max_entries=CACHE_ENTRIES, show_spinner=False)
def _summary_rows(store: str, version: str, start: dt.datetime | None, end: dt.datetime | None,
                  variables: tuple[tuple[str, Any], ...], time_range: TimeRange | None = None,
                  window_s: float = 60.0) -> list[dict[str, Any]]:
    from servelens.pipeline.report.summary import read_summary

    conn = _connection(store, version, variables, time_range)
    with _visitor_holds(conn):  # the range is set as variables of the shared connection: one reader at a time
        stored = conn.stored_summaries.get("incident_summary")
        if start is None and end is None and stored is not None and window_s == conn.stored_width:
            # the whole store at the base width: the rows stored at the last commit
            return _rows(conn.con, f"select * from read_parquet({literal(stored)}) order by instance, engine")
        conn.use_window(window_s)
        if start is None and end is None and stored is not None and conn.stored_width is not None:
            # the whole store at another width: the stored rows with the columns that read
            # the width taken from this width's tables (not every request and sample again)
            from servelens.pipeline.query import coarser

            return _rows(conn.con, coarser.summary_sql(str(stored)))
        try:
            return read_summary(conn.con, start, end, None)
        finally:
            conn.con.execute("reset variable summary_since")
            conn.con.execute("reset variable summary_until")


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    rel = con.execute(sql)
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def _summary_for(cfg: Settings, f: Filters) -> list[dict[str, Any]]:
    """The incident_summary rows of every instance over the selected range (cached). A range
    holding every event of the store (the page's default) is the whole store: the summary
    with no range, as `servelens report` without --since/--until reads it."""
    cat = catalog(cfg)
    whole = (not cat.is_empty() and cat["first_ts"].null_count() < cat.height
             and f.start <= cat["first_ts"].min() and f.end > cat["last_ts"].max())
    start, end = (None, None) if whole else (f.start, f.end)
    return _summary_rows(cfg.store, store_version(cfg.store), start, end, _variables(cfg), cfg.time_range,
                         float(f.window_s))


def fleet_story(cfg: Settings, f: Filters, episodes: pl.DataFrame, verdicts: dict[tuple[str, str], str]) -> dict[str, Any]:
    """The report's executive summary (pipeline/report/summary.py) for the selection: which
    instances died, how many requests failed, what to do."""
    from servelens.pipeline.report.summary import summarize

    rows = _summary_for(cfg, f)
    targets = set(f.targets)
    rows = [r for r in rows if (r["engine"], r["instance"]) in targets]
    by_instance: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in episodes.iter_rows(named=True):
        by_instance.setdefault((r["engine"], r["instance"]), []).append(r)
    return summarize(rows, by_instance, verdicts)


def availability(cfg: Settings) -> pl.DataFrame:
    """metric_availability: per engine and metric, whether the logs give it and why not."""
    return query(cfg, "select engine, metric, view, available, estimated, reason, sources from metric_availability")


# --- evidence time series --------------------------------------------------------------------


def queue_depth(cfg: Settings, f: Filters) -> pl.DataFrame:
    return query(
        cfg,
        f"""
        select {_bucket('ts')} as ts, engine, instance, source,
               avg(waiting) as waiting, max(waiting) as waiting_max
        from queue_depth
        where {f.target} and ts >= $start and ts < $end and waiting is not null
        group by all order by instance, ts
        """,
        f.params(bucket=f.bucket_s()),
    )


def batch_fill(cfg: Settings, f: Filters) -> pl.DataFrame:
    return query(
        cfg,
        f"""
        select {_bucket('ts')} as ts, engine, instance, source,
               avg(running) as running, max(running) as running_max,
               avg(fill) as fill, max(fill) as fill_max, avg(token_fill) as token_fill,
               max(max_num_seqs) as max_num_seqs
        from batch_fill
        where {f.target} and ts >= $start and ts < $end
        group by all order by instance, ts
        """,
        f.params(bucket=f.bucket_s()),
    )


def kv_cache(cfg: Settings, f: Filters) -> pl.DataFrame:
    # preemptions: logged counts plus preemption warnings; null (not 0) where the line has
    # neither field nor warning, so an engine without preemption data draws no bars
    return query(
        cfg,
        f"""
        select {_bucket('ts')} as ts, engine, instance,
               avg(kv_usage) as kv_usage, max(kv_usage) as kv_usage_max,
               case when count(preemptions) > 0 or sum(preemption_lines) > 0
                    then coalesce(sum(preemptions), 0) + sum(preemption_lines) end as preemptions
        from kv_cache
        where {f.target} and ts >= $start and ts < $end
        group by all order by instance, ts
        """,
        f.params(bucket=f.bucket_s()),
    )


def kv_devices(cfg: Settings, f: Filters) -> list[str]:
    """The devices the selected instances' logs name for their KV cache (`GPU`, `CPU`,
    `XPU`, `TPU`: vLLM's `<device> KV cache size` / `# <device> blocks` at start-up, and a
    stats line whose label is not GPU), from the few capacity events: read once per store
    version for every instance (a scan of the events' columns), the selection kept here, so
    that a filter change queries nothing."""
    df = query(
        cfg,
        """
        select distinct engine, instance, upper(attrs->>'kv_device') as device
        from events
        where event = 'capacity' and attrs like '%kv_device%'
        """,
    )
    return sorted({d for e, i, d in df.iter_rows() if d and f.keeps(e, i)})


def latency(cfg: Settings, f: Filters) -> pl.DataFrame:
    """Percentiles per window; over a range of more than MAX_POINTS windows, per bucket of
    whole windows (`Filters.window_bucket_s`), each percentile the worst (highest) window's
    of the bucket and the counts summed, so that a breach of the SLO in one window stays
    visible. With one window per bucket the rows are the view's."""
    return query(
        cfg,
        f"""
        select min(window_start) as ts, engine, instance, model, cast(sum(n) as bigint) as n,
               cast(sum(n_e2e) as bigint) as n_e2e, cast(sum(n_ttft) as bigint) as n_ttft, cast(sum(n_tpot) as bigint) as n_tpot, cast(sum(n_queue) as bigint) as n_queue,
               bool_or(e2e_estimated) as e2e_estimated,
               max(p50_e2e_s) as p50_e2e_s, max(p95_e2e_s) as p95_e2e_s, max(p99_e2e_s) as p99_e2e_s,
               max(p50_ttft_s) as p50_ttft_s, max(p95_ttft_s) as p95_ttft_s, max(p99_ttft_s) as p99_ttft_s,
               max(p50_tpot_s) as p50_tpot_s, max(p95_tpot_s) as p95_tpot_s, max(p99_tpot_s) as p99_tpot_s,
               max(p50_queue_s) as p50_queue_s, max(p95_queue_s) as p95_queue_s, max(p99_queue_s) as p99_queue_s
        from latency_percentiles
        where {f.target} and {_MODEL} and window_end > $start and window_start < $end
        group by engine, instance, model, floor(epoch(window_start) / $bucket)
        order by instance, model, ts
        """,
        f.params(models=list(f.models), bucket=f.window_bucket_s()),
        f.window_s,
    )


def throughput(cfg: Settings, f: Filters) -> pl.DataFrame:
    """Per window; over more than MAX_POINTS windows, per bucket of whole windows with the
    counts summed and the rates averaged over the bucket's windows."""
    return query(
        cfg,
        f"""
        select min(window_start) as ts, engine, instance, cast(sum(arrived) as bigint) as arrived, cast(sum(finished) as bigint) as finished,
               cast(sum(aborted) as bigint) as aborted, avg(requests_per_s) as requests_per_s,
               avg(output_tokens_per_s) as output_tokens_per_s, avg(prompt_tokens_per_s) as prompt_tokens_per_s,
               avg(gen_tps_logged) as gen_tps_logged, avg(prompt_tps_logged) as prompt_tps_logged,
               avg(http_requests_per_s) as http_requests_per_s
        from throughput
        where {f.target} and window_end > $start and window_start < $end
        group by engine, instance, floor(epoch(window_start) / $bucket)
        order by instance, ts
        """,
        f.params(bucket=f.window_bucket_s()),
        f.window_s,
    )


def errors(cfg: Settings, f: Filters) -> pl.DataFrame:
    return query(
        cfg,
        f"""
        select window_start as ts, engine, instance, kind, n_errors, first_ts, first_message,
               first_source, first_line
        from errors
        where {f.target} and window_end > $start and window_start < $end
        order by first_ts
        """,
        f.params(),
        f.window_s,
    )


def slowest_requests(cfg: Settings, f: Filters, limit: int = 20) -> pl.DataFrame:
    return query(
        cfg,
        f"""
        select instance, request_id, e2e_s, e2e_estimated, queue_s, ttft_s, tpot_s, status,
               arrival_ts, finish_ts, prompt_tokens, output_tokens, model, engine, source, line
        from requests
        where {f.target} and {_MODEL} and e2e_s is not null
          and finish_ts >= $start and finish_ts < $end
        order by e2e_s desc, finish_ts
        limit $limit
        """,
        f.params(models=list(f.models), limit=limit),
    )


def peaks(cfg: Settings, f: Filters) -> dict[str, Any]:
    """Headline numbers for the selection (None where the logs do not give the metric). The
    maxima and the error count are those of the frames the evidence charts draw (the same rows,
    the same conditions: a bucket's max is the max of its rows), read from their cached
    results rather than scanning the per-second views again; only the request counts are a
    query of their own."""
    df = query(
        cfg,
        f"""
        select count(*) filter (where status = 'finished') as finished,
               count(*) filter (where status = 'failed') as failed,
               count(*) filter (where status = 'aborted') as aborted
        from requests
        where {f.target} and {_MODEL} and finish_ts >= $start and finish_ts < $end
        """,
        f.params(models=list(f.models)),
    )
    counts = df.row(0, named=True)
    return {
        "peak_waiting": queue_depth(cfg, f)["waiting_max"].max(),
        "peak_kv_usage": kv_cache(cfg, f)["kv_usage_max"].max(),
        "worst_p99_e2e_s": latency(cfg, f)["p99_e2e_s"].max(),
        **counts,
        "n_errors": errors(cfg, f)["n_errors"].sum(),
    }


__all__ = [
    "Filters",
    "QueryError",
    "Settings",
    "availability",
    "batch_fill",
    "catalog",
    "errors",
    "fleet_story",
    "kv_cache",
    "latency",
    "one_line",
    "peaks",
    "query",
    "queue_depth",
    "resolve_targets",
    "run_user_sql",
    "settings",
    "signals",
    "slowest_requests",
    "store_version",
    "thresholds",
    "throughput",
    "warm",
    "warm_page",
]
