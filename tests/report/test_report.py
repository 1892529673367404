"""The post-mortem report: the data it gathers from the views, its three renderings, and the
`servelens report` command over a real store."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from servelens.pipeline.report.build import build_report, render
from tests.helpers import incident_truth as truth
from tests.helpers.sql_helpers import at, connect_events, ev, events_frame


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


@pytest.fixture(scope="module")
def _whole_report(con):
    return build_report(con)


@pytest.fixture
def whole_report(_whole_report):
    """The report of the whole range, built once (every preset's calibration replayed) for the
    tests that read it; each test gets its own copy."""
    return copy.deepcopy(_whole_report)


def test_report_gathers_timeline_peaks_and_recommendations(whole_report):
    r = whole_report
    assert [i["instance"] for i in r["instances"]] == ["i1", "t1"]
    i1 = r["instances"][0]
    assert i1["first_error"]["kind"] == "cuda_oom" and i1["first_error"]["first_ts"] == at(305)
    assert i1["peaks"]["waiting"] == {"value": 25, "ts": at(120), "source": "logged"}
    assert i1["peaks"]["kv_usage"] == {"value": 0.97, "ts": at(300), "source": "logged"}
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


def test_renderings(whole_report):
    r = whole_report
    md = render(r, "md")
    assert "## i1 (vllm)" in md and "### Timeline" in md and "### Recommendations" in md
    assert "| queue (waiting requests) | 25 | 2026-05-12 08:02:00Z |" in md
    assert "KV-cache usage | not available: TGI logs no KV-cache usage" in md
    assert "**First error:** 2026-05-12 08:05:05Z cuda_oom" in md
    html = render(r, "html")
    assert html.startswith("<!doctype html>") and "<h2 id='i-t1-tgi'>t1 (tgi): " in html and "<script" not in html
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


def test_report_command_over_a_store(tmp_path):
    from servelens.pipeline.cli.app import app, build_app

    build_app()
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
    # the one line names the instances the store does hold (the log's file is named gpu-a)
    assert res.output.strip().splitlines() == ["servelens: error: no events of instance 'nope' in this range; its instances: gpu-a"]
    res = runner.invoke(app, ["report", "--store", str(store), "--instance", "gpu-a", "--since", "2027-01-01T00:00Z"])
    assert res.exit_code == 1 and res.output.strip().endswith("no events of instance 'gpu-a' in this range")
    # an instance named by a hostile file name or label is listed escaped: still one line,
    # no escape sequence reaches the terminal
    hostile = tmp_path / "hostile.log"
    hostile.write_text(VLLM_LOG.replace("05-12 08:00", "05-12 09:00"))  # another log, not a copy
    res = runner.invoke(app, ["ingest", str(hostile), "--store", str(store), "--year", "2026", "-q",
                              "--instance", "\x1b[2Jgpu-b\nservelens: forged"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["report", "--store", str(store), "--instance", "nope"])
    assert res.exit_code == 1 and "\x1b" not in res.output
    lines = res.output.strip().splitlines()  # (after the note of the deferred refresh this query ran)
    assert lines[-1] == ("servelens: error: no events of instance 'nope' in this range; its instances: "
                         "\\x1b[2Jgpu-b\\nservelens: forged, gpu-a")
    assert not any(line.startswith("servelens: forged") for line in lines)
    res = runner.invoke(app, ["report", "--store", str(store), "--format", "pdf"])
    assert res.exit_code == 1 and "unknown --format" in res.output


def test_report_says_when_the_log_records_no_request_ends():
    # vLLM V1: arrivals only
    con = connect_events(events_frame([
        ev("request_arrived", 1, request_id="a"),
        ev("request_arrived", 2, request_id="b"),
    ]))
    r = build_report(con)
    assert r["instances"][0]["requests"] == {"finished": None, "aborted": 0, "failed": 0, "arrived": 2}
    assert "requests arrived: 2 (this log records no request ends)" in render(r, "md")


def test_parse_time_defaults_to_utc():
    import datetime as dt

    from servelens.pipeline.query.timerange import parse_time

    utc = dt.timezone.utc
    assert parse_time("2026-05-12T08:00Z") == dt.datetime(2026, 5, 12, 8, 0, tzinfo=utc)
    assert parse_time("2026-05-12 08:00") == dt.datetime(2026, 5, 12, 8, 0, tzinfo=utc)
    assert parse_time("2026-05-12T10:00:00+02:00") == dt.datetime(2026, 5, 12, 8, 0, tzinfo=utc)
    with pytest.raises(ValueError, match="cannot read time"):
        parse_time("the day before yesterday")


# --- the executive summary, on the bundled incident ------------------------------------


@pytest.fixture(scope="module")
def incident_connection(incident_store):
    """One connection to the incident store as `servelens report` connects, for every report
    of it these tests build (each report sets the range variables it reads afresh)."""
    from servelens.pipeline.query.connect import connect

    con = connect(incident_store, shared=True)
    try:
        yield con
    finally:
        con.close()


@pytest.fixture(scope="module")
def incident_report(incident_store, incident_connection):
    return incident_store, build_report(incident_connection, charts=True)


def _first_paragraph(md: str) -> str:
    after = md.split("## Summary", 1)[1].strip()
    return after.split("\n\n", 1)[0]


def _truth_slo_breach_minutes() -> float:
    """Minutes in which an instance's p99 e2e (over >= 5 finished requests, per the default
    thresholds) was above the 30 s SLO, from the truth files; TensorRT-LLM's log has no
    per-request latency (metric_availability says so), so its breaches cannot be seen."""
    import polars as pl

    windows = (truth.truth_requests().filter((pl.col("status") == "ok") & ~pl.col("instance").str.starts_with("trtllm"))
               .group_by("instance", pl.col("finish_ts").dt.truncate("1m"))
               .agg(pl.len().alias("n"), pl.col("e2e_s").quantile(0.99, "linear").alias("p99")))
    return float(windows.filter((pl.col("n") >= 5) & (pl.col("p99") > 30.0)).height)


def test_summary_first_paragraph_says_who_crashed_how_many_failed_and_what_to_do(incident_report):
    store, r = incident_report
    failed = truth.failed_by_instance()
    crashed = list(failed)
    assert crashed == ["tgi-a", "trtllm-a", "vllm-a"]  # the instances a of each engine (file names)
    first = _first_paragraph(render(r, "md"))
    # each crash at its log's first error line (a line of no time of its own: the last stamped before)
    died = sorted(truth.first_error(truth.log_of(i))[1].strftime("%H:%M") for i in crashed)
    span = f"{died[0]}-{died[-1]}" if died[0] != died[-1] else died[0]
    assert f"{truth.joined(crashed)} died of CUDA out-of-memory at {span} UTC" in first
    per = ", ".join(f"{i} {n}" for i, n in failed.items())
    assert f"failing {sum(failed.values())} requests ({per})" in first
    assert f"scale out the survivors ({truth.joined(truth.survivors())})" in first
    # the surge is told from the start of the window it began in
    surge = truth.window_start(truth.surge_start())
    assert f"Traffic surged from {surge:%H:%M:%S} UTC" in first
    # the likely cause is the fleet's first error, with where to read it
    log = truth.first_failing_log()
    assert f"({truth.relative(log)}:{truth.first_error(log)[0]})" in first
    sm = r["summary"]
    assert [c["instance"] for c in sm["crashed"]] == crashed
    assert sm["impact"]["failed"] == sum(failed.values()) and sm["impact"]["aborted"] == 0
    # slow requests: finished above the 30 s SLO, counted off the requests view
    from servelens.pipeline.query.connect import run

    slow = run(store, "select count(*) as n from requests where status = 'finished' and e2e_s > 30")["n"][0]
    assert sm["impact"]["slow"] == slow > 0
    assert sm["impact"]["slo_breach_minutes"] == _truth_slo_breach_minutes()
    assert [t["ts"] for t in sm["timeline"]] == sorted(t["ts"] for t in sm["timeline"])
    vb = next(a for a in sm["actions"] if a["instance"] == "vllm-b")
    assert vb["verdict"] == "scale out"


def test_summary_follows_the_range(incident_connection):
    r = build_report(incident_connection, until=at(60))  # before the surge and the crash
    sm = r["summary"]
    assert sm["crashed"] == [] and sm["impact"]["failed"] == 0
    assert "died" not in sm["headline"] and "Impact: 0 requests failed" in sm["headline"]


def test_html_report_is_one_offline_file_with_toc_and_charts(incident_report):
    import re

    _, r = incident_report
    html = render(r, "html")
    assert "<script" not in html and "<link" not in html
    assert not re.findall(r"(?:src|href)=['\"]https?:", html)
    charts = ("chart-queue", "chart-latency", "chart-failures")  # one figure each, of what the incident shows
    assert html.count("<svg") == len(charts) and all(f"id='{c}'" in html for c in charts)
    assert "<nav><h2>Contents</h2>" in html
    for anchor in ("summary", "impact", "cause", "todo", "charts", "i-vllm-a-vllm"):
        assert f"href='#{anchor}'" in html and f"id='{anchor}'" in html
    data = json.loads(render(r, "json"))
    assert "charts" not in data
    assert data["summary"]["headline"] == r["summary"]["headline"]
    assert data["summary"]["impact"]["failed"] == sum(truth.failed_by_instance().values())
    assert data["summary"]["likely_cause"]["line"] == truth.first_error(truth.first_failing_log())[0]
