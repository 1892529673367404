"""Dashboard tests with Streamlit's AppTest on a store built from the incident sample: the
verdicts, signals and numbers shown must be the ones the same SQL gives through
servelens.pipeline.query.connect; the SQL page answers and shows a bad query's error in one line.
Also the pure parts (verdict rule, charts) and the `servelens dashboard` command line."""

from __future__ import annotations

import datetime as dt
import re
import socket
from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner
from tests.helpers import incident_truth as truth
from tests.helpers.dashboard_store import INCIDENT, build_store, chart_specs, components_scanned_once
from servelens.pipeline.report import chart_specs as charts
from servelens.pipeline.report import verdict as vd
from servelens.pipeline.query.connect import QueryError, connect, run_on
from servelens.pipeline.query.connect import run as _run

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
_read_only: set[Path] = set()  # the shared incident store: only read
_connections: dict[Path, object] = {}


@pytest.fixture(scope="module", autouse=True)
def _components_scanned_once():
    yield from components_scanned_once()


@pytest.fixture(scope="session")
def store(incident_store) -> Path:
    _read_only.add(incident_store)
    return incident_store


@pytest.fixture(scope="module", autouse=True)
def _close_connections():
    yield
    while _connections:
        _connections.popitem()[1].close()


def run(store: Path, sql: str, params=None, **kw) -> pl.DataFrame:
    """The truth: what `servelens.pipeline.query.connect` answers. Over the shared incident
    store (only read) the queries share one connection with every view bound once
    (`shared=True`, whose answers tests/sql/test_shared_views.py shows equal `run`'s); any
    other store, or other variables: `run`, a connection per query."""
    if kw or store not in _read_only:
        return _run(store, sql, params, **kw)
    if store not in _connections:
        _connections[store] = connect(store, shared=True)
    return run_on(_connections[store], sql, params)


def _start(store: Path) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def app(store, monkeypatch) -> AppTest:
    """A fresh app, for tests that change filters or pages."""
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    return _start(store)


@pytest.fixture(scope="module")
def overview(store) -> AppTest:
    """The Overview page as it first opens, shared by the tests that only read it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVELENS_STORE", str(store))
        yield _start(store)


@pytest.fixture(scope="module")
def _sql_page(store) -> AppTest:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVELENS_STORE", str(store))
        at = AppTest.from_file(str(APP), default_timeout=60)
        at.switch_page("pages/sql.py").run()  # opened at /sql (its url_path is its file's name)
        assert not at.exception, [e.value for e in at.exception]
        assert at.title[0].value == "SQL"
    return at


@pytest.fixture
def sql_page(_sql_page, store, monkeypatch) -> AppTest:
    """The SQL page of one visitor, shared by the tests that each submit a query of their own
    (every submit runs its query afresh and replaces what the page shows)."""
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    return _sql_page


def _signals(store: Path) -> pl.DataFrame:
    return run(store, "select engine, instance, signal, severity, value, threshold, unit, window_start from scaling_signals")


def _instances(store: Path) -> list[tuple[str, str]]:
    return run(store, "select distinct engine, instance from events where ts is not null order by all").rows()


def _markdown(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown]


def test_overview_shows_the_verdict_of_every_instance(overview, store):
    sig = _signals(store)
    md = _markdown(overview)
    for engine, instance in _instances(store):
        expected = vd.verdict(sig.filter((pl.col("engine") == engine) & (pl.col("instance") == instance)))
        assert f"#### {instance} {vd.VERDICT_BADGE[expected]}" in md


def test_the_crashed_instances_must_be_investigated_and_show_their_signals(overview, store):
    sig = _signals(store)
    crashed = sig.filter((pl.col("signal") == "errors") & (pl.col("severity") == "critical"))["instance"].to_list()
    # the incident: instance a of every engine dies of CUDA out-of-memory
    assert sorted(crashed) == ["tgi-a", "trtllm-a", "vllm-a"]
    md = _markdown(overview)
    for instance in crashed:
        assert f"#### {instance} {vd.VERDICT_BADGE[vd.INVESTIGATE]}" in md
        for r in sig.filter(pl.col("instance") == instance).iter_rows(named=True):
            text = [m for m in md if f"`{r['signal']}`" in m]
            assert any(f"**{vd.format_value(r['value'], r['unit'])}**" in t for t in text), r
    # the recommendation is the signal line's tooltip
    assert any("`errors` → investigate" in m.value and "out-of-memory" in m.proto.help for m in overview.markdown)


def test_the_survivor_that_took_the_traffic_must_scale_out(overview, store):
    sig = _signals(store).filter(pl.col("instance") == "vllm-b")
    # vLLM's b takes a's traffic after the crash: its KV cache fills up and it preempts
    assert "kv_pressure" in sig["signal"].to_list()
    md = _markdown(overview)
    assert f"#### vllm-b {vd.VERDICT_BADGE[vd.SCALE_OUT]}" in md
    kv = sig.filter(pl.col("signal") == "kv_pressure").row(0, named=True)
    shown = [m for m in overview.markdown if "`kv_pressure` → scale out" in m.value]
    assert len(shown) == 1
    assert f"**{kv['value']:.0%}**" in shown[0].value and f"above threshold {kv['threshold']:.0%}" in shown[0].value
    assert f"{kv['window_start']:%H:%M:%S}→" in shown[0].value
    assert "Add replicas or GPU memory" in shown[0].proto.help


def test_headline_numbers_match_the_views(overview, store):
    metrics = {m.label: m.value for m in overview.metric}
    peak = run(store, "select max(waiting) as v from queue_depth")["v"][0]
    assert metrics["Peak queue"] == f"{peak:g}"
    kv = run(store, "select max(kv_usage) as v from kv_cache")["v"][0]
    assert metrics["Peak KV-cache usage"] == ("n/a" if kv is None else f"{kv:.1%}")
    finished = run(store, "select count(*) as v from requests where status = 'finished'")["v"][0]
    assert metrics["Finished requests"] == f"{finished:,}"
    n_err = run(store, "select sum(n_errors) as v from errors")["v"][0]
    assert metrics["Errors"] == f"{int(n_err):,}"


def test_peaks_of_one_instance_are_the_highest_its_log_gives(app):
    # the highest waiting count and KV-cache usage vllm-b's stats lines log, read with a
    # regular expression; the page takes them from the frames its charts draw
    text = truth.log_of("vllm-b").read_text()
    pending = max(int(n) for n in re.findall(r"Pending: (\d+) reqs", text))
    kv = max(float(p) for p in re.findall(r"GPU KV cache usage: ([\d.]+)%", text)) / 100
    finished = truth.truth_requests().filter((pl.col("instance") == "vllm-b") & (pl.col("status") == "ok")).height
    app.multiselect(key="instances").set_value(["vllm-b"]).run()
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert pending > 0 and metrics["Peak queue"] == f"{pending:g}"
    assert metrics["Peak KV-cache usage"] == f"{kv:.1%}"
    assert metrics["Finished requests"] == f"{finished:,}"


def test_metrics_the_logs_cannot_give_are_explained_not_drawn(overview, store):
    missing = run(store, "select engine, metric, reason from metric_availability where not available")
    assert missing.height > 0
    infos = "\n".join(i.value for i in overview.info)
    for engine, metric, reason in missing.rows():
        if metric in ("e2e_s", "ttft_s", "tpot_s", "queue_s", "kv_usage", "waiting"):
            assert reason in infos, f"{engine} {metric}: reason not shown"


def test_instance_filter_keeps_only_that_instance(app, store):
    instances = [i for _, i in _instances(store)]
    keep = instances[-1]
    app.multiselect(key="instances").set_value([keep]).run()
    assert not app.exception
    headers = [m for m in _markdown(app) if m.startswith("#### ")]
    assert len(headers) == 1 and headers[0].startswith(f"#### {keep} ")
    assert "1 instance(s)" in app.caption[0].value
    peak = run(store, "select max(waiting) as v from queue_depth where instance = $i", {"i": keep})["v"][0]
    assert {m.label: m.value for m in app.metric}["Peak queue"] == ("n/a" if peak is None else f"{peak:g}")


def test_post_mortem_range_narrows_the_signals(app, store):
    first = run(store, "select min(window_start) as s from scaling_signals")["s"][0]
    # a range that ends before the first signal: every instance holds
    app.datetime_input(key="end").set_value(first.replace(tzinfo=None)).run()
    assert not app.exception
    md = _markdown(app)
    assert all(vd.VERDICT_BADGE[vd.HOLD] in m for m in md if m.startswith("#### "))


def test_sql_page_answers_a_query(sql_page, store):
    app = sql_page
    app.text_area(key="sql_query").input("select engine, count(*) as n from events group by engine order by engine")
    app.button[0].click().run()
    shown = app.dataframe[0].value
    expected = run(store, "select engine, count(*) as n from events group by engine order by engine")
    assert shown["n"].tolist() == expected["n"].to_list()
    assert any(b.label == "Download CSV" for b in app.get("download_button"))


def test_sql_page_shows_a_bad_query_error_in_one_line(sql_page, store):
    app = sql_page
    bad = "select nonsense from nowhere"
    app.text_area(key="sql_query").input(bad)
    app.button[0].click().run()
    assert not app.exception
    with pytest.raises(QueryError) as e:
        _run(store, bad)  # the guarded path for typed SQL, whose error the page shows
    assert [err.value for err in app.error] == [str(e.value)]
    assert "\n" not in app.error[0].value


def test_sql_page_refuses_writes(sql_page):
    app = sql_page
    app.text_area(key="sql_query").input("create table t as select 1")
    app.button[0].click().run()
    assert "read-only" in app.error[0].value


def test_missing_store_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELENS_STORE", str(tmp_path / "nope"))
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.run()
    assert not at.exception
    assert "does not exist" in at.error[0].value


# --- pure parts ------------------------------------------------------------------------------


def test_verdict_rule():
    def eps(*rows):
        return pl.DataFrame(rows, schema=["signal", "severity"], orient="row")

    assert vd.verdict(eps()) == vd.HOLD
    assert vd.verdict(eps(("idle", "info"))) == vd.SCALE_IN
    assert vd.verdict(eps(("queue_backlog", "warning"), ("idle", "info"))) == vd.SCALE_OUT
    assert vd.verdict(eps(("throughput_swing", "warning"))) == vd.INVESTIGATE
    assert vd.verdict(eps(("queue_backlog", "critical"), ("errors", "warning"))) == vd.SCALE_OUT
    assert vd.verdict(eps(("queue_backlog", "critical"), ("errors", "critical"))) == vd.INVESTIGATE


def test_charts_drop_nulls_and_draw_the_threshold():
    import datetime as dt

    t = dt.datetime(2026, 5, 12, 8, tzinfo=dt.timezone.utc)
    df = pl.DataFrame({
        "ts": [t, t + dt.timedelta(seconds=5), t + dt.timedelta(seconds=10)],
        "engine": ["vllm"] * 3, "instance": ["gpu-0"] * 3, "source": ["logged"] * 3,
        "waiting": [3.0, None, 12.0], "waiting_max": [3, None, 12],
    })
    spec = charts.queue_chart(df, 10.0).to_dict()
    values = [v for d in spec["datasets"].values() for v in d if "waiting" in v]
    assert [v["waiting"] for v in values] == [3.0, 12.0]  # the null is a gap, not a 0
    inline = [layer for layer in spec["layer"] if "values" in layer.get("data", {})]
    assert [r["data"]["values"] for r in inline] == [[{"threshold": 10.0, "label": "scale-out threshold 10"}]]
    assert [sub["mark"]["type"] for sub in inline[0]["layer"]] == ["rule", "text"]
    assert inline[0]["layer"][0]["encoding"]["y"]["field"] == "threshold"


# --- the command -----------------------------------------------------------------------------


def test_dashboard_command_defaults_to_localhost(store):
    from servelens.pipeline.cli.dashboard import app_path, streamlit_command

    cmd = streamlit_command(store, 8600, "127.0.0.1")
    assert app_path().is_file()
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.headless") + 1] == "true"
    assert cmd[cmd.index("--browser.gatherUsageStats") + 1] == "false"
    assert cmd[-3:] == ["--", "--store", str(store)]


def test_dashboard_command_user_errors(tmp_path, store):
    from servelens.pipeline.cli.app import app, build_app

    build_app()
    runner = CliRunner()
    r = runner.invoke(app, ["dashboard", "--store", str(tmp_path / "missing")])
    assert r.exit_code == 1 and "does not exist" in r.output and len(r.output.strip().splitlines()) == 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = runner.invoke(app, ["dashboard", "--store", str(store), "--port", str(port)])
    assert r.exit_code == 1 and f"port {port} on 127.0.0.1 is in use" in r.output


def test_live_mode_follows_new_data_and_keeps_the_filters(tmp_path, monkeypatch):
    from servelens.pipeline.ingest import ingest

    # live mode and the filters are the subject, not the rollups: the page derives its views
    # from the events (the same rows: tests/sql), and neither commit refreshes rollups
    store = build_store(tmp_path, [INCIDENT / "vllm" / "vllm-b.log"], rollups=False)
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.multiselect(key="engines").set_value(["vllm"]).run()
    at.toggle(key="live").set_value(True).run()
    assert not at.exception
    newest = run(store, "select max(ts) as t from events")["t"][0]
    assert newest == truth.newest(INCIDENT / "vllm" / "vllm-b.log")  # the log's newest line, read here
    assert at.caption[0].value.startswith("Live: last 15 min up to the newest event")
    assert f"{newest:%H:%M:%S}" in at.caption[0].value
    assert [m.value for m in at.markdown if m.value.startswith("#### ")] == [f"#### vllm-b {vd.VERDICT_BADGE[vd.SCALE_OUT]}"]

    # the store grows (as under `servelens tail`): the next refresh shows the new instance
    ingest([INCIDENT / "vllm" / "vllm-a.log"], store, rollups=False)
    at.run()
    assert not at.exception
    headers = [m.value for m in at.markdown if m.value.startswith("#### ")]
    assert headers == [f"#### vllm-a {vd.VERDICT_BADGE[vd.INVESTIGATE]}", f"#### vllm-b {vd.VERDICT_BADGE[vd.SCALE_OUT]}"]
    assert at.multiselect(key="engines").value == ["vllm"]
    assert at.toggle(key="live").value is True


def test_slowest_requests_are_the_slowest_by_the_same_sql(overview, store):
    table = next(d.value for d in overview.dataframe if "request_id" in d.value.columns)
    expected = run(store, "select request_id, e2e_s from requests where e2e_s is not null order by e2e_s desc, finish_ts limit 20")
    assert table["e2e_s"].tolist() == expected["e2e_s"].to_list()
    assert table["e2e_s"].is_monotonic_decreasing


def _chart_rows(at: AppTest, title: str) -> pl.DataFrame:
    """The rows the chart whose spec names `title` sends to the browser (its datasets, as
    Arrow): what it can draw."""
    import pyarrow as pa

    todo, charts_ = [at.main], []
    while todo:
        node = todo.pop()
        todo.extend(getattr(node, "children", {}).values())
        if getattr(node, "type", None) == "vega_lite_chart" and title in node.proto.spec:
            charts_.append(node.proto)
    assert len(charts_) == 1, title
    return pl.concat([pl.from_arrow(pa.ipc.open_stream(d.data.data).read_all()) for d in charts_[0].datasets],
                     how="diagonal_relaxed")


def test_the_requests_chart_sends_its_rate_only_and_counts_the_logged_finishes(overview):
    # the chart draws finished requests/s per instance: the rows sent hold that rate and no
    # other column of the throughput view; per instance, the rates of its one-minute windows
    # add up to the requests the truth finished (the incident's range is one window a point)
    rows = _chart_rows(overview, "finished requests/s")
    assert set(rows.columns) == {"ts", "engine", "instance", "requests_per_s"}
    t = truth.truth_requests()
    for instance, rates in rows.group_by("instance"):
        finished = t.filter((pl.col("instance") == instance[0]) & (pl.col("status") == "ok")).height
        assert finished > 0 and round(rates["requests_per_s"].sum() * 60) == finished, instance


def test_throughput_says_which_instances_log_no_requests(overview, store):
    no_requests = run(store, "select engine, instance from throughput group by all "
                             "having count(requests_per_s) = 0 order by all").rows()
    # TensorRT-LLM logs no per-request lines by default
    assert ("trtllm", "trtllm-b") in no_requests
    info = next(i.value for i in overview.info if i.value.startswith("**Requests/s"))
    for engine, instance in no_requests:
        assert f"**{instance}** ({engine}): no finished requests in its log" in info


def test_model_filter_keeps_the_instances_that_served_it(app, store):
    models = run(store, "select distinct model from events where model is not null order by model")["model"].to_list()
    assert models, "the incident sample names its model"
    # an instance whose lines never name a model (TGI) may serve it: kept, with its requests
    served = sorted(run(store, "select instance from events where engine <> 'unknown' group by instance "
                               "having bool_or(model = $m) or count(model) = 0", {"m": models[0]})["instance"].to_list())
    assert "tgi-a" in served
    app.multiselect(key="models").set_value([models[0]]).run()
    assert not app.exception
    shown = sorted(m.split()[1] for m in _markdown(app) if m.startswith("#### "))
    assert shown == served
    finished = run(store, "select count(*) as n from requests where status = 'finished' and (model = $m or model is null)",
                   {"m": models[0]})["n"][0]
    assert {m.label: m.value for m in app.metric}["Finished requests"] == f"{finished:,}"
    tgi = run(store, "select count(*) as n from requests where engine = 'tgi' and status = 'finished'")["n"][0]
    assert finished > tgi > 0


def test_empty_store_says_to_ingest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELENS_STORE", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.run()
    assert not at.exception and not at.error
    assert at.info[0].value.startswith(f"The store `{tmp_path}` has no events yet")


def test_a_thresholds_file_changes_the_signals_shown(tmp_path, store, monkeypatch):
    from servelens.pipeline.query.views import resolve_variables

    th = tmp_path / "strict.toml"
    th.write_text("[slo]\np99_e2e_s = 5.0\n\n[queue]\nwaiting = 2\nsustain_s = 60\n")
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    monkeypatch.setenv("SERVELENS_THRESHOLDS", str(th))
    at = _start(store)
    strict = run(store, "select engine, instance, signal, severity from scaling_signals",
                 variables=resolve_variables(thresholds=th))
    default = _signals(store)
    md = _markdown(at)
    changed = 0
    for engine, instance in _instances(store):
        mine = strict.filter((pl.col("engine") == engine) & (pl.col("instance") == instance))
        assert f"#### {instance} {vd.VERDICT_BADGE[vd.verdict(mine)]}" in md
        was = vd.verdict(default.filter((pl.col("engine") == engine) & (pl.col("instance") == instance)))
        changed += was != vd.verdict(mine)
    assert strict.height > default.height and changed >= 1
    # the latency chart draws the stricter SLO
    assert any('"p99 SLO 5 s"' in spec for spec in chart_specs(at.main))


# --- the story first ------------------------------------------------------------------------


def test_fleet_summary_says_who_crashed_how_many_failed_and_to_scale_out(overview, store):
    story = overview.error[0].value  # the first element under the title: the fleet's story
    crashed = run(store, "select instance from incident_summary where died order by 1")["instance"].to_list()
    failed = run(store, "select count(*) as n from requests where status = 'failed'")["n"][0]
    truth_failed = truth.failed_by_instance()  # the instances that crashed, sorted
    assert crashed == list(truth_failed) and failed == sum(truth_failed.values())
    assert f"{truth.joined(crashed)} died of CUDA out-of-memory" in story
    assert f"failing {failed} requests" in story
    assert f"scale out the survivors ({truth.joined(truth.survivors())})" in story
    metrics = {m.label: m.value for m in overview.metric}
    assert metrics["Crashed instances"] == str(len(truth_failed)) and metrics["Failed requests"] == f"{failed:,}"
    # one line per verdict, the worst first: each instance under the verdict of its signals (the
    # rule is tested on its own), a crashed one with the requests the truth says it failed
    sig = _signals(store)
    by: dict[str, list[str]] = {}
    for engine, instance in _instances(store):
        mine = sig.filter((pl.col("engine") == engine) & (pl.col("instance") == instance))
        by.setdefault(vd.verdict(mine), []).append(instance)
    assert set(truth_failed) <= set(by[vd.INVESTIGATE]) and by[vd.SCALE_OUT]
    expected = [f"- {vd.VERDICT_BADGE[v]} **{len(names)}**: "
                + ", ".join(f"{i} (crashed, {truth_failed[i]} failed)" if i in truth_failed else i for i in sorted(names))
                for v, names in sorted(by.items(), key=lambda kv: vd.VERDICT_ORDER[kv[0]])]
    lines = next(m for m in _markdown(overview) if m.startswith("- ")).split("\n")
    assert lines == expected and lines[0].startswith(f"- {vd.VERDICT_BADGE[vd.INVESTIGATE]} ")
    assert lines[1].startswith(f"- {vd.VERDICT_BADGE[vd.SCALE_OUT]} ")


def test_a_signal_that_fires_below_its_threshold_says_so(overview, store):
    r = run(store, "select value, threshold, unit from scaling_signals where instance = 'trtllm-b' "
                   "and signal = 'scheduler_limit'").row(0, named=True)
    assert r["value"] < r["threshold"]
    line = next(m for m in _markdown(overview) if "`scheduler_limit`" in m)
    assert f"**{r['value']:.0%}** (estimated) · BELOW threshold {r['threshold']:.0%} (fires under it)" in line


def test_cards_and_chart_agree_on_the_errors_threshold(overview):
    from servelens.pipeline.query.views import resolve_variables

    count = resolve_variables()["errors_count"]
    lines = [m for m in _markdown(overview) if "`errors` → investigate" in m]
    assert lines and all(f"threshold {count:g} errors/window, or 1 crash/OOM (critical)" in m for m in lines)
    assert any(f"errors signal: {count:g} per window (warning); any crash or OOM: critical" in s for s in chart_specs(overview.main))


def test_instances_without_data_in_the_range_say_no_data_not_hold(app, store):
    last_a = run(store, "select max(ts) as t from events where instance like '%-a'")["t"][0]
    start = (last_a + dt.timedelta(minutes=1)).replace(tzinfo=None, second=0, microsecond=0)
    app.datetime_input(key="start").set_value(start).run()
    assert not app.exception
    md = _markdown(app)
    for inst in ("tgi-a", "trtllm-a", "vllm-a"):
        assert f"#### {inst} {vd.VERDICT_BADGE[vd.NO_DATA]}" in md
    assert not any(f"#### {i} {vd.VERDICT_BADGE[vd.HOLD]}" in m for m in md for i in ("tgi-a", "vllm-a"))


def test_tables_show_no_none(overview):
    from servelens.dashboards.pages.overview import no_none

    for d in overview.dataframe:
        assert int(d.value.isna().sum().sum()) == 0, d.value.columns
    frame = pl.DataFrame({"a": [1.5, None], "b": ["x", None], "n": [1, 2]})
    assert no_none(frame).rows() == [("1.5", "x", 1), ("-", "-", 2)]


def test_charts_tell_percentiles_apart_and_count_in_integers():
    import json

    lat = pl.DataFrame({"ts": [dt.datetime(2026, 5, 12, 8, tzinfo=dt.timezone.utc)], "instance": ["a"], "model": [None],
                        "p50_e2e_s": [1.0], "p95_e2e_s": [2.0], "p99_e2e_s": [3.0]}, schema_overrides={"model": pl.String})
    spec = json.dumps(charts.latency_chart(lat, "e2e").to_dict())
    assert '"strokeDash": {"field": "percentile"' in spec and '"color": {"field": "percentile"' in spec
    assert '"labelLimit": 0' in spec and '"titleLimit": 0' in spec
    pre = pl.DataFrame({"ts": [dt.datetime(2026, 5, 12, 8, tzinfo=dt.timezone.utc)], "instance": ["a"], "preemptions": [1]})
    pspec = json.dumps(charts.preemption_chart(pre).to_dict())
    assert '"tickMinStep": 1' in pspec and '"format": "d"' in pspec
