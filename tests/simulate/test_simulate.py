"""The simulator's model obeys queueing facts, so its ground truth deserves the name; runs are
deterministic; the fast path changes nothing."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import servelens.pipeline.simulate.model as model
from servelens.pipeline.simulate import SimulateError, parse_duration, simulate
from servelens.pipeline.simulate.scenarios import SCENARIOS, make_traffic, server_config


def run(tmp_path, engine, scenario, duration, **kw):
    out = tmp_path / f"{engine}-{scenario}"
    summary = simulate(engine, scenario, duration, kw.pop("seed", 7), out, **kw)
    req = pl.read_parquet(out / "truth_requests.parquet")
    state = pl.read_parquet(out / "truth_state.parquet")
    return summary, req, state, out


def secs(col: pl.Series) -> np.ndarray:
    return col.dt.epoch("ns").to_numpy().astype(np.float64) / 1e9


def step_weights(g: pl.DataFrame, end: float) -> tuple[np.ndarray, np.ndarray]:
    """Seconds each state row was in force (rows hold until the next one)."""
    t = secs(g["ts"])
    return t, np.diff(np.r_[t, end])


def test_below_capacity_the_queue_stays_near_empty(tmp_path):
    _, req, state, _ = run(tmp_path, "vllm", "steady", "8m")
    t, w = step_weights(state, secs(state["ts"]).min() + 480)
    waiting = state["waiting"].to_numpy()
    assert (waiting * w).sum() / w.sum() < 0.05
    assert waiting.max() <= 3
    ok = req.filter(pl.col("status") == "ok")
    assert ok.height > 700
    # nobody waits long for a slot
    assert ok["queue_s"].quantile(0.99) < 0.2


def test_above_capacity_the_queue_grows(tmp_path):
    _, req, state, _ = run(tmp_path, "tgi", "steady", "4m", rate=12.0)
    t, w = step_weights(state, secs(state["ts"]).min() + 240)
    waiting = state["waiting"].to_numpy()
    rel = t - t[0]
    thirds = [waiting[(rel >= a) & (rel < a + 80)].mean() for a in (0, 80, 160)]
    assert thirds[0] < thirds[1] < thirds[2]
    assert waiting[-1] > 100
    # and so does the time spent queueing
    ok = req.filter(pl.col("status") == "ok").sort("arrival_ts")
    q = ok["queue_s"].to_numpy()
    assert q[-len(q) // 5:].mean() > 5 * q[: len(q) // 5].mean() + 1.0


@pytest.mark.parametrize("engine,scenario", [("vllm", "steady"), ("vllm", "spike"), ("tgi", "kv-pressure")])
def test_littles_law_holds_on_the_truth(tmp_path, engine, scenario):
    """Mean number in the server (from truth_state) = arrival rate x mean time in the server
    (from truth_requests), over the same window."""
    dur = 360.0
    _, req, state, _ = run(tmp_path, engine, scenario, "6m")
    t0 = secs(state["ts"]).min()
    t, w = step_weights(state, t0 + dur)
    n = (state["running"] + state["waiting"]).to_numpy()
    L = (n * w).sum() / dur
    qs = secs(req["queue_start"]) - t0
    fin = req["finish_ts"].dt.epoch("ns").to_numpy().astype(float) / 1e9 - t0
    fin = np.where(np.isnan(fin), dur, np.minimum(fin, dur))
    inside = qs < dur
    lam = inside.sum() / dur
    W = (fin[inside] - qs[inside]).mean()
    assert L > 1.0
    assert L == pytest.approx(lam * W, rel=0.03)


def test_spike_queue_builds_past_ten_for_minutes_then_drains(tmp_path):
    _, req, state, _ = run(tmp_path, "vllm", "spike", "20m")
    end = secs(state["ts"]).min() + 1200
    t, w = step_weights(state, end)
    waiting = state["waiting"].to_numpy()
    assert w[waiting > 10].sum() > 120  # minutes, not a blip
    assert waiting[t > end - 120].max() <= 3  # drained before the end
    # latency follows the queue: requests arriving in the surge wait far longer
    ok = req.filter(pl.col("status") == "ok")
    rel = secs(ok["arrival_ts"]) - (end - 1200)
    surge = ok.filter(pl.Series((rel > 0.35 * 1200) & (rel < 0.55 * 1200)))
    before = ok.filter(pl.Series(rel < 0.3 * 1200))
    assert surge["e2e_s"].median() > 2 * before["e2e_s"].median()


def test_kv_pressure_fills_the_cache_and_preempts(tmp_path):
    _, req, state, _ = run(tmp_path, "vllm", "kv-pressure", "8m")
    assert state["kv_usage"].max() > 0.98
    assert state["kv_usage"].max() <= 1.0
    assert state["kv_blocks_used"].max() <= state["kv_blocks_total"][0]
    final = state["preemptions_cum"].max()
    assert final > 0
    assert req["preemptions"].sum() == final  # every preemption belongs to a request
    assert (req["preemptions"] > 0).sum() > 0
    ok = req.filter(pl.col("status") == "ok")
    preempted = ok.filter(pl.col("preemptions") > 0)
    assert preempted["e2e_s"].median() > ok["e2e_s"].median()


def test_reserving_engines_never_preempt_and_respect_the_batch_limit(tmp_path):
    _, req, state, _ = run(tmp_path, "trtllm", "spike", "6m", max_num_seqs=24)
    assert state["preemptions_cum"].max() == 0
    assert req["preemptions"].sum() == 0
    assert state["running"].max() == 24
    assert state["waiting"].max() > 10


def test_incident_crashes_one_instance_and_the_others_take_over(tmp_path):
    summary, req, state, out = run(tmp_path, "vllm", "incident", "5m")
    assert summary["instances"] == 3
    crash = req.filter(pl.col("status") == "error")
    assert crash.height > 0
    assert crash["instance"].unique().to_list() == ["vllm-a"]
    t_crash = crash["finish_ts"].max()
    assert crash["finish_ts"].min() == t_crash  # they all died at once
    a = req.filter(pl.col("instance") == "vllm-a")
    assert a["arrival_ts"].max() <= t_crash
    later = req.filter((pl.col("instance") != "vllm-a") & (pl.col("arrival_ts") > t_crash))
    assert later.height > 100 and (later["status"] == "ok").mean() > 0.9
    log = (out / "vllm-a.log").read_text()
    assert "torch.OutOfMemoryError: CUDA out of memory." in log
    assert log.rstrip("\n").endswith("Finished server process [1]")


def test_truth_is_self_consistent(tmp_path):
    _, req, _, _ = run(tmp_path, "tgi", "spike", "4m")
    ok = req.filter(pl.col("status") == "ok")
    assert (ok["arrival_ts"] <= ok["queue_start"]).all()
    assert (ok["queue_start"] <= ok["start_ts"]).all()
    assert (ok["start_ts"] < ok["first_token_ts"]).all()
    assert (ok["first_token_ts"] <= ok["finish_ts"]).all()
    assert (ok["output_tokens"] <= ok["max_tokens"]).all()
    assert ((ok["finish_reason"] == "length") == (ok["output_tokens"] == ok["max_tokens"])).all()
    total = ok["validation_s"] + ok["queue_s"] + ok["inference_s"]
    assert ((total - ok["e2e_s"]).abs() < 1e-9).all()
    assert ok["request_id"].n_unique() == ok.height


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = simulate("vllm", "incident", "90s", 11, tmp_path / "a", instances=2)
    b = simulate("vllm", "incident", "90s", 11, tmp_path / "b", instances=2)
    c = simulate("vllm", "incident", "90s", 12, tmp_path / "c", instances=2)
    for name in a["files"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    for name in ("truth_requests.parquet", "truth_state.parquet"):
        assert pl.read_parquet(tmp_path / "a" / name).equals(pl.read_parquet(tmp_path / "b" / name))
    assert a["requests"] == b["requests"] != c["requests"]


@pytest.mark.parametrize("engine,scenario", [("vllm", "kv-pressure"), ("vllm", "spike"), ("tgi", "spike")])
def test_fast_forward_changes_nothing(monkeypatch, engine, scenario):
    scen = SCENARIOS[scenario]
    tr = make_traffic(scen, np.random.default_rng(3), 240.0, 1, None, None, None)
    cfg = server_config(engine, scen)
    q = tr.arrival + tr.validation
    results = []
    for ff in (False, True):
        monkeypatch.setattr(model, "FAST_FORWARD", ff)
        results.append(model.run_instance(q, tr.prompt, tr.target, tr.max_tokens, cfg, 240.0))
    slow, fast = results
    for f in ("start", "first_token", "finish", "generated", "preemptions", "st_ts", "st_running",
              "st_waiting", "st_blocks", "st_dt", "st_iter", "st_preempt_cum"):
        assert np.array_equal(getattr(slow, f), getattr(fast, f), equal_nan=True), f
    assert len(fast.st_ts) > 1000


def test_durations_and_bad_requests():
    assert parse_duration("20m") == 1200
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90
    assert parse_duration("45") == 45
    for bad in ("", "5x", "0s", "m"):
        with pytest.raises(SimulateError):
            parse_duration(bad)
    with pytest.raises(SimulateError, match="unknown engine"):
        simulate("exllama", "steady", 10, 1, "/nonexistent")
    with pytest.raises(SimulateError, match="unknown scenario"):
        simulate("vllm", "chaos", 10, 1, "/nonexistent")
    with pytest.raises(SimulateError, match="unknown variant"):
        simulate("tgi", "steady", 10, 1, "/nonexistent", variant="v1")


def test_parallel_workers_write_the_same_files(tmp_path):
    a = simulate("trtllm", "incident", "40s", 2, tmp_path / "a", instances=2)
    simulate("trtllm", "incident", "40s", 2, tmp_path / "b", instances=2, workers=2)
    for name in a["files"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    for name in ("truth_requests.parquet", "truth_state.parquet"):
        assert pl.read_parquet(tmp_path / "a" / name).equals(pl.read_parquet(tmp_path / "b" / name))


def test_a_short_run_whose_first_request_never_finishes(tmp_path):
    # five seconds at 9/s: the first request is still running when the run ends (its finish
    # reason is null), which once made the truth table fail to build
    simulate("vllm", "steady", 5, seed=5, out_dir=tmp_path, variant="v1_outputs", instances=1, rate=9.0)
    truth = pl.read_parquet(tmp_path / "truth_requests.parquet").sort("arrival_ts")
    assert truth["status"][0] == "unfinished" and truth["finish_reason"][0] is None
    ok = truth.filter(pl.col("status") == "ok")
    assert ok.height > 0 and ok["finish_reason"].null_count() == 0
    assert set(ok["finish_reason"]) <= {"stop", "length"}
    assert truth.filter(pl.col("status") != "ok")["finish_reason"].null_count() == truth.height - ok.height
