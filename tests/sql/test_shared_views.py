"""Shared views (pipeline/query/shared.py): a one-query connection computes `requests` and
`engine_stats` once into temporary tables when the query reads them through several views.
The answers must be those of the views derived afresh at each reference (shared=False), on
the sample sets, a simulated store and a time range; a query reading a view once keeps it a
view.

Deriving a deep view afresh at each reference costs DuckDB seconds of planning on any store
(every path to `requests` is planned anew), so the reference answer is mostly taken from an
unshared connection on which every view is computed once, in load order, into a table of its
name (`computed_in_order`): each view's own SQL over the rows of the views beneath, the same
relation for deterministic views, with nothing of shared.py. The smallest sample set (tgi)
checks that reference against the unshared view queried as it stands, for every view
compared."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import connect
from servelens.pipeline.query.connect import run
from servelens.pipeline.query.shared import reads
from servelens.pipeline.query.views import closure, load_views, sql_files, view_name
from servelens.pipeline.store.layout import read_parquet_sql
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.query.timerange import TimeRange
from tests.helpers.run_store import built_once, read_only

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_logs"
UTC = dt.timezone.utc


def answered(store: Path, view: str, shared: bool, time_range=None) -> tuple[pl.DataFrame, set[str]]:
    """The view's rows and the temporary tables of the one-query connection that read them
    (read before the query: the tables connect made)."""
    con = connect(store, views={view}, rollups=False, shared=shared, time_range=time_range)
    try:
        temps = _temps(con)
        return _rows(con, view), temps
    finally:
        con.close()


def answer(store: Path, view: str, shared: bool, time_range=None) -> pl.DataFrame:
    return answered(store, view, shared, time_range)[0]


def _rows(con, view: str) -> pl.DataFrame:
    return pl.from_arrow(con.sql(f"select * from {view} order by all").to_arrow_table())


def computed_in_order(con) -> None:
    """Replace every view of sql/ bound on `con` by a table of its rows, one view at a time in
    load order (the `scan` schema of a time range first, then main): each is computed once from
    its own SQL over the tables of the views beneath, which hold those views' rows. `events`
    and `samples` stay the store's scans."""
    order = [view_name(p) for p in sql_files()]
    for schema in ("scan", "main"):
        bound = {v for (v,) in con.execute("select view_name from duckdb_views() where not internal "
                                           "and database_name = current_database() and schema_name = ?",
                                           [schema]).fetchall()}
        for v in (v for v in order if v in bound):
            con.execute(f"create table {schema}.computed_{v} as select * from {schema}.{v}")
            con.execute(f"drop view {schema}.{v}")
            con.execute(f"alter table {schema}.computed_{v} rename to {v}")


def reference(store: Path, view: str, time_range=None, direct: bool = False, also: tuple[str, ...] = ()
              ) -> tuple[pl.DataFrame, set[str], pl.DataFrame | None, dict[str, tuple[pl.DataFrame, pl.DataFrame | None]]]:
    """The view's rows on an unshared connection (connect(shared=False)) with every view
    computed once in load order, the temporary tables connect made, and with `direct` the
    view's rows queried before that, each reference derived afresh. `also`: views `view`
    reads, each answered from the same connection (its computed rows, and its rows queried
    as it stands)."""
    con = connect(store, views={view}, rollups=False, shared=False, time_range=time_range)
    try:
        temps = _temps(con)
        plain = _rows(con, view) if direct else None
        others = {v: _rows(con, v) for v in also}
        computed_in_order(con)
        tables = {t for (t,) in con.execute("select table_name from duckdb_tables() where not temporary").fetchall()}
        assert {view, *also} <= tables  # the answers below are read from the computed tables
        return _rows(con, view), temps, plain, {v: (_rows(con, v), others[v]) for v in also}
    finally:
        con.close()


def _temps(con) -> set[str]:
    return {r[0] for r in con.execute("select table_name from duckdb_tables() where temporary").fetchall()}


def temp_tables(store: Path, view: str, **kw) -> set[str]:
    con = connect(store, views={view}, rollups=False, **kw)
    try:
        return _temps(con)
    finally:
        con.close()


def test_reads_counts_the_paths_to_a_view():
    wm = reads(["window_metrics"], closure(["window_metrics"]))
    # throughput, request_state (read by queue_depth, batch_fill and window_metrics) and
    # window_metrics itself
    assert wm["requests"] == 5
    assert wm["request_state"] == 3
    assert wm["window_metrics"] == 1
    assert reads(["latency_percentiles"], closure(["latency_percentiles"]))["requests"] == 1
    # window_metrics bound over its rollup reads nothing beneath it
    both = reads(["latency_percentiles", "window_metrics"], closure(["latency_percentiles", "window_metrics"], leaves={"window_metrics"}),
                 leaves={"window_metrics"})
    assert both["requests"] == 1 and "throughput" not in both


class _Stores(dict):
    """Each sample set ingested when a test first asks for it, once per test run
    (tests/helpers/run_store.py: under xdist the first worker that needs a set builds it);
    the incident is the session's `incident_store`. Read only: checked at the session's end."""

    def __init__(self, tmp_path_factory, incident: Path):
        super().__init__(incident=incident)
        self.tmp = tmp_path_factory
        self.checks = []

    def __missing__(self, name: str) -> Path:
        check = read_only(built_once(self.tmp, f"shared-views-{name}",
                                     lambda store: ingest([SAMPLES / name], store, rollups=False)),
                          f"{name} sample store")
        store = next(check)
        self.checks.append(check)
        self[name] = store
        return store


@pytest.fixture(scope="session")
def stores(tmp_path_factory, incident_store) -> dict[str, Path]:
    found = _Stores(tmp_path_factory, incident_store)
    yield found
    for check in found.checks:
        next(check, None)  # read_only's check after the yield


@pytest.mark.parametrize("name", ["incident", "vllm", "tgi", "client"])
@pytest.mark.parametrize("view", ["window_metrics", "incident_summary", "metric_availability"])
def test_shared_answers_equal_the_views(stores, name, view):
    store = stores[name]
    # each answer comes from the connection whose tables are checked
    a, shared_temps = answered(store, view, True)
    b, unshared_temps, plain, _ = reference(store, view, direct=name == "tgi")
    assert "shared_requests" in shared_temps
    assert "shared_requests" not in unshared_temps
    if name == "client" and view != "metric_availability":
        # benchmark results files only, no server log: no instance has windows or a summary
        assert a.height == 0
    else:
        assert a.height > 0
    if plain is not None:
        # the view queried as it stands, each reference derived afresh: the reference's rows
        assert_frame_equal(b, plain, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
        assert_frame_equal(a, plain, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
    assert_frame_equal(a, b, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)


def test_a_view_read_once_is_not_materialised(stores):
    assert temp_tables(stores["incident"], "latency_percentiles") == set()
    assert temp_tables(stores["incident"], "events") == set()


def test_shared_in_a_time_range(stores):
    store = stores["incident"]
    lo, hi = run(store, "select min(ts) as lo, max(ts) as hi from events").row(0)
    rng = TimeRange(lo + (hi - lo) / 3, lo + 2 * (hi - lo) / 3)
    # one unshared connection for incident_summary, which reads window_metrics: window_metrics
    # (the cheaper to plan) is also queried as it stands over the range, the ranged unshared
    # path itself answering what the reference answers
    summary, _, _, wm = reference(store, "incident_summary", rng, also=("window_metrics",))
    unshared = {"incident_summary": summary, "window_metrics": wm["window_metrics"][0]}
    assert_frame_equal(unshared["window_metrics"], wm["window_metrics"][1], check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
    for view in ("window_metrics", "incident_summary"):
        a, b = answer(store, view, True, rng), unshared[view]
        assert a.height > 0
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
    # run's own path (the user's SQL) shares too, and answers the same
    got = run(store, "select * from window_metrics order by all", rollups=False, time_range=rng)
    assert_frame_equal(got, unshared["window_metrics"], check_exact=False, rel_tol=1e-9, abs_tol=1e-12)


def _bound(store: Path, stand_ins: bool) -> duckdb.DuckDBPyConnection:
    """A plain connection with `events` over the store's parts and the views incident_summary
    reads, created over stand-ins (load_views' default) or each over the real ones beneath (a
    hook after each view keeps that order)."""
    con = duckdb.connect()
    con.execute(f"create view events as {read_parquet_sql([str(p) for p in committed_parts(store)], False)}")
    load_views(con, only=closure(["incident_summary"]), after=None if stand_ins else (lambda name: None))
    return con


def _catalog(con) -> tuple[list, list, list]:
    views = con.execute("select view_name from duckdb_views() where not internal order by 1").fetchall()
    tables = con.execute("select table_name from duckdb_tables()").fetchall()
    columns = con.execute("select table_name, column_name, data_type from duckdb_columns() "
                          "where not internal order by all").fetchall()
    return views, tables, columns


@pytest.fixture(scope="module")
def in_order(stores) -> tuple[tuple[list, list, list], pl.DataFrame]:
    """The catalog of the views incident_summary reads, each created over the real ones beneath
    (binding each over its whole derivation: seconds, so once per module), and incident_summary's
    rows with the views computed in that order."""
    plain = _bound(stores["incident"], False)
    try:
        catalog = _catalog(plain)
        computed_in_order(plain)
        return catalog, _rows(plain, "incident_summary")
    finally:
        plain.close()


def test_views_created_over_stand_ins_are_the_views_created_in_order(stores, in_order):
    store = stores["incident"]
    over = _bound(store, True)
    try:
        views, tables, columns = _catalog(over)
        assert tables == []  # no stand-in is left behind
        assert {v for (v,) in views} >= closure(["incident_summary"])
        assert (views, tables, columns) == in_order[0]
        # each view created over stand-ins computes its rows from the views beneath as the
        # view created over them does (a view over stand-ins queried as it stands, every
        # reference planned afresh, is compared in test_shared_answers_equal_the_views: connect
        # creates its views over stand-ins)
        computed_in_order(over)
        a, b = _rows(over, "incident_summary"), in_order[1]
        assert a.height > 0
        assert_frame_equal(a, b)
    finally:
        over.close()


def test_shared_views_leave_no_stand_in_and_keep_the_columns(stores, in_order):
    # the views beneath a shared one are set aside behind stand-ins, brought back to compute
    # it and set aside again: all must end under their own names, with their own columns
    store = stores["incident"]
    con = connect(store, views={"incident_summary"}, rollups=False, shared=True)
    try:
        def columns(c, views):
            return c.execute("select table_name, column_name, data_type from duckdb_columns() "
                             "where not internal and table_name in (select unnest(?)) order by all",
                             [sorted(views)]).fetchall()
        views = {v for (v,) in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
        assert views >= closure(["incident_summary"])
        assert not any(v.startswith("servelens_bound_") for v in views)
        tables = con.execute("select table_name from duckdb_tables() where not temporary").fetchall()
        assert tables == []
        assert _temps(con) == {"shared_requests", "shared_engine_stats", "shared_window_metrics"}
        created_in_order = [c for c in in_order[0][2] if c[0] in closure(["incident_summary"])]
        assert columns(con, closure(["incident_summary"])) == created_in_order
    finally:
        con.close()
