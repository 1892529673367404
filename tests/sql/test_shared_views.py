"""Shared views (pipeline/query/shared.py): a one-query connection computes `requests` and
`engine_stats` once into temporary tables when the query reads them through several views.
The answers must be those of the views derived afresh at each reference (shared=False), on
the sample sets, a simulated store and a time range; a query reading a view once keeps it a
view."""

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
from servelens.pipeline.query.views import closure, load_views
from servelens.pipeline.store.layout import read_parquet_sql
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.query.timerange import TimeRange

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_logs"
UTC = dt.timezone.utc


def answered(store: Path, view: str, shared: bool, time_range=None) -> tuple[pl.DataFrame, set[str]]:
    """The view's rows and the temporary tables of the one-query connection that read them
    (read before the query: the tables connect made)."""
    con = connect(store, views={view}, rollups=False, shared=shared, time_range=time_range)
    try:
        temps = _temps(con)
        return pl.from_arrow(con.sql(f"select * from {view} order by all").to_arrow_table()), temps
    finally:
        con.close()


def answer(store: Path, view: str, shared: bool, time_range=None) -> pl.DataFrame:
    return answered(store, view, shared, time_range)[0]


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
    """Each sample set ingested when a test first asks for it: under xdist a worker ingests
    only the sets of the tests it runs."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp = tmp_path_factory

    def __missing__(self, name: str) -> Path:
        store = self.tmp.mktemp(f"st-{name}")
        ingest([SAMPLES / name], store, rollups=False)
        self[name] = store
        return store


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    return _Stores(tmp_path_factory)


@pytest.mark.parametrize("name", ["incident", "vllm", "tgi", "client"])
@pytest.mark.parametrize("view", ["window_metrics", "incident_summary", "metric_availability"])
def test_shared_answers_equal_the_views(stores, name, view):
    store = stores[name]
    # each answer comes from the connection whose tables are checked
    a, shared_temps = answered(store, view, True)
    b, unshared_temps = answered(store, view, False)
    assert "shared_requests" in shared_temps
    assert "shared_requests" not in unshared_temps
    if name == "client" and view != "metric_availability":
        # benchmark results files only, no server log: no instance has windows or a summary
        assert a.height == 0
    else:
        assert a.height > 0
    assert_frame_equal(a, b, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)


def test_a_view_read_once_is_not_materialised(stores):
    assert temp_tables(stores["incident"], "latency_percentiles") == set()
    assert temp_tables(stores["incident"], "events") == set()


def test_shared_in_a_time_range(stores):
    store = stores["incident"]
    lo, hi = run(store, "select min(ts) as lo, max(ts) as hi from events").row(0)
    rng = TimeRange(lo + (hi - lo) / 3, lo + 2 * (hi - lo) / 3)
    unshared = {}
    for view in ("window_metrics", "incident_summary"):
        a, b = answer(store, view, True, rng), answer(store, view, False, rng)
        assert a.height > 0
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
        unshared[view] = b
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


def test_views_created_over_stand_ins_are_the_views_created_in_order(stores):
    store = stores["incident"]
    over, plain = _bound(store, True), _bound(store, False)
    try:
        def catalog(con):
            views = con.execute("select view_name from duckdb_views() where not internal order by 1").fetchall()
            tables = con.execute("select table_name from duckdb_tables()").fetchall()
            columns = con.execute("select table_name, column_name, data_type from duckdb_columns() "
                                  "where not internal order by all").fetchall()
            return views, tables, columns
        views, tables, columns = catalog(over)
        assert tables == []  # no stand-in is left behind
        assert {v for (v,) in views} >= closure(["incident_summary"])
        assert (views, tables, columns) == catalog(plain)
        a = pl.from_arrow(over.sql("select * from incident_summary order by all").to_arrow_table())
        b = pl.from_arrow(plain.sql("select * from incident_summary order by all").to_arrow_table())
        assert a.height > 0
        assert_frame_equal(a, b)
    finally:
        over.close()
        plain.close()


def test_shared_views_leave_no_stand_in_and_keep_the_columns(stores):
    # the views beneath a shared one are set aside behind stand-ins, brought back to compute
    # it and set aside again: all must end under their own names, with their own columns
    store = stores["incident"]
    con = connect(store, views={"incident_summary"}, rollups=False, shared=True)
    plain = _bound(store, False)
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
        assert columns(con, closure(["incident_summary"])) == columns(plain, closure(["incident_summary"]))
    finally:
        con.close()
        plain.close()
