"""A window width that is a multiple of the stored one: windows, errors and throughput derived
from the stored width's rows (pipeline/query/coarser.py) give exactly the rows of the views'
SQL at that width."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import streamlit as st
from tests.helpers.dashboard_store import INCIDENT

from servelens.dashboards import data
from servelens.pipeline.query import coarser

# errors of one kind in two base windows of the same 2- and 5-minute window, the later one
# with the earlier text; another kind beside them; then a silence of two days
EXTRA = [
    "2026-05-12T08:00:10.000000Z ERROR text_generation_router::infer: router/src/infer.rs:876: "
    "Request failed during generation: Server error: the first",
    "2026-05-12T08:01:30.000000Z ERROR text_generation_router::infer: router/src/infer.rs:876: "
    "Request failed during generation: Server error: the second",
    "2026-05-12T08:01:31.000000Z ERROR text_generation_router::infer: router/src/infer.rs:876: "
    "Request timed out",
    "2026-05-14T09:00:00.000000Z  INFO text_generation_router::server: router/src/server.rs:1: back after two days",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from servelens.pipeline.ingest import ingest

    root = tmp_path_factory.mktemp("coarser")
    lines = (INCIDENT / "tgi" / "tgi-a.log").read_text().splitlines()[:400] + EXTRA
    log = root / "logs" / "tgi-a.log"
    log.parent.mkdir()
    # ISO times sort as text: the lines in time order
    log.write_text("\n".join(sorted(lines, key=lambda s: s[:27])) + "\n")
    ingest([log, INCIDENT / "vllm"], root / "store")
    return root / "store"


@pytest.fixture(autouse=True)
def fresh_caches():
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()


def _tables(store: Path, derive: bool, widths) -> tuple[dict, list]:
    cfg = data.Settings(store=str(store))
    conn = data._Connection(str(store), dict(data._variables(cfg)))
    assert conn.stored_width == 60.0
    used = []
    if derive:
        real = conn._coarser

        def spy(view, w):
            sql = real(view, w)
            if sql is not None:
                used.append((view, w))
            return sql

        conn._coarser = spy
    else:
        conn._coarser = lambda view, w: None
    out = {}
    for w in widths:
        conn.use_window(w)
        for view in data.PER_WINDOW:
            out[(view, w)] = conn.con.sql(f"select * from {view}").to_arrow_table()
    conn.con.close()
    return out, used


def _same(a: pa.Table, b: pa.Table) -> bool:
    db = duckdb.connect()
    db.register("a", a)
    db.register("b", b)
    one = db.execute("select count(*) from (select * from a except all select * from b)").fetchall()[0][0]
    other = db.execute("select count(*) from (select * from b except all select * from a)").fetchall()[0][0]
    return a.schema == b.schema and a.num_rows == b.num_rows and one == other == 0


def test_the_derived_widths_are_the_views_at_that_width(store):
    widths = (120.0, 300.0, 900.0, 30.0)
    want, _ = _tables(store, False, widths)
    got, used = _tables(store, True, widths)
    # the multiples of 60 s are derived, 30 s is computed by the views' SQL
    assert used == [(v, w) for w in widths[:3] for v in ("windows", "throughput", "errors")]
    for key in want:
        assert _same(got[key], want[key]), key
    errors = got[("errors", 300.0)].to_pylist()
    first = [r for r in errors if r["kind"] == "generation_error" and r["instance"] == "tgi-a"]
    # two errors of two base windows counted in one window, the earlier one's text kept
    assert [(r["n_errors"], r["first_message"].endswith("the first")) for r in first] == [(2, True)]
    # the grid stops a day after the silence began, at every width
    windows = {w: got[("windows", w)].to_pylist() for w in (120.0, 900.0)}
    for w, rows in windows.items():
        tgi = sorted(r["window_index"] for r in rows if r["instance"] == "tgi-a")
        assert tgi[-1] - tgi[0] + 1 > len(tgi), w  # a hole in the grid: the silence past a day
    throughput = [r for r in got[("throughput", 300.0)].to_pylist() if r["instance"] == "tgi-a" and r["finished"]]
    assert throughput and all(r["requests_per_s"] == r["finished"] / 300.0 for r in throughput)


@pytest.mark.parametrize(("view", "base", "width", "gap", "ok"), [
    ("windows", 60.0, 120.0, None, True),
    ("throughput", 60.0, 900.0, 86400, True),
    ("errors", 60.0, 300.0, 1000, True),  # errors have no grid
    ("windows", 60.0, 30.0, None, False),  # finer than the stored width
    ("windows", 60.0, 90.0, None, False),  # not a multiple
    ("throughput", 60.0, 900.0, 600, False),  # the silence is not a whole number of windows
    ("latency_percentiles", 60.0, 120.0, None, False),  # percentiles do not sum
    ("window_metrics", 60.0, 120.0, None, False),
])
def test_what_is_derived(view, base, width, gap, ok):
    assert coarser.derivable(view, base, width, {"window_max_gap_s": gap}) is ok


def test_the_whole_stores_summary_at_another_width_is_the_views(incident_store):
    from servelens.pipeline.report.summary import read_summary

    cfg = data.Settings(store=str(incident_store))
    conn = data._Connection(str(incident_store), dict(data._variables(cfg)))
    stored = conn.stored_summaries["incident_summary"]
    seen = set()
    try:
        for w in (120.0, 300.0, 900.0, 30.0):
            conn.use_window(w)
            want = read_summary(conn.con, None, None, None)
            got = data._rows(conn.con, coarser.summary_sql(str(stored)))
            assert got == want, w
            seen.add(tuple((r["slo_breach_minutes"], r["surge_ts"]) for r in got))
    finally:
        conn.con.close()
    assert len(seen) == 4  # the columns read from the width differ at each width: the test can fail


def test_the_page_reads_the_summary_at_another_width_without_the_requests(incident_store, monkeypatch):
    from servelens.pipeline.report import summary

    def unread(*a, **k):
        raise AssertionError("incident_summary computed from every request")

    monkeypatch.setattr(summary, "read_summary", unread)
    cfg = data.Settings(store=str(incident_store))
    rows = data._summary_rows(cfg.store, data.store_version(cfg.store), None, None, data._variables(cfg), None, 300.0)
    assert len(rows) == 6 and sum(r["slo_breach_minutes"] for r in rows) == 10.0
