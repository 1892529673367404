"""Property tests for the vLLM parser: arbitrary text and byte noise between valid lines
never crashes it, every input line lands in exactly one event span, attrs stay valid JSON,
and the valid stats / request lines keep their values whatever surrounds them."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.engines.vllm import parser as vllm
from servelens.parsers.base import (
    ParseContext,
    check_events,
    parse_lines,
    lines_frame,
    uncovered_lines,
)


def v0_stats(run: int, wait: int, kv: int, period: bool) -> str:
    # V0 format (vllm#3094 / #12314), kv in tenths of a percent
    return (
        f"INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 1.5 tokens/s, Avg generation "
        f"throughput: 44.9 tokens/s, Running: {run} reqs, Swapped: 0 reqs, Pending: {wait} reqs, "
        f"GPU KV cache usage: {kv / 10:.1f}%, CPU KV cache usage: 0.0%" + ("." if period else "")
    )


def v1_stats(run: int, wait: int, kv: int, pid: int) -> str:
    # V1 format with the APIServer prefix (intel/llm-scaler#391)
    return (
        f"(APIServer pid={pid}) INFO 04-28 22:54:32 [loggers.py:257] Engine 000: Avg prompt throughput: "
        f"0.0 tokens/s, Avg generation throughput: 5.4 tokens/s, Running: {run} reqs, Waiting: {wait} reqs, "
        f"GPU KV cache usage: {kv / 10:.1f}%, Prefix cache hit rate: 92.0%"
    )


def added(rid: str) -> str:
    return f"INFO 03-05 18:46:21 async_llm.py:164] Added request {rid}."


counts = st.integers(0, 5000)
kv = st.integers(0, 1000)
request_ids = st.from_regex(r"(?:chatcmpl|cmpl)-[0-9a-f]{8,32}", fullmatch=True)
valid = st.one_of(
    st.builds(lambda r, w, k, p: ("stats", (r, w, k), v0_stats(r, w, k, p)), counts, counts, kv, st.booleans()),
    st.builds(lambda r, w, k, p: ("stats", (r, w, k), v1_stats(r, w, k, p)), counts, counts, kv, st.integers(1, 99999)),
    st.builds(lambda rid: ("arrived", rid, added(rid)), request_ids),
)
no_newline = st.text(
    alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=120
)
byte_noise = st.binary(max_size=120).map(lambda b: b.decode("utf-8", errors="replace").replace("\n", " "))
# fragments that look like the start of something the parser knows
tricky = st.sampled_from(
    [
        "",
        "   ",
        "Traceback (most recent call last):",
        "  File \"/x/vllm/engine.py\", line 1, in f",
        "RuntimeError: boom",
        "(EngineCore_DP0 pid=1) ",
        "(APIServer pid=1)   File \"a.py\", line 2",
        "INFO 13-45 99:99:99 x.py:1] Avg prompt throughput: 1.0 tokens/s",
        "ERROR 06-10 14:23:45 [core.py:1] ",
        "INFO:     127.0.0.1:1 - \"GET / HTTP/1.1\" 200 OK",
        "\x1b[0;36m(APIServer pid=1)\x1b[0;0m \x1b[33mWARNING\x1b[0m",
        "svc-1  | ",
        "2026-05-12T08:01:39.331095044Z ",
        "Aborted request(s) .",
        "\r",
    ]
)
noise = st.one_of(no_newline, byte_noise, tricky)
items = st.lists(st.one_of(valid, noise.map(lambda t: ("noise", None, t))), min_size=1, max_size=40)


def run(texts: list[str], first_line: int = 1) -> pl.DataFrame:
    ctx = ParseContext(engine="vllm", source="p.log", instance="p", year=2026)
    ev = parse_lines(vllm, lines_frame(texts, first_line), ctx)
    check_events(ev)
    return ev


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items)
def test_noise_never_crashes_and_every_line_is_accounted_for(parts):
    texts = [t for _, _, t in parts]
    ev = run(texts)
    assert uncovered_lines(ev, 1, len(texts)) == []
    for a in ev["attrs"].drop_nulls():
        assert isinstance(json.loads(a), dict)
    starts = vllm.record_starts(pl.Series(texts, dtype=pl.String))
    assert len(starts) == len(texts) and starts[0]
    # a record's span is exactly the run of continuation lines record_starts reports
    spans = ev.select("line", "n_lines").unique().sort("line")
    assert spans["line"].to_list() == [i + 1 for i, s in enumerate(starts) if s]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items)
def test_valid_lines_keep_their_values_amid_noise(parts):
    texts = [t for _, _, t in parts]
    ev = run(texts)
    for i, (kind, want, _) in enumerate(parts, start=1):
        here = ev.filter(pl.col("line") == i)
        if kind == "stats":
            r = here.row(0, named=True)
            assert r["event"] == "engine_stats" and r["n_lines"] == 1
            assert (r["running"], r["waiting"]) == want[:2]
            assert r["kv_usage"] == round(want[2] / 1000, 6)
        elif kind == "arrived":
            r = here.row(0, named=True)
            assert (r["event"], r["request_id"]) == ("request_arrived", want)


@settings(max_examples=25, deadline=None)
@given(items, st.integers(1, 39))
def test_split_at_a_record_start_changes_nothing(parts, cut):
    texts = [t for _, _, t in parts]
    starts = vllm.record_starts(pl.Series(texts, dtype=pl.String)).to_list()
    cut = min(cut, len(texts))
    while cut < len(texts) and not starts[cut]:  # the ingest loop only cuts at a start
        cut += 1
    whole = run(texts)
    ctx = ParseContext(engine="vllm", source="p.log", instance="p", year=2026)
    parts_ev = [parse_lines(vllm, lines_frame(texts[:cut]), ctx)]
    if cut < len(texts):
        parts_ev.append(parse_lines(vllm, lines_frame(texts[cut:], cut + 1), ctx))
    cols = ["line", "n_lines", "event", "level", "request_id", "running", "message"]
    assert pl.concat(parts_ev).select(cols).equals(whole.select(cols))
