"""Everything the simulator writes goes through the engine parsers with nothing unparsed, and
what the parsers extract agrees with the ground truth."""

from __future__ import annotations

import datetime as dt
import importlib
import re

import polars as pl
import pytest

from servelens.parsers import ENGINES
from servelens.parsers.base import check_events, uncovered_lines
from servelens.parsers.text import parse_text
from servelens.pipeline.simulate import simulate


def import_parser(engine: str):
    # a parser that does not import is a failure, never a skip
    importlib.import_module(ENGINES[engine])


def parse_file(engine, path):
    text = path.read_text(encoding="utf-8")
    ev = parse_text(engine, text, source=path.name, instance=path.stem, year=2026)
    check_events(ev)
    n = len(text.split("\n")) - 1
    assert uncovered_lines(ev, 1, n) == []
    return ev


FORMATS = [
    ("vllm", "v0", False), ("vllm", "v0", True), ("vllm", "v1", False), ("vllm", "v1", True),
    ("tgi", "text", False), ("tgi", "json", False), ("tgi", "text", True),
    ("trtllm", "triton", False), ("trtllm", "executor", False), ("trtllm", "triton", True),
]


@pytest.mark.parametrize("engine,variant,docker", FORMATS)
def test_every_simulated_line_parses(tmp_path, engine, variant, docker):
    import_parser(engine)
    # the incident covers start-up, traffic, preemption and the crash
    summary = simulate(engine, "incident", "150s", 9, tmp_path, variant=variant, instances=2,
                       docker_timestamps=docker, max_log_len=60)
    for name in summary["files"]:
        ev = parse_file(engine, tmp_path / name)
        unparsed = ev.filter(pl.col("event") == "unparsed")["message"].to_list()
        assert unparsed == [], f"{name}: {unparsed[:5]}"
        assert ev["ts"].null_count() < ev.height
        kinds = set(ev["event"])
        assert "capacity" in kinds
        if name.endswith("-a.log"):
            assert "error" in kinds  # the crash


def test_tgi_parsed_latencies_equal_the_truth_exactly(tmp_path):
    import_parser("tgi")
    simulate("tgi", "spike", "4m", 4, tmp_path)
    ev = parse_file("tgi", tmp_path / "tgi-a.log").filter(pl.col("event") == "request").sort("line")
    truth = (
        pl.read_parquet(tmp_path / "truth_requests.parquet")
        .filter(pl.col("status") == "ok")
        .sort("finish_ts", "arrival_ts")
    )
    assert ev.height == truth.height > 500
    ns = lambda s: (s * 1e9).round().cast(pl.Int64)  # noqa: E731
    for col in ("e2e_s", "queue_s", "inference_s"):
        assert ns(ev[col]).to_list() == ns(truth[col]).to_list(), col
    # the log line is stamped when the request finishes, to the microsecond
    assert ev["ts"].to_list() == truth["finish_ts"].dt.truncate("1us").dt.cast_time_unit("us").to_list()


def test_vllm_parsed_requests_and_stats_match_the_truth(tmp_path):
    import_parser("vllm")
    simulate("vllm", "kv-pressure", "4m", 4, tmp_path, docker_timestamps=True, max_log_len=0)
    ev = parse_file("vllm", tmp_path / "vllm-a.log")
    truth = pl.read_parquet(tmp_path / "truth_requests.parquet")
    arrived = ev.filter(pl.col("event") == "request_arrived")["request_id"].unique(maintain_order=True)
    assert arrived.to_list() == truth.sort("queue_start")["request_id"].to_list()
    finished = ev.filter(pl.col("event") == "request_finished").select("request_id", "ts")
    ok = truth.filter(pl.col("status") == "ok").select("request_id", "finish_ts")
    joined = finished.join(ok, on="request_id", how="full")
    assert joined.height == ok.height == finished.height
    # docker timestamps carry the exact finish time (to the microsecond)
    assert (joined["ts"] == joined["finish_ts"].dt.truncate("1us").dt.cast_time_unit("us")).all()
    # stats lines: running / pending / KV usage equal the true state at that moment
    stats = ev.filter(pl.col("event") == "engine_stats").select(
        (pl.col("ts") + dt.timedelta(microseconds=1)).dt.cast_time_unit("ns").alias("ts"),
        "running", "waiting", "kv_usage",
    )
    state = pl.read_parquet(tmp_path / "truth_state.parquet").sort("ts")
    m = stats.sort("ts").join_asof(state, on="ts", suffix="_true")
    assert m.height > 30
    assert (m["running"] == m["running_true"]).all()
    assert (m["waiting"] == m["waiting_true"]).all()
    assert ((m["kv_usage"] - m["kv_usage_true"]).abs() <= 0.0005 + 1e-9).all()
    assert m["kv_usage"].max() > 0.95
    cap = ev.filter(pl.col("event") == "capacity")
    blocks = state.filter(pl.col("instance") == "vllm-a")["kv_blocks_total"].unique().to_list()
    seqs = re.findall(r"max_num_seqs=(\d+)", (tmp_path / "vllm-a.log").read_text())  # the args line, read here
    assert len(blocks) == 1 and blocks[0] in cap["kv_blocks_total"].to_list()
    assert seqs and int(seqs[0]) in cap["max_num_seqs"].to_list()


def test_trtllm_parsed_iteration_stats_match_the_truth(tmp_path):
    import_parser("trtllm")
    simulate("trtllm", "spike", "3m", 4, tmp_path)
    ev = parse_file("trtllm", tmp_path / "trtllm-a.log").filter(pl.col("event") == "engine_stats")
    assert ev.height > 100
    parsed = ev.select(
        pl.col("attrs").str.json_path_match("$.iteration").cast(pl.Int64).alias("iteration"),
        "batch_size", "kv_blocks_used", "kv_blocks_total",
    )
    state = pl.read_parquet(tmp_path / "truth_state.parquet").filter(pl.col("iteration") >= 0)
    m = parsed.join(state, on="iteration", how="left")
    assert m["running"].null_count() == 0  # every logged iteration happened
    assert (m["batch_size"] == m["running"]).all()  # Scheduled Requests = the batch
    assert (m["kv_blocks_used"] == m["kv_blocks_used_right"]).all()
    assert (m["kv_blocks_total"] == m["kv_blocks_total_right"]).all()
