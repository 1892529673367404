"""Time ranges reach the scans (`--since/--until`), and a query binds only the views it reads.

The answer over a range must equal the whole store's answer restricted to that range
afterwards: on the sample incident and on simulator stores whose truth is known."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.views import views_for
from servelens.pipeline.query.connect import connect
from servelens.pipeline.query.connect import run
from servelens.pipeline.query.timerange import TimeRange, part_day, parts_in, row_filter

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs"
UTC = dt.timezone.utc
build_app()
runner = CliRunner()

# Views whose rows carry their own time, compared row for row.
# (the deep ones, window_metrics and scaling_signals, rest on these and take too long to
# compare here; bench/rangequery.py checks latency_percentiles on the 10M-request store)
TIMED_VIEWS = ("events", "requests", "latency_percentiles", "throughput", "queue_depth", "batch_fill",
               "kv_cache", "errors", "windows")
# Known, documented difference (docs/performance.md): throughput's http_* columns are null
# rather than 0 for an instance whose HTTP access lines all lie outside the widened range
# ("does it log HTTP at all" is a property of its whole log).
HTTP_COLUMNS = ("http_requests", "http_errors", "http_requests_per_s")


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory) -> Iterator[Path]:
    """Every sample log ingested once per test run (tests/helpers/run_store.py), read-only:
    the teardown fails if a test changed it."""
    from tests.helpers.run_store import built_once, read_only

    yield from read_only(built_once(tmp_path_factory, "timerange-sample", lambda store: ingest([SAMPLE], store)),
                         "sample store")


def _restricted_equals_filtered(store: Path, rng: TimeRange, views=TIMED_VIEWS, full=None) -> dict[str, int]:
    """Compare every view over `rng` with the unrestricted view filtered afterwards; the row
    counts compared, per view. `full`: an unrestricted connection binding at least those
    views, kept open by the caller (else one is made)."""
    need = views_for(" ".join(v for v in views))  # bind only what is compared (fast)
    own = full is None
    full, part = connect(store, views=need) if own else full, connect(store, time_range=rng, views=need)
    counts = {}
    try:
        for view in views:
            cols = [d[0] for d in full.execute(f"select * from {view} limit 0").description]
            where = row_filter(cols, rng)
            assert where is not None, view
            keep = ", ".join(f'"{c}"' for c in cols if not (view == "throughput" and c in HTTP_COLUMNS))
            expected = full.sql(f"select {keep} from {view} where {where} order by all").pl()
            got = part.sql(f"select {keep} from {view} order by all").pl()
            assert_frame_equal(got, expected, check_exact=False, rel_tol=1e-9, abs_tol=1e-9), view
            counts[view] = got.height
    finally:
        if own:
            full.close()
        part.close()
    return counts


def test_sample_incident_range_equals_the_whole_store_filtered(sample_store):
    # edges inside windows and inside the surge: requests straddle both edges
    rng = TimeRange(dt.datetime(2026, 5, 12, 8, 1, 30, tzinfo=UTC), dt.datetime(2026, 5, 12, 8, 3, 10, tzinfo=UTC))
    full = connect(sample_store, views=views_for(" ".join(TIMED_VIEWS)))  # the whole store, kept for the count
    try:
        counts = _restricted_equals_filtered(sample_store, rng, full=full)
        # the range really selects something of every view (an empty comparison proves nothing)
        assert all(n > 0 for n in counts.values()), counts
        assert counts["events"] < full.execute("select count(*) from events").fetchone()[0]
    finally:
        full.close()


def test_ranged_views_are_left_under_their_names_with_their_columns(sample_store):
    # main's views are created over tables standing in for the views they read (of scan and
    # of main), then given back their names: none may be left aside or standing in, and each
    # main view that keeps rows in the range has the columns of the view it filters
    rng = TimeRange(dt.datetime(2026, 5, 12, 8, 1, 30, tzinfo=UTC), dt.datetime(2026, 5, 12, 8, 3, 10, tzinfo=UTC))
    con = connect(sample_store, rollups=False, shared=False, time_range=rng)
    try:
        views = con.execute("select schema_name, view_name from duckdb_views() where not internal").fetchall()
        assert not [v for v in views if v[1].startswith("servelens_bound_")]
        assert con.execute("select table_name from duckdb_tables() where not temporary").fetchall() == []
        names = {v for s, v in views if s == "main"}
        assert names == {v for s, v in views if s == "scan"} and {"events", "requests", "incident_summary"} <= names

        def columns(schema):
            return con.execute("select table_name, column_name, data_type from duckdb_columns() where schema_name = ? "
                               "and table_name in (select unnest(?)) order by all", [schema, sorted(names)]).fetchall()
        kept = {t for t, c, _ in columns("main")}
        same = {t for t in kept if [r[1:] for r in columns("main") if r[0] == t] == [r[1:] for r in columns("scan") if r[0] == t]}
        assert {"events", "requests", "window_metrics", "queue_depth"} <= same
        n = con.execute("select count(*) from requests").fetchone()[0]
        assert 0 < n < con.execute("select count(*) from scan.requests").fetchone()[0]
    finally:
        con.close()


def test_open_ended_ranges(sample_store):
    # (not `windows`: an instance silent past the widened range gets no empty windows up to
    # its next event, which the whole store fills; see docs/performance.md)
    compared = ("events", "requests", "latency_percentiles", "queue_depth")
    full = connect(sample_store, views=views_for(" ".join(compared)))  # the whole store, for both ranges
    try:
        _restricted_equals_filtered(sample_store, TimeRange(dt.datetime(2026, 5, 12, 8, 2, 15, tzinfo=UTC), None),
                                    compared, full)
        _restricted_equals_filtered(sample_store, TimeRange(None, dt.datetime(2026, 5, 12, 8, 1, 45, tzinfo=UTC)),
                                    compared, full)
    finally:
        full.close()


def _simulated(tmp: Path, engine: str) -> Path:
    from servelens.pipeline.simulate import simulate

    out = tmp / engine
    simulate(engine, "spike", 900, seed=11, out_dir=out, start="2026-05-12T08:00:00Z")
    # no rollup refresh: both sides of the comparison derive the views from the events (the
    # sample store's comparison reads the rollups over a range)
    ingest(sorted(out.glob("*.log")), out / "store", year=2026, rollups=False)
    return out


@pytest.mark.parametrize("engine", ["tgi", "vllm"])
def test_simulated_range_equals_the_whole_store_filtered_and_the_truth(tmp_path, engine):
    out = _simulated(tmp_path, engine)
    rng = TimeRange(dt.datetime(2026, 5, 12, 8, 5, 20, tzinfo=UTC), dt.datetime(2026, 5, 12, 8, 9, 40, tzinfo=UTC))
    counts = _restricted_equals_filtered(out / "store", rng, ("events", "requests", "latency_percentiles",
                                                              "throughput", "queue_depth", "windows"))
    assert counts["latency_percentiles"] >= 4
    # and against what happened: the requests that finished in the range, as the simulator
    # generated them
    truth = pl.read_parquet(out / "truth_requests.parquet")
    finish = [c for c in truth.columns if "finish" in c]
    assert finish, truth.columns
    col = pl.col(finish[0])
    if truth.schema[finish[0]] != pl.Datetime("us", "UTC"):
        col = col.cast(pl.Datetime("us", "UTC"))
    n_true = truth.filter((col >= rng.since) & (col < rng.until)).height
    got = run(out / "store", "select count(*) as n from requests where status = 'finished'", time_range=rng)["n"][0]
    assert abs(got - n_true) <= max(2, n_true // 100), (got, n_true)


def test_the_range_is_a_filter_inside_the_parquet_scan(sample_store):
    rng = TimeRange(dt.datetime(2026, 5, 12, 8, 1, tzinfo=UTC), dt.datetime(2026, 5, 12, 8, 2, tzinfo=UTC))
    # the raw path: the widened bound reaches the events' READ_PARQUET operator (row groups
    # are skipped by their ts statistics)
    plan = run(sample_store, "explain select count(*) from latency_percentiles", time_range=rng, rollups=False)
    text = "\n".join(str(v) for v in plan.row(-1))
    scan = text[text.index("READ_PARQUET"):]
    assert "ts >= '2026-05-12 07:5" in scan and "ts < '2026-05-12 08:1" in scan
    # latency_percentiles read as stored at the base width: the range's bounds on its window
    # columns reach the rollup's scan
    plan = run(sample_store, "explain select count(*) from latency_percentiles", time_range=rng)
    text = "\n".join(str(v) for v in plan.row(-1))
    scan = text[text.index("READ_PARQUET"):]
    assert "window_end > '2026-05-12 08:01" in scan and "window_start < '2026-05-12 08:02" in scan


def test_parts_of_other_days_are_not_read(tmp_path):
    parts = [tmp_path / "events/engine=vllm/day=2026-05-11/a.parquet", tmp_path / "events/engine=vllm/day=2026-05-12/b.parquet",
             tmp_path / "events/engine=vllm/day=2026-05-13/c.parquet", tmp_path / "events/engine=vllm/day=unknown/d.parquet"]
    assert part_day(parts[0]) == dt.date(2026, 5, 11) and part_day(parts[3]) is None
    one_day = TimeRange(dt.datetime(2026, 5, 12, 10, tzinfo=UTC), dt.datetime(2026, 5, 13, tzinfo=UTC))
    assert [p.name for p in parts_in(parts, one_day)] == ["b.parquet", "d.parquet"]  # until is exclusive
    widened = one_day.widened({"window_s": 60})
    assert widened.since == dt.datetime(2026, 5, 12, 9, 50, tzinfo=UTC)
    assert [p.name for p in parts_in(parts, widened)] == ["b.parquet", "c.parquet", "d.parquet"]
    assert [p.name for p in parts_in(parts, TimeRange(None, dt.datetime(2026, 5, 12, tzinfo=UTC)))] == ["a.parquet", "d.parquet"]


def test_a_range_needs_aware_times_in_order():
    with pytest.raises(ValueError, match="after"):
        TimeRange.parse("2026-05-12T09:00", "2026-05-12T08:00")
    with pytest.raises(ValueError, match="cannot read time"):
        TimeRange.parse("last tuesday", None)
    assert TimeRange.parse(None, None) is None
    assert TimeRange.parse("2026-05-12 08:00+02:00", None).since == dt.datetime(2026, 5, 12, 6, tzinfo=UTC)


# --- the CLI ---------------------------------------------------------------------------------


def test_sql_since_until_on_the_cli(sample_store):
    args = ["sql", "select count(*) as n, min(ts) as first, max(ts) as last from events", "--store", str(sample_store),
            "-f", "json", "--since", "2026-05-12T08:01:00Z", "--until", "2026-05-12T08:02:00Z"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    # events without a time are in every range
    expected = run(sample_store, "select count(*) as n from events where ts is null or (ts >= timestamptz '2026-05-12 08:01:00+00' "
                                 "and ts < timestamptz '2026-05-12 08:02:00+00')")["n"][0]
    assert row["n"] == expected > 0
    assert "2026-05-12" in row["first"] and "08:01:" in row["first"] and "08:01:" in row["last"]
    r = runner.invoke(app, ["sql", "select count(*) as n from latency_percentiles where window_start < '2026-05-12 08:01:00+00'",
                            "--store", str(sample_store), "-f", "json", "--since", "2026-05-12T08:01:00Z", "--until", "2026-05-12T08:02:00Z"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"n": 0}]  # only windows overlapping the range


@pytest.mark.parametrize("args, needle", [
    (["--since", "noon"], "cannot read time 'noon'"),
    (["--until", "2026-13-01"], "cannot read time"),
    (["--since", "2026-05-12T09:00Z", "--until", "2026-05-12T08:00Z"], "--until must be after --since"),
])
@pytest.mark.parametrize("command", [["sql", "select 1"], ["report"], ["dashboard", "--port", "1"]])
def test_a_bad_time_is_one_line_and_a_non_zero_exit(sample_store, command, args, needle):
    r = runner.invoke(app, [*command, "--store", str(sample_store), *args])
    assert r.exit_code != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servelens: error: ") and needle in lines[0], r.stderr
    assert "Traceback" not in r.output


@pytest.mark.slow
def test_report_over_a_range_equals_the_report_over_the_whole_store(sample_store):
    from servelens.pipeline.report.build import build_report, to_json

    since, until = dt.datetime(2026, 5, 12, 8, 1, tzinfo=UTC), dt.datetime(2026, 5, 12, 8, 3, tzinfo=UTC)
    con = connect(sample_store, shared=True)
    try:
        whole = json.loads(to_json(build_report(con, since=since, until=until)))
    finally:
        con.close()
    # the ranged report is the CLI's: `servelens report --since --until` connects over the
    # range (shared views) and builds the report, once
    r = runner.invoke(app, ["report", "--store", str(sample_store), "--since", "2026-05-12T08:01Z", "--until", "2026-05-12T08:03Z", "-f", "json"])
    assert r.exit_code == 0, r.output
    ranged = json.loads(r.stdout)
    cli_instances = {i["instance"] for i in ranged["instances"]}
    # summaries now cover the range, not the whole store (docs/performance.md): calibration
    # lists only the instances seen in it; availability is judged on what was read
    ranged_instances = {(r["engine"], r["instance"]) for r in ranged["instances"]}
    assert {(c["engine"], c["instance"]) for c in ranged["calibration"]} <= ranged_instances
    assert {(c["engine"], c["instance"]) for c in ranged["tail_latency"]} <= ranged_instances
    assert {(c["engine"], c["instance"]) for c in whole["tail_latency"]} <= ranged_instances
    for r in (whole, ranged):
        for key in ("generated_at", "calibration", "tail_latency"):
            r.pop(key, None)
        for inst in r["instances"]:
            inst.pop("availability", None)
    assert ranged == whole  # peaks, signals, slowest requests, errors, the summary: the same
    assert cli_instances == {i for _, i in ranged_instances}


def test_dashboard_passes_the_range_to_the_app(tmp_path):
    from servelens.dashboards.data import settings

    from servelens.pipeline.cli.dashboard import streamlit_command

    cmd = streamlit_command(tmp_path, 8501, "127.0.0.1", None, "2026-05-12T08:00:00+00:00", None)
    cfg = settings(cmd[cmd.index("--") + 1:])
    assert cfg.time_range == TimeRange(dt.datetime(2026, 5, 12, 8, tzinfo=UTC), None)
    assert settings(["--store", str(tmp_path)]).time_range is None


# --- binding only what a query reads ---------------------------------------------------------


def test_views_for_finds_the_views_a_query_reads_and_what_they_read():
    assert views_for("select count(*) from events") == set()
    # latency_percentiles reads requests (which reads engine_stats for the queue at arrival,
    # and its staging views: the server's rows by line and by id, and the client's rows) and
    # scraped_latency (the /metrics histograms); the server's rows read the request events,
    # the instances' deaths and vLLM's request ids
    assert views_for("select * from latency_percentiles") == {
        "latency_percentiles", "requests", "engine_stats", "scraped_latency", "server_requests_by_line",
        "server_requests_by_id", "client_requests", "request_events", "instance_deaths", "vllm_request_ids"}
    # names in comments and strings are no references; quoted and mixed-case names are
    assert views_for("select 'requests' as x from events -- windows") == set()
    assert views_for('select * from "Windows"') == {"windows"}
    assert {"scaling_signals", "window_metrics", "throughput", "requests", "windows"} <= views_for(
        "with s as (select * from scaling_signals) select * from s")
    # a question about the catalog sees every view
    assert views_for("show tables") is None
    assert views_for("select * from duckdb_views()") is None


def test_a_query_binds_only_its_views_and_answers_the_same(sample_store):
    con = connect(sample_store, views=set())
    # only the base relations: the events and the scraped /metrics samples
    assert sorted(r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()) == [
        "events", "samples"]
    con.close()
    full = connect(sample_store, views=views_for("scaling_signals latency_percentiles"))
    for sql in ("select count(*) as n from events", "select * from latency_percentiles order by all",
                "select * from scaling_signals order by all"):
        assert_frame_equal(run(sample_store, sql), full.sql(sql).pl())
    full.close()
    tables = run(sample_store, "show tables")["name"].to_list()
    assert {"events", "requests", "scaling_signals", "metric_snapshot"} <= set(tables)


def test_lazy_binding_keeps_the_sandbox(sample_store):
    from servelens.pipeline.query.connect import QueryError

    for sql in ("select * from read_text('/etc/passwd')", "select count(*) from events, read_csv('/etc/hosts')"):
        with pytest.raises(QueryError, match="reads only the store"):
            run(sample_store, sql)
    # a range does not widen what may be opened
    with pytest.raises(QueryError, match="reads only the store"):
        run(sample_store, "select * from read_text('/etc/passwd')",
            time_range=TimeRange(dt.datetime(2026, 5, 12, 8, tzinfo=UTC), None))


@pytest.mark.parametrize("old_first", [False, True])
def test_parts_of_an_older_schema_are_read_by_name(tmp_path, sample_store, old_first):
    """`run` reads only the first part's footer; parts written before a column was added are
    still read, whichever comes first."""
    import pyarrow.parquet as pq

    from servelens.parsers.schema import EVENT_SCHEMA
    from servelens.pipeline.store.manifest import empty_manifest, write_json_atomic

    events = run(sample_store, "select * from events where engine = 'tgi' order by ts, line limit 200")
    table = events.to_arrow().cast(EVENT_SCHEMA)
    store = tmp_path / "store"
    manifest = empty_manifest()
    halves = [table.slice(0, 100), table.slice(100).drop_columns([EVENT_SCHEMA.names[-1]])]  # the older part lacks the newest column
    for n, half in enumerate(reversed(halves) if old_first else halves):
        rel = f"events/engine=tgi/day=unknown/part-{n}.parquet"
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(half, store / rel)
        manifest["parts"].append(rel)
    write_json_atomic(store / "manifest.json", manifest)
    got = run(store, "select count(*) as n, count(distinct line) as lines from events")
    assert got.row(0) == (200, events["line"].n_unique())
    assert run(store, f"select count(*) as n from events where {EVENT_SCHEMA.names[-1]} is null")["n"][0] >= 100
