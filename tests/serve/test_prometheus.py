"""A real Prometheus (Debian's prometheus 2.x, installed by tests/e2e/install_prometheus.sh)
scrapes `servelens serve` on the sample incident; PromQL must return what the SQL views say.
And the backfill round trip: `servelens export` -> `promtool tsdb create-blocks-from
openmetrics` -> a Prometheus serving those blocks answers PromQL at the incident's times.
Both bind 127.0.0.1 only, and every wait is bounded."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.query import connect as query
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.views import resolve_variables
from servelens.pipeline.serve.snapshot import Exporter
from servelens.pipeline.serve.http import make_server

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool missing: run tests/e2e/install_prometheus.sh (make test does)")

build_app()
runner = CliRunner()
INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident"
WAIT_S = 120.0  # a refresh over the incident store takes seconds on a loaded 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def promql(base: str, expr: str, at: float | None = None) -> list[dict]:
    q = {"query": expr} | ({"time": str(at)} if at is not None else {})
    with urllib.request.urlopen(f"{base}/api/v1/query?{urllib.parse.urlencode(q)}", timeout=5) as r:
        data = json.load(r)
    assert data["status"] == "success", data
    return data["data"]["result"]


def wait_for(fn, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            got = fn()
            if got:
                return got
        except OSError:
            pass
        time.sleep(0.3)
    pytest.fail(f"timed out after {WAIT_S:g} s waiting for {what}")


def start_prometheus(tmp: Path, config: str, data: Path, *extra: str):
    port = free_port()
    cfg = tmp / "prometheus.yml"
    cfg.write_text(config)
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", *extra],
        stdout=subprocess.DEVNULL, stderr=open(tmp / "prometheus.log", "wb"))
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def store(incident_store):
    return incident_store


def test_prometheus_scrapes_serve_and_promql_matches_the_sql_views(store, tmp_path):
    exporter = Exporter(store, resolve_variables(), refresh_s=3600)
    server = make_server(exporter, "127.0.0.1", 0)
    exporter.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    wait_for(lambda: exporter.refreshes, "the first snapshot")
    target = f"127.0.0.1:{server.server_address[1]}"
    proc, base = start_prometheus(tmp_path, f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: servelens
    static_configs: [{{targets: ["{target}"]}}]
""", tmp_path / "data")
    try:
        wait_for(lambda: promql(base, 'up{job="servelens"} == 1'), "a successful scrape")
        truth = query.run(store, """
            select w.instance, w.waiting_avg, w.kv_avg from window_metrics as w
            join (select instance, max(ts) as last_ts from events group by all) using (instance)
            where w.window_end <= last_ts
            qualify row_number() over (partition by w.instance order by w.window_end desc) = 1""").to_dicts()
        got = {r["metric"]["server"]: float(r["value"][1])
               for r in promql(base, 'servelens_requests_waiting{job="servelens"}')}
        assert got == {r["instance"]: pytest.approx(r["waiting_avg"]) for r in truth if r["waiting_avg"] is not None}
        # an autoscaler's query: the worst KV usage across servers
        (kv,) = promql(base, "max(servelens_kv_cache_usage_ratio)")
        assert float(kv["value"][1]) == pytest.approx(max(r["kv_avg"] for r in truth if r["kv_avg"] is not None))
        # labels survive; Prometheus adds `instance` (the target) itself
        (one,) = promql(base, 'servelens_signal_active{server="vllm-b", signal="kv_pressure"}')
        assert one["metric"]["instance"] == target and one["metric"]["severity"] == "critical"
        # the docs' KEDA queries parse and filter on staleness: the sample incident's events are
        # months old, so every server is stale and the fleet's sum is empty, not its last window
        import re

        doc = (Path(__file__).resolve().parents[2] / "docs" / "prometheus.md").read_text()
        keda = [" ".join(q.split()) for q in re.findall(r"query: >-\n((?:\s{10}.*\n)+)", doc)]
        assert len(keda) == 2 and all("servelens_newest_event_age_seconds < 120" in q for q in keda)
        for q in keda:
            assert promql(base, q) == []
            assert promql(base, q.replace("< 120", "< 1e12"))  # the same query over fresh servers answers
        # every server, llama.cpp's too, exports the series the Grafana server variable lists
        servers = {r["metric"]["server"] for r in promql(base, "servelens_newest_event_timestamp_seconds")}
        assert servers == {r["instance"] for r in truth}
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        server.shutdown()
        server.server_close()
        exporter.stop()


def test_backfill_round_trip(store, tmp_path):
    om = tmp_path / "incident.om"
    assert runner.invoke(app, ["export", "--store", str(store), "-o", str(om)]).exit_code == 0
    data = tmp_path / "tsdb"
    res = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                         capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    # the incident is from 2026-05-12: the retention must reach back to it, or Prometheus
    # deletes the blocks on start
    proc, base = start_prometheus(tmp_path, "global: {scrape_interval: 1h}\n", data,
                                  "--storage.tsdb.retention.time=100y")
    try:
        truth = query.run(store, """select instance, epoch(window_end) as t, value from metric_series
            where name = 'servelens_requests_waiting' and instance in ('vllm-a', 'tgi-b')""").to_dicts()
        wait_for(lambda: promql(base, "servelens_requests_waiting", at=truth[0]["t"]), "the backfilled blocks")
        for r in truth:
            got = promql(base, f'servelens_requests_waiting{{server="{r["instance"]}"}}', at=r["t"])
            assert len(got) == 1 and float(got[0]["value"][1]) == pytest.approx(r["value"]), r
    finally:
        proc.terminate()
        proc.wait(timeout=15)
