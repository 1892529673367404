"""Autoscaler presets: the replayed scale-out rules (autoscaler_decisions, autoscaler_episodes,
calibration) on constructed engine stats whose decisions are known, and the preset files."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from servelens.pipeline.query.views import preset_path, presets, read_thresholds, resolve_variables
from tests.helpers import incident_truth
from tests.helpers.sql_helpers import at, connect_events, ev, events_frame, rows


def stats(t: int, waiting: float, running: float = 10, kv: float = 0.3, **cols):
    return ev("engine_stats", t, waiting=waiting, running=running, kv_usage=kv, **cols)


def connect(evs, preset: str, **variables):
    return connect_events(events_frame(evs), variables=resolve_variables(variables, f"preset:{preset}"))


def test_every_preset_is_documented_with_its_source_and_only_sets_known_keys():
    assert presets() == ["aibrix", "kserve", "llm-d", "vllm-production-stack"]
    known = read_thresholds()
    for name in presets():
        text = preset_path(name).read_text()
        assert "Source" in text and "http" in text, name
        keys = read_thresholds(preset_path(name))
        assert set(keys) <= set(known) and keys["autoscaler_preset"] == name


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown preset 'keda'.*vllm-production-stack"):
        resolve_variables(None, "preset:keda")


def test_vllm_production_stack_fires_on_waiting_above_5_over_its_polling_window():
    # a stats line every 10 s: waiting 8 from t=100 to t=190, 0 otherwise
    evs = [stats(t, 8 if 100 <= t < 200 else 0) for t in range(0, 400, 10)]
    con = connect(evs, "vllm-production-stack")
    # the 15 s window at t=100 holds the samples at 90 (0) and 100 (8): average 4, not above 5
    fired = [r["ts"] for r in rows(con, "select ts from autoscaler_decisions where scale_out order by ts")]
    assert fired[0] == at(110) and fired[-1] == at(190)
    ep = rows(con, "select * from autoscaler_episodes")
    assert len(ep) == 1
    assert ep[0]["start_ts"] == at(110) and ep[0]["end_ts"] == at(200) and ep[0]["duration_s"] == 90
    assert ep[0]["peak_waiting"] == 8 and ep[0]["flap"] is False


def test_a_second_burst_inside_the_cooldown_is_a_flap_and_outside_is_not():
    def burst(t0):
        return range(t0, t0 + 60, 10)
    waiting = set(burst(100)) | set(burst(300)) | set(burst(1200))  # 140 s gap, then 840 s
    evs = [stats(t, 9 if t in waiting else 0) for t in range(0, 1400, 10)]
    con = connect(evs, "vllm-production-stack")  # cooldown 360 s
    ep = rows(con, "select start_ts, gap_s, flap from autoscaler_episodes order by start_ts")
    assert [e["start_ts"] for e in ep] == [at(110), at(310), at(1210)]
    assert [e["flap"] for e in ep] == [False, True, False]
    assert ep[1]["gap_s"] == 310 - 160
    cal = rows(con, "select n_scale_outs, n_flaps from calibration")
    assert cal == [{"n_scale_outs": 3, "n_flaps": 1}]


def test_kserve_fires_on_running_requests_and_ignores_the_queue():
    evs = [stats(t, waiting=50, running=2) for t in range(0, 100, 10)]
    evs += [stats(t, waiting=0, running=3) for t in range(100, 200, 10)]
    con = connect(evs, "kserve")
    ep = rows(con, "select start_ts, end_ts from autoscaler_episodes")
    # 30 s window at t=100: samples 80 (2), 90 (2), 100 (3) average 2.33 > 2; the queue of 50 before never counts
    assert len(ep) == 1 and ep[0]["start_ts"] == at(100)


def test_llm_d_needs_both_kv_and_queue():
    evs = [stats(t, waiting=3, kv=0.9) for t in range(0, 100, 10)]  # KV high, queue short
    evs += [stats(t, waiting=6, kv=0.5) for t in range(100, 200, 10)]  # queue long, KV low
    evs += [stats(t, waiting=6, kv=0.85) for t in range(200, 300, 10)]  # both
    con = connect(evs, "llm-d")
    fired = [r["ts"] for r in rows(con, "select ts from autoscaler_decisions where scale_out order by ts")]
    # the 15 s window at 200 still averages KV 0.675: the first step with both is 210
    assert fired[0] == at(210) and fired[-1] == at(290)


def test_aibrix_panics_on_a_short_kv_spike_before_the_stable_window_agrees():
    evs = [stats(t, waiting=0, kv=0.1) for t in range(0, 120)]  # a sample every second
    evs += [stats(t, waiting=0, kv=1.0) for t in range(120, 130)]
    con = connect(evs, "aibrix")
    d = {r["ts"]: r for r in rows(con, "select * from autoscaler_decisions")}
    # panic window 6 s at 120..125 averages 1.0 >= 2 x 0.5 by t=125; the 60 s average stays low
    assert d[at(125)]["panic_fire"] and not d[at(125)]["stable_fire"] and d[at(125)]["scale_out"]
    assert not d[at(124)]["panic_fire"]
    assert max(r["kv_stable"] for r in d.values()) < 0.5


def test_calibration_says_how_long_before_the_first_oom_the_rule_fired():
    evs = [stats(t, 8 if t >= 100 else 0) for t in range(0, 400, 10)]
    evs.append(ev("error", 340, level="ERROR", message="torch.OutOfMemoryError: CUDA out of memory."))
    con = connect(evs, "vllm-production-stack")
    (cal,) = rows(con, "select * from calibration")
    assert cal["warned_scale_out_ts"] == at(110) and cal["first_severe_ts"] == at(340)
    assert cal["lead_s"] == 340 - 110 and cal["first_severe_kind"] == "cuda_oom"  # from the warning to the OOM


def test_no_preset_no_rows():
    con = connect_events(events_frame([stats(t, 50) for t in range(0, 100, 10)]))
    assert rows(con, "select count(*) as n from autoscaler_decisions") == [{"n": 0}]
    assert rows(con, "select count(*) as n from calibration") == [{"n": 0}]


def test_report_has_a_calibration_section_on_the_sample_incident(incident_store):
    from servelens.pipeline.cli.app import app, build_app

    build_app()
    runner = CliRunner()
    # the session's ingested sample incident (the report only reads it)
    res = runner.invoke(app, ["report", "--store", str(incident_store)])
    assert res.exit_code == 0, res.output
    text = res.output
    assert "## Autoscaler calibration" in text
    # KServe's running > 2 fires within seconds of the surge, minutes before vllm-a's OOM (its
    # log's first `CUDA out of memory` line, read here)
    line = next(l for l in text.splitlines() if l.startswith("- With preset kserve, scale-out of vllm-a"))
    _, oom = incident_truth.first_line(incident_truth.log_of("vllm-a"), re.compile("CUDA out of memory"))
    assert f"before the first cuda_oom ({oom:%Y-%m-%d %H:%M:%S})" in line
    for name in presets():
        assert f"| {name} | vllm-a |" in text


def test_calibration_restores_the_reports_own_rule_and_json_carries_the_rows():
    import json

    from servelens.pipeline.report import calibration
    from servelens.pipeline.report.build import build_report, render

    evs = [stats(t, 8 if t >= 100 else 0) for t in range(0, 400, 10)]
    evs.append(ev("error", 340, level="ERROR", message="torch.OutOfMemoryError: CUDA out of memory."))
    con = connect(evs, "kserve")
    rows_ = calibration.build(con)
    assert [r["preset"] for r in rows_] == presets()
    by = {r["preset"]: r for r in rows_}
    assert by["vllm-production-stack"]["lead_s"] == 340 - 110  # from the rule's first warning to the OOM
    assert by["kserve"]["n_scale_outs"] == 1  # running 10 > 2 from the first sample
    # the connection's own preset is back for the rest of the report
    assert con.execute("select getvariable('autoscaler_preset')").fetchone()[0] == "kserve"
    data = json.loads(render(build_report(con), "json"))
    assert {r["preset"] for r in data["calibration"]} == set(presets())
    assert "Autoscaler calibration" in render(build_report(con), "html")
