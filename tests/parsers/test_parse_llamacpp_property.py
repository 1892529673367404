"""Property tests for the llama.cpp parser: timing blocks of any era, with other lines
between their parts and the chunk cut anywhere ingest may cut it, give exactly one request
per block with the printed values; noise never crashes it or loses a line."""

from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelens.parsers.engines.llamacpp import parser as llamacpp
from servelens.parsers.base import ParseContext, check_events, finalize, lines_frame, uncovered_lines

NOISE = [
    "srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200",
    "srv  params_from_: Chat format: peg-native",
    "slot get_availabl: id  3 | task -1 | selected slot by LRU, t_last = 2833482217",
    "llama_model_loader: - kv   2:                       general.name str = Qwen3 0.6B",
]

block = st.fixed_dictionaries({
    "slot": st.integers(0, 15),
    "prompt_cs": st.integers(1, 10**8),  # centi-milliseconds, as printed with %.2f
    "prompt_n": st.integers(1, 200_000),
    "eval_cs": st.integers(1, 10**8),
    "eval_n": st.integers(2, 100_000),
    "noise": st.lists(st.sampled_from(NOISE), max_size=2),
})


def ms(cs: int) -> str:
    return f"{cs // 100}.{cs % 100:02d}"


def render(blocks: list[dict], era: str) -> list[str]:
    out: list[str] = []
    for task, b in enumerate(blocks):
        total = b["prompt_cs"] + b["eval_cs"]
        parts = [
            f"prompt eval time = {ms(b['prompt_cs']):>10} ms / {b['prompt_n']:5d} tokens (    1.00 ms per token,     1.00 tokens per second)",
            f"       eval time = {ms(b['eval_cs']):>10} ms / {b['eval_n']:5d} tokens (    1.00 ms per token,     1.00 tokens per second)",
            f"      total time = {ms(total):>10} ms / {b['prompt_n'] + b['eval_n']:5d} tokens",
        ]
        head = f"slot print_timing: id {b['slot']:2d} | task {task} | "
        out.append(f"slot launch_slot_: id {b['slot']:2d} | task {task} | processing task")
        if era == "2025":  # one log call: header and continuation lines, nothing between
            out += [head, *parts]
            out += b["noise"]
        else:  # 2026: one prefixed line per part, other lines may come between
            t = f"{task}.00.000.000 I "
            out.append(t + head + parts[0])
            out += [t + x for x in b["noise"]]
            out += [t + head + parts[1], t + head + parts[2]]
        out.append(f"slot      release: id {b['slot']:2d} | task {task} | stop processing: n_tokens = 5, truncated = 0")
    return out


def parse_chunks(texts: list[str], cuts: list[int]) -> pl.DataFrame:
    ctx = ParseContext(engine="llamacpp", source="p.log", instance="p")
    bounds = [0, *cuts, len(texts)]
    parts = []
    for a, b in zip(bounds, bounds[1:]):
        if b > a:
            parts.append(finalize(llamacpp.parse(lines_frame(texts[a:b], first_line=a + 1), ctx), ctx,
                                  carry=llamacpp.CARRY_FORWARD))
    return pl.concat(parts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(block, min_size=1, max_size=6), st.sampled_from(["2025", "2026"]), st.data())
def test_every_block_is_one_exact_request_wherever_the_chunk_is_cut(blocks, era, data):
    texts = render(blocks, era)
    starts = llamacpp.record_starts(pl.Series(texts, dtype=pl.String)).to_list()
    allowed = [i for i in range(1, len(texts)) if starts[i]]
    cuts = sorted(data.draw(st.sets(st.sampled_from(allowed), max_size=3))) if allowed else []
    ev = parse_chunks(texts, cuts)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(texts)) == []
    req = ev.filter(pl.col("event") == "request").sort("line")
    assert req["request_id"].to_list() == [str(i) for i in range(len(blocks))]
    for r, b in zip(req.to_dicts(), blocks):
        assert r["prompt_tokens"] == b["prompt_n"] and r["output_tokens"] == b["eval_n"]
        assert abs(r["e2e_s"] - (b["prompt_cs"] + b["eval_cs"]) / 1e5) < 1e-9
        assert abs(r["tpot_s"] - b["eval_cs"] / 1e5 / (b["eval_n"] - 1)) < 1e-12


garbage = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=80)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(garbage, st.sampled_from(render([{"slot": 1, "prompt_cs": 12345, "prompt_n": 7,
                                                            "eval_cs": 999, "eval_n": 3, "noise": []}], "2025"))),
                min_size=1, max_size=30))
def test_noise_never_crashes_and_no_line_is_lost(texts):
    ev = parse_chunks(texts, [])
    check_events(ev)
    assert uncovered_lines(ev, 1, len(texts)) == []
    unparsed = ev.filter(pl.col("event") == "unparsed")
    assert unparsed["message"].to_list() == [texts[i - 1] for i in unparsed["line"].to_list()]
