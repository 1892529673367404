"""Fixture-driven tests for the TensorRT-LLM parser (parsers/engines/trtllm/parser.py, stats.py).

Fixtures live in tests/fixtures/trtllm/. Their lines come from public bug reports, cited at
each test; where a report's paste was cut or wrapped by GitHub, the test says what was
joined or completed. Lines marked "format" follow shared/formats/trtllm.md (engine source)
where no pasted example was found.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest
from servelens.parsers.engines.trtllm import parser as trtllm
from servelens.parsers.base import ParseContext, check_events, finalize, lines_frame, uncovered_lines
from servelens.parsers.text import parse_text

FIX = Path(__file__).parents[1] / "fixtures" / "trtllm"
UTC = dt.timezone.utc


def parse_fixture(name: str, year: int = 2026) -> pl.DataFrame:
    text = (FIX / name).read_text()
    ev = parse_text("trtllm", text, year=year)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(text.rstrip("\n").split("\n"))) == []
    return ev


def row(ev: pl.DataFrame, line: int, k: int = 0) -> dict:
    rows = ev.filter(pl.col("line") == line).to_dicts()
    return rows[k]


def attrs(r: dict) -> dict:
    return json.loads(r["attrs"]) if r["attrs"] else {}


def t(*a) -> dt.datetime:
    return dt.datetime(*a, tzinfo=UTC)


# --- iteration statistics ------------------------------------------------------------


def test_glog_stats_alphabetical_and_minimal():
    # line 1: NVIDIA/TensorRT-LLM#431 (minimal 3-key form, backend 0.5/0.6)
    # line 2: triton-inference-server/tensorrtllm_backend#217 (alphabetical keys; GitHub
    # wrapped the paste over 5 lines, joined here)
    ev = parse_fixture("glog_stats_alphabetical.log")
    assert ev["event"].to_list() == ["engine_stats", "engine_stats"]
    m = row(ev, 1)
    assert (m["running"], m["ts"], m["ts_inferred"], m["level"]) == (
        1,
        t(2023, 11, 20, 2, 29, 1),
        False,
        "INFO",
    )
    assert (
        m["batch_size"] is None
        and m["kv_usage"] is None
        and m["kv_blocks_total"] is None
    )
    assert attrs(m)["iteration"] == 200
    r = row(ev, 2)
    assert r["ts"] == t(2023, 12, 18, 3, 35, 37)
    assert (
        r["running"],
        r["batch_size"],
        r["kv_blocks_used"],
        r["kv_blocks_total"],
    ) == (1, 1, 1, 513)
    assert r["kv_usage"] == pytest.approx(1 / 513)
    assert r["waiting"] is None  # this form has no queue count: null, never 0
    a = attrs(r)
    assert (
        a["gpu_mem_bytes"] == 3648012
        and a["cpu_mem_bytes"] == 156
        and a["pinned_mem_bytes"] == 16
    )
    assert (
        a["context_tokens"] == 2048
        and a["tokens_per_block"] == 64
        and a["kv_blocks_free"] == 480
    )
    assert a["max_request_count"] == 64 and a["glog_src"] == "libtensorrtllm.cc:1205"


STAT_COLS = [
    "ts",
    "running",
    "waiting",
    "batch_size",
    "kv_usage",
    "kv_blocks_used",
    "kv_blocks_total",
]


def test_code_order_json_matches_alphabetical():
    # Same values as tensorrtllm_backend#217, in the backend >=0.9 code order
    # (model_instance_state.cc), as a JSON-quoted glog message (Triton >=24.05), through
    # the C++ logger (gptManagerBenchmark --log_iteration_data) and bare.
    ref = row(parse_fixture("glog_stats_alphabetical.log"), 2)
    ev = parse_fixture("stats_code_order.log")
    assert ev["event"].to_list() == ["engine_stats"] * 3
    ref_attrs = {k: v for k, v in attrs(ref).items() if not k.startswith("glog_")}
    for r in ev.to_dicts():
        assert {c: r[c] for c in STAT_COLS} == {c: ref[c] for c in STAT_COLS}
        a = {k: v for k, v in attrs(r).items() if not k.startswith("glog_")}
        # the code-order form adds Paused/Reused counters the alphabetical one lacks
        assert a.pop("paused_requests") == 0 and a.pop("kv_blocks_reused") == 0
        assert a == ref_attrs
    assert [r["level"] for r in ev.to_dicts()] == ["INFO", "INFO", None]
    assert attrs(ev.row(0, named=True))["glog_src"] == "model_instance_state.cc:1129"


def test_executor_stats_object_array_and_empty():
    # NVIDIA/TensorRT-LLM#3376 (executor getLatestIterationStats). Line 1 is the report's
    # first object alone; line 2 the array of both (the report's paste was cut inside the
    # second object's kvCacheStats; its tail is completed with consistent values).
    ev = parse_fixture("executor_stats.log")
    assert ev["event"].to_list() == [
        "engine_stats",
        "engine_stats",
        "engine_stats",
        "log",
    ]
    one = row(ev, 1)
    assert one["ts"] == t(2025, 4, 7, 20, 33, 17, 747028)
    assert (one["running"], one["waiting"], one["batch_size"]) == (1, 7, 1)
    assert (one["kv_blocks_used"], one["kv_blocks_total"]) == (5495, 7240)
    assert one["kv_usage"] == pytest.approx(5495 / 7240)
    a = attrs(one)
    assert a["gpu_mem_bytes"] == 25330607135 and a["pinned_mem_bytes"] == 55538100068
    assert a["iter_latency_s"] == 0.0 and a["queue_latency_s"] == pytest.approx(
        0.091039e-3
    )
    assert a["max_batch_size_runtime"] == 16 and a["max_num_tokens_runtime"] == 17800
    assert a["context_tokens"] == 16000 and a["kv_blocks_alloc_new"] == 250
    # the array: one event per element, same line span
    first, second = row(ev, 2, 0), row(ev, 2, 1)
    assert {c: first[c] for c in STAT_COLS} == {c: one[c] for c in STAT_COLS}
    assert (
        second["ts"] == t(2025, 4, 7, 20, 33, 19, 852011)
        and second["ts_inferred"] is False
    )
    assert (
        second["running"],
        second["waiting"],
        second["batch_size"],
        second["kv_blocks_used"],
    ) == (2, 6, 2, 5745)
    assert attrs(second)["iter_latency_s"] == pytest.approx(2.104673455)
    assert attrs(second)["iteration"] == 1 and second["n_lines"] == 1
    assert row(ev, 3)["message"] == "[]"  # no iterations yet


def test_pytorch_backend_iter_lines():
    # lines 1-2: NVIDIA/TensorRT-LLM#3914 (before/after num_scheduled_requests);
    # lines 3-4: format of py_executor.py late 2025 (host/prev_device step times)
    ev = parse_fixture("pytorch_iter.log")
    assert ev["event"].to_list() == ["engine_stats"] * 4
    old, new, host, dev = ev.to_dicts()
    assert old["ts"] == t(2025, 4, 28, 9, 56, 44) and old["batch_size"] is None
    a = attrs(old)
    assert a["iteration"] == 198 and a["iter_latency_s"] == pytest.approx(
        0.005060911178588867
    )
    assert (
        a["generation_tokens_padded"] == 16
        and a["context_tokens"] == 0
        and a["rank"] == 0
    )
    assert new["batch_size"] == 10
    assert host["batch_size"] == 3 and host["running"] is None
    ah = attrs(host)
    assert ah["host_step_time_s"] == pytest.approx(0.007426261901855469)
    assert "prev_device_step_time_s" not in ah  # printed as N/A
    assert (ah["currank_requests"], ah["total_requests"], ah["context_tokens"]) == (
        2,
        5,
        512,
    )
    assert attrs(dev)["prev_device_step_time_s"] == pytest.approx(0.0055)


def test_malformed_stats_json_is_kept_not_lost():
    text = (
        'I1218 03:35:37.688135 20559 libtensorrtllm.cc:1205] {"Active Request Count":1,"Iteration Counter":\n'
        '{"Active Request Count":1,"Free KV cache \n'
        '{"Active Request Count":3,"Iteration Counter":5,"Timestamp":"12-18-2023 03:35:38"}\n'
    )
    ev = parse_text("trtllm", text)
    check_events(ev)
    assert ev["event"].to_list() == ["log", "unparsed", "engine_stats"]
    assert ev["message"][1] == '{"Active Request Count":1,"Free KV cache '
    assert ev["running"][2] == 3


# --- capacity, design notes ----------------------------------------------------------


def test_capacity_lines():
    # NVIDIA/TensorRT-LLM PR #4028 (TRTGptModel dump, engine size), #2268 (memory usage,
    # primary pool), triton-inference-server/tutorials PR #150 (blocks per sequence,
    # [MemUsageChange] Allocated ... GiB); lines 17-19: format (<=0.8 releases).
    ev = parse_fixture("capacity.log")
    kinds = ev["event"].to_list()
    assert (
        kinds
        == ["log"] * 3
        + ["capacity"] * 2
        + ["log"] * 2
        + ["capacity", "log", "capacity", "log"]
        + ["capacity"] * 8
    )
    assert row(ev, 4)["max_num_seqs"] == 64 and row(ev, 5)["max_num_seqs"] == 64
    assert row(ev, 8)["max_batch_tokens"] == 384
    assert attrs(row(ev, 10))["engine_size_bytes"] == 240 * 2**20
    assert attrs(row(ev, 12))["gpu_mem_available_bytes"] == round(21.89 * 2**30)
    assert row(ev, 13)["kv_blocks_total"] == 631
    r = row(ev, 14)
    assert r["kv_blocks_total"] == 116617
    assert attrs(r) == {
        "max_blocks_per_seq": 65,
        "attention_window": 2051,
        "tokens_per_block": 32,
        "kv_blocks_secondary": 0,
    }
    assert attrs(row(ev, 15)) == {"tokens_per_block": 32}
    r = row(ev, 16)
    assert r["kv_capacity_tokens"] == 3731744 and attrs(r)["kv_cache_bytes"] == round(
        78.30 * 2**30
    )
    assert attrs(row(ev, 17))["kv_cache_bytes"] == 1073741824
    assert row(ev, 18)["kv_capacity_tokens"] == 2048
    assert attrs(row(ev, 19))["max_blocks_per_seq"] == 32
    # values a line does not carry stay null
    assert row(ev, 13)["max_num_seqs"] is None and row(ev, 4)["kv_blocks_total"] is None


def test_design_note_lines_exactly_as_written():
    ev = parse_fixture("design_notes.log")
    load, batch, mem = ev.to_dicts()
    assert (load["event"], load["max_num_seqs"]) == ("capacity", 64)
    assert attrs(load)["engine_path"] == "/models/llama2-7b-trt.engine"
    assert batch["event"] == "batch"
    assert (
        batch["batch_size"],
        batch["prompt_tokens"],
        batch["output_tokens"],
        batch["batch_tokens"],
    ) == (16, 1024, 2048, 3072)
    assert mem["event"] == "engine_stats"
    assert attrs(mem) == {
        "gpu_mem_used_bytes": 12_400_000_000,
        "gpu_mem_total_bytes": 24_000_000_000,
        "kv_cache_bytes": 4_200_000_000,
    }
    assert mem["kv_usage"] is None


# --- errors and backtraces -----------------------------------------------------------


def test_backtraces_are_one_event_each():
    # lines 1-15: NVIDIA/TensorRT-LLM#1556 (tail of one backtrace, then a Python traceback
    # ending in a TllmException with its frames); 16-18: #498 (doubled [ERROR] prefix);
    # 19-27: #1060 (another rank's import banner printed into the traceback);
    # 28-32: #583 (assertion); 33-36: #600 (terminate / what()).
    ev = parse_fixture("backtraces.log")
    spans = [(r["line"], r["n_lines"], r["event"]) for r in ev.to_dicts()]
    assert spans == [
        (1, 4, "error"),
        (5, 11, "error"),
        (16, 3, "error"),
        (19, 8, "error"),
        (27, 1, "log"),
        (28, 1, "capacity"),
        (29, 4, "error"),
        (33, 4, "error"),
    ]
    tb = row(ev, 5)
    assert tb["level"] == "ERROR" and tb["message"].startswith(
        "Traceback (most recent call last):"
    )
    assert tb["message"].endswith(
        "TllmRuntime::TllmRuntime(void const*, unsigned long, nvinfer1::ILogger&) + 593"
    )
    a = attrs(tb)
    assert (a["error_kind"], a["src_line"], a["n_frames"]) == ("oom", 118, 3)
    assert a["src_file"] == "/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h"
    assert attrs(row(ev, 1))["n_frames"] == 4 and row(ev, 1)["level"] is None
    assert attrs(row(ev, 16))["src_line"] == 112
    assert "TensorRT-LLM version: 0.9.0.dev2024020600" in row(ev, 19)["message"]
    assert attrs(row(ev, 27))["trtllm_version"] == "0.11.0.dev2024052800"
    assert (
        attrs(row(ev, 29))["error_kind"] == "assertion"
        and attrs(row(ev, 29))["src_line"] == 320
    )
    assert attrs(row(ev, 33))["src_line"] == 249 and row(ev, 33)["level"] == "ERROR"


def test_triton_status_table_with_backtrace_is_one_error():
    # rows from tensorrtllm_backend#195 inside the table layout of Triton's server.cc
    # (header and borders as in triton-inference-server/server#2477)
    ev = parse_fixture("triton_table_error.log")
    first = row(ev, 1)
    assert (first["event"], first["n_lines"]) == ("error", 9)
    assert first["message"].startswith("+--------------------+")
    assert "UNAVAILABLE: Internal" in first["message"]
    assert attrs(first)["n_frames"] == 2 and attrs(first)["error_kind"] == "oom"
    assert row(ev, 10)["event"] == "log"  # the blank line after the table
    assert row(ev, 11)["message"] == "BackendStates()"


# --- line anatomy and timestamps -----------------------------------------------------


def test_triton_startup_glog_quoted_tables_and_inheritance():
    # tensorrtllm_backend#300 (unquoted glog, backend warnings), #563 and #553 (quoted glog,
    # `\t` escaped), tutorials PR #150 (quoted, server.cc:620 table), server#4387.
    ev = parse_fixture("triton_startup.log")
    assert row(ev, 2)["message"] == "loading: tensorrt_llm:1"
    assert row(ev, 2)["ts"] == t(2026, 1, 14, 14, 18, 56, 398667)
    w = row(ev, 3)
    assert (w["level"], w["event"], w["ts"], w["ts_inferred"]) == (
        "WARNING",
        "log",
        row(ev, 2)["ts"],
        True,
    )
    assert (
        row(ev, 6)["message"]
        == "TRITONBACKEND_ModelInitialize: tensorrt_llm (version 1)"
    )
    assert row(ev, 7)["message"] == "\tModelConfig::input::dims"
    assert row(ev, 9)["message"] == "successfully loaded 'tensorrt_llm'"
    table = row(ev, 10)
    assert (table["event"], table["n_lines"]) == ("log", 5)
    assert table["message"].split("\n")[1] == "| Repository Agent | Path |"
    assert row(ev, 8)["kv_blocks_total"] == 116617 and row(ev, 8)["ts_inferred"] is True


def test_python_logger_forms():
    # 1: format doc real example; 2: [TRT] wrapper; 3: PR #5891 sample output;
    # 4: MPI_Rank variant (0.5-0.8, format); 5: un-wrapped [E] (format doc real_errors.log);
    # 6: newest C++ form (format); 7: [_torch][RANK n] tags (format); 8: trtllm-serve
    # uvicorn access line; 9: C++ rank variant.
    ev = parse_fixture("python_logger.log")
    r = ev.to_dicts()
    assert [x["level"] for x in r] == [
        "INFO",
        "INFO",
        "INFO",
        "WARNING",
        "ERROR",
        "INFO",
        "INFO",
        "INFO",  # uvicorn's `INFO:` prefix
        "INFO",
    ]
    assert [x["event"] for x in r] == [
        "log",
        "log",
        "request_arrived",
        "log",
        "error",
        "log",
        "request_arrived",
        "http_access",
        "capacity",
    ]
    assert (
        r[2]["request_id"] == "c1627587-927f-4717-bad4-7266c9960d32"
        and r[6]["request_id"] == "7"
    )
    assert (
        r[0]["ts"] == t(2024, 11, 16, 0, 5, 44)
        and r[0]["message"] == "Set gemm_plugin to float16."
    )
    assert attrs(r[1])["logger"] == "TRT" and attrs(r[0])["logger"] == "TRT-LLM"
    assert attrs(r[3])["mpi_rank"] == 1
    assert attrs(r[4])["error_kind"] == "oom" and r[4]["ts_inferred"] is True
    assert (
        r[5]["ts"] == t(2025, 7, 25, 16, 54, 34, 140189)
        and r[5]["message"] == "Set logger level to INFO"
    )
    assert (
        r[6]["message"] == "Received request 7 at 11.5" and attrs(r[6])["mpi_rank"] == 1
    )
    assert r[7]["http_status"] == 200 and attrs(r[7]) == {
        "method": "POST",
        "path": "/v1/chat/completions",
    }
    assert attrs(r[8]) == {"mpi_rank": 0, "engine_size_bytes": 3404 * 2**20}


def test_timestamp_inheritance():
    ev = parse_fixture("timestamps.log")
    r = ev.to_dicts()
    # nothing timestamped before: null and not inferred
    assert [(x["ts"], x["ts_inferred"]) for x in r[:2]] == [
        (None, False),
        (None, False),
    ]
    glog = t(2026, 5, 14, 21, 1, 55, 276668)
    assert (r[2]["ts"], r[2]["ts_inferred"]) == (glog, False)
    assert (r[3]["ts"], r[3]["ts_inferred"]) == (glog, True)
    assert (r[5]["ts"], r[5]["ts_inferred"]) == (t(2026, 5, 14, 21, 2, 10), True)
    # glog carries no year: it comes from --year
    assert parse_text("trtllm", (FIX / "timestamps.log").read_text(), year=2024)["ts"][
        2
    ] == t(2024, 5, 14, 21, 1, 55, 276668)


def test_docker_timestamps_compose_prefix_and_ansi():
    text = (
        "2026-05-12T08:01:39.331095044Z [TensorRT-LLM][INFO] Loaded engine size: 3404 MiB\n"
        "trtllm-1  | [TensorRT-LLM][WARNING] max_beam_width is not specified, will use default value of 1\n"
        "\x1b[32m[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 631\x1b[0m\n"
    )
    ev = parse_text("trtllm", text)
    check_events(ev)
    assert (
        ev["ts"][0] == t(2026, 5, 12, 8, 1, 39, 331095)
        and ev["ts_inferred"][0] is False
    )
    assert ev["level"][1] == "WARNING" and ev["message"][1].startswith("max_beam_width")
    assert ev["kv_blocks_total"][2] == 631


def test_unknown_lines_are_unparsed_whole():
    ev = parse_text("trtllm", "hello world\n\n[TensorRT-LLM][INFO] ok\n")
    assert ev["event"].to_list() == ["unparsed", "log", "log"]
    assert ev["message"][0] == "hello world"


def test_chunked_parse_carries_time():
    texts = (FIX / "timestamps.log").read_text().rstrip("\n").split("\n")
    ctx = ParseContext(engine="trtllm", source="x", instance="x", year=2026)
    a = finalize(trtllm.parse(lines_frame(texts[:3]), ctx), ctx)
    b = finalize(trtllm.parse(lines_frame(texts[3:], first_line=4), ctx), ctx)
    assert (
        b["line"].to_list() == [4, 5, 6]
        and b["ts"][0] == a["ts"][2]
        and b["ts_inferred"][0]
    )


# --- detect / record_starts ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in FIX.glob("*.log")))
def test_detect_fixtures(name):
    lines = (FIX / name).read_text().split("\n")[:50]
    assert trtllm.detect(lines) >= 0.6


def test_detect_other_engines_near_zero():
    vllm = [
        "INFO 06-10 14:23:45 [engine.py:310] Added request cmpl-1.",
        "INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 1.5 tokens/s, Running: 1 reqs",
    ]
    tgi = [
        "2024-05-14T21:01:55.276668Z  INFO text_generation_router::server: router/src/server.rs:309: Success",
        "2024-05-14T21:01:55.276668Z  INFO text_generation_launcher: Starting shard rank=0",
    ]
    assert (
        trtllm.detect(vllm) == 0.0
        and trtllm.detect(tgi) == 0.0
        and trtllm.detect([]) == 0.0
    )


def test_record_starts():
    text = pl.Series((FIX / "backtraces.log").read_text().rstrip("\n").split("\n"))
    starts = trtllm.record_starts(text).to_list()
    # line 1 is an orphan frame: a continuation (the framework opens a record there anyway)
    assert [i + 1 for i, s in enumerate(starts) if s] == [5, 16, 19, 27, 28, 29, 33]


def test_request_failures_and_crash_signal():
    # line 1: the executor failing one request after the step's OOM (executor source format,
    # as the incident simulator writes it; no pasted example found); line 2: Triton's signal
    # line; line 3: triton-inference-server/server#7181; line 4: NVIDIA/TensorRT-LLM#1279
    # (docker --timestamps prefix)
    text = (
        "[TensorRT-LLM][ERROR] Encountered error for requestId 420: Encountered an error in forwardAsync "
        "function: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): "
        "out of memory (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)\n"
        "Signal (6) received.\n"
        "[TensorRT-LLM][ERROR] Received stop request for requestId 7772708 but it's not active (might be completed already).\n"
        "2024-03-11T18:16:28.919807829Z [TensorRT-LLM][ERROR] Encountered an error in forward function: "
        "[TensorRT-LLM][ERROR] Assertion failed: freeBlockIterator.has_value() "
        "(/tmp/tritonbuild/tensorrtllm/tensorrt_llm/cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:249)\n"
    )
    ev = parse_text("trtllm", text)
    check_events(ev)
    assert ev["event"].to_list() == ["request_aborted", "error", "error", "error"]
    assert ev["request_id"].to_list() == ["420", None, "7772708", None]
    assert ev["level"].to_list() == ["ERROR", None, "ERROR", "ERROR"]
    assert attrs(ev.row(0, named=True))["error_kind"] == "oom"
    last = ev.row(3, named=True)
    assert (
        last["ts"] == t(2024, 3, 11, 18, 16, 28, 919807)
        and last["ts_inferred"] is False
    )
    assert attrs(last)["error_kind"] == "assertion" and attrs(last)["src_line"] == 249


REAL = Path(__file__).resolve().parents[2] / "sample_logs" / "trtllm" / "real"


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("backtraces.log", {"capacity": 1, "error": 6, "log": 1}),
        ("iteration_stats.log", {"engine_stats": 5, "log": 1}),
        ("pytorch_backend.log", {"engine_stats": 2, "log": 1, "request_arrived": 5}),
        ("triton_startup_quoted.log", {"capacity": 3, "log": 32}),
        ("triton_startup_unquoted.log", {"engine_stats": 1, "log": 33}),
    ],
)
def test_real_sample_logs(name, kinds):
    # sources in sample_logs/trtllm/real/_SOURCES.md; nothing there is left unparsed
    text = (REAL / name).read_text()
    ev = parse_text("trtllm", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(text.split("\n")) - 1) == []
    assert dict(ev["event"].value_counts().iter_rows()) == kinds


def test_banner_per_rank_and_mpi_tags():
    # two ranks' banners on one line, and a banner glued before a C++ line (the pattern of
    # NVIDIA/TensorRT-LLM#1060); Open MPI --tag-output prefixes `[job,rank]<stdout>:`
    text = (
        "[TensorRT-LLM] TensorRT-LLM version: 0.14.0[TensorRT-LLM] TensorRT-LLM version: 0.14.0\n"
        "[TensorRT-LLM] TensorRT-LLM version: 0.14.0[TensorRT-LLM][INFO] Loaded engine size: 3404 MiB\n"
        "[1,1]<stdout>:[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 631\n"
        "[1,0]<stderr>:[11/16/2024-00:05:44] [TRT-LLM] [W] Set gemm_plugin to float16.\n"
    )
    ev = parse_text("trtllm", text)
    check_events(ev)
    r = ev.to_dicts()
    assert [x["event"] for x in r] == ["log", "capacity", "capacity", "log"]
    assert (
        r[0]["message"] == "TensorRT-LLM version: 0.14.0"
        and attrs(r[0])["trtllm_version"] == "0.14.0"
    )
    assert attrs(r[1]) == {
        "trtllm_version": "0.14.0",
        "engine_size_bytes": 3404 * 2**20,
    }
    assert r[2]["kv_blocks_total"] == 631 and attrs(r[2])["mpi_rank"] == 1
    assert (r[3]["level"], r[3]["ts"], attrs(r[3])["mpi_rank"]) == (
        "WARNING",
        t(2024, 11, 16, 0, 5, 44),
        0,
    )


def test_trtllm_serve_uvicorn_lifecycle_lines_are_understood():
    text = (
        "INFO:     Started server process [1]\n"
        "INFO:     Waiting for application startup.\n"
        "INFO:     Application startup complete.\n"
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
        'INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        "INFO:     Shutting down\n"
        "INFO:     Finished server process [1]\n"
    )
    ev = parse_text("trtllm", text)
    assert ev["event"].to_list() == ["log", "log", "log", "log", "http_access", "log", "log"]
    assert ev["level"].to_list() == ["INFO"] * 7


def test_a_line_of_two_json_values_does_not_shift_later_stats():
    """polars decodes `[..],[..]` as two values; were that accepted, every later line's
    stats would land one row off. Such a line is kept unparsed, the others keep theirs."""
    line = (FIX / "executor_stats.log").read_text().splitlines()[1]

    def at_iter(k: int) -> str:
        return line.replace('"iter":0', f'"iter":{k}', 1)

    text = "\n".join([at_iter(1), at_iter(2) + "," + at_iter(3), at_iter(4)]) + "\n"
    ev = parse_text("trtllm", text)
    first = ev.group_by("line", maintain_order=True).first()
    assert first["event"].to_list() == ["engine_stats", "unparsed", "engine_stats"]
    iters = [json.loads(a)["iteration"] if a else None for a in first["attrs"].to_list()]
    assert iters == [1, None, 4]
