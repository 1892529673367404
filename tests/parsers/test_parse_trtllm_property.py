"""Property tests for the TensorRT-LLM parser: noise between valid lines never crashes it
and loses no line (every line in exactly one event span), attrs stay valid JSON, valid
stats lines keep their values whatever surrounds them, and a stats JSON object parses to
the same values whatever the order of its keys."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.engines.trtllm import parser as trtllm
from servelens.parsers.base import (
    ParseContext,
    check_events,
    finalize,
    lines_frame,
    uncovered_lines,
)

FIX = Path(__file__).parents[1] / "fixtures" / "trtllm"
# every real line of every fixture (bug-report lines, see test_parse_trtllm.py)
VALID = sorted(
    {
        line
        for p in FIX.glob("*.log")
        for line in p.read_text().split("\n")
        if line.strip()
    }
)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def run(texts: list[str]) -> pl.DataFrame:
    ctx = ParseContext(engine="trtllm", source="p", instance="p", year=2026)
    ev = finalize(trtllm.parse(lines_frame(texts), ctx), ctx)
    check_events(ev)
    return ev


def stats_line(active: int, used: int, total: int, sched: int) -> str:
    # tensorrtllm_backend#217 shape
    return (
        f'I1218 03:35:37.688135 20559 libtensorrtllm.cc:1205] {{"Active Request Count":{active},'
        f'"Context Requests":1,"Free KV cache blocks":{total - used},"Generation Requests":0,'
        f'"Iteration Counter":0,"Max KV cache blocks":{total},"Max Request Count":64,'
        f'"Scheduled Requests":{sched},"Timestamp":"12-18-2023 03:35:37","Used KV cache blocks":{used}}}'
    )


noise_line = st.one_of(
    st.text(
        st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
        max_size=80,
    ),
    st.sampled_from(
        [
            "",
            " ",
            "{",
            "[",
            "[]",
            "{}",
            '{"Active Request Count":',
            "1       0x7f",
            "|",
            "+--+",
            "Traceback (most recent call last):",
            '  File "x", line 1',
            "[TensorRT-LLM]",
            "[TensorRT-LLM][INFO]",
            '"',
            'I0101 00:00:00.000000 1 a.cc:1] "unterminated',
            "I1399 25:61:61.000000 1 a.cc:1] bad date",
            "\x1b[31m",
            "iter = x, global_rank = 0",
        ]
    ),
    # a valid line with a random cut or suffix
    st.tuples(st.sampled_from(VALID), st.integers(0, 300)).map(lambda t: t[0][: t[1]]),
)


@SETTINGS
@given(st.lists(st.one_of(st.sampled_from(VALID), noise_line), min_size=1, max_size=40))
def test_noise_never_crashes_or_loses_lines(texts):
    ev = run(texts)
    assert uncovered_lines(ev, 1, len(texts)) == []
    for a in ev["attrs"].drop_nulls():
        assert isinstance(json.loads(a), dict)
    unparsed = ev.filter(pl.col("event") == "unparsed")
    for line, msg in unparsed.select("line", "message").iter_rows():
        assert msg.split("\n")[0] == texts[line - 1]  # kept whole


@SETTINGS
@given(
    st.lists(noise_line, max_size=8),
    st.lists(noise_line, max_size=8),
    st.integers(0, 500),
    st.integers(0, 5000),
    st.integers(1, 5000),
)
def test_stats_line_keeps_values_in_noise(before, after, active, used, extra):
    total = used + extra
    line = stats_line(active, used, total, active // 2)
    texts = [*before, line, *after]
    ev = run(texts)
    assert uncovered_lines(ev, 1, len(texts)) == []
    r = ev.filter(pl.col("line") == len(before) + 1).row(0, named=True)
    assert r["event"] == "engine_stats"
    assert (
        r["running"],
        r["batch_size"],
        r["kv_blocks_used"],
        r["kv_blocks_total"],
    ) == (active, active // 2, used, total)
    assert r["kv_usage"] == used / total


GPT_KEYS = [
    "Active Request Count",
    "Iteration Counter",
    "Max Request Count",
    "Runtime CPU Memory Usage",
    "Runtime GPU Memory Usage",
    "Runtime Pinned Memory Usage",
    "Context Requests",
    "Generation Requests",
    "MicroBatch ID",
    "Paused Requests",
    "Scheduled Requests",
    "Total Context Tokens",
    "Free KV cache blocks",
    "Max KV cache blocks",
    "Tokens per KV cache block",
    "Used KV cache blocks",
    "Reused KV cache blocks",
]
KV_KEYS = [
    "allocNewBlocks",
    "allocTotalBlocks",
    "freeNumBlocks",
    "maxNumBlocks",
    "missedBlocks",
    "reusedBlocks",
    "tokensPerBlock",
    "usedNumBlocks",
]
IFB_KEYS = [
    "microBatchId",
    "numContextRequests",
    "numCtxTokens",
    "numGenRequests",
    "numPausedRequests",
    "numScheduledRequests",
]
TOP_KEYS = [
    "cpuMemUsage",
    "gpuMemUsage",
    "iter",
    "maxBatchSizeRuntime",
    "numActiveRequests",
    "numCompletedRequests",
    "numNewActiveRequests",
    "numQueuedRequests",
    "pinnedMemUsage",
]

VALUE_COLS = [
    "ts",
    "running",
    "waiting",
    "batch_size",
    "kv_usage",
    "kv_blocks_used",
    "kv_blocks_total",
]


def shuffled(d: dict, perm: list[int]) -> dict:
    keys = list(d)
    order = sorted(range(len(keys)), key=lambda i: perm[i % len(perm)] * 1000 + i)
    return {keys[i]: d[keys[i]] for i in order}


def values(line: str) -> tuple:
    ev = run([line])
    assert ev.height == 1 and ev["event"][0] == "engine_stats"
    r = ev.row(0, named=True)
    return tuple(r[c] for c in VALUE_COLS), json.loads(r["attrs"])


@SETTINGS
@given(
    st.fixed_dictionaries({k: st.integers(0, 10**9) for k in GPT_KEYS}),
    st.lists(
        st.integers(0, 10**6), min_size=len(GPT_KEYS) + 1, max_size=len(GPT_KEYS) + 1
    ),
    st.sampled_from(
        [
            "",
            "[TensorRT-LLM][INFO] ",
            "I1218 03:35:37.688135 20559 model_instance_state.cc:1129] ",
        ]
    ),
)
def test_gptmanager_json_any_key_order(obj, perm, prefix):
    obj = {**obj, "Timestamp": "12-18-2023 03:35:37"}
    alpha = prefix + json.dumps(dict(sorted(obj.items())), separators=(",", ":"))
    other = prefix + json.dumps(shuffled(obj, perm), separators=(",", ":"))
    assert values(alpha) == values(other)
    (_ts, running, _, batch, _, used, total), _ = values(other)
    assert (running, batch, used, total) == (
        obj["Active Request Count"],
        obj["Scheduled Requests"],
        obj["Used KV cache blocks"],
        obj["Max KV cache blocks"],
    )


@SETTINGS
@given(
    st.fixed_dictionaries({k: st.integers(0, 10**6) for k in TOP_KEYS}),
    st.fixed_dictionaries({k: st.integers(0, 10**6) for k in KV_KEYS}),
    st.fixed_dictionaries({k: st.integers(0, 10**6) for k in IFB_KEYS}),
    st.floats(0, 1e5, allow_nan=False),
    st.lists(st.integers(0, 10**6), min_size=20, max_size=20),
)
def test_executor_json_any_key_order(top, kv, ifb, latency, perm):
    obj = {
        **top,
        "iterLatencyMS": latency,
        "kvCacheStats": kv,
        "inflightBatchingStats": ifb,
        "timestamp": "04-07-2025 20:33:17.747028",
    }
    a = json.dumps(obj)
    b = json.dumps(
        shuffled(
            {
                **obj,
                "kvCacheStats": shuffled(kv, perm),
                "inflightBatchingStats": shuffled(ifb, perm[::-1]),
            },
            perm,
        )
    )
    va, vb = values(a), values(b)
    assert va == vb
    (_, running, waiting, batch, _, used, total), attrs = va
    assert (running, waiting, batch, used, total) == (
        top["numActiveRequests"],
        top["numQueuedRequests"],
        ifb["numScheduledRequests"],
        kv["usedNumBlocks"],
        kv["maxNumBlocks"],
    )
    assert attrs["iter_latency_s"] == latency / 1000.0
