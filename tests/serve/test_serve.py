"""`servelens serve` and `servelens export`: the exposition and JSON against the SQL views
over the sample incident, content negotiation, the snapshot (refreshed after a commit, never
evaluated per scrape), and the OpenMetrics backfill file. The real Prometheus is in
tests/serve/test_prometheus.py."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from servelens.pipeline.query import connect as query
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.views import resolve_variables
from servelens.pipeline.serve.snapshot import Exporter
from servelens.pipeline.serve.http import make_server
from tests.helpers import incident_truth

build_app()
runner = CliRunner()
INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident"


@pytest.fixture(scope="module")
def store(incident_store):
    return incident_store


@pytest.fixture(scope="module")
def exporter(store):
    e = Exporter(store, resolve_variables(), refresh_s=3600)
    e.refresh()
    assert e.snapshot.error is None
    return e


@pytest.fixture(scope="module")
def http(exporter):
    server = make_server(exporter, "127.0.0.1", 0)
    import threading

    exporter.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    exporter.stop()


def get(url, accept=None):
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read()


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def window_metrics_at_last_complete_window(store, instance):
    """The truth, from the views the signals use: the window_metrics row of the instance's
    last window that ended by its newest event."""
    return query.run(store, """
        select w.* from window_metrics as w
        join (select instance, max(ts) as last_ts from events group by all) as i using (instance)
        where w.instance = ? and w.window_end <= i.last_ts
        order by w.window_end desc limit 1""", [instance]).to_dicts()[0]


def last_complete_window(instance: str) -> tuple[dt.datetime, dt.datetime]:
    """(start, end) of the instance's last complete window: the one before the window its log's
    newest line (read here with a plain regex) falls in."""
    end = incident_truth.window_start(incident_truth.newest(incident_truth.log_of(instance)))
    return end - dt.timedelta(seconds=resolve_variables()["window_s"]), end


def documented_signals() -> set[str]:
    """The signals of the table under docs/metrics.md's `## Signals`."""
    doc = (INCIDENT.parents[1] / "docs" / "metrics.md").read_text().split("\n## Signals\n", 1)[1]
    table = doc.lstrip("\n").split("\n\n", 1)[0]
    return {m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", table, re.M)}


def test_metrics_transport_the_window_metrics_row_with_server_engine_model_labels(http, store):
    """A transport test: what /metrics carries is the stored window_metrics row, unchanged (the
    values themselves are checked against the log in the next test)."""
    code, ctype, body = get(http + "/metrics")
    assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
    got = samples(body.decode())
    truth = window_metrics_at_last_complete_window(store, "vllm-b")
    labels = (("engine", "vllm"), ("model", "meta-llama/Llama-3.1-8B-Instruct"), ("server", "vllm-b"))
    assert got[("servelens_requests_waiting", labels)] == pytest.approx(truth["waiting_avg"])
    assert got[("servelens_requests_running", labels)] == pytest.approx(truth["running_avg"])
    assert got[("servelens_kv_cache_usage_ratio", labels)] == pytest.approx(truth["kv_avg"])
    assert got[("servelens_batch_fill_ratio", labels)] == pytest.approx(truth["fill_avg"])
    assert got[("servelens_requests_per_second", labels)] == pytest.approx(truth["requests_per_s"])
    assert got[("servelens_tokens_per_second", labels)] == pytest.approx(truth["throughput"])
    assert got[("servelens_errors_per_second", labels)] == pytest.approx(truth["n_errors"] / 60)
    # no `instance` label: Prometheus sets that one to the scrape target
    assert not any("instance" in dict(lab) for _, lab in got)


def test_exported_queue_batch_and_kv_equal_the_stats_lines_of_the_log(http, store):
    """The values, against the log read here with a plain regex: the mean of the stats lines'
    Running / Pending / GPU KV cache usage in the window the exporter publishes."""
    got = samples(get(http + "/metrics")[2].decode())
    window = window_metrics_at_last_complete_window(store, "vllm-b")
    start, end = window["window_start"], window["window_end"]
    assert (start, end) == last_complete_window("vllm-b")
    stats = re.compile(r"^(\S+) .*Running: (\d+) reqs, Swapped: \d+ reqs, Pending: (\d+) reqs, GPU KV cache usage: ([\d.]+)%")
    rows = []
    for line in (INCIDENT / "vllm" / "vllm-b.log").read_text().splitlines():
        m = stats.match(line)
        if m:
            ts = dt.datetime.fromisoformat(m.group(1)[:26] + "+00:00")
            if start <= ts < end:
                rows.append((int(m.group(2)), int(m.group(3)), float(m.group(4)) / 100))
    assert len(rows) >= 3
    labels = (("engine", "vllm"), ("model", "meta-llama/Llama-3.1-8B-Instruct"), ("server", "vllm-b"))
    assert got[("servelens_requests_running", labels)] == pytest.approx(sum(r[0] for r in rows) / len(rows))
    assert got[("servelens_requests_waiting", labels)] == pytest.approx(sum(r[1] for r in rows) / len(rows))
    assert got[("servelens_kv_cache_usage_ratio", labels)] == pytest.approx(sum(r[2] for r in rows) / len(rows))


def test_latency_quantiles_follow_the_opentelemetry_names(http, store):
    got = samples(get(http + "/metrics")[2].decode())
    lp = query.run(store, """select * from latency_percentiles where instance = 'tgi-b'
                             order by window_start desc limit 2""").to_dicts()
    # the last complete window: the one before the window of tgi-b's newest line (its log read here)
    start, _ = last_complete_window("tgi-b")
    row = next(r for r in lp if r["window_start"] == start)
    base = (("engine", "tgi"), ("model", "meta-llama/Llama-3.1-8B-Instruct"))
    for q, col in (("0.5", "p50_e2e_s"), ("0.95", "p95_e2e_s"), ("0.99", "p99_e2e_s")):
        key = ("gen_ai_server_request_duration_seconds", base + (("quantile", q), ("server", "tgi-b")))
        assert got[key] == pytest.approx(row[col])
    key = ("gen_ai_server_time_per_output_token_seconds", base + (("quantile", "0.99"), ("server", "tgi-b")))
    assert got[key] == pytest.approx(row["p99_tpot_s"])


def test_signal_active_matches_scaling_signals_and_age_is_visible(http, store):
    before = time.time()
    got = samples(get(http + "/metrics")[2].decode())
    after = time.time()
    start, end = last_complete_window("vllm-b")
    sig = query.run(store, """select signal, severity from scaling_signals
        where instance = 'vllm-b' and window_start <= ? and window_end >= ?""", [start, end]).to_dicts()
    assert sig, "the sample incident has signals on vllm-b in its last complete window"
    active = {dict(lab)["signal"]: dict(lab)["severity"] for (name, lab), v in got.items()
              if name == "servelens_signal_active" and dict(lab)["server"] == "vllm-b" and v == 1}
    assert active == {r["signal"]: r["severity"] for r in sig}
    inactive = [dict(lab)["signal"] for (name, lab), v in got.items()
                if name == "servelens_signal_active" and dict(lab)["server"] == "vllm-b" and v == 0]
    # every signal docs/metrics.md lists: the spec, written apart from the SQL that publishes them
    documented = documented_signals()
    assert "idle" in inactive and len(active) + len(inactive) == len(documented)
    assert set(active) | set(inactive) == documented
    ages = {dict(lab)["server"]: v for (name, lab), v in got.items() if name == "servelens_newest_event_age_seconds"}
    assert set(ages) == {"vllm-a", "vllm-b", "tgi-a", "tgi-b", "trtllm-a", "trtllm-b"}
    # the sample incident is from 2026-05-12: months old
    newest = incident_truth.newest(incident_truth.log_of("vllm-b")).timestamp()  # its log's newest line, read here
    assert before - newest - 0.01 <= ages["vllm-b"] <= after - newest + 0.01


def test_openmetrics_when_the_scraper_asks_for_it(http):
    code, ctype, body = get(http + "/metrics", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5")
    assert code == 200 and ctype.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_api_signals_is_the_same_snapshot_as_json(http, store):
    code, ctype, body = get(http + "/api/signals")
    assert code == 200 and ctype == "application/json"
    data = json.loads(body)
    by = {s["server"]: s for s in data["servers"]}
    truth = window_metrics_at_last_complete_window(store, "trtllm-b")
    assert by["trtllm-b"]["waiting"] == pytest.approx(truth["waiting_avg"])
    assert data["totals"]["max_waiting"] == max(s["waiting"] for s in data["servers"] if s.get("waiting") is not None)
    # KEDA's metrics-api scaler reads one value by path, e.g. valueLocation: waiting with ?server=
    code, _, body = get(http + "/api/signals?server=trtllm-b")
    assert json.loads(body)["waiting"] == pytest.approx(truth["waiting_avg"])
    assert get(http + "/api/signals?server=nope")[0] == 404


def test_healthz_and_unknown_paths(http):
    code, _, body = get(http + "/healthz")
    assert code == 200 and json.loads(body)["status"] == "ok"
    assert get(http + "/nothing")[0] == 404


def test_scrapes_render_the_snapshot_and_never_evaluate_the_views(store):
    calls = []

    def reader(*args):
        calls.append(args)
        return [{"engine": "vllm", "instance": "x", "model": "m", "name": "servelens_requests_waiting",
                 "quantile": None, "signal": None, "severity": None, "value": 3.0,
                 "window_start": None, "window_end": None}]

    e = Exporter(store, {}, refresh_s=3600, reader=reader)
    e.refresh()
    for _ in range(50):
        body, _ = e.metrics(None)
    assert len(calls) == 1
    assert b'servelens_requests_waiting{engine="vllm",model="m",server="x"} 3.0' in body


def test_a_failed_refresh_is_retried_without_waiting_for_the_refresh_interval(store):
    calls = []

    def reader(*args):
        calls.append(args)
        if len(calls) == 1:
            raise OSError("a part vanished mid-read")
        return [{"engine": "vllm", "instance": "x", "model": "m", "name": "servelens_requests_waiting",
                 "quantile": None, "signal": None, "severity": None, "value": 3.0,
                 "window_start": None, "window_end": None}]

    e = Exporter(store, {}, refresh_s=3600, reader=reader)  # no commit comes: only the retry can help
    e.start()
    try:
        deadline = time.monotonic() + 30
        while e.refreshes < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        e.stop()
    assert e.refresh_errors == 1 and e.refreshes == 1 and len(calls) == 2
    assert e.snapshot.error is None and e.snapshot.rows[0]["value"] == 3.0


def test_a_commit_refreshes_the_snapshot(tmp_path):
    store = tmp_path / "live"
    assert runner.invoke(app, ["ingest", str(INCIDENT / "vllm" / "vllm-a.log"), "--store", str(store), "-q"]).exit_code == 0
    # only a commit can trigger a refresh; evaluated in this process (the worker process that
    # `serve` uses is exercised by the http fixture and the serve and tail processes below)
    e = Exporter(store, resolve_variables(), refresh_s=3600, isolate=False)
    e.start()
    try:
        deadline = time.monotonic() + 90  # a loaded 2-core CI machine: a refresh can take seconds
        while e.refreshes < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert {r["instance"] for r in e.snapshot.rows} == {"vllm-a"}
        assert runner.invoke(app, ["ingest", str(INCIDENT / "vllm" / "vllm-b.log"), "--store", str(store), "-q"]).exit_code == 0
        deadline = time.monotonic() + 90  # the second refresh gets its own allowance
        while "vllm-b" not in {r["instance"] for r in e.snapshot.rows} and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "vllm-b" in {r["instance"] for r in e.snapshot.rows}, (e.refreshes, e.refresh_errors, e.snapshot.error)
    finally:
        e.stop()


@pytest.fixture(scope="module")
def whole_export(store, tmp_path_factory):
    """`servelens export` of the whole incident store, once per module: (its output, the file)."""
    out = tmp_path_factory.mktemp("export") / "incident.om"
    res = runner.invoke(app, ["export", "--store", str(store), "-o", str(out)])
    return res, out


def test_export_writes_every_window_with_timestamps(store, whole_export):
    res, out = whole_export
    assert res.exit_code == 0, res.output
    n = query.run(store, "select count(*) as n from metric_series").item()
    assert f"{n:,} samples written" in res.output
    text = out.read_text()
    assert text.endswith("# EOF\n")
    lines = [l for l in text.splitlines() if l.startswith("servelens_requests_waiting{") and 'server="vllm-a"' in l]
    truth = query.run(store, """select epoch(window_end) as t, value from metric_series
        where name = 'servelens_requests_waiting' and instance = 'vllm-a' order by window_end""").to_dicts()
    assert [(float(l.split()[-1]), float(l.split()[-2])) for l in lines] == [
        (pytest.approx(r["t"]), pytest.approx(r["value"])) for r in truth]


def test_export_range_and_bad_input(store, tmp_path):
    out = tmp_path / "part.om"
    since, until = "2026-05-12T08:01:00Z", "2026-05-12T08:02:00Z"  # one window
    res = runner.invoke(app, ["export", "--store", str(store), "-o", str(out), "--since", since, "--until", until])
    assert res.exit_code == 0, res.output
    stamps = {float(l.split()[-1]) for l in out.read_text().splitlines() if l and not l.startswith("#")}
    assert stamps == {dt.datetime.fromisoformat(until).timestamp()}  # the one window, stamped at its end
    res = runner.invoke(app, ["export", "--store", str(store), "--format", "csv"])
    assert res.exit_code != 0 and "unknown --format 'csv'" in res.output
    res = runner.invoke(app, ["export", "--store", str(store), "--since", "the day before"])
    assert res.exit_code != 0 and "cannot read time" in res.output
    res = runner.invoke(app, ["serve", "--store", str(tmp_path / "none")])
    assert res.exit_code != 0 and "does not exist" in res.output
    res = runner.invoke(app, ["export", "--store", str(tmp_path / "none"), "-o", str(tmp_path / "none.om")])
    assert res.exit_code != 0 and "does not exist" in res.output
    assert not (tmp_path / "none.om").exists()  # nothing written when the export fails
    res = runner.invoke(app, ["serve", "--store", str(store), "--thresholds", "preset:nope"])
    assert res.exit_code != 0 and "unknown preset" in res.output


def test_preset_rule_is_exported_as_a_signal(store):
    e = Exporter(store, resolve_variables(None, "preset:kserve"), refresh_s=3600)
    e.refresh()
    rows = [r for r in e.snapshot.rows if r["signal"] == "autoscaler_scale_out"]
    # KServe's running > 2 holds through the incident on every surviving instance
    assert {r["instance"] for r in rows if r["value"] == 1} >= {"vllm-b", "tgi-b", "trtllm-b"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: run tests/e2e/install_prometheus.sh (make test does)")
def test_promtool_accepts_the_exposition(exporter):
    body, _ = exporter.metrics(None)
    res = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30)
    # promtool lints (exit 3 for lint findings such as units); a parse error is exit 1
    assert res.returncode == 0, (res.stdout + res.stderr).decode()


def test_tail_serves_metrics_with_serve_port(tmp_path):
    import signal
    import socket
    import sys

    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(INCIDENT / "vllm" / "vllm-a.log", logs / "vllm-a.log")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "servelens"
    proc = subprocess.Popen([str(exe), "tail", str(logs), "--store", str(tmp_path / "store"), "-q",
                             "--serve-port", str(port)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        body = b""
        while b'servelens_requests_waiting{engine="vllm"' not in body and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                body = get(f"http://127.0.0.1:{port}/metrics")[2]
            except OSError:
                pass
        assert b'server="vllm-a"' in body
        assert json.loads(get(f"http://127.0.0.1:{port}/healthz")[2])["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert f"serving metrics at http://127.0.0.1:{port}/metrics" in err.decode()


def test_every_exported_series_is_documented_and_the_grafana_dashboard_uses_only_them():
    from servelens.pipeline.serve.snapshot import SERIES

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "prometheus.md").read_text()
    live = ["servelens_newest_event_age_seconds", "servelens_exporter_snapshot_age_seconds",
            "servelens_exporter_refresh_duration_seconds", "servelens_exporter_refresh_errors"]
    for name in list(SERIES) + live:
        assert f"| `{name}` |" in doc, name
    dash = json.loads((root / "dashboards" / "grafana" / "servelens.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b((?:servelens|gen_ai)_[a-z_]+)\b", e)}
    assert used and used <= set(SERIES) | set(live)
    assert all(p["datasource"]["type"] == "prometheus" for p in dash["panels"])


def test_the_recent_events_a_refresh_reads_give_the_same_snapshot_as_the_whole_store(store):
    from servelens.pipeline.serve.snapshot import read_snapshot

    def key(rows):
        return {(r["instance"], r["name"], r["quantile"], r["signal"]): r["value"] for r in rows
                if r["name"] in ("servelens_requests_waiting", "servelens_requests_running",
                                 "servelens_kv_cache_usage_ratio", "servelens_requests_per_second",
                                 "servelens_newest_event_timestamp_seconds")}

    whole = key(read_snapshot(store, resolve_variables(), lookback_s=None))
    # two minutes before each instance's own newest event: vllm-a stopped two minutes before
    # the others, and still shows its last complete window
    recent = key(read_snapshot(store, resolve_variables(), lookback_s=120))
    assert ("vllm-a", "servelens_requests_waiting", None, None) in recent
    assert recent == pytest.approx(whole)


def test_serve_command_runs_until_interrupted_and_a_busy_port_is_a_clear_error(store):
    import signal
    import socket
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = runner.invoke(app, ["serve", "--store", str(store), "--port", str(busy.getsockname()[1])])
        assert res.exit_code == 1 and "cannot listen on 127.0.0.1:" in res.output and "--port" in res.output
        port = None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "servelens"
    proc = subprocess.Popen([str(exe), "serve", "--store", str(store), "--port", str(port)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        data = {}
        while not data.get("servers") and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                data = json.loads(get(f"http://127.0.0.1:{port}/api/signals")[2])
            except OSError:
                pass
        assert {s["server"] for s in data["servers"]} == {"vllm-a", "vllm-b", "tgi-a", "tgi-b", "trtllm-a", "trtllm-b"}
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert f"at http://127.0.0.1:{port}/metrics" in err.decode()


def test_ranged_export_reads_the_range_and_equals_the_whole_store_filtered(store, whole_export, tmp_path, monkeypatch):
    since, until = "2026-05-12T08:02:00Z", "2026-05-12T08:04:00Z"
    res, whole = whole_export
    assert res.exit_code == 0, res.output
    ranged = tmp_path / "ranged.om"
    seen = []
    real_run = query.run
    monkeypatch.setattr(query, "run", lambda *a, **k: seen.append(k.get("time_range")) or real_run(*a, **k))
    res = runner.invoke(app, ["export", "--store", str(store), "-o", str(ranged), "--since", since, "--until", until])
    assert res.exit_code == 0, res.output
    assert [(r.since.isoformat(), r.until.isoformat()) for r in seen] == [
        ("2026-05-12T08:02:00+00:00", "2026-05-12T08:04:00+00:00")]
    # the samples of windows inside the range, as the whole-store export has them
    lo, hi = (dt.datetime.fromisoformat(t).timestamp() for t in (since, until))
    def inside(path):
        return sorted(l for l in path.read_text().splitlines()
                      if l and not l.startswith("#") and lo < float(l.split()[-1]) <= hi)
    got = inside(ranged)
    assert got and got == inside(whole)
    assert len(got) == sum(1 for l in ranged.read_text().splitlines() if l and not l.startswith("#"))
