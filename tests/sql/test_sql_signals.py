"""scaling_signals: each rule fires on hand-built events exactly where its condition holds,
for as long as it holds, and not on healthy traffic; thresholds come from the config."""

from __future__ import annotations

import re

import numpy as np
import pytest

from servelens.pipeline.query.views import read_thresholds, resolve_variables, sql_files
from tests.helpers.sql_helpers import at, connect_events, ev, events_frame, rows


def stats_every_10s(t0, t1, **cols):
    return [ev("engine_stats", t, **cols) for t in range(t0, t1, 10)]


def healthy(t0, t1):
    """Busy, steady vLLM traffic well under capacity."""
    return stats_every_10s(t0, t1, running=20, waiting=0, kv_usage=0.3, gen_tps=500.0)


def signals(con):
    return rows(con, "select * from scaling_signals order by window_start, signal")


def test_steady_traffic_fires_nothing():
    con = connect_events(events_frame(
        [ev("capacity", 0, max_num_seqs=64)] + healthy(0, 900)
    ))
    assert signals(con) == []


def test_queue_backlog_sustained_fires_once_over_its_episode():
    evs = healthy(0, 120) + stats_every_10s(120, 360, running=64, waiting=25, kv_usage=0.5, gen_tps=500.0) + healthy(360, 600)
    got = signals(connect_events(events_frame(evs)))
    assert [(s["signal"], s["window_start"], s["window_end"], s["duration_s"]) for s in got] == [
        ("queue_backlog", at(120), at(360), 240.0)
    ]
    s = got[0]
    assert s["severity"] == "critical" and s["value"] == 25.0 and s["threshold"] == 10.0
    assert s["estimated"] is False and s["engine"] == "vllm" and s["instance"] == "i1"
    assert "Scale out" in s["recommendation"] and "25.0 requests waited" in s["recommendation"]


def test_queue_backlog_too_short_does_not_fire():
    evs = healthy(0, 120) + stats_every_10s(120, 240, running=64, waiting=25, kv_usage=0.5, gen_tps=500.0) + healthy(240, 600)
    assert signals(connect_events(events_frame(evs))) == []


def test_threshold_override_by_variable_and_file(tmp_path):
    evs = healthy(0, 120) + stats_every_10s(120, 360, running=64, waiting=25, kv_usage=0.5, gen_tps=500.0) + healthy(360, 600)
    frame = events_frame(evs)
    assert signals(connect_events(frame, variables={"queue_waiting": 30})) == []
    f = tmp_path / "t.toml"
    f.write_text("[queue]\nsustain_s = 60\nwaiting = 24\n")
    got = signals(connect_events(frame, thresholds=str(f)))
    assert [(s["signal"], s["threshold"]) for s in got] == [("queue_backlog", 24.0)]
    f.write_text("[queue]\nwaitng = 24\n")
    with pytest.raises(ValueError, match="unknown threshold.*queue_waitng"):
        connect_events(frame, thresholds=str(f))


def test_kv_pressure_with_preemptions_is_critical():
    evs = healthy(0, 120) + [
        ev("engine_stats", 130, running=40, waiting=2, kv_usage=0.95, gen_tps=500.0, attrs='{"preemptions": 4}'),
        ev("engine_stats", 140, running=40, waiting=2, kv_usage=0.99, gen_tps=500.0),
    ] + healthy(180, 300)
    got = signals(connect_events(events_frame(evs)))
    assert [(s["signal"], s["severity"], s["window_start"], s["value"], s["threshold"]) for s in got] == [
        ("kv_pressure", "critical", at(120), 0.99, 0.9)
    ]
    assert "99%" in got[0]["recommendation"] and "--max-num-seqs" in got[0]["recommendation"]


def test_kv_high_without_preemption_data_is_only_a_warning_when_requests_wait():
    evs = healthy(0, 120) + stats_every_10s(120, 180, running=40, waiting=3, kv_usage=0.93, gen_tps=500.0) \
        + stats_every_10s(180, 240, running=40, waiting=0, kv_usage=0.93, gen_tps=500.0) + healthy(240, 300)
    got = signals(connect_events(events_frame(evs)))
    assert [(s["signal"], s["severity"], s["window_start"]) for s in got] == [("kv_pressure", "warning", at(120))]
    assert "no preemption counts" in got[0]["recommendation"]


def test_scheduler_limit_when_batch_is_low_and_requests_wait():
    evs = [ev("capacity", 0, max_num_seqs=256)] + healthy(0, 60) \
        + stats_every_10s(60, 240, running=32, waiting=5, kv_usage=0.3, gen_tps=500.0) + healthy(240, 300)
    got = signals(connect_events(events_frame(evs)))
    assert [(s["signal"], s["window_start"], s["window_end"], s["value"]) for s in got] == [
        ("scheduler_limit", at(60), at(240), 0.125)
    ]
    assert "--max-num-seqs" in got[0]["recommendation"]


def test_batch_limit_when_the_batch_is_full_with_memory_to_spare_and_requests_wait():
    """16 of 16 sequences running, the KV cache at 1%, 800 waiting: raise --max-num-seqs,
    the value (fill 1.0) above its threshold (0.9) as it reads."""
    evs = [ev("capacity", 0, max_num_seqs=16)] + stats_every_10s(0, 60, running=8, waiting=0, kv_usage=0.01, gen_tps=500.0) \
        + stats_every_10s(60, 240, running=16, waiting=800, kv_usage=0.01, gen_tps=500.0) \
        + stats_every_10s(240, 300, running=8, waiting=0, kv_usage=0.01, gen_tps=500.0)
    got = [s for s in signals(connect_events(events_frame(evs))) if s["signal"] == "batch_limit"]
    assert [(s["window_start"], s["window_end"], s["value"], s["threshold"]) for s in got] == [(at(60), at(240), 1.0, 0.9)]
    assert "Raise --max-num-seqs" in got[0]["recommendation"] and "100% of its sequence limit" in got[0]["recommendation"]
    # the same load with the KV cache nearly full: memory is the limit, not the sequence count
    full = [ev("capacity", 0, max_num_seqs=16)] + stats_every_10s(60, 240, running=16, waiting=800, kv_usage=0.8, gen_tps=500.0)
    assert [s for s in signals(connect_events(events_frame(full))) if s["signal"] == "batch_limit"] == []


def test_scheduler_limit_needs_a_known_limit():
    evs = healthy(0, 60) + stats_every_10s(60, 240, running=32, waiting=5, kv_usage=0.3, gen_tps=500.0)
    assert [s["signal"] for s in signals(connect_events(events_frame(evs)))] == []


def tgi(finish, e2e):
    return ev("request", finish, engine="tgi", instance="t1", e2e_s=e2e, queue_s=0.01, inference_s=e2e - 0.02)


def test_latency_slo_on_p99_e2e():
    evs = [tgi(1 + i, 2.0) for i in range(50)]  # window 0: fine
    evs += [tgi(61 + i, 2.0) for i in range(8)] + [tgi(70 + i, 50.0) for i in range(2)]  # window 1: tail
    evs += [tgi(121 + i, 45.0) for i in range(3)]  # window 2: too few requests to judge
    got = [s for s in signals(connect_events(events_frame(evs))) if s["signal"].startswith("latency")]
    assert len(got) == 1
    s = got[0]
    assert (s["signal"], s["window_start"], s["window_end"]) == ("latency_slo_e2e", at(60), at(120))
    assert s["value"] == pytest.approx(50.0) and s["threshold"] == 30.0 and s["severity"] == "warning"


def test_idle_sustained_fires_scale_in():
    evs = healthy(0, 60) + [ev("log", 900, message="still alive")]
    got = signals(connect_events(events_frame(evs)))
    assert [(s["signal"], s["severity"], s["window_start"], s["window_end"], s["value"]) for s in got] == [
        ("idle", "info", at(60), at(960), 900.0)
    ]
    assert "scale in" in got[0]["recommendation"]


def test_throughput_swing():
    evs = []
    for k in range(8):
        evs += stats_every_10s(60 * k, 60 * k + 60, running=20, waiting=0, kv_usage=0.3,
                               gen_tps=100.0 if k % 2 else 1000.0)
    got = signals(connect_events(events_frame(evs)))
    assert [(s["signal"], s["window_start"], s["window_end"]) for s in got] == [
        ("throughput_swing", at(240), at(480))
    ]
    # worst lookback: 100, 1000, 100, 1000, 100 -> population stddev / mean
    worst = [100.0, 1000.0, 100.0, 1000.0, 100.0]
    assert got[0]["value"] == pytest.approx(float(np.std(worst) / np.mean(worst)))


def test_errors_signal_critical_on_oom():
    evs = healthy(0, 180) + [ev("error", 70, level="ERROR", message="CUDA out of memory")]
    got = signals(connect_events(events_frame(evs)))
    assert [(s["signal"], s["severity"], s["window_start"], s["value"]) for s in got] == [
        ("errors", "critical", at(60), 1.0)
    ]


def test_sql_defaults_match_thresholds_toml():
    """The coalesce() defaults in SQL are the documented defaults in thresholds.toml."""
    defaults = read_thresholds()
    seen = set()
    for path in sql_files():
        text = path.read_text()
        for name, value in re.findall(r"getvariable\('(\w+)'\) as double\), (-?[0-9.]+)\)", text):
            assert name in defaults, f"{path.name}: {name} not in thresholds.toml"
            assert float(value) == float(defaults[name]), f"{path.name}: {name}"
            seen.add(name)
        # string parameters (the autoscaler rule's preset name and combine mode)
        for name, value in re.findall(r"getvariable\('(\w+)'\) as varchar\), '([^']*)'\)", text):
            assert name in defaults, f"{path.name}: {name} not in thresholds.toml"
            assert value == defaults[name], f"{path.name}: {name}"
            seen.add(name)
    assert seen == set(defaults)
    assert resolve_variables({"window_s": 30})["window_s"] == 30


def test_every_sql_file_is_one_documented_view():
    for path in sql_files():
        text = path.read_text()
        assert text.startswith("-- "), path.name
        assert "Grain:" in text and "Columns:" in text, path.name
        assert len(re.findall(r"create or replace view", text)) == 1, path.name


def test_throughput_swing_that_follows_the_arrivals_is_traffic_not_a_signal():
    evs = []
    for k in range(8):
        busy = k % 2 == 0
        evs += stats_every_10s(60 * k, 60 * k + 60, running=20, waiting=0, kv_usage=0.3,
                               gen_tps=1000.0 if busy else 100.0)
        evs += [ev("request_arrived", 60 * k + i, request_id=f"r{k}-{i}") for i in range(50 if busy else 5)]
    assert [s["signal"] for s in signals(connect_events(events_frame(evs)))] == []
    # the same throughput under steady arrivals does fire
    evs = [e for e in evs if e["event"] != "request_arrived"]
    evs += [ev("request_arrived", 60 * k + i, request_id=f"s{k}-{i}") for k in range(8) for i in range(20)]
    assert [s["signal"] for s in signals(connect_events(events_frame(evs)))] == ["throughput_swing"]
