"""The post-mortem report: the data it gathers from the views, its three renderings, and the
`servelens report` command over a real store."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from servelens.pipeline.report import build_report, render
from sql_helpers import at, connect_events, ev, events_frame


def incident_events():
    evs = [ev("capacity", 0, max_num_seqs=64)]
    for t in range(0, 600, 10):
        busy = 120 <= t < 360
        evs.append(ev("engine_stats", t, running=64 if busy else 20, waiting=25 if busy else 0,
                      kv_usage=0.97 if t == 300 else 0.4, gen_tps=500.0,
                      attrs='{"preemptions": 2}' if t == 300 else None))
    evs.append(ev("error", 305, level="ERROR", message="torch.OutOfMemoryError: CUDA out of memory."))
    evs.append(ev("error", 400, level="ERROR", message="EngineCore encountered a fatal error."))
    for i, e2e in enumerate([1.0, 2.0, 3.0, 40.0, 5.0, 6.0, 7.0]):
        evs.append(ev("request", 60 + i, engine="tgi", instance="t1", e2e_s=e2e, queue_s=0.1, inference_s=e2e - 0.2))
    return evs


@pytest.fixture(scope="module")
def con():
    return connect_events(events_frame(incident_events()))


def test_report_gathers_timeline_peaks_and_recommendations(con):
    r = build_report(con)
    assert [i["instance"] for i in r["instances"]] == ["i1", "t1"]
    i1 = r["instances"][0]
    assert i1["first_error"]["kind"] == "cuda_oom" and i1["first_error"]["first_ts"] == at(305)
    assert i1["peaks"]["waiting"] == {"value": 25, "ts": at(120), "source": "logged"}
    assert i1["peaks"]["kv_usage"] == {"value": 0.97, "ts": at(300)}
    assert i1["preemptions"]["preemptions"] == 2
    assert i1["peaks"]["p99_e2e_s"] is None  # vLLM stats only: no latency
    sigs = [(s["signal"], s["window_start"]) for s in i1["signals"]]
    assert ("queue_backlog", at(120)) in sigs and ("kv_pressure", at(300)) in sigs and ("errors", at(300)) in sigs
    assert i1["recommendations"][0]["severity"] == "critical"
    whats = [t["what"] for t in i1["timeline"]]
    assert whats[0] == "first log line in range" and whats[-1] == "last log line in range"
    assert "first cuda_oom error (FIRST ERROR)" in whats and "first engine_dead error" in whats
    t1 = r["instances"][1]
    assert [q["e2e_s"] for q in t1["slowest_requests"]][:3] == [40.0, 7.0, 6.0]
    assert t1["peaks"]["kv_usage"] is None
    assert any(a["metric"] == "kv_usage" and not a["available"] for a in t1["availability"])


def test_report_range_and_instance_filter(con):
    r = build_report(con, since=at(0), until=at(100), instance="i1")
    assert [i["instance"] for i in r["instances"]] == ["i1"]
    i1 = r["instances"][0]
    assert i1["first_error"] is None and i1["signals"] == []
    assert i1["peaks"]["waiting"]["value"] == 0 and i1["last_ts"] == at(90)
    assert build_report(con, since=at(10_000))["instances"] == []


def test_renderings(con):
    r = build_report(con)
    md = render(r, "md")
    assert "## i1 (vllm)" in md and "### Timeline" in md and "### Recommendations" in md
    assert "| queue (waiting requests) | 25 | 2026-05-12 08:02:00Z |" in md
    assert "KV-cache usage | not available: TGI logs no KV-cache usage" in md
    assert "**First error:** 2026-05-12 08:05:05Z cuda_oom" in md
    html = render(r, "html")
    assert html.startswith("<!doctype html>") and "<h2>t1 (tgi)</h2>" in html and "<script" not in html
    data = json.loads(render(r, "json"))
    assert data["instances"][0]["first_error"]["first_ts"] == "2026-05-12T08:05:05Z"
    assert data["instances"][1]["slowest_requests"][0]["e2e_s"] == 40.0
    with pytest.raises(ValueError):
        render(r, "pdf")


VLLM_LOG = """\
INFO 05-12 08:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 120.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 10 reqs, Waiting: 0 reqs, GPU KV cache usage: 30.0%, Prefix cache hit rate: 0.0%
INFO 05-12 08:00:11 [loggers.py:123] Engine 000: Avg prompt throughput: 120.0 tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 10 reqs, Waiting: 2 reqs, GPU KV cache usage: 95.0%, Prefix cache hit rate: 0.0%
ERROR 05-12 08:00:21 [core.py:708] EngineCore encountered a fatal error.
"""


@pytest.mark.skipif(importlib.util.find_spec("servelens.parsers.vllm") is None, reason="vLLM parser not present")
def test_report_command_over_a_store(tmp_path):
    from servelens.pipeline.cli import _register_commands, app

    _register_commands()
    log = tmp_path / "gpu-a.log"
    log.write_text(VLLM_LOG)
    store = tmp_path / "st"
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(log), "--store", str(store), "--year", "2026", "-q"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", "--store", str(store)])
    assert res.exit_code == 0, res.output
    assert "## gpu-a (vllm)" in res.output and "EngineCore encountered a fatal error." in res.output
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["report", "--store", str(store), "--format", "json", "-o", str(out),
                              "--since", "2026-05-12T08:00:05Z"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["instances"][0]["peaks"]["kv_usage"]["value"] == pytest.approx(0.95)
    assert data["instances"][0]["first_ts"] == "2026-05-12T08:00:11Z"
    res = runner.invoke(app, ["report", "--store", str(store), "--instance", "nope"])
    assert res.exit_code == 1 and "no events of instance 'nope'" in res.output
    res = runner.invoke(app, ["report", "--store", str(store), "--format", "pdf"])
    assert res.exit_code == 1 and "unknown --format" in res.output


def test_report_says_when_the_log_records_no_request_ends():
    # vLLM V1: arrivals only
    con = connect_events(events_frame([
        ev("request_arrived", 1, request_id="a"),
        ev("request_arrived", 2, request_id="b"),
    ]))
    r = build_report(con)
    assert r["instances"][0]["requests"] == {"finished": None, "aborted": 0, "arrived": 2}
    assert "requests arrived: 2 (this log records no request ends)" in render(r, "md")


def test_parse_time_defaults_to_utc():
    import datetime as dt

    from servelens.pipeline.cli_report import parse_time

    utc = dt.timezone.utc
    assert parse_time("2026-05-12T08:00Z") == dt.datetime(2026, 5, 12, 8, 0, tzinfo=utc)
    assert parse_time("2026-05-12 08:00") == dt.datetime(2026, 5, 12, 8, 0, tzinfo=utc)
    assert parse_time("2026-05-12T10:00:00+02:00") == dt.datetime(2026, 5, 12, 8, 0, tzinfo=utc)
    with pytest.raises(ValueError, match="cannot read time"):
        parse_time("yesterday")
