"""What keeps the dashboard fast and its memory flat (issue 20), on the incident sample: one
connection per store version for every window width, the window-independent views evaluated
once, a window change evaluating only the views of that width (and giving the same rows as
`servelens.pipeline.query.connect` at that width), window-independent queries not run again on a
window change, bounded result caches, a bounded DuckDB memory, and per-window series
bucketed to MAX_POINTS in SQL with the view's values."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl
import pytest
import streamlit as st
from polars.testing import assert_frame_equal
from streamlit.testing.v1 import AppTest
from tests.helpers.dashboard_store import chart_specs, components_scanned_once
from servelens.dashboards import data, sidebar
from servelens.pipeline.query.connect import connect, run_on
from servelens.pipeline.query.connect import run as _run
from tests.helpers import incident_truth as truth

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
REPO = Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc


@pytest.fixture(scope="module", autouse=True)
def _components_scanned_once():
    yield from components_scanned_once()


@pytest.fixture(scope="module")
def store(incident_store) -> Path:
    return incident_store


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


def _connection(store: Path) -> data._Connection:
    cfg = data.Settings(store=str(store))
    return data._connection(cfg.store, data.store_version(cfg.store), data._variables(cfg), None)


_truths: dict[str, pl.DataFrame] = {}


def run(store: Path, sql: str, params=None, **kw) -> pl.DataFrame:
    """`servelens.pipeline.query.connect.run`, the truth the dashboard's rows are checked
    against, each distinct query computed once per test process (the store only read)."""
    key = repr((str(store), sql, params, sorted(kw.items())))
    if key not in _truths:
        _truths[key] = _run(store, sql, params, **kw)
    return _truths[key].clone()


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    return df.sort(df.columns, nulls_last=True)


def test_a_window_change_evaluates_only_the_views_of_that_width(store):
    conn = _connection(store)
    # the width-free views are read from their rollups, not copied
    assert set(data.SHARED) - set(conn.shared) == set(data.WIDTH_FREE_ROLLUPS) - {"event_catalog"}
    rolled = {name for name, sql in conn.con.execute("select view_name, sql from duckdb_views() where not internal")
              .fetchall() if "/rollups/" in sql}
    assert set(data.WIDTH_FREE_ROLLUPS) <= rolled
    assert [(v, w) for v, w, _ in conn.evaluated] == [(v, None) for v in conn.shared]
    conn.use_window(60.0)
    conn.use_window(300.0)
    conn.use_window(300.0)  # the width shown: nothing to do
    conn.use_window(60.0)  # a width seen before: its tables are kept
    assert [(v, w) for v, w, _ in conn.evaluated] == (
        [(v, None) for v in conn.shared] + [(v, 60.0) for v in data.PER_WINDOW] + [(v, 300.0) for v in data.PER_WINDOW])
    assert conn.widths == [300.0, 60.0]
    # the tables: in the compressed in-memory database, under temp views of the views' names;
    # the views stored at the store's width (60 s) are read from their rollup files, not copied
    assert conn.stored_width == 60.0 and set(conn.stored_per_window) == set(data.PER_WINDOW)
    tables = {r[0] for r in conn.con.execute("select table_name from duckdb_tables() where database_name = ?",
                                             [data.PACKED]).fetchall()}
    assert ({f"w60_{v}" for v in data.PER_WINDOW if v not in conn.stored_per_window} | {f"w300_{v}" for v in data.PER_WINDOW}
            | set(conn.shared) == tables)
    assert tables and not conn.con.execute("select table_name from duckdb_tables() where temporary").fetchall()
    temp_views = dict(conn.con.execute("select view_name, sql from duckdb_views() where temporary and not internal").fetchall())
    # (and metric_availability over its stored rows)
    assert set(conn.shared) | set(data.PER_WINDOW) | {"metric_availability"} == set(temp_views)
    for view, path in conn.stored_per_window.items():
        assert str(path) in temp_views[view] and "w60_" not in temp_views[view], view
    # the same connection serves every width and every query of the store version
    assert _connection(store) is conn


CHANGED = ["latency_percentiles", "throughput", "scaling_signals", "errors", "window_metrics"]
WIDTH_CHANGES = (60.0, 300.0, 120.0, 60.0, 300.0)  # new widths, then kept ones


@pytest.fixture(scope="module")
def after_window_changes(store) -> list[tuple[float, dict[str, pl.DataFrame]]]:
    """What each view of CHANGED gives on one connection after each change of WIDTH_CHANGES
    (read once per module for the test below, one case per view)."""
    st.cache_resource.clear()
    conn = _connection(store)
    seen = []
    for width in WIDTH_CHANGES:
        with conn.lock:
            conn.use_window(width)
            seen.append((width, {view: data.run_on(conn.con, f"select * from {view}") for view in CHANGED}))
    st.cache_resource.clear()
    return seen


@pytest.fixture(scope="module")
def views_at_width(store) -> dict[float, dict[str, pl.DataFrame]]:
    """The truth for the test below: CHANGED and `windows` as `servelens.pipeline.query.connect`
    binds them at each width, one connection per width."""
    out = {}
    for width in sorted(set(WIDTH_CHANGES)):
        con = connect(store, {"window_s": width}, views={*CHANGED, "windows"})
        try:
            out[width] = {view: run_on(con, f"select * from {view}") for view in [*CHANGED, "windows"]}
        finally:
            con.close()
    return out


@pytest.mark.parametrize("view", CHANGED)
def test_after_a_window_change_the_tables_are_the_views_at_that_width(after_window_changes, views_at_width, view):
    assert [w for w, _ in after_window_changes] == list(WIDTH_CHANGES)
    for width, got in after_window_changes:
        got, want = got[view], views_at_width[width][view]
        assert got.height == want.height and got.height > 0 or view in ("errors",) and got.height == want.height
        assert_frame_equal(_sorted(got), _sorted(want))
    rows = {w: views_at_width[w]["windows"].height for w in (60.0, 120.0)}
    assert rows[60.0] > rows[120.0]  # the widths do differ: the comparison above can fail


def test_the_widths_kept_are_bounded(store, monkeypatch):
    monkeypatch.setattr(data, "WIDTHS_KEPT", 2)
    conn = _connection(store)
    for width in (30.0, 60.0, 120.0):
        conn.use_window(width)
    assert conn.widths == [60.0, 120.0]
    tables = {r[0] for r in conn.con.execute("select table_name from duckdb_tables() where database_name = ?",
                                             [data.PACKED]).fetchall()}
    assert not [t for t in tables if t.startswith("w30_")]
    # the two widths kept: their tables, but those of the views stored at 60 s (read from the
    # rollup files)
    assert len([t for t in tables if t.startswith("w")]) == 2 * len(data.PER_WINDOW) - len(conn.stored_per_window) > 0
    assert not [t for t in tables if t.startswith("w60_") and t[len("w60_"):] in conn.stored_per_window]
    conn.use_window(30.0)  # dropped: evaluated again
    assert [w for _, w, _ in conn.evaluated].count(30.0) == 2 * len(data.PER_WINDOW)


def test_the_shared_tables_are_the_views(store):
    conn = _connection(store)
    for view in data.SHARED:
        with conn.lock:
            got = data.run_on(conn.con, f"select * from {view}")
        want = run(store, f"select * from {view}")
        assert got.height == want.height > 0, view
        assert_frame_equal(_sorted(got), _sorted(want))


def _spy_queries(monkeypatch) -> list[str]:
    """The SQL of every query the dashboard runs from now on (whitespace collapsed), in order."""
    ran: list[str] = []
    real = data.run_on

    def spy(con, sql, params=None, limits=None):
        ran.append(" ".join(sql.split()))
        return real(con, sql, params, limits)

    monkeypatch.setattr(data, "run_on", spy)
    return ran


def test_a_window_change_runs_only_the_queries_that_read_the_window(store, monkeypatch):
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    ran = _spy_queries(monkeypatch)
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    first = list(ran)
    assert any("from queue_depth" in q and "bucket" in q for q in first)  # the spy sees the page's queries
    ran.clear()
    at.select_slider(key="window").set_value("5 min").run()
    assert not at.exception
    assert ran, "a new window width must be queried"
    per_window = ("latency_percentiles", "throughput", "errors", "scaling_signals")
    for q in ran:
        assert any(f"from {v}" in q for v in per_window), q
    # the charts of point views, the catalog, the availability and the slowest requests are
    # the cached ones
    assert not [q for q in ran if "from events" in q or "from metric_availability" in q or "limit $limit" in q]
    assert at.caption[0].value.endswith("window 300 s")
    ran.clear()
    at.select_slider(key="window").set_value("1 min").run()  # back: every result is cached
    assert ran == []


def test_the_result_cache_is_bounded_and_drops_the_least_recently_used(store, monkeypatch):
    cfg = data.Settings(store=str(store))
    calls: list[int] = []
    real = data.run_on

    def spy(con, sql, params=None, limits=None):
        calls.append(params["k"])
        return real(con, sql, params, limits)

    monkeypatch.setattr(data, "run_on", spy)
    n = data.CACHE_ENTRIES + 1
    for k in range(n):
        assert data.query(cfg, "select cast($k as bigint) as k", {"k": k})["k"][0] == k
    assert calls == list(range(n))
    data.query(cfg, "select cast($k as bigint) as k", {"k": n - 1})  # the newest: still cached
    assert calls == list(range(n))
    data.query(cfg, "select cast($k as bigint) as k", {"k": 0})  # the oldest: evicted, run again
    assert calls == [*range(n), 0]
    assert 16 <= data.CACHE_ENTRIES <= 256


def test_the_shared_connection_has_a_bounded_memory(store, monkeypatch):
    conn = _connection(store)
    limit = conn.con.execute("select current_setting('memory_limit')").fetchone()[0]
    assert limit.replace(" ", "") in ("1.0GiB", "1024.0MiB", "1GiB", "1.0GB", "1.07GB"), limit
    monkeypatch.setenv("SERVELENS_DASHBOARD_MEMORY", "1GB")
    assert data.page_limits().memory_bytes == 10**9


def _in_range(df: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    utc = {c: pl.col(c).dt.convert_time_zone("UTC") for c in ("window_start", "window_end")}
    return df.filter(utc["window_end"] > pl.lit(start).dt.convert_time_zone("UTC"),
                     utc["window_start"] < pl.lit(end).dt.convert_time_zone("UTC"))


def test_long_ranges_are_bucketed_to_whole_windows_with_the_view_values(store, monkeypatch):
    cfg = data.Settings(store=str(store))
    cat = data.catalog(cfg)
    start = cat["first_ts"].min().astimezone(UTC)
    end = cat["last_ts"].max().astimezone(UTC)
    targets = data.resolve_targets(cat, (), (), ())
    f = data.Filters(start=start, end=end, window_s=60.0, targets=targets)
    monkeypatch.setattr(data, "MAX_POINTS", 400)
    lat_all = data.latency(cfg, f)
    raw = _in_range(run(store, "select * from latency_percentiles"), start, end)
    assert f.window_bucket_s() == 60.0
    assert lat_all.height == raw.height  # one window per point: the view's rows
    monkeypatch.setattr(data, "MAX_POINTS", 5)
    bucket = f.window_bucket_s()
    assert bucket > 60.0 and bucket % 60.0 == 0 and f.span_s / bucket <= 5
    lat = data.latency(cfg, f)
    assert lat.group_by("engine", "instance", "model").len()["len"].max() <= 6  # 5 points, plus a cut edge
    want = (raw.with_columns((pl.col("window_start").dt.epoch("s") // int(bucket)).alias("b"))
            .group_by("engine", "instance", "model", "b")
            .agg(pl.col("window_start").min().alias("ts"), pl.col("n").sum(), pl.col("p99_e2e_s").max(),
                 pl.col("p50_ttft_s").max()))
    got = lat.select("ts", "engine", "instance", "model", "n", "p99_e2e_s", "p50_ttft_s")
    assert_frame_equal(_sorted(got), _sorted(want.drop("b").select(got.columns)))
    assert got["n"].sum() == raw["n"].sum() > 0
    tp = data.throughput(cfg, f)
    traw = _in_range(run(store, "select * from throughput"), start, end)
    assert tp["finished"].sum() == traw["finished"].sum() > 0
    assert tp.group_by("engine", "instance").len()["len"].max() <= 6


def test_with_a_time_range_the_page_shows_what_the_range_query_gives(store):
    """`servelens dashboard --since/--until`: the tables hold the widened range the views read
    (schema `scan`), and what the page shows is what `servelens sql --since/--until` gives."""
    from servelens.pipeline.query.timerange import TimeRange

    first, last = run(store, "select min(ts) as a, max(ts) as b from events").row(0)
    since = (first + (last - first) / 3).astimezone(UTC).replace(microsecond=0)
    until = (first + 2 * (last - first) / 3).astimezone(UTC).replace(microsecond=0)
    cfg = data.Settings(store=str(store), since=since.isoformat(), until=until.isoformat())
    rng = TimeRange(since, until)
    cat = data.catalog(cfg)
    f = data.Filters(start=since, end=until, window_s=60.0, targets=data.resolve_targets(cat, (), (), ()))
    got = data.signals(cfg, f).select("engine", "instance", "signal", "severity", "window_start", "value")
    # the truth: both queries on one connection over the range, as `run(..., time_range=rng)`
    # binds it for each (the views they read, over the range)
    con = connect(store, time_range=rng, views={"scaling_signals", "latency_percentiles"})
    try:
        want = run_on(con, "select engine, instance, signal, severity, window_start, value from scaling_signals "
                           "where window_end > $s and window_start < $u", {"s": since, "u": until})
        want_lat = run_on(con, "select window_start as ts, instance, model, n, p99_e2e_s from latency_percentiles "
                               "where window_end > $s and window_start < $u", {"s": since, "u": until})
    finally:
        con.close()
    assert got.height == want.height > 0
    assert_frame_equal(_sorted(got), _sorted(want))
    lat = data.latency(cfg, f).select("ts", "instance", "model", "n", "p99_e2e_s")
    assert lat.height == want_lat.height > 0
    assert_frame_equal(_sorted(lat), _sorted(want_lat))
    assert _connection_schema(cfg) == "scan"


def _connection_schema(cfg: data.Settings) -> str:
    return data._connection(cfg.store, data.store_version(cfg.store), data._variables(cfg), cfg.time_range).schema


# --- the first visitor and the reruns: work done before, or once -----------------------------


def test_the_server_start_evaluates_the_views_the_first_visitor_needs(store, monkeypatch):
    import threading

    from servelens.dashboards import serve
    from servelens.pipeline.cli.dashboard import streamlit_command

    cmd = streamlit_command(store, 8600, "127.0.0.1")
    assert cmd[1:5] == ["-m", "servelens.dashboards.serve", "run", cmd[4]] and cmd[4].endswith("app.py")
    assert serve.app_args(cmd) == ["--store", str(store)]
    default = float(data.thresholds(None)["window_s"])
    others = serve.other_widths(default)
    assert sorted(others) == sorted(w for w in sidebar.WINDOWS.values() if w != default)
    # the warm-up waits for the first page before the other widths: record what it had done then
    at_wait: list[tuple[list, float | None]] = []
    ran = _spy_queries(monkeypatch)
    warmed: list[str] = []

    class Drawn(threading.Event):
        def wait(self, timeout=None):
            conn = _connection(store)
            at_wait.append(([(v, w) for v, w, _ in conn.evaluated], timeout))
            warmed.extend(ran)
            ran.clear()
            return super().wait(timeout)

    monkeypatch.setattr(data, "FIRST_PAGE_DRAWN", Drawn())
    # the pauses in the visits the other widths wait for are another test's (below): here a
    # short one, and no width counts as slow (a loaded machine would make it a long one)
    monkeypatch.setattr(serve, "SLOW_WIDTH_S", float("inf"))
    monkeypatch.setattr(serve, "IDLE_SLOW_S", 0.05)  # nor one whose cost is unknown
    warm = threading.Thread(target=serve.warm, args=(serve.app_args(cmd),), kwargs={"idle_s": 0.05}, daemon=True)
    warm.start()
    for _ in range(1200):
        if at_wait or not warm.is_alive():
            break
        warm.join(0.1)
    conn = _connection(store)  # what the page asks for: the warmed connection, not a new one
    # before the first page: the shared views and the default width only
    assert at_wait == [([(v, None) for v in conn.shared] + [(v, default) for v in data.PER_WINDOW], serve.OTHERS_AFTER_S)]
    assert warm.is_alive() and conn.widths == [default]
    assert "requests" not in conn.shared  # read from its rollup, not copied
    # and the first page's queries, for the filters a new visitor starts from
    assert any("from queue_depth" in q and "bucket" in q for q in warmed)
    assert any("from metric_availability" in q for q in warmed) and any("limit $limit" in q for q in warmed)
    # the visitor's first page evaluates no view again and runs no query: every result it
    # draws is the warm-up's; and it lets the warm-up go on
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception and data.FIRST_PAGE_DRAWN.is_set()
    assert ran == []
    warm.join(120)
    assert not warm.is_alive()
    # then every other width the sidebar offers, the default shown
    assert [(v, w) for v, w, _ in conn.evaluated] == (
        [(v, None) for v in conn.shared] + [(v, w) for w in [default, *others] for v in data.PER_WINDOW])
    assert conn.window_s == default and sorted(conn.widths) == sorted(sidebar.WINDOWS.values())
    # a change of width evaluates no view again
    n = len(conn.evaluated)
    at.select_slider(key="window").set_value("15 min").run()
    assert not at.exception and at.caption[0].value.endswith("window 900 s")
    assert len(conn.evaluated) == n


def test_without_a_visitor_the_warm_up_evaluates_every_width_after_a_while(store, monkeypatch):
    import threading
    import time

    from servelens.dashboards import serve

    monkeypatch.setattr(data, "FIRST_PAGE_DRAWN", threading.Event())  # nobody draws a page
    monkeypatch.setattr(data, "_last_visit", [time.monotonic() - 3600.0])  # nor asked for anything
    # the first page's own queries count as a visit: the pauses after it are another test's
    # (below), here short ones
    monkeypatch.setattr(serve, "IDLE_SLOW_S", 0.05)
    serve.warm(["--store", str(store)], others_after_s=0.05, idle_s=0.05)
    conn = _connection(store)
    assert sorted(conn.widths) == sorted(sidebar.WINDOWS.values())
    assert conn.window_s == float(data.thresholds(None)["window_s"])


def test_a_failed_warm_up_is_one_line_and_the_server_still_starts(tmp_path, capsys):
    from servelens.dashboards import serve

    serve._warm_in_background(["--store", str(tmp_path / "nothing-here")])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servelens dashboard: warm-up failed (") and "Traceback" not in err[0]


def _queue_frame(values: list[float | None]) -> pl.DataFrame:
    t = dt.datetime(2026, 5, 12, 8, tzinfo=UTC)
    n = len(values)
    return pl.DataFrame({"ts": [t + dt.timedelta(seconds=5 * k) for k in range(n)], "engine": ["vllm"] * n,
                         "instance": ["gpu-0"] * n, "source": ["logged"] * n, "waiting": values,
                         "waiting_max": values})


def test_a_chart_spec_is_built_once_per_content_and_the_kept_specs_are_bounded(monkeypatch):
    from servelens.pipeline.report import chart_specs as charts

    monkeypatch.setattr(charts, "_specs", type(charts._specs)())
    monkeypatch.setattr(charts, "SPECS_KEPT", 2)
    built: list[int] = []

    def queue(df, threshold, domain=None):
        built.append(df.height)
        return charts.queue_chart(df, threshold, domain)

    a, b, c = _queue_frame([3.0, None, 12.0]), _queue_frame([1.0, 2.0]), _queue_frame([1.0, 2.0, 3.0, 4.0])
    spec = charts.vega_spec(queue, a, 10.0)
    # the frame (nulls dropped: a gap, not a 0) travels as a named dataset, the rule inline
    (name, frame), = spec["datasets"].items()
    assert frame["waiting"].to_list() == [3.0, 12.0]
    assert spec["layer"][0]["data"] == {"name": name}
    assert [r["data"]["values"] for r in spec["layer"] if "values" in r.get("data", {})] == [
        [{"threshold": 10.0, "label": "scale-out threshold 10"}]]
    # everything but the data's name is what Altair gives for the same chart
    want = charts.queue_chart(a, 10.0).to_dict()
    want.pop("datasets"), want.pop("$schema", None), want.pop("config", None)
    got = {k: v for k, v in spec.items() if k not in ("datasets", "$schema", "config")}
    got["layer"][0]["data"] = want["layer"][0]["data"]
    assert got == want
    spec["layer"].clear()  # Streamlit takes the spec apart: the kept one is a copy
    assert charts.vega_spec(queue, a, 10.0)["layer"] and built == [3]
    assert charts.vega_spec(queue, _queue_frame([3.0, None, 12.0]), 10.0)["datasets"] and built == [3]  # same content
    charts.vega_spec(queue, a, 20.0)  # another threshold
    charts.vega_spec(queue, b, 10.0)  # another frame
    assert built == [3, 3, 2]
    charts.vega_spec(queue, c, 10.0)  # a third: the least recently used (a, 10) is dropped
    charts.vega_spec(queue, a, 10.0)
    assert built == [3, 3, 2, 4, 3] and len(charts._specs) == 2


def test_a_rerun_with_the_same_filters_builds_no_chart(store, monkeypatch):
    from servelens.pipeline.report import chart_specs as charts

    monkeypatch.setenv("SERVELENS_STORE", str(store))
    monkeypatch.setattr(charts, "_specs", type(charts._specs)())
    built: list[dict] = []
    real = charts._to_spec
    monkeypatch.setattr(charts, "_to_spec", lambda chart: built.append(real(chart)) or built[-1])
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception and len(built) >= 5
    n = len(built)
    at.run()
    assert not at.exception and len(built) == n
    at.select_slider(key="window").set_value("5 min").run()  # new per-window frames: those charts again
    assert n < len(built) < 2 * n


def test_only_the_open_latency_tab_draws_its_chart(store, monkeypatch):
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    assert not at.exception
    tabs = {t.label: t for t in at.tabs}

    e2e = chart_specs(tabs["End-to-end"])
    assert len(e2e) == 1 and '"e2e latency (s)"' in e2e[0]
    assert chart_specs(tabs["Queue time"]) == []
    # the closed tabs still say which instances' logs give no such metric
    assert any("Time to first token" in i.value for i in at.info)


def test_a_width_that_does_not_fit_gives_back_the_widths_kept(store, monkeypatch):
    """On a big store the widths kept fill the page's memory: the next width drops them and is
    computed alone (its rows those of a fresh connection); when even that does not fit, the
    page gets one line saying what to do, not DuckDB's exception."""
    import duckdb

    conn = _connection(store)
    with conn.lock:
        conn.use_window(60.0)
        conn.use_window(300.0)
    want = conn.con.execute("select count(*), sum(epoch(window_start)) from window_metrics").fetchone()
    with conn.lock:
        conn.use_window(60.0)
    evaluate, failed = conn._evaluate, []

    def short_of_memory_once(view, window_s=None):
        if not failed:
            failed.append(view)
            raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")
        evaluate(view, window_s)

    monkeypatch.setattr(conn, "_evaluate", short_of_memory_once)
    with conn.lock:
        conn.use_window(900.0)
        assert conn.widths == [900.0] and failed
        conn.use_window(300.0)
    assert conn.con.execute("select count(*), sum(epoch(window_start)) from window_metrics").fetchone() == want

    def never_fits(view, window_s=None):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    monkeypatch.setattr(conn, "_evaluate", never_fits)
    with conn.lock, pytest.raises(data.QueryError, match="SERVELENS_DASHBOARD_MEMORY"):
        conn.use_window(120.0)


# --- the default view: every instance, without a per-row test of each pair ---------------------


def _default_spec(**kw) -> sidebar.Spec:
    base = dict(live=False, live_span_s=0, refresh_s=0, start=None, end=None, engines=(), instances=(), models=(),
                window_s=60.0)
    return sidebar.Spec(**{**base, **kw})


def test_every_instance_reads_the_same_rows_as_the_list_of_every_pair(store):
    import dataclasses

    cfg = data.Settings(store=str(store))
    cat = data.catalog(cfg)
    f = sidebar.resolve(_default_spec(), cat)
    assert f.every and f.target != data._TARGET and "targets" not in f.params()
    listed = dataclasses.replace(f, every=False)
    assert listed.target == data._TARGET and len(listed.params()["targets"]) == len(f.targets) >= 2
    for fn in (data.signals, data.queue_depth, data.batch_fill, data.kv_cache, data.latency, data.throughput,
               data.errors, data.slowest_requests):
        got, want = fn(cfg, f), fn(cfg, listed)
        assert got.height == want.height, fn.__name__
        assert_frame_equal(_sorted(got), _sorted(want))
    assert data.peaks(cfg, f) == data.peaks(cfg, listed)
    assert data.peaks(cfg, f)["finished"] > 0
    # every server instance of the store: the catalog's, but files no parser recognised
    assert set(f.targets) == set(cat.filter(pl.col("engine") != "unknown").select("engine", "instance").rows())


def test_a_narrowing_filter_tests_each_pair(store):
    cfg = data.Settings(store=str(store))
    cat = data.catalog(cfg)
    every = sidebar.resolve(_default_spec(), cat)
    first = every.targets[0]
    one = sidebar.resolve(_default_spec(instances=(first[1],)), cat)
    assert not one.every and one.target == data._TARGET and one.targets == (first,)
    assert set(data.queue_depth(cfg, one)["instance"].to_list()) <= {first[1]}
    # every engine named is still every instance; a model filter is never "every" (it keeps
    # only the requests of that model)
    engines = tuple(sorted({e for e, _ in every.targets}))
    assert sidebar.resolve(_default_spec(engines=engines), cat).every
    model = cat.drop_nulls("model")["model"][0]
    assert not sidebar.resolve(_default_spec(models=(model,)), cat).every


def test_the_default_width_reads_the_stored_per_window_views(store):
    conn = _connection(store)
    default = float(data.thresholds(None)["window_s"])
    assert conn.stored_width == default
    # every per-window view stored at the base width (pipeline/query/stored.py) is read from its file
    assert set(conn.stored_per_window) == {"windows", "errors", "throughput", "latency_percentiles", "window_metrics",
                                           "scaling_signals"}
    assert {p.parent.name for p in conn.stored_per_window.values()} == {"rollups"}
    got, other = {}, {}
    with conn.lock:
        conn.use_window(default)
        for view in conn.stored_per_window:
            got[view] = data.run_on(conn.con, f"select * from {view}")
        conn.use_window(120.0)  # another width: derived by the views
        for view in conn.stored_per_window:
            other[view] = data.run_on(conn.con, f"select * from {view}")
    for view in conn.stored_per_window:
        # the stored rows are those the view computes from the events
        want = run(store, f"select * from {view}", variables={"window_s": default}, rollups=False)
        assert got[view].height == want.height, view
        assert_frame_equal(_sorted(got[view]), _sorted(want))
    assert got["window_metrics"].height > 0 and got["latency_percentiles"].height > 0
    assert other["window_metrics"].height > 0 and set(other["window_metrics"]["window_s"].to_list()) == {120.0}
    assert set(other["windows"]["window_s"].to_list()) == {120.0}


def test_the_whole_store_summary_and_availability_are_read_as_stored(store, monkeypatch):
    """The first page's fleet summary over the whole store and the metrics' availability come
    from the summaries stored at the last commit: no query of incident_summary or
    metric_availability runs, and the rows are those the views compute from the events."""
    conn = _connection(store)
    assert set(conn.stored_summaries) == {"incident_summary", "metric_availability"}
    cfg = data.Settings(store=str(store))
    cat = data.catalog(cfg)
    whole = sidebar.resolve(_default_spec(), cat)
    from servelens.pipeline.report import summary

    read = []
    real = summary.read_summary
    monkeypatch.setattr(summary, "read_summary", lambda con, *a: read.append(a) or real(con, *a))
    rows = data._summary_for(cfg, whole)
    avail = data.availability(cfg)
    assert read == []  # the stored rows: incident_summary not computed
    assert "read_parquet" in conn.con.execute(
        "select sql from duckdb_views() where view_name = 'metric_availability' and temporary").fetchone()[0]
    want = run(store, "select * from incident_summary order by instance, engine", rollups=False)
    assert_frame_equal(pl.DataFrame(rows, schema=want.schema), want)
    assert_frame_equal(_sorted(avail), _sorted(run(store, "select engine, metric, view, available, estimated, reason, "
                                                          "sources from metric_availability", rollups=False)))
    # who died, as the simulator's truth says
    assert sorted(r["instance"] for r in rows if r["died"]) == list(truth.failed_by_instance())
    # a narrower range is the view's over that range, as ever
    import dataclasses

    start, end = whole.start + dt.timedelta(minutes=1), whole.end
    part = data._summary_for(cfg, dataclasses.replace(whole, start=start))
    assert read == [(start, end, None)]
    con = connect(store, views={"incident_summary"}, rollups=False)
    try:
        assert part == real(con, start, end, None) != rows
    finally:
        con.close()


def test_without_a_usable_rollup_the_default_width_is_derived(store, monkeypatch):
    monkeypatch.setenv("SERVELENS_NO_ROLLUPS", "1")
    conn = _connection(store)
    assert conn.stored_per_window == {} and conn.shared == list(data.SHARED)
    with conn.lock:
        conn.use_window(60.0)
        got = {view: data.run_on(conn.con, f"select * from {view}") for view in ("window_metrics", "latency_percentiles")}
    for view, rows in got.items():
        want = run(store, f"select * from {view}", variables={"window_s": 60.0}, rollups=False)
        assert_frame_equal(_sorted(rows), _sorted(want))


def test_the_other_widths_nearest_slider_steps_first():
    from servelens.dashboards import serve

    assert list(sidebar.WINDOWS.values()) == [30.0, 60.0, 120.0, 300.0, 900.0]
    assert serve.other_widths(60.0) == [120.0, 30.0, 300.0, 900.0]
    assert serve.other_widths(300.0) == [900.0, 120.0, 60.0, 30.0]
    assert serve.other_widths(30.0) == [60.0, 120.0, 300.0, 900.0]


class _Clock:
    """A clock the waits of dashboards/data.py read instead of time: sleeping advances it at
    once, so a test checks how long the code waited, not how fast the machine was."""

    def __init__(self, t: float = 1000.0):
        self.t = t
        self.slept: list[float] = []
        self.on_sleep = None

    def monotonic(self) -> float:
        return self.t

    def perf_counter(self) -> float:  # how long a width took to compute: no time passes here
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += max(s, 1e-6)  # a real sleep always passes some time (float rounding at t)
        if self.on_sleep:
            self.on_sleep(self)


def test_the_warm_up_of_other_widths_waits_for_a_pause_in_the_visits(store, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(data, "time", clock)
    cfg = data.Settings(store=str(store))
    data.catalog(cfg)  # a visitor's query, at the clock's now
    assert data._last_visit[0] == clock.t
    t0 = clock.t
    data._wait_idle(0.4)
    assert clock.t - t0 == pytest.approx(0.4, abs=1e-5)  # a pause of 0.4 s after the visit, no more
    monkeypatch.setattr(data, "_last_visit", [clock.t - 60.0])  # nobody for a minute
    t0, n = clock.t, len(clock.slept)
    data._wait_idle(5.0)
    assert clock.t == t0 and len(clock.slept) == n  # idle already: no wait at all
    # a visitor waiting for the connection: not idle, however long ago the last visit began;
    # it gets its turn after 0.6 s, and the warm-up waits a whole pause after the poll that saw it
    monkeypatch.setattr(data, "_waiting", [1])
    t0, n = clock.t, len(clock.slept)
    clock.on_sleep = lambda c: data._waiting.__setitem__(0, 0) if c.t - t0 >= 0.6 else None
    data._wait_idle(0.3)
    clock.on_sleep = None
    # polled every 0.25 s while it waited (0, 0.25, 0.5 saw it; its turn came by 0.75), then
    # a pause of 0.3 s from the last poll that saw it: 0.8 s in all
    assert clock.slept[n:n + 3] == [0.25, 0.25, 0.25]
    assert clock.t - t0 == pytest.approx(0.8, abs=1e-5)
    # a visitor's hold counts as a visit
    conn = _connection(store)
    monkeypatch.setattr(data, "_last_visit", [0.0])
    with data._visitor_holds(conn):
        assert conn.lock.locked() and data._waiting == [0]
    assert not conn.lock.locked() and data._last_visit[0] == clock.t
    # warm: the widths after a pause, the default one shown at the end
    monkeypatch.setattr(data, "_last_visit", [clock.t])
    t0 = clock.t
    conn = data.warm(cfg, (120.0,), idle_s=0.5)
    assert clock.t - t0 >= 0.5 and conn.widths == [120.0, 60.0] and conn.window_s == 60.0


@pytest.mark.parametrize("stored", [True, False])
@pytest.mark.parametrize("slow", [False, True])
def test_where_a_width_is_slow_the_warm_up_waits_for_a_longer_pause(store, monkeypatch, slow, stored):
    import threading

    from servelens.dashboards import serve

    if not stored:  # the default width derived, as on a store whose rollups are stale
        monkeypatch.setattr(data, "_stored_rollups", lambda *a, **k: {})
    drawn = threading.Event()
    drawn.set()
    monkeypatch.setattr(data, "FIRST_PAGE_DRAWN", drawn)
    waits: list[float] = []
    monkeypatch.setattr(data, "_wait_idle", waits.append)
    # slow: any width counts as slow; else none does
    monkeypatch.setattr(serve, "SLOW_WIDTH_S", 0.0 if slow else 1e9)
    monkeypatch.setattr(serve, "IDLE_SLOW_S", 12.5)
    # the pause is what is checked, once per other width: a slider of three widths (the
    # default one among them) has two, each evaluated as any other
    monkeypatch.setattr(sidebar, "WINDOWS", {"30 s": 30.0, "1 min": 60.0, "2 min": 120.0})
    assert float(data.thresholds(None)["window_s"]) in sidebar.WINDOWS.values()
    serve.warm(["--store", str(store)], idle_s=0.1)
    conn = _connection(store)
    default = float(data.thresholds(None)["window_s"])
    assert conn.stored_width == (default if stored else None)
    # the default width's rows read from the store tell nothing of what deriving a width
    # costs: the first other width waits for the long pause, the next as the one before cost
    first = 12.5 if slow or stored else 0.1
    assert waits == [first] + [12.5 if slow else 0.1] * (len(sidebar.WINDOWS) - 2)
    assert sorted(conn.widths) == sorted(sidebar.WINDOWS.values())


def test_the_kv_devices_of_a_selection_and_a_filter_change_scans_no_events(store, monkeypatch):
    """kv_devices reads the capacity events once per store version for every instance and
    keeps the selection's: the same devices as the query over the selection's own events."""
    import re

    cfg = data.Settings(store=str(store))
    cat = data.catalog(cfg)
    every = sidebar.resolve(_default_spec(), cat)
    ones = [sidebar.resolve(_default_spec(engines=(e,), instances=(i,)), cat) for e, i in every.targets]
    ran = _spy_queries(monkeypatch)
    got = {f.targets: data.kv_devices(cfg, f) for f in [every, *ones]}
    assert len([q for q in ran if "from events" in q]) == 1  # once, whatever the selection
    devices = "select distinct upper(attrs->>'kv_device') as device from events where event = 'capacity' and attrs like '%kv_device%'"
    for f in [every, *ones]:
        want = run(store, f"{devices} and {data._EVERY}" if f.every else
                   f"{devices} and engine = $engine and instance = $instance",
                   None if f.every else {"engine": f.targets[0][0], "instance": f.targets[0][1]})
        assert got[f.targets] == sorted(d for d in want["device"].to_list() if d), f.targets
    # the incident's vLLM servers announce their GPU KV cache at start-up (what their logs say)
    announced = {p.stem for p in (REPO / "sample_logs" / "incident" / "vllm").glob("*.log")
                 if re.search(r"GPU KV cache size|# GPU blocks", p.read_text())}
    assert announced and {f.targets[0][1] for f in ones if got[f.targets] == ["GPU"]} == announced


def test_a_selections_python_condition_keeps_the_instances_its_sql_keeps(store):
    """Filters.keeps, for rows already read into Python, against Filters.target run by DuckDB
    over the store's events: every selection, and an engine name no server has."""
    cfg = data.Settings(store=str(store))
    cat = data.catalog(cfg)
    every = sidebar.resolve(_default_spec(), cat)
    ones = [sidebar.resolve(_default_spec(engines=(e,), instances=(i,)), cat) for e, i in every.targets]
    pairs = run(store, "select distinct engine, instance from events")
    pairs = [*zip(pairs["engine"].to_list(), pairs["instance"].to_list()), ("unknown", "x"), ("vllm", None)]
    assert len(ones) >= 6
    for f in [every, *ones]:
        kept = run(store, f"select distinct engine, instance from events where {f.target} "
                          "and ts >= $start and ts < $end", f.params())
        want = set(zip(kept["engine"].to_list(), kept["instance"].to_list()))
        assert {p for p in pairs if f.keeps(*p)} == want, f.targets
