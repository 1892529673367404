"""Property tests for the SGLang parser: scheduler stats lines in every era's form (label
`.` or `,`, trailing `, ` / `,` / none, any rank prefix, fields in any order, unknown fields
anywhere) keep their exact values whatever surrounds them; noise, pasted-and-damaged lines
and byte garbage never crash it; every input line lands in exactly one event span."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelens.parsers.engines.sglang import parser as sglang
from servelens.parsers.base import ParseContext, check_events, lines_frame, parse_lines, uncovered_lines

RANKS = st.lists(st.sampled_from(["DP", "PP", "TP", "EP", "ATTN_CP", "MOE_DP"]), unique=True, max_size=4).flatmap(
    lambda tags: st.tuples(*[st.integers(0, 63) for _ in tags]).map(lambda ns: [f"{t}{n}" for t, n in zip(tags, ns)])
)


@st.composite
def decode_line(draw):
    running, tokens, queue = draw(st.integers(0, 5000)), draw(st.integers(0, 10**7)), draw(st.integers(0, 10**5))
    usage = draw(st.integers(0, 100)) / 100
    tps = draw(st.integers(0, 10**7)) / 100
    fields = [
        f"#running-req: {running}",
        f"#token: {tokens}",
        f"token usage: {usage:.2f}",
        f"gen throughput (token/s): {tps:.2f}",
        f"#queue-req: {queue}",
    ]
    if draw(st.booleans()):
        fields.insert(draw(st.integers(1, len(fields))), f"cuda graph: {draw(st.booleans())}")
    # a field SGLang may add tomorrow, anywhere after the first
    unknown = draw(st.none() | st.integers(0, 999))
    if unknown is not None:
        fields.insert(draw(st.integers(1, len(fields))), f"#brand-new-field: {unknown}")
    label = draw(st.sampled_from(["Decode batch. ", "Decode batch, ", "Decode batch [7], "]))
    tail = draw(st.sampled_from(["", ", ", ","]))
    ranks = draw(RANKS)
    date = draw(st.sampled_from(["2025-03-14 02:16:14", "02:16:14", "2026-09-24 01:50:43.001"]))
    prefix = "[" + " ".join([date, *ranks]) + "] "
    line = prefix + label + ", ".join(fields) + tail
    return line, {"running": running, "waiting": queue, "kv_usage": usage, "gen_tps": tps, "kv_tokens": tokens,
                  "unknown": unknown, "ranks": ranks}


@st.composite
def prefill_line(draw):
    new_seq, new_tok, cached = draw(st.integers(0, 512)), draw(st.integers(0, 65536)), draw(st.integers(0, 10**6))
    running, queue = draw(st.integers(0, 5000)), draw(st.integers(0, 10**5))
    usage = draw(st.integers(0, 100)) / 100
    fields = [f"#new-seq: {new_seq}", f"#new-token: {new_tok}", f"#cached-token: {cached}",
              f"token usage: {usage:.2f}", f"#running-req: {running}", f"#queue-req: {queue}"]
    label = draw(st.sampled_from(["Prefill batch. ", "Prefill batch, "]))
    line = "[2026-04-05 20:02:51] " + label + ", ".join(fields) + draw(st.sampled_from(["", ", ", ","]))
    return line, {"batch_tokens": new_tok, "running": running, "waiting": queue, "kv_usage": usage,
                  "new_seq": new_seq, "cached_tokens": cached}


NOISE = st.one_of(
    st.text(max_size=80),
    st.sampled_from([
        "", "   ", "Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
        "RuntimeError: boom", "[", "[]", "[TP0]", "[2025-01-01 00:00:00", "[99:99:99 TP0] Decode batch. #running-req: x",
        "Decode batch. ", "Prefill batch, #new-seq", "new fill batch. #seq", "{", '{"e2e_latency": ', "\x00\x1b[31m",
        "[2025-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #token: , token usage: 0.5x, #queue-req: -",
    ]),
)


def _parse(texts: list[str]) -> pl.DataFrame:
    ctx = ParseContext(engine="sglang", source="p.log", instance="p", year=2026)
    ev = parse_lines(sglang, lines_frame(texts), ctx)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(texts)) == []
    for a in ev["attrs"].drop_nulls():
        json.loads(a)
    return ev


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(decode_line().map(lambda x: ("d", x)), prefill_line().map(lambda x: ("p", x)),
                          NOISE.map(lambda x: ("n", x))), min_size=1, max_size=30))
def test_stats_lines_keep_exact_values_among_noise(items):
    texts = []
    for _, x in items:
        text = x[0] if isinstance(x, tuple) else x
        texts.append(text.replace("\n", " ").replace("\r", " "))
    ev = _parse(texts)
    for i, (kind, x) in enumerate(items, start=1):
        if kind == "n":
            continue
        line, want = x
        rows = ev.filter(pl.col("line") == i)
        assert rows.height == 1, line
        r = rows.row(0, named=True)
        a = json.loads(r["attrs"])
        assert r["event"] == ("engine_stats" if kind == "d" else "batch"), line
        assert (r["running"], r["waiting"], r["kv_usage"]) == (want["running"], want["waiting"], want["kv_usage"])
        if kind == "d":
            assert r["gen_tps"] == want["gen_tps"] and a["kv_tokens"] == want["kv_tokens"]
            assert a.get("brand_new_field") == want["unknown"]
            for tok in want["ranks"]:
                tag, n = tok.rstrip("0123456789"), int(tok[len(tok.rstrip("0123456789")):])
                assert a[tag.lower() + "_rank"] == n, (line, a)
        else:
            assert r["batch_tokens"] == want["batch_tokens"]
            assert (a["new_seq"], a["cached_tokens"]) == (want["new_seq"], want["cached_tokens"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(decode_line(), min_size=1, max_size=10), st.data())
def test_pasted_and_damaged_lines_never_crash(lines, data):
    # a paste cut lines at random places and joined others
    texts = []
    for line, _ in lines:
        cut = data.draw(st.integers(0, len(line)))
        texts.append(line[:cut])
        if data.draw(st.booleans()):
            texts.append(line[cut:])
    _parse(texts)


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=400))
def test_byte_garbage_never_crashes(blob):
    texts = blob.decode("utf-8", errors="replace").split("\n")
    _parse(texts)
