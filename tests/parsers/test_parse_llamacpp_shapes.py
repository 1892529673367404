"""The cheap reading of llama.cpp's commonest `new prompt` line (one anchored pattern for the
whole message) says what the per-field patterns say: on every such line of the fixtures and
sample logs, on generated ones and on near misses, the parsed n_ctx_slot, n_keep and whole
prompt are those the line's own fields give, read here by Python's `re` one field at a time."""

from __future__ import annotations

import json
import re

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.base import ParseContext, finalize, lines_frame
from servelens.parsers.engines.llamacpp import parser as llamacpp

from tests.helpers.common import logged_messages

# the shape the parser reads in one pass (pinned here: the test of its coverage below)
SHAPE = re.compile(r"new prompt, n_ctx_slot = [0-9]+, n_keep = -?[0-9]+, (?:n_prompt_tokens|task\.n_tokens) = [0-9]+")


def field(pattern: str, message: str) -> int | None:
    m = re.search(pattern, message)
    return int(m.group(1)) if m else None


def expected(message: str) -> tuple:
    return (
        field(r"n_ctx_slot = ([0-9]+)", message),
        field(r"n_keep = (-?[0-9]+)", message),
        field(r"(?:n_prompt_tokens|task\.n_tokens) = ([0-9]+)", message),
    )


def parsed(messages: list[str], between: list[str] = ()) -> list[tuple]:
    """(n_ctx_slot, n_keep, prompt_tokens) of each message, as a slot line of its own
    (task numbers apart, so that no prompt carries over to another line), with the lines
    `between` after each."""
    texts = []
    for i, m in enumerate(messages):
        texts.append(f"0.{i % 60:02d}.000.000 I slot update_slots: id  0 | task {i} | {m}")
        texts.extend(between)
    ctx = ParseContext(engine="llamacpp", source="t.log", instance="t")
    ev = finalize(llamacpp.parse(lines_frame(texts), ctx), ctx, carry=llamacpp.CARRY_FORWARD).sort("line")
    assert ev.height == len(texts)
    out = []
    for row in ev.filter(pl.col("message").str.starts_with("new prompt,")).iter_rows(named=True):
        a = json.loads(row["attrs"]) if row["attrs"] else {}
        out.append((a.get("n_ctx_slot"), a.get("n_keep"), row["prompt_tokens"]))
    assert len(out) == len(messages)
    return out


def assert_same(messages: list[str]) -> None:
    got = parsed(messages)
    diff = [(m, g, expected(m)) for m, g in zip(messages, got) if g != expected(m)]
    assert diff == []


def test_logged_new_prompt_lines_read_the_same_and_all_are_of_the_shape():
    messages = logged_messages("new prompt,", r"^.*?\| (new prompt,.*)$")
    assert len(messages) >= 20
    assert_same(messages)
    # the logs' lines are all of the shape: the one-pass reading is what reads them
    assert [m for m in messages if not SHAPE.fullmatch(m)] == []


NEAR_MISSES = [
    "new prompt, n_ctx_slot = 8192, n_keep = 0, task.n_tokens = 139 ",
    "new prompt, n_ctx_slot = 8192, n_keep = 0, task.n_tokens = 139, extra = 1",
    "new prompt, n_ctx_slot = 8192, n_keep = --1, n_prompt_tokens = 12",
    "new prompt, n_ctx_slot = 8192,  n_keep = 0, task.n_tokens = 139",
    "new prompt, n_keep = 4, n_ctx_slot = 512, n_prompt_tokens = 77",
    "new prompt, n_ctx_slot = 8192, n_keep = 0",
    "new prompt, n_ctx_slot = 8192, n_keep = 0, task.n_tokens = ",
    "new prompt, n_ctx_slot = 8192, n_keep = 0, n_tokens = 139",
    "new prompt, n_ctx_slot = 8192, n_keep = 0, task.n_tokens = 139 n_prompt_tokens = 5",
    "new prompt, n_ctx_slot = x, n_keep = 0, task.n_tokens = 139",
    "new prompt,n_ctx_slot = 8192, n_keep = 0, task.n_tokens = 139",
    "new prompt, loading model 'm', n_ctx_slot = 1, n_keep = 0, task.n_tokens = 2",
]


def test_near_misses_read_by_the_field_patterns():
    assert_same(NEAR_MISSES)
    assert [m for m in NEAR_MISSES if SHAPE.fullmatch(m)] == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(
    st.integers(0, 10**7), st.integers(-1, 10**5), st.integers(0, 10**7),
    st.sampled_from(["n_prompt_tokens", "task.n_tokens"]), st.sampled_from(["", " ", ", x = 1"]),
), min_size=1, max_size=12))
def test_generated_new_prompt_lines_read_the_same(cases):
    assert_same([f"new prompt, n_ctx_slot = {c}, n_keep = {k}, {key} = {n}{tail}" for c, k, n, key, tail in cases])


def test_the_shape_is_read_the_same_among_the_other_lines_of_a_request():
    messages = ["new prompt, n_ctx_slot = 4096, n_keep = 0, task.n_tokens = 321"] + NEAR_MISSES[:3]
    between = [
        "0.59.000.001 I srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200",
        "0.59.000.002 I slot print_timing: id  1 | task 90 | n_decoded =    197, tg =  65.67 t/s, tg_3s =  65.67 t/s",
        "0.59.000.003 I srv          init: initializing slots, n_slots = 16",
    ]
    assert parsed(messages, between) == [expected(m) for m in messages]
