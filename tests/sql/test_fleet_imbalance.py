"""Fleet imbalance: one replica queues while its siblings serving the same model idle. A
routing problem, so the finding says "route better", not "scale out": in the view, the
signal, the report, the dashboard and /api/signals.

Truth: the simulator's `imbalance` scenario (the load balancer sends 80% of the traffic to
vllm-a) and its truth_state.parquet: the true queue of every replica over time, averaged
per minute by the test itself."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()
THRESHOLDS = Path(__file__).resolve().parents[2] / "sql" / "thresholds.toml"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    d = tmp_path_factory.mktemp("imbalance")
    r = invoke("simulate", "--engine", "vllm", "--scenario", "imbalance", "--duration", "5m", "--seed", "3",
               "--out", d / "logs", "--state-grid", "1")
    assert r.exit_code == 0, r.output
    r = invoke("ingest", d / "logs", "--store", d / "store", "-q")
    assert r.exit_code == 0, r.output
    return d / "logs", d / "store"


def truth_windows(logs: Path) -> pl.DataFrame:
    """Per replica and minute, the true average queue and load (running + waiting)."""
    st = pl.read_parquet(logs / "truth_state.parquet")
    return (st.with_columns(window_start=pl.col("ts").dt.truncate("1m"))
            .group_by("instance", "window_start")
            .agg(pl.col("waiting").mean().alias("waiting"), (pl.col("running") + pl.col("waiting")).mean().alias("load"))
            .sort("instance", "window_start"))


def expected(logs: Path) -> pl.DataFrame:
    """The windows in which the truth puts a replica's queue at >= 10 (the default
    [fleet] waiting) while a sibling's is <= 1 (sibling_waiting), whole minutes only."""
    w = truth_windows(logs)
    w = w.filter(pl.col("window_start") < pl.col("window_start").max())  # the run ends in the last one
    sib = w.group_by("window_start").agg(pl.col("instance"), pl.col("waiting"))
    rows = []
    for inst, t, waiting in w.select("instance", "window_start", "waiting").iter_rows():
        others = sib.filter(pl.col("window_start") == t).row(0, named=True)
        sibling_min = min(x for i, x in zip(others["instance"], others["waiting"]) if i != inst)
        if waiting >= 10 and sibling_min <= 1:
            rows.append((inst, t))
    return pl.DataFrame(rows, schema=["instance", "window_start"], orient="row")


def test_the_truth_has_one_replica_queueing_while_its_siblings_idle(sim):
    logs, _ = sim
    w = truth_windows(logs)
    mean = dict(w.group_by("instance").agg(pl.col("waiting").mean()).iter_rows())
    assert mean["vllm-a"] > 100 and mean["vllm-b"] == 0 and mean["vllm-c"] == 0
    assert expected(logs)["instance"].unique().to_list() == ["vllm-a"]


def test_the_view_finds_the_windows_the_truth_has(sim):
    logs, store = sim
    want = expected(logs)
    r = invoke("sql", "select instance, window_start, condition, sibling from fleet_imbalance order by all",
               "--store", store, "--format", "json")
    got = pl.DataFrame(json.loads(r.stdout))
    got_windows = got.filter(pl.col("condition") == "queue").select(
        "instance", pl.col("window_start").str.to_datetime(time_zone="UTC").dt.cast_time_unit("ns"))
    # every whole minute of the truth is found; a found window not in the truth can only be
    # the last, partial one
    assert set(want.rows()) <= set(got_windows.rows())
    assert len(set(got_windows.rows()) - set(want.rows())) <= 1
    assert set(got["instance"]) == {"vllm-a"} and set(got["sibling"]) <= {"vllm-b", "vllm-c"}


def test_the_signal_says_route_better_not_scale_out(sim):
    logs, store = sim
    want = expected(logs)
    r = invoke("sql", "select instance, signal, window_start, duration_s, recommendation from scaling_signals "
                      "where signal = 'fleet_imbalance'", "--store", store, "--format", "json")
    (ep,) = json.loads(r.stdout)
    assert ep["instance"] == "vllm-a"
    assert ep["window_start"].startswith(want["window_start"].min().strftime("%Y-%m-%dT%H:%M:%S"))
    assert ep["duration_s"] >= 60 * want.height
    assert "route better" in ep["recommendation"] and "rather than scale out" in ep["recommendation"]
    assert "vllm-b" in ep["recommendation"] or "vllm-c" in ep["recommendation"]


def test_the_report_names_it_route_better(sim):
    _, store = sim
    r = invoke("report", "--store", store, "--format", "json")
    doc = json.loads(r.stdout)
    verdicts = {i["instance"]: i["verdict"] for i in doc["instances"]}
    assert verdicts == {"vllm-a": "route better", "vllm-b": "hold", "vllm-c": "hold"}
    md = invoke("report", "--store", store).stdout
    assert "### vllm-a (vllm): route better" in md
    assert "What to do: route better vllm-a" in md


def test_api_signals_says_route_better_and_does_not_ask_to_scale_out(sim):
    from servelens.pipeline.serve.snapshot import Exporter

    _, store = sim
    from servelens.pipeline.query.views import resolve_variables

    exp = Exporter(store, resolve_variables(), refresh_s=3600)
    exp.refresh()
    doc = exp.signals()
    a = next(s for s in doc["servers"] if s["server"] == "vllm-a")
    assert {"signal": "fleet_imbalance", "severity": "critical"} in a["signals"]
    assert a["route_better"] is True and a["scale_out"] is False and a["action"] == "route better"
    assert doc["totals"]["route_better"] == 1 and doc["totals"]["scale_out"] == 0
    text = exp.metrics(None)[0].decode()
    assert 'servelens_signal_active{' in text and 'signal="fleet_imbalance"' in text


def test_the_dashboard_shows_route_better(sim, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from servelens.pipeline.report import verdict as vd

    _, store = sim
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "dashboards" / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception
    headers = [m.value for m in at.markdown if m.value.startswith("#### ")]
    assert f"#### vllm-a {vd.VERDICT_BADGE[vd.ROUTE_BETTER]}" in headers
    assert any("Replicas out of balance (route better)" in m.value for m in at.markdown)


def test_the_thresholds_are_documented():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    text = THRESHOLDS.read_text()
    for key in ("waiting", "sibling_waiting", "load", "load_ratio", "sustain_s"):
        assert f"fleet_{key}" in doc
    assert "[fleet]" in text


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Eight TGI replicas of one model: one takes most of the traffic, seven share the rest
    with loads that differ a little from window to window."""
    d = tmp_path_factory.mktemp("fleet8")
    r = invoke("simulate", "--engine", "tgi", "--scenario", "imbalance", "--duration", "10m", "--instances", "8",
               "--seed", "4", "--out", d / "logs")
    assert r.exit_code == 0, r.output
    r = invoke("ingest", d / "logs", "--store", d / "store", "-q")
    assert r.exit_code == 0, r.output
    return d / "store"


def every_pair(windows: pl.DataFrame, k: dict) -> pl.DataFrame:
    """The view's finding worked out the long way: every replica against every sibling of its
    deployment in the window, judged pair by pair, the least loaded qualifying sibling kept
    (of equally loaded ones, the first by name)."""
    w = windows.with_columns(
        load_avg=pl.col("running_avg").fill_null(0) + pl.col("waiting_avg").fill_null(0),
        has_state=pl.col("running_avg").is_not_null() | pl.col("waiting_avg").is_not_null(),
        healthy=pl.col("n_severe_errors").fill_null(0) == 0)
    rows = []
    for a in w.filter("has_state").iter_rows(named=True):
        sibs = [b for b in w.filter((pl.col("window_index") == a["window_index"]) & (pl.col("engine") == a["engine"])
                                    & pl.col("has_state") & pl.col("healthy")).iter_rows(named=True)
                if b["instance"] != a["instance"] and b["model"] == a["model"]]
        judged = []
        for b in sibs:
            bw = b["waiting_avg"]
            if a["waiting_avg"] is not None and a["waiting_avg"] >= k["fleet_waiting"] and bw is not None \
                    and bw <= k["fleet_sibling_waiting"]:
                judged.append(("queue", b))
            elif a["load_avg"] >= k["fleet_load"] and a["load_avg"] >= k["fleet_load_ratio"] * b["load_avg"] \
                    and (bw or 0) <= k["fleet_sibling_waiting"]:
                judged.append(("load", b))
        if judged:
            least = min((b for _, b in judged), key=lambda b: (b["load_avg"], b["instance"]))
            rows.append((a["instance"], a["window_index"], max(c for c, _ in judged), least["instance"],
                         least["load_avg"], len(sibs) + 1))
    return pl.DataFrame(rows, schema=["instance", "window_index", "condition", "sibling", "sibling_load_avg",
                                      "n_replicas"], orient="row").sort("instance", "window_index")


@pytest.mark.parametrize("thresholds", [
    {},  # the defaults: the busy replica queues
    {"fleet_waiting": 100000.0, "fleet_sibling_waiting": 1.0, "fleet_load": 2.0, "fleet_load_ratio": 1.05},  # load only
    {"fleet_waiting": 0.0, "fleet_sibling_waiting": 0.0, "fleet_load": 0.0, "fleet_load_ratio": 0.0},  # everyone
])
def test_the_view_names_the_least_loaded_sibling_of_a_fleet(fleet, thresholds):
    """The view compares a replica with its least loaded siblings only (a fleet of hundreds
    would otherwise be compared pair by pair); it finds what comparing every pair finds."""
    from servelens.pipeline.query.connect import connect, run_on
    from servelens.pipeline.query.views import resolve_variables

    k = resolve_variables(thresholds)
    con = connect(fleet, k, views={"fleet_imbalance", "window_metrics"}, shared=True)
    try:
        # each replica's model worked out here from the lines, not window_metrics' own column
        windows = run_on(con, "select w.* exclude (model), m.model from window_metrics as w left join (select engine, "
                              "instance, mode(model) as model from events where model is not null group by all) as m "
                              "using (engine, instance) where w.engine not in ('client', 'unknown')")
        got = run_on(con, "select instance, window_index, condition, sibling, sibling_load_avg, n_replicas "
                          "from fleet_imbalance order by instance, window_index")
    finally:
        con.close()
    want = every_pair(windows, k)
    assert want.height > 0 and want["instance"].n_unique() >= (1 if not thresholds else 3)
    assert got.with_columns(pl.col("n_replicas").cast(pl.Int64)).equals(want.with_columns(pl.col("n_replicas").cast(pl.Int64)))


SIGNAL_QUERIES = ("select * from fleet_imbalance order by all", "select * from scaling_signals order by all")


def sql_csv(store: Path, query: str, *args) -> str:
    r = invoke("sql", query, "--store", store, "-f", "csv", *args)
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("thresholds", [
    {},
    {"fleet": {"waiting": 100000.0, "sibling_waiting": 1.0, "load": 2.0, "load_ratio": 1.05}},  # load only
    {"fleet": {"waiting": 0.0, "sibling_waiting": 0.0, "load": 0.0, "load_ratio": 0.0, "sustain_s": 0.0}},  # everyone
])
@pytest.mark.parametrize("which", ["sim", "fleet"])
def test_the_rollup_path_answers_what_the_events_answer(which, thresholds, request, tmp_path):
    """fleet_imbalance and scaling_signals over the stored window_metrics (each replica's
    model read from it) are the rows the raw path derives from the events (`--no-rollups`)."""
    store = request.getfixturevalue(which)
    store = store[1] if isinstance(store, tuple) else store
    args = []
    if thresholds:
        path = tmp_path / "thresholds.toml"
        path.write_text("".join(f"[{s}]\n" + "".join(f"{k} = {v!r}\n" for k, v in vals.items())
                                for s, vals in thresholds.items()))
        args = ["--thresholds", path]
    from servelens.pipeline.query import stored
    from servelens.pipeline.query.views import resolve_variables
    from servelens.pipeline.store.manifest import read_manifest

    # (the first query refreshes the rollups an ingest left to it)
    rolled = [sql_csv(store, query, *args) for query in SIGNAL_QUERIES]
    # the shipped path really read the stored window_metrics (its variables are the
    # thresholds', which change no window)
    assert "window_metrics" in stored.usable(store, read_manifest(store), resolve_variables({}, args[1] if args else None))
    assert rolled == [sql_csv(store, query, *args, "--no-rollups") for query in SIGNAL_QUERIES]
    assert rolled[0].count("\n") > 1  # fleet_imbalance rows: compared for real
