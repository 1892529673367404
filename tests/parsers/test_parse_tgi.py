"""TGI parser: every line form of shared/formats/tgi.md, on fixtures built from lines
users pasted in public bug reports (the issue is cited at each test and, per line, in
tests/fixtures/tgi/SOURCES.md) plus a few hand-built lines in the documented format where
no real paste shows the form."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest
from servelens.parsers import detect_engine, wrappers
from servelens.parsers.engines.tgi import parser as tgi
from servelens.parsers.base import check_events, uncovered_lines
from servelens.parsers.text import parse_text
from servelens.parsers.engines.tgi.fields import duration_ns, ns_to_s

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tgi"
UTC = dt.timezone.utc


def decoded(lines: list[str]) -> list[str]:
    """The engine lines inside wrapped lines, as ingest hands them to engine detection."""
    return wrappers.decode_texts(lines, wrappers.detect(lines))


def parse_fixture(name: str) -> pl.DataFrame:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    ev = parse_text("tgi", text)
    check_events(ev)
    n = len(text.split("\n")) - 1
    assert uncovered_lines(ev, 1, n) == []
    return ev


def row(ev: pl.DataFrame, line: int) -> dict:
    rows = ev.filter(pl.col("line") == line).to_dicts()
    assert len(rows) == 1, rows
    r = rows[0]
    r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    r["params"] = json.loads(r["sampling_params"]) if r["sampling_params"] else {}
    return r


def ns(seconds: float) -> int:
    return round(seconds * 1e9)


# ---------------------------------------------------------------------------------------
# durations


@pytest.mark.parametrize(
    "text, expected_ns",
    [
        ("2.458150804s", 2_458_150_804),
        ("13.678487ms", 13_678_487),
        ("184.26µs", 184_260),
        ("70µs", 70_000),
        ("12ns", 12),
        ("161.454300714s", 161_454_300_714),
        ("1s", 1_000_000_000),
        ("0ns", 0),
        ("999.999999ms", 999_999_999),
        ("1.001µs", 1_001),
        ("2.5\u03bcs", 2_500),  # Greek mu
        ("3us", 3_000),
        ("1.5 s", None),
        ("1.5", None),
        ("abc", None),
        (None, None),
    ],
)
def test_duration_ns_exact(text, expected_ns):
    got = pl.DataFrame({"d": [text]}, schema={"d": pl.String}).select(duration_ns(pl.col("d"))).item()
    assert got == expected_ns


def test_seconds_are_the_float_nearest_the_nanoseconds():
    values = [127_337, 43_600_359, 610_405_028, 754_500, 161_454_300_714, 1, 999_999_999]
    got = pl.DataFrame({"ns": values}).select(ns_to_s(pl.col("ns"))).to_series().to_list()
    assert got == [v / 1e9 for v in values]


# ---------------------------------------------------------------------------------------
# Success lines (text)


def test_success_generate_text():
    ev = parse_fixture("success_text.log")
    r = row(ev, 3)  # tgi.md §1 line
    assert r["event"] == "request" and r["level"] == "INFO"
    assert r["ts"] == dt.datetime(2024, 2, 14, 6, 49, 51, 437631, tzinfo=UTC)
    assert r["e2e_s"] == 611_286_748 / 1e9
    assert r["queue_s"] == 127_337 / 1e9
    assert r["inference_s"] == 610_405_028 / 1e9
    assert r["tpot_s"] == 43_600_359 / 1e9
    assert r["ttft_s"] is None  # TGI does not log it
    assert r["output_tokens"] == 14  # round(610.405028 / 43.600359)
    assert r["max_tokens"] == 180
    assert r["prompt_tokens"] is None and r["request_id"] is None
    a = r["attrs"]
    assert a["validation_s"] == 754_500 / 1e9
    assert a["arrival_ts"] == "2024-02-14T06:49:50.826344252Z"  # ts - 611.286748ms
    assert a["endpoint"] == "generate" and a["span"] == "generate"
    p = r["params"]  # the sampling parameters: in their own column, not in attrs
    assert (p["temperature"], p["top_k"], p["top_p"], p["repetition_penalty"]) == (0.69, 67, 0.94, 1.1)
    assert p["do_sample"] is True and p["watermark"] is False and p["max_new_tokens"] == 180
    assert "typical_p" not in p and "seed" not in p  # None stays absent
    assert "seed" not in a and "temperature" not in a and "do_sample" not in a
    assert a["target"] == "text_generation_router::server"
    assert a["file"] == "router/src/server.rs:299"
    assert r["message"] == "Success"


def test_success_compat_generate_behind_compose_prefix():
    # huggingface/text-generation-inference#1374
    r = row(parse_fixture("success_text.log"), 1)
    assert r["event"] == "request"
    assert ns(r["e2e_s"]) == 2_458_150_804 and r["e2e_s"] == 2.458150804
    assert r["queue_s"] == 184_260 / 1e9
    assert r["inference_s"] == 2_444_288_229 / 1e9
    assert r["tpot_s"] == 61_107_205 / 1e9
    assert r["output_tokens"] == 40 == r["max_tokens"]
    a = r["attrs"]
    assert a["validation_s"] == 13_678_487 / 1e9
    assert a["endpoint"] == "compat_generate" and a["span"] == "compat_generate:generate"
    assert r["params"]["return_full_text"] is False and "return_full_text" not in a
    assert json.loads(r["labels"])["service"] == "chat_inference-text_generation_inference-1"
    assert a["arrival_ts"] == "2023-12-22T00:21:21.744018196Z"


def test_success_generate_stream_seed_and_small_units():
    r = row(parse_fixture("success_text.log"), 4)
    assert r["e2e_s"] == 161.454300714
    assert r["queue_s"] == 12 / 1e9  # "12ns"
    assert r["attrs"]["validation_s"] == 70e-6  # "70µs", no fraction
    assert r["inference_s"] == 161.4 and r["tpot_s"] == 0.0807
    assert r["output_tokens"] == 2000
    assert r["max_tokens"] == 48  # old routers: `max_new_tokens: 48` without Some()
    a = r["attrs"]
    assert a["endpoint"] == "generate_stream"
    assert a["seed"] == "13465365087046561476"  # a u64, kept exact as text
    assert a["param_seed"] == "42"  # the requested seed: per request, so in attrs
    assert "seed" not in r["params"] and r["params"]["temperature"] == 0.5


def test_success_chat_completions_and_completions():
    ev = parse_fixture("success_text.log")
    chat, comp = row(ev, 5), row(ev, 6)
    assert chat["attrs"]["endpoint"] == "chat_completions"
    assert chat["e2e_s"] == 1.5 and chat["queue_s"] == 3e-6  # "3us"
    assert chat["attrs"]["validation_s"] == 2.5e-6  # Greek mu
    assert chat["output_tokens"] == 20 and chat["max_tokens"] is None
    assert comp["attrs"]["endpoint"] == "completions"
    assert comp["e2e_s"] == 0.999999999 and comp["queue_s"] == 0.0  # "0ns" is a value, not null
    assert comp["output_tokens"] == 1
    assert comp["attrs"]["arrival_ts"] == "2024-03-01T10:00:01.000000001Z"


def test_success_inside_v0_http_request_span():
    r = row(parse_fixture("success_text.log"), 7)
    assert r["event"] == "request"
    assert r["attrs"]["endpoint"] == "generate"
    assert r["e2e_s"] == 1.000000001 and r["queue_s"] == 999e-9 and r["inference_s"] == 1.0
    assert r["attrs"]["validation_s"] == 1.001e-6
    assert r["max_tokens"] == 20 and r["output_tokens"] == 20


# ---------------------------------------------------------------------------------------
# router lines, errors


def test_router_text_lines():
    ev = parse_fixture("router_text.log")
    assert row(ev, 1)["level"] == "DEBUG"
    connected = row(ev, 2)  # #3203
    assert (connected["event"], connected["message"]) == ("log", "Connected")
    radix = row(ev, 10)  # #2593
    assert radix["message"] == "Prefix 580 - Suffix 1023"
    assert radix["attrs"]["target"] == "text_generation_router_v3::radix"


def test_debug_input_prompt_spanning_lines_is_one_event():
    r = row(parse_fixture("router_text.log"), 3)  # #3203
    assert r["n_lines"] == 6 and r["event"] == "log"
    assert r["message"].startswith("Input: <|im_start|>system\nYou are CIPHER.")
    assert r["message"].endswith("<|im_start|>assistant")
    assert r["attrs"]["span"] == "generate"


def test_server_error_in_batch_span_keeps_batch_size():
    ev = parse_fixture("router_text.log")
    oom = row(ev, 9)  # #1356
    assert oom["event"] == "error" and oom["level"] == "ERROR"
    assert oom["batch_size"] == 1
    assert oom["attrs"]["error_kind"] == "server" and oom["attrs"]["oom"] is True
    assert oom["attrs"]["span"] == "batch:prefill:prefill:prefill"
    assert oom["message"].startswith("Server error: CUDA out of memory. Tried to allocate 18.00 MiB.")
    refused = row(ev, 11)  # #2593, v3 client
    assert refused["batch_size"] == 1 and refused["attrs"]["oom"] is False
    assert refused["attrs"]["file"] == "backends/v3/src/client/mod.rs:45"
    decode = row(ev, 12)  # #2043
    assert decode["batch_size"] == 2 and decode["message"] == "Server error: transport error"
    assert decode["attrs"]["span"] == "batch:decode:decode:decode"


def test_overload_and_client_gone():
    ev = parse_fixture("router_text.log")
    over = row(ev, 13)  # vllm-project/vllm#4936
    assert over["event"] == "error" and over["attrs"]["error_kind"] == "overloaded"
    assert over["attrs"]["span"] == "generate_stream:async_stream:generate_stream"
    assert over["message"] == "no permits available"
    assert over["e2e_s"] is None
    gone = row(ev, 14)  # #2660
    assert gone["attrs"]["error_kind"] == "client_gone"


def test_request_failed_during_generation():
    r = row(parse_fixture("launcher_text.log"), 48)  # #653
    assert r["event"] == "error" and r["attrs"]["error_kind"] == "generation"
    assert r["attrs"]["oom"] is True
    assert r["message"].startswith("Request failed during generation: Server error: CUDA out of memory.")


# ---------------------------------------------------------------------------------------
# launcher


def test_pretty_args_dump_is_one_capacity_event():
    r = row(parse_fixture("launcher_text.log"), 1)  # #2842
    assert r["n_lines"] == 28 and r["event"] == "capacity"
    assert r["model"] == "llama-3.3-70b"
    assert r["max_num_seqs"] == 4  # max_batch_size: Some(\n 4,\n)
    assert r["max_batch_tokens"] == 100000  # max_batch_total_tokens
    a = r["attrs"]
    assert a["max_concurrent_requests"] == 128
    assert a["num_shard"] == 2 and a["quantize"] == "Awq" and a["waiting_served_ratio"] == 0.3
    assert "max_batch_prefill_tokens" not in a  # None in the dump


def test_relayed_warning_with_its_empty_line():
    r = row(parse_fixture("launcher_text.log"), 29)  # #814
    assert r["level"] == "WARNING" and r["n_lines"] == 3
    assert r["message"].endswith("install-flash-attention-v2`")  # no trailing newline


def test_launcher_compact_lines():
    ev = parse_fixture("launcher_text.log")
    waiting = row(ev, 32)  # #2728
    assert waiting["message"] == "Waiting for shard to be ready..."
    assert waiting["attrs"]["rank"] == 0 and waiting["attrs"]["span"] == "shard-manager"
    ready = row(ev, 33)  # tgi.md §5
    assert ready["event"] == "log" and ready["message"] == "Shard ready in 10.308899699s"
    assert ready["attrs"]["ready_s"] == 10.308899699
    signaled = row(ev, 34)  # #814
    assert signaled["event"] == "error" and signaled["attrs"]["rank"] == 1


def test_shard_tracebacks_are_one_error_each():
    ev = parse_fixture("launcher_text.log")
    warmup = row(ev, 35)  # #1067
    assert warmup["n_lines"] == 8 and warmup["event"] == "error"
    assert warmup["attrs"]["method"] == "Warmup" and warmup["attrs"]["error_kind"] == "shard_exception"
    assert "Not enough memory to handle 4096 prefill tokens" in warmup["message"]
    prefill = row(ev, 43)  # #653
    assert prefill["n_lines"] == 5 and prefill["attrs"]["method"] == "Prefill"
    assert prefill["attrs"]["oom"] is True
    assert prefill["message"].endswith("20.86 GiB reserved in total by PyTorch)")


# ---------------------------------------------------------------------------------------
# capacity


def test_capacity_lines():
    ev = parse_fixture("capacity.log")
    assert row(ev, 1)["max_batch_tokens"] == 133696 and row(ev, 1)["event"] == "capacity"
    assert row(ev, 2)["event"] == "log"
    inferred = row(ev, 3)
    assert inferred["max_batch_tokens"] == 92448 and inferred["level"] == "WARNING"
    prefill = row(ev, 4)
    assert prefill["event"] == "capacity" and prefill["attrs"]["max_batch_prefill_tokens"] == 4145
    assert prefill["max_batch_tokens"] is None
    assert row(ev, 5)["attrs"]["max_total_tokens"] == 4096
    supports = row(ev, 6)
    assert supports["attrs"]["model_max_total_tokens"] == 131072
    assert supports["attrs"]["max_total_tokens"] == 4096
    assert "max_batch_prefill_tokens" not in supports["attrs"]  # only a suggestion there
    kv = row(ev, 7)
    assert (kv["kv_blocks_total"], kv["attrs"]["block_size"], kv["kv_capacity_tokens"]) == (263426, 1, 263426)
    assert row(ev, 9)["message"] == "Warming up model"


# ---------------------------------------------------------------------------------------
# JSON


def test_json_launcher_and_router_lines():
    ev = parse_fixture("json.log")
    args = row(ev, 1)  # #1156
    assert args["event"] == "capacity" and args["model"] == "tiiuae/falcon-7b-instruct"
    assert args["attrs"]["max_concurrent_requests"] == 128
    assert args["attrs"]["max_batch_prefill_tokens"] == 4096
    assert args["attrs"]["max_input_tokens"] == 1024  # max_input_length in this version
    assert args["max_batch_tokens"] is None and args["max_num_seqs"] is None
    waiting = row(ev, 2)  # #737
    assert waiting["attrs"]["rank"] == 4 and waiting["attrs"]["span"] == "shard-manager"
    started = row(ev, 3)
    assert started["message"] == "Server started at unix:///tmp/text-generation-server-0"
    assert row(ev, 4)["max_batch_tokens"] == 133696
    assert row(ev, 8)["message"] == "Connected"  # a text line among JSON ones


def test_json_success_lines():
    ev = parse_fixture("json.log")
    r = row(ev, 5)
    assert r["event"] == "request" and r["level"] == "INFO"
    assert r["ts"] == dt.datetime(2024, 3, 9, 5, 9, 0, 123456, tzinfo=UTC)
    assert r["e2e_s"] == 0.2901 and r["queue_s"] == 41.2e-6
    assert r["inference_s"] == 0.286497811 and r["tpot_s"] == 0.004476528
    assert r["output_tokens"] == 64 and r["max_tokens"] == 64
    assert r["attrs"]["validation_s"] == 0.00356
    assert r["attrs"]["seed"] == "7" and r["params"]["temperature"] == 0.7
    assert r["attrs"]["arrival_ts"] == "2024-03-09T05:08:59.833356000Z"
    compat = row(ev, 6)
    assert compat["attrs"]["endpoint"] == "compat_generate"
    assert compat["attrs"]["span"] == "compat_generate:generate"
    assert compat["e2e_s"] == 1.3 and compat["output_tokens"] == 10
    err = row(ev, 7)
    assert err["event"] == "error" and err["batch_size"] == 2
    assert err["attrs"]["file"] == "router/client/src/lib.rs:46"


def test_malformed_and_oddly_typed_json_lines():
    text = "\n".join([
        '{"timestamp":"2024-03-09T05:09:00.000001Z","level":"INFO","message":"Connected","target":"text_generation_router::server","filename":"router/src/server.rs","line_number":1}',
        '{"timestamp":"2024-03-09T05:09:01.000001Z","level":"INFO","message":"Succ',  # cut off
        '{"timestamp":"2024-03-09T05:09:02.000001Z","level":"INFO","message":{"nested":true},"target":"text_generation_router","span":{"batch_size":"Some(3)","name":"batch"}}',
        '{"timestamp":"2024-03-09T05:09:03.000001Z","level":"INFO","message":"Setting max batch total tokens to 7","target":"text_generation_router","filename":"router/src/main.rs","line_number":328}',
    ]) + "\n"
    ev = parse_text("tgi", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, 4) == []
    assert ev["event"].to_list() == ["log", "unparsed", "log", "capacity"]
    assert ev["message"][1].endswith('"message":"Succ')
    assert ev["max_batch_tokens"][3] == 7
    assert ev["batch_size"][2] is None  # "Some(3)" is not a number


# ---------------------------------------------------------------------------------------
# ANSI, prefixes, design notes


def test_ansi_variants():
    ev = parse_fixture("ansi.log")
    cw = row(ev, 1)  # #1763: CloudWatch time, `#033`, empty line after the message
    assert cw["n_lines"] == 2
    assert cw["ts"] == dt.datetime(2024, 4, 18, 22, 43, 58, 111453, tzinfo=UTC)  # TGI's, not CloudWatch's
    assert cw["message"] == "Waiting for shard to be ready..." and cw["attrs"]["rank"] == 0
    assert cw["wrapper_ts"] == dt.datetime(2024, 4, 18, 22, 44, 3, 144000, tzinfo=UTC)  # the docker-ts layer's
    esc = row(ev, 3)  # ESC bytes
    assert esc["event"] == "request" and esc["e2e_s"] == 0.611286748 and esc["max_tokens"] == 20
    bare = row(ev, 4)  # ESC lost: `[2m`
    assert bare["max_batch_tokens"] == 133696
    compose = row(ev, 5)
    assert compose["level"] == "WARNING" and json.loads(compose["labels"])["service"] == "tgi-1"
    assert compose["message"] == "Model does not support automatic max batch total tokens"


def test_docker_timestamps_prefix():
    ev = parse_fixture("docker_timestamps.log")
    first = row(ev, 1)
    assert first["ts"] == dt.datetime(2024, 5, 1, 1, 17, 2, 618817, tzinfo=UTC)
    assert first["wrapper_ts"] == dt.datetime(2024, 5, 1, 1, 17, 2, 618901, tzinfo=UTC)  # ns kept in the column
    assert first["attrs"]["rank"] == 1
    js = row(ev, 2)
    assert js["message"] == "Starting shard" and js["attrs"]["rank"] == 0
    assert row(ev, 3)["message"] == "Connected"


def test_design_note_lines_exactly():
    ev = parse_fixture("design_notes.log")
    req, batch = row(ev, 1), row(ev, 2)
    assert req["event"] == "request"
    assert (req["request_id"], req["model"], req["prompt_tokens"], req["output_tokens"]) == ("abc123", "gpt2", 64, 128)
    assert req["ts"] == dt.datetime(2025, 6, 10, 14, 23, 45, 123000, tzinfo=UTC)
    assert req["e2e_s"] is None
    assert batch["event"] == "batch"
    assert (batch["batch_size"], batch["max_batch_tokens"], batch["waiting"]) == (16, 2048, 3)
    assert batch["batch_tokens"] is None


# ---------------------------------------------------------------------------------------
# contract: record starts, unparsed lines, detection


def test_record_starts():
    lines = [
        "2024-02-14T06:49:51.437631Z  INFO text_generation_router::server: router/src/server.rs:1: Connected",
        "Traceback (most recent call last):",
        "",
        "svc-1  | \x1b[2m2024-02-14T06:49:51.437631Z\x1b[0m \x1b[32m INFO\x1b[0m x: y",
        '{"timestamp":"2024-03-09T05:08:19.961136Z","level":"INFO"}',
        '{"prompt": "json inside a prompt is a continuation"}',
        "2024-05-01T01:17:02.618901234Z 2024-05-01T01:17:02.618817Z TRACE a: b",
        "2024-05-01T01:17:02.618901234Z   File \"x.py\", line 1",
    ]
    # the wrappers (compose, ANSI, docker times) are undone first, as ingest and tail do
    got = wrappers.wrap(tgi, wrappers.detect(lines)).record_starts(pl.Series(lines)).to_list()
    assert got == [True, False, False, True, True, False, True, False]


def test_lines_without_a_header_stay_whole_and_unparsed():
    text = "nvidia-smi table\n\x1b[1mbold\x1b[0m\n2024-02-14T06:49:51.437631Z TRACE text_generation_router: router/src/x.rs:1: deep\n"
    ev = parse_text("tgi", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, 3) == []
    first = row(ev, 1)
    assert first["event"] == "unparsed" and first["n_lines"] == 2
    assert first["message"] == "nvidia-smi table\nbold"  # whole; the ansi layer removed the colour codes
    assert first["attrs"] == {}
    assert row(ev, 3)["level"] == "DEBUG"  # TRACE folds into DEBUG


def test_empty_input():
    ev = parse_text("tgi", "")
    check_events(ev)
    assert ev.height == 0


def test_detect():
    for name in ("router_text.log", "success_text.log", "launcher_text.log", "json.log", "ansi.log"):
        lines = decoded((FIXTURES / name).read_text(encoding="utf-8").splitlines())
        assert tgi.detect(lines) >= 0.6, name
        assert detect_engine(lines)[0] == "tgi", name
    design = (FIXTURES / "design_notes.log").read_text(encoding="utf-8").splitlines()
    assert tgi.detect(design) >= 0.5
    vllm = [
        "INFO 06-10 14:23:45 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%",
        "INFO:     127.0.0.1:45678 - \"POST /v1/completions HTTP/1.1\" 200 OK",
        "(APIServer pid=1) INFO 05-14 08:01:39 [api_server.py:1880] vLLM API server version 0.9.0",
    ]
    trtllm = [
        "[TensorRT-LLM][INFO] Engine version 0.9.0 found in the config file, assuming engine(s) built by new builder API.",
        "[05/14/2025-08:01:39] [TRT-LLM] [I] Set nccl_plugin to None.",
        "I0514 08:01:39.331095 1 model_lifecycle.cc:469] loading: tensorrt_llm:1",
    ]
    assert tgi.detect(vllm) == 0.0
    assert tgi.detect(trtllm) == 0.0
    assert tgi.detect([]) == 0.0


def test_v3_warmup_capacity_lines():
    ev = parse_fixture("capacity.log")  # lines 10-14: #2842
    kv = row(ev, 10)
    assert (kv["kv_blocks_total"], kv["kv_capacity_tokens"]) == (13807, 13807)
    budget = row(ev, 11)
    assert budget["max_batch_tokens"] == 13793
    assert budget["attrs"]["target"] == "text_generation_router_v3"
    assert budget["attrs"]["file"] == "backends/v3/src/lib.rs:137"
    chunking = row(ev, 12)
    assert chunking["event"] == "log" and chunking["level"] == "WARNING"
    assert row(ev, 13)["attrs"]["max_input_tokens"] == 13792 and row(ev, 13)["event"] == "capacity"
    assert row(ev, 14)["attrs"]["max_total_tokens"] == 13793


def test_v0_quoted_shard_exception_panic_and_exit():
    ev = parse_fixture("launcher_text.log")
    decode = row(ev, 49)  # #165: v0.x quotes the relayed message
    assert decode["event"] == "error" and decode["n_lines"] == 4
    assert decode["attrs"]["method"] == "Decode" and decode["attrs"]["span"] == "shard-manager"
    panic = row(ev, 53)  # #563: a router panic, no header, is its own record
    assert panic["event"] == "error" and panic["attrs"]["error_kind"] == "panic"
    assert panic["n_lines"] == 2 and panic["level"] is None
    assert panic["ts_inferred"] is True
    assert panic["message"].endswith("environment variable to display a backtrace")
    assert row(ev, 55)["message"] == "Webserver Crashed" and row(ev, 55)["event"] == "error"
    exit_ = row(ev, 58)
    assert exit_["event"] == "error" and exit_["attrs"]["error_kind"] == "launcher_exit"
    assert exit_["message"] == "Error: WebserverFailed"


REAL = Path(__file__).resolve().parents[2] / "sample_logs" / "tgi" / "real"


@pytest.mark.parametrize(
    "name, kinds",
    [
        ("router_text.log", {"log": 10, "error": 5, "capacity": 2, "request": 1}),
        ("json.log", {"capacity": 1, "log": 5}),
        ("launcher_traceback.log", {"error": 5, "log": 2}),
        ("ansi_cloudwatch.log", {"log": 4}),
    ],
)
def test_real_sample_logs(name, kinds):
    text = (REAL / name).read_text(encoding="utf-8")
    ev = parse_text("tgi", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(text.split("\n")) - 1) == []
    assert dict(ev["event"].value_counts().rows()) == kinds
    assert detect_engine(decoded(text.splitlines()))[0] == "tgi"


def test_real_startup_values():
    ev = parse_text("tgi", (REAL / "router_text.log").read_text(encoding="utf-8"))  # #2657
    caps = ev.filter(pl.col("event") == "capacity")
    assert caps["max_batch_tokens"].to_list() == [485257, 485257]
    ready = ev.filter(pl.col("message").str.starts_with("Shard ready"))
    assert [json.loads(a)["ready_s"] for a in ready["attrs"]] == [19.620941266, 19.623260049, 19.621143067]
    assert [json.loads(a)["rank"] for a in ready["attrs"]] == [2, 1, 3]
    failed = ev.filter(pl.col("event") == "error")
    assert failed["batch_size"].to_list() == [None, 1, 1, 1, 1]


def test_chunks_cut_at_record_starts_parse_like_the_whole_file():
    # the ingest loop cuts chunks where record_starts is True: the events must not change
    from servelens.parsers.base import ParseContext, finalize, lines_frame

    texts = (FIXTURES / "launcher_text.log").read_text(encoding="utf-8").split("\n")[:-1]
    starts = tgi.record_starts(pl.Series(texts)).to_list()
    cuts = [i for i, s in enumerate(starts) if s and i > 0]

    def run(parts: list[tuple[int, int]]) -> pl.DataFrame:
        ctx = ParseContext(engine="tgi", source="x", instance="x", year=2026)
        frames = [finalize(tgi.parse(lines_frame(texts[a:b], first_line=a + 1), ctx), ctx) for a, b in parts]
        return pl.concat(frames)

    whole = run([(0, len(texts))])
    for cut in cuts:
        assert run([(0, cut), (cut, len(texts))]).equals(whole), cut
