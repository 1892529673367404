"""Golden tests for the SGLang parser on real log excerpts (sample_logs/sglang/real, sources
in _SOURCES.md) and on the per-request metrics file, field by field."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest
from tests.helpers.common import SAMPLE_LOGS

from servelens.parsers import detect_engine
from servelens.parsers.engines.sglang import parser as sglang
from servelens.parsers.base import ParseContext, check_events, lines_frame, parse_lines, uncovered_lines
from servelens.parsers.text import parse_text
from servelens.pipeline.sources.naming import directory_instance

REAL = SAMPLE_LOGS / "sglang" / "real"


def parse_file(name: str, *, mtime: dt.datetime | None = None, instance: str = "srv") -> pl.DataFrame:
    texts = (REAL / name).read_text().split("\n")
    if texts[-1] == "":
        texts.pop()
    ctx = ParseContext(engine="sglang", source=str(REAL / name), instance=instance, mtime=mtime)
    ev = parse_lines(sglang, lines_frame(texts), ctx)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(texts)) == []
    return ev


def row(ev: pl.DataFrame, line: int) -> dict:
    rows = ev.filter(pl.col("line") == line).to_dicts()
    assert len(rows) == 1, rows
    r = rows[0]
    r["a"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return r


def utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.timezone.utc)


def test_decode_line_2025_full_date_and_tp_rank():
    r = row(parse_file("v0_4_2025.log"), 1)
    assert r["event"] == "engine_stats"
    assert r["ts"] == utc(2025, 2, 27, 4, 46, 39)
    assert (r["running"], r["waiting"], r["kv_usage"], r["gen_tps"]) == (8, 0, 0.12, 186.64)
    assert r["a"] == {"tp_rank": 0, "phase": "decode", "kv_tokens": 62531}
    assert r["level"] is None  # SGLang prints no level


def test_trailing_separator_and_renamed_fields_keep_every_value():
    ev = parse_file("v0_4_2025.log")
    r = row(ev, 12)  # `..., largest-len: 0, #queue-req: 0, `
    assert (r["running"], r["waiting"], r["kv_usage"], r["gen_tps"]) == (509, 0, 0.43, 7897.87)
    assert r["a"]["largest_len"] == 0 and r["a"]["kv_tokens"] == 180776
    r = row(ev, 18)  # cuda graph, trailing `, `
    assert r["a"]["graph"] is True and r["a"]["graph_device"] == "cuda" and r["gen_tps"] == 84.2
    p = row(ev, 16)  # Prefill batch, 2025-09
    assert p["event"] == "batch"
    assert (p["batch_tokens"], p["running"], p["waiting"], p["kv_usage"]) == (103, 0, 0, 0.0)
    assert p["a"]["new_seq"] == 1 and p["a"]["cached_tokens"] == 1 and p["a"]["phase"] == "prefill"


def test_retraction_copies_from_other_tp_ranks_count_once_per_second():
    ev = parse_file("v0_4_2025.log")
    retract = ev.filter(pl.col("message").str.starts_with("Decode out of memory"))
    assert retract.height == 6
    pre = retract.filter(pl.col("event") == "preemption")
    # TP13/12/10 at :33 and TP9/11/8 at :45 (a second node of a TP16 group: no TP0 line)
    assert pre["line"].to_list() == [6, 9]
    a = json.loads(pre["attrs"][0])
    assert a == {"tp_rank": 13, "retracted_reqs": 1, "new_token_ratio_before": 0.1474, "new_token_ratio_after": 0.1845}
    copies = retract.filter(pl.col("event") == "log")
    assert all(json.loads(x)["rank_copy"] for x in copies["attrs"])


def test_uvicorn_lines_behind_the_prefix_and_bare():
    ev = parse_file("v0_4_2025.log")
    r = row(ev, 19)
    assert (r["event"], r["http_status"], r["level"]) == ("http_access", 200, "INFO")
    assert r["a"] == {"method": "POST", "path": "/v1/chat/completions", "client": "192.168.30.81:35262", "protocol": "HTTP/1.1"}
    bare = row(parse_file("v0_1_2024.log"), 1)
    assert (bare["event"], bare["http_status"]) == ("http_access", 200)


def test_comma_label_era_with_input_throughput_on_either_side_of_cuda_graph():
    ev = parse_file("v0_5_2026.log")
    r = row(ev, 1)  # `Decode batch, ... #queue-req: 5,`
    assert (r["running"], r["waiting"], r["kv_usage"], r["gen_tps"]) == (6, 5, 0.94, 446.45)
    a = row(ev, 11)  # input throughput before cuda graph
    b = row(ev, 15)  # after
    assert (a["prompt_tps"], a["batch_tokens"], a["running"], a["a"]["graph"]) == (0.14, 578, 1, False)
    assert (b["prompt_tps"], b["batch_tokens"], b["running"], b["a"]["graph"]) == (559.53, 158, 31, True)


def test_hybrid_mamba_fields_and_npu_graph():
    r = row(parse_file("v0_5_2026.log"), 21)
    assert (r["kv_usage"], r["batch_tokens"], r["waiting"], r["running"], r["prompt_tps"]) == (0.14, 43008, 97, 1, 15734.14)
    assert r["a"]["mamba_usage"] == 0.2 and r["a"]["pending_tokens"] == 109585
    assert r["a"]["graph"] is False and r["a"]["graph_device"] == "npu"


def test_foreign_lines_with_millisecond_prefix_are_log_events():
    r = row(parse_file("v0_5_2026.log"), 8)
    assert r["event"] == "log" and r["message"].startswith("LMCache INFO: LMCache retrieve started")
    assert r["ts"] == utc(2026, 1, 20, 21, 24, 54, 336000)


def test_v0_1_unprefixed_new_fill_batch_and_unlabelled_decode():
    ev = parse_file("v0_1_2024.log")
    r = row(ev, 4)
    assert r["event"] == "batch"
    assert (r["batch_tokens"], r["waiting"], r["running"]) == (1, 4, 2)
    assert r["a"] == {"phase": "prefill", "new_seq": 1, "cached_tokens": 757, "cache_hit_rate": 0.8083}
    d = row(ev, 11)
    assert d["event"] == "engine_stats" and (d["running"], d["waiting"], d["kv_usage"]) == (5, 0, 0.24)
    # the fsm-cache variant: keys SGLang dropped later are kept, values as printed
    f = row(ev, 14)
    assert (f["batch_tokens"], f["waiting"], f["running"]) == (18, 0, 0)
    assert f["a"]["fsm_cache_hit_rate"] == "33.33%" and f["a"]["fsm_cache_avg_init_time"] == "15.73s"
    assert f["a"]["cache_hit_rate"] == 0.6218


def test_time_only_prefix_takes_the_date_of_the_file_mtime():
    ev = parse_file("v0_3_time_only.log", mtime=utc(2024, 8, 31, 12, 0, 0))
    r = row(ev, 1)
    assert r["ts"] == utc(2024, 8, 31, 4, 40, 55)
    assert r["a"]["date_source"] == "mtime" and r["a"]["tp_rank"] == 0
    p = row(ev, 17)
    assert p["ts"] == utc(2024, 8, 31, 16, 43, 29)
    assert (p["batch_tokens"], p["waiting"], p["kv_usage"]) == (8192, 38, 0.04)
    assert p["a"]["cache_hit_rate"] == 0.0276 and p["a"]["cached_tokens"] == 291
    # tqdm lines without a prefix are progress, not unparsed
    assert row(ev, 11)["event"] == "log"


def test_day_rollover_of_time_only_lines():
    text = "[23:59:58 TP0] Decode batch. #running-req: 1, #token: 5, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0\n" \
           "[00:00:03 TP0] Decode batch. #running-req: 2, #token: 9, token usage: 0.00, gen throughput (token/s): 2.00, #queue-req: 0\n"
    ctx = ParseContext(engine="sglang", source="x.log", instance="x", mtime=utc(2024, 9, 2, 8))
    ev = parse_lines(sglang, lines_frame(text.splitlines()), ctx)
    assert ev["ts"].to_list() == [utc(2024, 9, 1, 23, 59, 58), utc(2024, 9, 2, 0, 0, 3)]


def test_startup_capacity_and_scheduler_tracebacks():
    ev = parse_file("startup_and_crash.log")
    kv = row(ev, 7)
    assert (kv["event"], kv["kv_capacity_tokens"]) == ("capacity", 30192)
    assert kv["a"] == {"k_size_gb": 1.38, "v_size_gb": 1.38}
    assert row(ev, 2)["event"] == "log" and row(ev, 4)["n_lines"] == 2  # the blank line joins it
    err = row(ev, 10)
    assert (err["event"], err["level"], err["n_lines"]) == ("error", "ERROR", 17)
    assert err["a"]["exc_type"] == "ValueError"
    assert err["a"]["exc_message"] == "Failed to allocate token prealloc indices"
    # a paste cut inside the traceback is still one error; `[TP0]` without a time is a prefix
    cut = row(ev, 27)
    assert (cut["event"], cut["n_lines"], cut["a"]["tp_rank"]) == ("error", 7, 2)
    notime = row(ev, 34)
    assert (notime["event"], notime["a"]["tp_rank"], notime["ts_inferred"]) == ("error", 0, True)
    assert row(ev, 42)["event"] == "error"  # logging's `Message: 'Received sigquit ...'`


def test_server_args_and_pool_lines_announce_capacity():
    text = (
        "[2025-08-04 10:10:06] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tokenizer_path='Qwen/Qwen2.5-7B-Instruct', "
        "mem_fraction_static=0.88, max_running_requests=None, chunked_prefill_size=8192, tp_size=2, dp_size=1, page_size=1, "
        "disaggregation_mode='null')\n"
        "[2025-08-04 10:10:09 TP0] max_total_num_tokens=30192, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4097, context_len=32768, available_gpu_mem=74.11 GB\n"
    )
    ev = parse_text("sglang", text, instance="a")
    args, pool = ev.row(0, named=True), ev.row(1, named=True)
    assert (args["event"], args["model"], args["max_batch_tokens"], args["max_num_seqs"]) == ("capacity", "Qwen/Qwen2.5-7B-Instruct", 8192, None)
    assert json.loads(args["attrs"]) == {"tp_size": 2, "dp_size": 1, "page_size": 1, "mem_fraction_static": 0.88, "disaggregation_mode": "null"}
    assert (pool["kv_capacity_tokens"], pool["max_num_seqs"], pool["max_batch_tokens"]) == (30192, 4097, 8192)
    assert json.loads(pool["attrs"])["max_model_len"] == 32768
    assert ev["instance"].to_list() == ["a", "a"]  # not disaggregated: no role suffix


def test_pd_workers_are_separate_instances_and_keep_their_fields():
    pre = parse_file("pd_prefill_worker.log", instance="node1")
    dec = parse_file("pd_decode_worker.log", instance="node2")
    assert set(pre["instance"]) == {"node1:prefill"}
    assert set(dec["instance"]) == {"node2:decode"}
    p = row(pre, 1)
    assert p["ts"] == utc(2026, 9, 24, 1, 47, 50, 615000)
    assert (p["batch_tokens"], p["prompt_tps"], p["waiting"]) == (64, 7.29, 0)
    assert {k: p["a"][k] for k in ("dp_rank", "tp_rank", "ep_rank", "forward_iter", "bootstrap_reqs", "inflight_reqs", "optimistic_reqs")} == {
        "dp_rank": 3, "tp_rank": 3, "ep_rank": 3, "forward_iter": 1, "bootstrap_reqs": 0, "inflight_reqs": 1, "optimistic_reqs": 0
    }
    d = row(dec, 2)
    assert (d["running"], d["waiting"], d["kv_usage"], d["gen_tps"]) == (1, 0, 0.19, 11.87)
    assert {k: d["a"][k] for k in ("accept_len", "accept_rate", "prealloc_kv_usage", "prealloc_reqs", "transfer_reqs", "retracted_reqs")} == {
        "accept_len": 4.4, "accept_rate": 0.68, "prealloc_kv_usage": 0.18, "prealloc_reqs": 0, "transfer_reqs": 22, "retracted_reqs": 0
    }
    stage = row(dec, 1)
    assert (stage["event"], stage["request_id"], stage["prompt_tokens"], stage["output_tokens"]) == ("request", "request-decode", 16956, 19)
    assert stage["queue_s"] == pytest.approx(0.00071)
    assert stage["a"]["transfer_s"] == pytest.approx(22.29777) and stage["a"]["stage"] == "decode"


def test_pd_role_from_server_args_applies_from_the_start_of_the_file():
    text = (
        "[2026-05-19 00:30:00] server_args=ServerArgs(model_path='m', disaggregation_mode='decode', tp_size=1)\n"
        "[2026-05-19 00:30:01] INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\n"
        "[2026-05-19 00:34:42 DP0 TP0 EP0] Decode batch [2], #running-req: 1, #token: 64, token usage: 0.20, cuda graph: True, gen throughput (token/s): 58.87, #queue-req: 0\n"
    )
    ev = parse_text("sglang", text, instance="w")
    assert ev["instance"].to_list() == ["w:decode"] * 3


def test_logging_config_form_and_unknown_fork_fields():
    ev = parse_file("forks_and_logging_config.log")
    r = row(ev, 1)
    assert (r["level"], r["running"], r["gen_tps"], r["ts"]) == ("INFO", 1, 126.29, utc(2026, 6, 7, 10, 59, 31, 659000))
    assert r["a"]["logger"] == "sglang.srt.managers.scheduler_metrics_mixin"
    j = row(ev, 9)
    assert j["a"]["cache_miss"] == 1 and j["gen_tps"] == 84.39


METRICS = [
    # the exporter's record: {"request_parameters": json.dumps(obj fields), **meta_info}
    {"request_parameters": json.dumps({"rid": "r1", "text": "hi", "sampling_params": {"max_new_tokens": 32}}),
     "id": "r1", "finish_reason": {"type": "length", "length": 32}, "prompt_tokens": 5,
     "completion_tokens": 32, "cached_tokens": 4, "e2e_latency": 0.5, "queue_time": 0.02,
     "request_received_ts": 1787481184.0, "prefill_finished_ts": 1787481184.125,
     "request_finished_ts": 1787481184.5, "response_sent_to_client_ts": 1787481184.5001,
     "decode_throughput": 62.0},
    {"request_parameters": "{}", "id": "r2", "finish_reason": {"type": "stop", "matched": 2},
     "prompt_tokens": 7, "completion_tokens": 1, "cached_tokens": 0, "e2e_latency": 0.25},
]


def test_exported_request_metrics_are_request_facts_of_the_directory_instance(tmp_path):
    d = tmp_path / "sglang-a"
    d.mkdir()
    f = d / "sglang-request-metrics-20260811_14.log"
    f.write_text("".join(json.dumps(m) + "\n" for m in METRICS))
    texts = f.read_text().splitlines()
    assert detect_engine(texts) == ("sglang", pytest.approx(1.0))
    # the pipeline names the directory's instance; the exporter's file takes it
    ctx = ParseContext(engine="sglang", source=str(f), instance="sglang-request-metrics-20260811_14",
                       directory_instance=directory_instance(str(f)))
    ev = parse_lines(sglang, lines_frame(texts), ctx)
    check_events(ev)
    a, b = ev.row(0, named=True), ev.row(1, named=True)
    assert a["event"] == "request" and a["instance"] == "sglang-a"
    assert (a["request_id"], a["prompt_tokens"], a["output_tokens"]) == ("r1", 5, 32)
    assert (a["e2e_s"], a["queue_s"], a["ttft_s"]) == (0.5, 0.02, 0.125)
    assert a["tpot_s"] == pytest.approx(1 / 62.0)
    assert a["ts"] == dt.datetime.fromtimestamp(1787481184.5, dt.timezone.utc)
    assert json.loads(a["attrs"])["finish_reason"] == "length" and json.loads(a["attrs"])["cached_tokens"] == 4
    # no time stats: exact e2e and tokens, no TTFT, no time (inherited)
    assert (b["request_id"], b["e2e_s"], b["ttft_s"], b["ts_inferred"]) == ("r2", 0.25, None, True)
    # an explicit --instance is kept
    ctx = ParseContext(engine="sglang", source=str(f), instance="mine")
    assert set(parse_lines(sglang, lines_frame(texts), ctx)["instance"]) == {"mine"}


def test_dp_attention_ranks_and_the_log_requests_finish_line():
    ev = parse_file("dp_attention_and_finish.log")
    r = row(ev, 16)  # `[2025-05-31 18:31:21 DP6 TP6] Decode batch. ... accept len: 2.86, ...`
    assert (r["running"], r["kv_usage"], r["gen_tps"]) == (8, 0.12, 168.28)
    assert (r["a"]["dp_rank"], r["a"]["tp_rank"], r["a"]["accept_len"]) == (6, 6, 2.86)
    assert row(ev, 1)["event"] == "unparsed"  # SGLang's unprefixed print(): kept whole
    assert row(ev, 10)["event"] == "log"  # "The following error message ... can be ignored."
    fin = row(ev, 33)
    assert (fin["event"], fin["request_id"], fin["prompt_tokens"], fin["output_tokens"]) == (
        "request", "24fa397b7cab4418b3f6a5c903ae310f", 50, 97
    )
    assert fin["e2e_s"] == 0.6632676124572754 and fin["ts"] == utc(2025, 10, 1, 21, 25, 35)
    assert fin["a"]["finish_reason"] == "stop" and fin["a"]["cached_tokens"] == 1


@pytest.mark.parametrize("variant", ["v0_5", "v0_4", "pd"])
def test_every_simulated_line_parses(tmp_path, variant):
    from servelens.pipeline.simulate import simulate

    summary = simulate("sglang", "incident", "150s", 9, tmp_path, variant=variant, instances=2)
    files = [tmp_path / n for n in summary["files"]] + sorted(tmp_path.glob("*/sglang-request-metrics-*.log"))
    assert len(files) == 4
    for path in files:
        texts = path.read_text().splitlines()
        ev = parse_text("sglang", path.read_text(), source=str(path), instance=path.stem)
        check_events(ev)
        assert uncovered_lines(ev, 1, len(texts)) == []
        assert ev.filter(pl.col("event") == "unparsed").height == 0, path.name
        kinds = set(ev["event"])
        if path.name.endswith("-a.log"):
            assert {"capacity", "error", "batch", "engine_stats", "http_access"} <= kinds
        if "request-metrics" in path.name:
            assert kinds == {"request"} and ev["e2e_s"].null_count() == 0


def test_a_prefix_behind_a_wrapper_the_decoding_stage_left_is_still_read():
    text = (
        "(SGLangEngine pid=41820) [2025-06-01 10:00:00 TP0] Decode batch. #running-req: 3, #token: 99, "
        "token usage: 0.01, cuda graph: True, gen throughput (token/s): 12.50, #queue-req: 2, \n"
        '2025-06-01T10:00:01.123456789Z [2025-06-01 10:00:01] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
    )
    ev = parse_text("sglang", text, decode=())  # the parser alone, as if the stage had left them
    a, b = ev.row(0, named=True), ev.row(1, named=True)
    assert (a["event"], a["running"], a["waiting"], a["ts"]) == ("engine_stats", 3, 2, utc(2025, 6, 1, 10, 0, 0))
    assert json.loads(a["attrs"])["wrapper"] == "(SGLangEngine pid=41820)"
    assert (b["event"], b["http_status"]) == ("http_access", 200)
    assert json.loads(b["attrs"])["wrapper"] == "2025-06-01T10:00:01.123456789Z"


# --- families read from real pastes (pd_failures_and_v0_2.log), values from the lines --------


def test_prefill_batch_size_is_new_seq_and_gpu_id_prefix():
    ev = parse_file("pd_failures_and_v0_2.log")
    r = row(ev, 2)  # `[gpu_id=0] Prefill batch. #new-seq: 1, #new-token: 2, ...`
    assert (r["event"], r["batch_size"], r["batch_tokens"], r["running"], r["waiting"]) == ("batch", 1, 2, 0, 0)
    assert r["a"]["gpu_id"] == 0 and r["a"]["cached_tokens"] == 42 and r["a"]["cache_hit_rate"] == 0.4526
    # v0.1's `#seq` is the same count; a decode line is no batch of new requests
    v01 = parse_file("v0_1_2024.log")
    fills = v01.filter(pl.col("event") == "batch")
    assert fills["batch_size"].null_count() == 0 and set(fills["batch_size"].to_list()) <= {1, 2, 3, 4}
    assert v01.filter(pl.col("event") == "engine_stats")["batch_size"].null_count() == v01.filter(pl.col("event") == "engine_stats").height


def test_uvicorn_warning_behind_the_prefix_keeps_its_level():
    ev = parse_file("pd_failures_and_v0_2.log")
    for line in (5, 7):  # `[2026-02-19 16:31:49] WARNING:  Invalid HTTP request received.`
        r = row(ev, line)
        assert (r["event"], r["level"], r["ts"]) == ("log", "WARNING", utc(2026, 2, 19, 16, 31, 49))
    assert row(ev, 4)["http_status"] == 404 and row(ev, 14)["http_status"] == 500


def test_pd_transfer_failures_fail_their_request_once():
    ev = parse_file("pd_failures_and_v0_2.log")
    fails = ev.filter(pl.col("event") == "request_aborted")
    # one per request: the decode side's rid and the prefill side's, each printed by 3 TP ranks
    assert fails["request_id"].to_list() == ["63b1b22dad53465b92560ebdda56d075", "ca271fb6eab2421f98ac61976e6f0f34"]
    assert fails["level"].to_list() == ["ERROR", "ERROR"] and fails["line"].to_list() == [8, 11]
    a = row(ev, 8)["a"]
    assert (a["stage"], a["failed_step"], a["bootstrap_room"], a["exc_type"]) == ("decode", "transfer", 6593551520068383758, "KVTransferError")
    assert row(ev, 11)["a"]["exc_message"].endswith("remote mooncake session 10.99.91.49:15295 is not alive")
    copies = ev.filter(pl.col("line").is_in([9, 10, 12, 13]))
    assert copies["event"].to_list() == ["log"] * 4 and copies["level"].null_count() == 4
    assert all(json.loads(a)["rank_copy"] for a in copies["attrs"])


def test_pd_transfer_failure_is_a_failed_request_in_the_requests_view(tmp_path):
    from servelens.pipeline.ingest import ingest
    from servelens.pipeline.query.connect import connect

    log = tmp_path / "pd.log"
    log.write_text((REAL / "pd_failures_and_v0_2.log").read_text())
    # (no rollups: the requests view is computed from the events, as the rollup would be)
    ingest([log], tmp_path / "store", engine="sglang", rollups=False)
    con = connect(tmp_path / "store", views={"requests"})
    rows = con.execute("select request_id, status, failure_reason from requests order by request_id").fetchall()
    con.close()
    assert [(r[0], r[1]) for r in rows] == [("63b1b22dad53465b92560ebdda56d075", "failed"), ("ca271fb6eab2421f98ac61976e6f0f34", "failed")]
    assert rows[0][2].startswith("Decode transfer failed for request rank=3")


def test_v0_2_decode_out_of_memory_is_a_retraction():
    # v0.1/v0.2 printed it with no time: bare, or behind `[gpu_id=N] ` (scheduler.py of the era)
    ctx = ParseContext(engine="sglang", source="t.log", instance="t")
    texts = ["Decode out of memory happened. #retracted_reqs: 2, #new_token_ratio: 0.4000 -> 0.5000",
             "[gpu_id=0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.3142 -> 0.4142"]
    ev = parse_lines(sglang, lines_frame(texts), ctx)
    assert ev["event"].to_list() == ["preemption", "preemption"]
    a = [json.loads(x) for x in ev["attrs"]]
    assert [x["retracted_reqs"] for x in a] == [2, 1] and a[1]["new_token_ratio_after"] == 0.4142
