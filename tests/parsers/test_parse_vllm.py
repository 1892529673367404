"""vLLM parser: every line family of shared/formats/vllm.md, on fixture lines users pasted
in public bug reports (the source of each fixture line is in tests/fixtures/vllm/SOURCES.md;
the issue is also named at each test)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import polars as pl
import pytest
from servelens.parsers import detect_engine
from servelens.parsers.engines.vllm import parser as vllm
from servelens.parsers.base import ParseContext, check_events, parse_lines, lines_frame, uncovered_lines
from servelens.parsers.text import parse_text

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm"
SAMPLES = Path(__file__).parents[2] / "sample_logs" / "vllm" / "real"
UTC = dt.timezone.utc


def parse_fixture(name: str) -> pl.DataFrame:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    ev = parse_text("vllm", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(text.split("\n")) - 1) == []
    return ev


def rows(ev: pl.DataFrame, line: int) -> list[dict]:
    out = ev.filter(pl.col("line") == line).to_dicts()
    for r in out:
        r["attrs"] = json.loads(r["attrs"]) if r["attrs"] else {}
    return out


def row(ev: pl.DataFrame, line: int) -> dict:
    out = rows(ev, line)
    assert len(out) == 1, out
    return out[0]


@pytest.mark.parametrize(
    "name", ["stats.log", "capacity.log", "requests.log", "design_notes.log", "errors.log", "wrappers.log"]
)
def test_fixture_conforms_and_every_line_is_covered(name: str) -> None:
    ev = parse_fixture(name)
    for a in ev["attrs"].drop_nulls():
        assert isinstance(json.loads(a), dict)
    assert ev.filter(pl.col("event") == "unparsed")["message"].null_count() == 0


# ---------------------------------------------------------------------------------------
# stats lines


def test_v0_stats_old_header_without_period() -> None:  # vllm#3094
    r = row(parse_fixture("stats.log"), 1)
    assert r["event"] == "engine_stats" and r["level"] == "INFO"
    assert (r["prompt_tps"], r["gen_tps"]) == (0.0, 44.9)
    assert (r["running"], r["swapped"], r["waiting"]) == (2, 0, 3)
    assert r["kv_usage"] == pytest.approx(0.821)
    assert r["attrs"]["cpu_kv_usage"] == 0.0
    assert r["attrs"]["src"] == "metrics.py:161"
    assert r["ts"] == dt.datetime(2026, 2, 28, 21, 48, 18, tzinfo=UTC)


def test_v0_stats_variants() -> None:  # vllm#3561, #12314, #15018
    ev = parse_fixture("stats.log")
    r = row(ev, 2)  # llm_engine.py emitter of v0.2
    assert (r["prompt_tps"], r["gen_tps"], r["running"], r["waiting"]) == (209.6, 567.4, 36, 78)
    assert r["kv_usage"] == pytest.approx(0.991)
    r = row(ev, 3)  # trailing period after `0.0%.`
    assert (r["gen_tps"], r["running"], r["waiting"], r["swapped"]) == (41.7, 1, 0, 0)
    assert r["kv_usage"] == pytest.approx(0.02) and r["attrs"]["cpu_kv_usage"] == 0.0
    r = row(ev, 4)  # V0 stats in the v0.8 bracket header
    assert r["attrs"]["src"] == "metrics.py:481"
    assert (r["gen_tps"], r["running"], r["kv_usage"]) == (0.4, 2, pytest.approx(0.006))


def test_v1_stats_engine_prefix_and_process() -> None:  # intel/llm-scaler#391, vllm#43295
    ev = parse_fixture("stats.log")
    r = row(ev, 5)
    assert r["event"] == "engine_stats"
    assert (r["running"], r["waiting"], r["gen_tps"]) == (1, 14, 5.4)
    assert r["swapped"] is None  # V1 has no Swapped: stays null, never 0
    assert r["kv_usage"] == pytest.approx(0.765)
    a = r["attrs"]
    assert a["prefix_cache_hit_rate"] == pytest.approx(0.92)
    assert (a["process"], a["pid"], a["engine_index"]) == ("APIServer", 851, 0)
    assert "cpu_kv_usage" not in a
    r = row(ev, 6)
    assert (r["prompt_tps"], r["gen_tps"], r["running"], r["waiting"]) == (12068.8, 734.9, 18, 33)


def test_v1_stats_optional_parts() -> None:
    ev = parse_fixture("stats.log")
    r = row(ev, 7)  # compose prefix + APIServer + MM cache hit rate
    assert json.loads(r["labels"])["service"] == "qwen35-4b-vllm"  # the compose layer's label
    assert r["attrs"]["mm_cache_hit_rate"] == 0.0 and r["prompt_tps"] == 247.0
    r = row(ev, 8)  # `1 Engines Aggregated:` and the DEBUG-mode short path
    assert r["event"] == "engine_stats" and r["gen_tps"] == 11.5
    assert r["attrs"]["engines_aggregated"] == 1
    assert r["attrs"]["src"] == "v1/metrics/loggers.py:271"
    r = row(ev, 9)  # `Preemptions: N` sits between Waiting and GPU KV cache usage
    assert r["attrs"]["preemptions"] == 3
    assert (r["running"], r["waiting"], r["kv_usage"]) == (64, 12, pytest.approx(0.972))
    assert r["attrs"]["prefix_cache_hit_rate"] == pytest.approx(0.413)


def test_docker_timestamp_is_preferred_and_exact() -> None:  # tt-inference-server#3359
    r = row(parse_fixture("stats.log"), 10)
    assert r["ts"] == dt.datetime(2026, 5, 12, 8, 1, 39, 331095, tzinfo=UTC)
    assert r["ts_inferred"] is False
    assert (r["running"], r["prompt_tps"]) == (9, 6335.3)
    # the docker time carries the year: it wins over --year
    ev = parse_text("vllm", (FIXTURES / "stats.log").read_text().split("\n")[9] + "\n", year=2019)
    assert ev["ts"][0] == dt.datetime(2026, 5, 12, 8, 1, 39, 331095, tzinfo=UTC)


# ---------------------------------------------------------------------------------------
# capacity


def test_capacity_lines() -> None:
    ev = parse_fixture("capacity.log")
    r = row(ev, 1)  # v0.2 engine config, vllm#1846
    assert r["event"] == "capacity" and r["model"] == "/data2_vision5/xxx/vicuna-7b-v1.5/"
    assert r["attrs"]["max_model_len"] == 4096 and r["attrs"]["tensor_parallel_size"] == 2
    r = row(ev, 2)  # behind a TorchServe wrapper, pytorch/serve#3315
    assert r["kv_blocks_total"] == 61913 and r["attrs"]["cpu_blocks"] == 4096
    assert r["ts"] == dt.datetime(2026, 9, 13, 22, 25, 41, tzinfo=UTC)
    r = row(ev, 3)
    assert r["kv_blocks_total"] == 2356 and r["attrs"]["kv_device"] == "CUDA"
    r = row(ev, 4)
    assert r["attrs"]["max_concurrency"] == 0.29 and r["attrs"]["max_model_len"] == 131072
    assert row(ev, 5)["kv_blocks_total"] == 13618  # `# cuda blocks:`
    r = row(ev, 6)  # V1 0.7 `# GPU blocks: N` alone
    assert r["kv_blocks_total"] == 1381 and "cpu_blocks" not in r["attrs"]


def test_capacity_from_arguments_and_v1_startup() -> None:
    ev = parse_fixture("capacity.log")
    r = row(ev, 7)  # args: Namespace(...), vllm#10151
    assert r["max_num_seqs"] == 256 and r["max_batch_tokens"] is None
    assert r["model"] == "Qwen/Qwen2.5-Coder-3B-Instruct"
    r = row(ev, 8)  # non-default args dict: model only
    assert r["model"] == "/models/mistral-7b" and r["max_num_seqs"] is None
    assert row(ev, 9)["attrs"]["max_model_len"] == 32768
    assert row(ev, 10)["max_batch_tokens"] == 2048
    r = row(ev, 11)
    assert r["attrs"]["vllm_version"] == "0.11.0+582e4e37.nv25.11"
    assert r["attrs"]["max_model_len"] == 32768 and r["attrs"]["dp_rank"] == 0
    r = row(ev, 12)
    assert r["kv_capacity_tokens"] == 840160 and r["attrs"]["kv_device"] == "GPU"
    r = row(ev, 13)
    assert r["attrs"]["max_concurrency"] == 25.64 and r["attrs"]["max_model_len"] == 32768
    assert row(ev, 14)["kv_blocks_total"] == 52510


def test_non_default_args_with_limits() -> None:
    # format of the `non-default args` dict as pasted in vllm#39734, with the two limits
    line = (
        "(APIServer pid=1327189) INFO 04-15 07:22:41 [utils.py:233] non-default args: "
        "{'model_tag': 'google/gemma-4-31B-it', 'max_model_len': 65536, 'max_num_seqs': 8, "
        "'max_num_batched_tokens': 64000}"
    )
    r = row(parse_text("vllm", line), 1)
    assert (r["max_num_seqs"], r["max_batch_tokens"]) == (8, 64000)
    assert r["attrs"]["max_model_len"] == 65536 and r["model"] == "google/gemma-4-31B-it"


def test_model_is_carried_to_later_events_and_chunks() -> None:
    text = (FIXTURES / "capacity.log").read_text().splitlines()
    ctx = ParseContext(engine="vllm", source="a.log", instance="a", year=2026)
    first = parse_lines(vllm, lines_frame(text[:8]), ctx)
    assert first.filter(pl.col("line") == 8)["model"][0] == "/models/mistral-7b"
    second = parse_lines(vllm, lines_frame(text[8:10], first_line=9), ctx)
    assert second["model"].to_list() == ["/models/mistral-7b"] * 2


# ---------------------------------------------------------------------------------------
# requests and preemption


def test_received_request_variants() -> None:
    ev = parse_fixture("requests.log")
    r = row(ev, 1)  # v0.4 with prompt token ids (vllm#5160, list shortened to 10 ids)
    assert r["event"] == "request_arrived"
    assert r["request_id"] == "ec762724d38e404f8666471d3343ed7c"
    assert (r["max_tokens"], r["prompt_tokens"]) == (1, 10)
    r = row(ev, 2)  # v0.3 form under a compose prefix (vllm#2947): ids are None
    assert r["request_id"] == "d9e65a86be2a42a4917ba9fee5e97d9e"
    assert r["max_tokens"] == 256 and r["prompt_tokens"] is None
    assert json.loads(r["labels"])["service"] == "qwen15-fastchat-qwen2-72b-1"


def test_received_request_sampling_params() -> None:
    ev = parse_fixture("requests.log")
    p = json.loads(row(ev, 1)["sampling_params"])  # the repr's scalar fields, typed
    assert (p["n"], p["temperature"], p["top_p"], p["top_k"], p["min_p"]) == (1, 1.0, 1.0, -1, 0.0)
    assert p["use_beam_search"] is False and p["skip_special_tokens"] is True and p["prompt_logprobs"] == 1
    # None, lists and the per-request fields stay out (max_tokens has its column)
    assert not {"seed", "stop", "stop_token_ids", "logprobs", "max_tokens"} & p.keys()
    p = json.loads(row(ev, 2)["sampling_params"])  # v0.3 `,sampling_params:`
    assert (p["temperature"], p["repetition_penalty"], p["top_k"]) == (0.7, 1.1, -1.0)
    assert row(ev, 3)["sampling_params"] is None  # `Added request`: no parameters


def test_sampling_params_once_per_distinct_repr_with_the_seed_per_request() -> None:
    head = "INFO 05-31 16:44:58 logger.py:39] Received request r{i}: prompt: 'a=1, b', params: SamplingParams("
    lines = [
        head.format(i=i) + f"n=1, temperature={t}, top_p=0.9, seed={s}, stop=['x, z=2', 'y'], max_tokens={100 + i}, "
        f"logprobs=None, skip_special_tokens=True), prompt_token_ids: [1, 2], lora_request: None."
        for i, (t, s) in enumerate([(0.5, "None"), (0.5, "7"), (0.7, "8"), (0.5, "9"), (1e-05, "None")])
    ]
    ev = parse_text("vllm", "\n".join(lines) + "\n")
    params = [json.loads(v) for v in ev["sampling_params"].to_list()]
    assert params[0] == params[1] == params[3] == {"n": 1, "temperature": 0.5, "top_p": 0.9, "skip_special_tokens": True}
    assert params[2]["temperature"] == 0.7 and params[4]["temperature"] == 1e-05
    assert ev["sampling_params"].n_unique() == 3
    assert [json.loads(a).get("param_seed") for a in ev["attrs"].to_list()] == [None, "7", "8", "9", None]
    assert ev["max_tokens"].to_list() == [100, 101, 102, 103, 104]


def test_added_finished_aborted() -> None:
    ev = parse_fixture("requests.log")
    r = row(ev, 3)  # vllm#14226
    assert (r["event"], r["request_id"]) == ("request_arrived", "chatcmpl-8fb2ae58dc6941868e20e8887e3e52de")
    assert r["max_tokens"] is None and r["prompt_tokens"] is None
    r = row(ev, 4)
    assert (r["event"], r["request_id"]) == ("request_finished", "cmpl-10f955208ce04051aeb80f37a1b930b4")
    r = row(ev, 5)  # vllm#5697: several aborts in the same second from the same line of code
    assert (r["event"], r["request_id"]) == ("request_aborted", "cmpl-7347d49f836c40a6b8d00fff45f5998d")
    assert row(ev, 6)["request_id"] == "cmpl-10f955208ce04051aeb80f37a1b930b4"


def test_aborted_requests_plural_one_event_per_id() -> None:
    many = rows(parse_fixture("requests.log"), 7)
    assert [r["event"] for r in many] == ["request_aborted"] * 2
    assert [r["request_id"] for r in many] == [
        "chatcmpl-8fb2ae58dc6941868e20e8887e3e52de",
        "cmpl-66dbd15ae2574c24ad701af023c451e6",
    ]
    assert {r["n_lines"] for r in many} == {1}


def test_preemption_keeps_cumulative_count() -> None:
    ev = parse_fixture("requests.log")
    r = row(ev, 8)  # GAIR-NLP/LIMO#29
    assert (r["event"], r["level"], r["request_id"]) == ("preemption", "WARNING", "221")
    assert r["attrs"]["cumulative_preemptions"] == 101
    assert r["attrs"]["preemption_mode"] == "RECOMPUTE"
    r = row(ev, 9)  # the v0.4.2 counter name
    assert r["attrs"]["cumulative_preemptions"] == 51 and r["attrs"]["preemption_mode"] == "SWAP"
    assert r["request_id"] == "cmpl-d9e65a86be2a42a4917ba9fee5e97d9e"


def test_design_note_lines_parse_as_written() -> None:
    ev = parse_fixture("design_notes.log")
    r = row(ev, 1)
    assert (r["event"], r["request_id"], r["prompt_tokens"], r["max_tokens"]) == (
        "request_arrived", "req-001", 128, 512,
    )
    r = row(ev, 2)
    assert (r["event"], r["batch_size"], r["batch_tokens"]) == ("batch", 8, 2048)
    r = row(ev, 3)
    assert (r["event"], r["output_tokens"], r["gen_tps"], r["inference_s"]) == ("batch", 64, 78.0, 0.82)


# ---------------------------------------------------------------------------------------
# errors and multi-line records


def test_logged_traceback_is_one_error_event() -> None:  # vllm#17939
    ev = parse_fixture("errors.log")
    r = row(ev, 1)
    assert r["event"] == "log" and r["attrs"]["rank"] == 0 and r["attrs"]["process"] == "VllmWorker"
    r = row(ev, 2)  # message line + `Traceback` + frames, all with the same header
    assert (r["event"], r["n_lines"], r["level"]) == ("error", 6, "ERROR")
    assert r["attrs"]["rank"] == 1 and r["attrs"]["pid"] == 2445156
    assert r["message"].startswith("WorkerProc hit an exception.\nTraceback (most recent call last):")


def test_logged_traceback_exception_extracted() -> None:  # genesis-vllm-patches#1
    r = row(parse_fixture("errors.log"), 8)
    assert (r["event"], r["n_lines"]) == ("error", 6)
    assert r["attrs"]["exc_type"] == "torch.OutOfMemoryError"
    assert r["attrs"]["exc_message"].startswith("CUDA out of memory. Tried to allocate 72.00 MiB.")


def test_single_error_line_and_raw_tracebacks() -> None:
    ev = parse_fixture("errors.log")
    r = row(ev, 14)  # club-3090#58
    assert (r["event"], r["n_lines"]) == ("error", 1)
    assert r["attrs"]["exc_type"] == "vllm.v1.engine.exceptions.EngineDeadError"
    r = row(ev, 15)  # raw traceback under the process prefix, no header
    assert (r["event"], r["n_lines"], r["level"]) == ("error", 6, None)
    assert r["attrs"]["process"] == "EngineCore" and r["message"].startswith("Process EngineCore:\n")
    r = row(ev, 21)  # vllm#27508, with Python 3.13 carets
    assert (r["event"], r["n_lines"]) == ("error", 6)
    assert r["attrs"]["exc_type"] == "torch.OutOfMemoryError" and r["attrs"]["dp_rank"] == 0
    r = row(ev, 27)  # `[rank0]: ` prefix, vllm#19018
    assert (r["event"], r["n_lines"], r["attrs"]["rank"]) == ("error", 6, 0)
    r = row(ev, 33)  # plain traceback, then the ValueError it raised
    assert (r["event"], r["n_lines"]) == ("error", 7)
    assert r["attrs"]["exc_type"] == "ValueError" and "(7344)" in r["attrs"]["exc_message"]


def test_logged_oom_then_another_process_traceback() -> None:  # club-3090#16
    ev = parse_fixture("errors.log")
    r = row(ev, 40)
    assert (r["event"], r["n_lines"], r["attrs"]["exc_type"]) == ("error", 1, "torch.OutOfMemoryError")
    r = row(ev, 41)
    assert (r["event"], r["n_lines"], r["attrs"]["process"]) == ("error", 5, "APIServer")


def test_record_starts_never_split_a_traceback() -> None:
    text = (FIXTURES / "errors.log").read_text().splitlines()
    starts = vllm.record_starts(pl.Series(text))
    assert [i + 1 for i, s in enumerate(starts) if s] == [1, 2, 8, 14, 15, 21, 27, 33, 40, 41]


@pytest.mark.parametrize("second", [
    "(APIServer pid=1) INFO 05-12 08:00:00 [logger.py:49]  indented",  # two blanks behind `]`
    "(APIServer pid=1) INFO 05-12 08:00:00 [logger.py:49]\tindented",  # a tab right behind it
    "(APIServer pid=1) INFO 05-12 08:00:00 [logger.py:49] ",  # an empty body
    "(APIServer pid=1) INFO 05-12 08:00:00 [logger.py:49]",
    "(APIServer pid=1)    File \"x.py\", line 3, in f",  # a raw frame behind the prefix
    "(APIServer pid=1)",
    "(APIServer pid=1) INFO 05-12 08:00:00 [logger.py:49] \u00a0non-breaking",
    "[rank0]:   File \"x.py\", line 3, in f",
    "[rank0]:",
])
def test_record_starts_shortcut_keeps_every_continuation(second: str) -> None:
    """A window without a shaped line skips the line anatomy (record_starts' shortcut); a
    continuation the anatomy finds is never lost to it."""
    head = second.split(" INFO ")[0] if " INFO " in second else second.split(" ")[0].rstrip(":")
    first = f"{head} INFO 05-12 08:00:00 [logger.py:49] Traceback (most recent call last):"
    if second.startswith("[rank0]"):
        first = "[rank0]: Traceback (most recent call last):"
    lines = pl.Series([first, second, first.replace("Traceback (most recent call last):", "ok")])
    full = ~vllm._lines_anatomy(pl.DataFrame({"text": lines}))["cont"]
    assert vllm.record_starts(lines).to_list() == full.to_list()
    assert vllm.record_starts(lines[1:]).to_list() == (~vllm._lines_anatomy(pl.DataFrame({"text": lines[1:]}))["cont"]).to_list()
    # and with the traceback's head out of the window: the same answer as the anatomy's
    plain = pl.Series([first.replace("Traceback (most recent call last):", "x"), second])
    assert vllm.record_starts(plain).to_list() == (~vllm._lines_anatomy(pl.DataFrame({"text": plain}))["cont"]).to_list()


def test_record_starts_shortcut_on_plain_lines() -> None:
    lines = pl.Series([
        "(APIServer pid=1) INFO 05-12 08:00:00 [logger.py:49] Received request a: params: SamplingParams(n=1), lora_request: None.",
        "(APIServer pid=1) INFO:     10.0.0.1:1 - \"POST /v1/completions HTTP/1.1\" 200 OK",
        "(APIServer pid=1) INFO 05-12 08:00:00 [async_llm.py:360] Added request a.",
    ])
    assert not lines.str.contains(vllm._MAYBE_SHAPED).any()
    assert vllm.record_starts(lines).to_list() == [True, True, True]


def test_chunks_split_at_record_starts_give_the_same_events() -> None:
    text = (FIXTURES / "errors.log").read_text().splitlines()
    whole = parse_text("vllm", "\n".join(text) + "\n")
    ctx = ParseContext(engine="vllm", source="test.log", instance="test", year=2026)
    parts = [
        parse_lines(vllm, lines_frame(text[:13]), ctx),
        parse_lines(vllm, lines_frame(text[13:32], first_line=14), ctx),
        parse_lines(vllm, lines_frame(text[32:], first_line=33), ctx),
    ]
    chunked = pl.concat(parts)
    cols = ["line", "n_lines", "event", "level", "message", "attrs"]
    assert chunked.select(cols).equals(whole.select(cols))


# ---------------------------------------------------------------------------------------
# wrappers, uvicorn, foreign lines


def test_ansi_with_and_without_esc() -> None:  # kunchenguid/firstmate#984
    ev = parse_fixture("wrappers.log")
    for line in (6, 8):  # ESC bytes lost / ESC bytes present and a stray `\r`
        r = row(ev, line)
        assert (r["event"], r["level"]) == ("log", "WARNING")
        assert r["attrs"]["src"] == "envs.py:2019" and r["attrs"]["process"] == "APIServer"
        assert r["message"].strip() == "Unknown vLLM environment variable detected: VLLM_BUILD_COMMIT"
        assert r["ts"] == dt.datetime(2026, 7, 24, 13, 15, 43, tzinfo=UTC)


def test_uvicorn_access_and_lifecycle() -> None:
    ev = parse_fixture("wrappers.log")
    r = row(ev, 9)  # intel/llm-scaler#391, with the APIServer prefix
    assert (r["event"], r["http_status"], r["level"]) == ("http_access", 200, "INFO")
    assert (r["attrs"]["method"], r["attrs"]["path"]) == ("GET", "/metrics")
    assert r["attrs"]["client"] == "10.109.20.86:59146" and r["attrs"]["pid"] == 851
    r = row(ev, 10)
    assert (r["attrs"]["method"], r["attrs"]["path"]) == ("POST", "/v1/chat/completions")
    for line in (11, 12, 13):
        r = row(ev, line)
        assert (r["event"], r["level"], r["attrs"]["uvicorn"]) == ("log", "INFO", True)
    assert row(ev, 11)["ts_inferred"] is True


def test_foreign_lines_are_kept_and_never_metrics() -> None:
    ev = parse_fixture("wrappers.log")
    r = row(ev, 4)  # FastChat's own logger under the compose prefix
    assert r["event"] == "unparsed" and "RequestOutput(request_id=" in r["message"]
    r = row(ev, 14)  # `INFO:root:Generated 745 tokens in 45.47s` is not the design-note line
    assert (r["event"], r["attrs"]["logger"]) == ("log", "root")
    assert r["output_tokens"] is None and r["gen_tps"] is None
    r = row(ev, 15)  # LMCache inside the engine-core process
    assert r["event"] == "log" and r["attrs"]["dp_rank"] == 0 and r["level"] is None
    assert row(ev, 16)["event"] == "unparsed"  # tqdm
    assert ev.filter(pl.col("event") == "engine_stats")["line"].to_list() == [1, 2, 3]


def test_process_prefixes_behind_other_wrappers() -> None:
    ev = parse_fixture("wrappers.log")
    r = row(ev, 17)  # Ray
    assert (r["attrs"]["process"], r["attrs"]["pid"], r["attrs"]["ip"]) == ("RayWorkerWrapper", 581, "10.225.128.18")
    r = row(ev, 18)  # TorchServe wrapper, then the process prefix, then the header
    assert r["attrs"]["process"] == "VllmWorkerProcess" and r["attrs"]["pid"] == 2716901
    assert r["message"] == "Loading model weights took 7.5122 GB"
    r = row(ev, 19)  # `vLLM STDOUT: ` before the header
    assert (r["event"], r["kv_blocks_total"]) == ("capacity", 3637)
    r = row(ev, 3)  # compose prefix
    assert json.loads(r["labels"])["service"] == "qwen15-fastchat-qwen2-72b-1" and r["prompt_tps"] == 0.9


def test_process_prefix_names() -> None:
    # prefix forms of the catalogue §2: lines 1, 3, 4 as pasted (vllm#10661, vllm#43222);
    # line 2 puts the v0.10.1 `VllmWorker TP0` prefix on a real message (LMCache#1739)
    lines = [
        "(VllmWorkerProcess pid=1634044) INFO 11-26 12:54:46 selector.py:120] Using Flash Attention backend.",
        "(VllmWorker TP0 pid=77) INFO 08-20 10:00:00 [gpu_worker.py:298] Available KV cache memory: 6.51 GiB",
        "(Worker_DP0_EP0 pid=2647785) ERROR 05-20 10:42:56 [multiproc_executor.py:962]   File \"/home/robertgshaw2-redhat/vllm/vllm/model_executor/models/deepseek_v2.py\", line 1067, in forward",
        "(EngineCore_DP0 pid=2647451) ERROR 05-20 10:42:56 [dump_input.py:81] Dumping scheduler stats: SchedulerStats(num_running_reqs=809, num_waiting_reqs=0, num_skipped_waiting_reqs=0,",
    ]
    ev = parse_text("vllm", "\n".join(lines) + "\n")
    a = [json.loads(x) for x in ev["attrs"]]
    assert a[0]["process"] == "VllmWorkerProcess"
    assert (a[1]["process"], a[1]["tp_rank"]) == ("VllmWorker TP0", 0)
    assert (a[2]["dp_rank"], a[2]["ep_rank"]) == (0, 0)
    assert a[3]["dp_rank"] == 0 and ev["event"].to_list()[3] == "error"


# ---------------------------------------------------------------------------------------
# detection


def test_detect_scores() -> None:
    assert vllm.detect((FIXTURES / "stats.log").read_text().splitlines()) > 0.9
    assert vllm.detect((FIXTURES / "errors.log").read_text().splitlines()) > 0.6
    tgi = (Path(__file__).parents[1] / "fixtures" / "tgi" / "router_text.log").read_text().splitlines()
    assert vllm.detect(tgi[:50]) < 0.05
    trt = [
        "[TensorRT-LLM][INFO] Loaded engine size: 3404 MiB",
        "[TensorRT-LLM][WARNING] max_beam_width is not specified, will use default value of 1",
        "[11/16/2024-00:05:44] [TRT-LLM] [I] Set gemm_plugin to float16.",
    ]
    assert vllm.detect(trt) < 0.05
    uvicorn_only = [
        "INFO:     Started server process [12625]",
        'INFO:     127.0.0.1:45468 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ]
    assert vllm.detect(uvicorn_only) < 0.2
    assert vllm.detect([]) == 0.0
    assert detect_engine((FIXTURES / "capacity.log").read_text().splitlines())[0] == "vllm"


# ---------------------------------------------------------------------------------------
# the real excerpts shipped in sample_logs/


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.log")), ids=lambda p: p.name)
def test_sample_logs_parse_completely(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    ev = parse_text("vllm", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(text.split("\n")) - 1) == []
    stats_lines = sum("Avg prompt throughput" in t for t in text.splitlines())
    assert ev.filter(pl.col("event") == "engine_stats").height == stats_lines
    assert vllm.detect(text.splitlines()[:200]) > 0.6


def test_header_stripped_vllm_lines_are_still_recognised() -> None:
    # vllm#10517 pasted start-up lines without their headers; foreign look-alikes stay logs
    text = (SAMPLES / "v0_4.log").read_text().splitlines()
    ev = parse_text("vllm", "\n".join(text) + "\n")
    r = row(ev, 20)
    assert (r["event"], r["kv_blocks_total"], r["attrs"]["cpu_blocks"]) == ("capacity", 1478, 2048)
    assert r["ts_inferred"] is True and r["level"] is None
    r = row(ev, 21)
    assert r["attrs"]["max_model_len"] == 29000 and r["attrs"]["max_concurrency"] == 0.82
    assert row(ev, 18)["event"] == "unparsed"  # `Loading model weights took ...` without header
    assert row(ev, 8)["kv_usage"] == 0.022  # percent -> fraction without float noise


def test_format_built_lines_of_the_catalogue() -> None:
    # no real paste found for these; built from the format strings of shared/formats/vllm.md
    lines = [
        # §4 `Generated response %s%s: output: %r, output_token_ids: %s, finish_reason: %s`
        (
            "(APIServer pid=1) INFO 09-02 08:46:23 [logger.py:71] Generated response chatcmpl-a1b2 "
            "(streaming complete): output: 'Hi', output_token_ids: [13347, 0, 2], finish_reason: stop"
        ),
        # §3b v0.33 iteration line
        (
            "(APIServer pid=1) INFO 05-12 08:01:39 [loggers.py:310] Engine 000: Iteration(7): 2 context "
            "requests, 512 context tokens, 6 generation requests, 6 generation tokens, iteration elapsed "
            "time: 31.20 ms, GPU KV cache usage: 12.5%"
        ),
        # §0 journald wrapper (non-ASCII month) before a real message
        (
            "авг 18 14:15:04 host python3[812]: INFO 08-18 14:15:04 [loggers.py:116] Engine 000: Avg "
            "prompt throughput: 0.0 tokens/s, Avg generation throughput: 7.2 tokens/s, Running: 9 reqs, "
            "Waiting: 1 reqs, GPU KV cache usage: 68.8%, Prefix cache hit rate: 0.0%"
        ),
        # §1 colours rendered as `#033` (CloudWatch / SageMaker)
        (
            "#033[32mINFO#033[0m #033[90m08-18 14:15:05#033[0m #033[90m[async_llm.py:316]#033[0m "
            "Added request chatcmpl-8fb2ae58dc6941868e20e8887e3e52de."
        ),
    ]
    ev = parse_text("vllm", "\n".join(lines) + "\n")
    check_events(ev)
    r = row(ev, 1)
    # the end of a stream is the request's end (output logging, issue 17)
    assert (r["event"], r["request_id"], r["output_tokens"]) == ("request_finished", "chatcmpl-a1b2", 3)
    assert r["attrs"]["finish_reason"] == "stop"
    r = row(ev, 2)
    assert (r["event"], r["batch_size"], r["batch_tokens"]) == ("batch", 8, 518)
    assert r["inference_s"] == pytest.approx(0.0312) and r["kv_usage"] == 0.125
    assert r["attrs"]["iteration"] == 7 and r["attrs"]["engine_index"] == 0
    r = row(ev, 3)
    assert (r["event"], r["running"], r["waiting"]) == ("engine_stats", 9, 1)
    assert r["message"].startswith("Engine 000: Avg prompt")
    r = row(ev, 4)
    assert (r["event"], r["request_id"]) == ("request_arrived", "chatcmpl-8fb2ae58dc6941868e20e8887e3e52de")
    assert r["attrs"]["src"] == "async_llm.py:316"


def test_a_large_chunk_of_repeated_lines_parses_each_one() -> None:
    # (the parse's speed is bench/'s: bench/phases.py profiles each phase per engine)
    base = (FIXTURES / "stats.log").read_text().splitlines() + (
        FIXTURES / "requests.log"
    ).read_text().splitlines()
    texts = (base * (20_000 // len(base) + 1))[:20_000]
    ctx = ParseContext(engine="vllm", source="b.log", instance="b", year=2026)
    ev = parse_lines(vllm, lines_frame(texts), ctx)
    assert ev.filter(pl.col("event") == "engine_stats").height == sum(
        "Avg prompt throughput" in t for t in texts
    ) > 1000


def test_newest_stats_and_kv_forms_parse_by_name() -> None:
    # §3b / §5 of shared/formats/vllm.md (v0.33): no real paste found; the parts are joined
    # as the format strings say, in an order no version prints, to show parsing is by name
    lines = [
        (
            "(APIServer pid=1) INFO 05-12 08:01:39 [loggers.py:310] Engine 001: Avg prompt throughput: "
            "10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Waiting: 2 reqs, "
            "Deferred: 1 reqs, KV fetch: 4 waiting to start, 5 in progress, 6 completed waiting, "
            "Preemptions: 7, XPU KV cache usage: 12.5%, Prefix cache hit rate: 40.0%, Corrupted: 0 reqs, "
            "External prefix cache hit rate: 10.0%, MM cache hit rate: 20.0%"
        ),
        (
            "(EngineCore pid=7) INFO 05-12 08:01:30 [kv_cache_utils.py:2146] GPU KV cache size: "
            "2,042,016 tokens, Maximum concurrency for 2,048 tokens per request: 997.08x"
        ),
    ]
    ev = parse_text("vllm", "\n".join(lines) + "\n")
    r = row(ev, 1)
    assert (r["running"], r["waiting"], r["kv_usage"], r["gen_tps"]) == (3, 2, 0.125, 20.0)
    assert r["swapped"] is None
    a = r["attrs"]
    assert (a["engine_index"], a["deferred_reqs"], a["preemptions"], a["corrupted_reqs"]) == (1, 1, 7, 0)
    assert (a["kv_fetch_waiting"], a["kv_fetch_in_progress"], a["kv_fetch_completed_waiting"]) == (4, 5, 6)
    assert (a["prefix_cache_hit_rate"], a["external_prefix_cache_hit_rate"], a["mm_cache_hit_rate"]) == (
        0.4,
        0.1,
        0.2,
    )
    r = row(ev, 2)
    assert (r["event"], r["kv_capacity_tokens"]) == ("capacity", 2042016)
    assert (r["attrs"]["max_concurrency"], r["attrs"]["max_model_len"]) == (997.08, 2048)


def test_empty_chunk_and_blank_lines() -> None:
    ctx = ParseContext(engine="vllm", source="a.log", instance="a", year=2026)
    ev = parse_lines(vllm, lines_frame([]), ctx)
    check_events(ev)
    assert ev.height == 0
    assert vllm.record_starts(pl.Series([], dtype=pl.String)).len() == 0
    ev = parse_text("vllm", "\n\n\n")
    assert uncovered_lines(ev, 1, 3) == [] and set(ev["event"]) == {"unparsed"}


def test_mixed_directory_gives_per_instance_series_with_no_stats_line_lost(tmp_path):
    """Several vLLM versions and instances in one directory: every stats line in every file
    becomes one engine_stats event of that file's instance."""
    import shutil

    from servelens.pipeline.ingest import ingest
    from servelens.pipeline.query.connect import run

    repo = Path(__file__).resolve().parents[2]
    logs = tmp_path / "logs"
    logs.mkdir()
    sources = sorted((repo / "sample_logs" / "vllm" / "real").glob("*.log"))
    sources += sorted((repo / "sample_logs" / "incident" / "vllm").glob("*.log"))
    expected = {}
    for src in sources:
        shutil.copy(src, logs / src.name)
        text = src.read_text(errors="replace")
        expected[src.stem] = sum("Avg prompt throughput:" in ln for ln in text.splitlines())
    store = tmp_path / "store"
    res = ingest([logs], store, rollups=False)  # (the events are what is read)
    assert {f.engine for f in res.files} == {"vllm"}
    got = dict(
        run(store, "select instance, count(*) as n from events where event = 'engine_stats' group by all").iter_rows()
    )
    assert got == {k: v for k, v in expected.items() if v}
    # each instance's series is ordered in time and carries the state columns
    series = run(store, "select instance, ts, running, kv_usage from events where event = 'engine_stats' order by instance, ts")
    assert series["running"].null_count() == 0 and series["kv_usage"].null_count() == 0
