"""The cheaper readings of llama.cpp's lines by their literal heads say what the general
readings say:

- a timing part's kind (`prompt eval time =`, `eval time =`, ...), told by one anchored
  pattern (it was five searches, tried in turn);
- a slot's arrival (`processing task`) and release (`stop processing`) lines, told by their
  literal head (the patterns still read the older `slot ...` forms).

On every such message of the fixtures and sample logs, on generated messages and on near
misses, the parser's reading is that of the general patterns, applied here by Python's `re`."""

from __future__ import annotations

import re

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.engines.llamacpp import timing

from tests.helpers.common import logged_messages, parsed_lines

# ---------------------------------------------------------------------------------------
# the timing part's kind

# the general reading: each part's own head, tried in this order
PART_HEADS = (
    ("prompt", r"^\s*prompt eval time\s*="),
    ("eval", r"^\s*(?:generation )?eval time\s*="),
    ("total", r"^\s*total time\s*="),
    ("graphs", r"^\s*graphs reused\s*="),
    ("draft", r"^\s*draft acceptance"),
)


def expected_kind(message: str | None) -> str | None:
    if message is None:
        return None
    return next((kind for kind, head in PART_HEADS if re.search(head, message)), None)


def assert_kinds(messages: list[str | None]) -> None:
    got = pl.select(timing.part_kind(pl.lit(pl.Series(messages, dtype=pl.String)))).to_series().to_list()
    assert [(m, g, w) for m, g, w in zip(messages, got, map(expected_kind, messages)) if g != w] == []


def test_logged_timing_messages_read_the_same():
    # a 2026 line's message follows its task; an older block's parts are lines of their own
    messages = [
        *logged_messages("time =", r"^.*?\| (.*time =.*)$"),
        *logged_messages("time =", r"^(\s*[a-z ]*time\s*=.*)$"),
        *logged_messages("graphs reused", r"^.*?\|? ?(\s*graphs reused.*)$"),
        *logged_messages("draft acceptance", r"^.*?\|? ?(\s*draft acceptance.*)$"),
    ]
    assert len(messages) >= 100
    kinds = {expected_kind(m) for m in messages}
    assert {"prompt", "eval", "total"} <= kinds
    assert_kinds(messages)


TIMING_NEAR_MISSES = [
    None, "", " ", "prompt eval time", "prompt eval time=", "  prompt eval time =  1.0 ms",
    "prompt eval  time = 1", "generation eval time = 3 ms / 2 runs", "generation  eval time = 3",
    "eval time= 5", "evaltime = 5", "xeval time = 5", "total time", "total time  =", "total tim = 1",
    "graphs reused", "graphs reused =", "graphs  reused = 1", "draft acceptance", "draft acceptance rate = 0.5",
    "draft acceptanc", "\tprompt eval time =", "n_decoded = 5, tg = 1 t/s", "prompt processing, n_tokens = 5",
    "Prompt eval time = 1", "total time = 1 ms / 2 tokens, eval time = 3",
]


def test_timing_near_misses_read_the_same():
    assert_kinds(TIMING_NEAR_MISSES)
    # each kind among them, and some that are none
    kinds = [expected_kind(m) for m in TIMING_NEAR_MISSES]
    assert set(kinds) == {None, "prompt", "eval", "total", "graphs", "draft"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(
    st.sampled_from(["", " ", "   ", "\t", "x"]),
    st.sampled_from(["prompt eval time", "eval time", "generation eval time", "total time", "graphs reused",
                     "draft acceptance", "draft acceptance rate", "prompt  eval time", "eval", "total"]),
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["=", " =", "", ":"]),
    st.sampled_from(["", " 12.5 ms / 3 tokens", " 7"]),
), min_size=1, max_size=12))
def test_generated_timing_messages_read_the_same(cases):
    assert_kinds([f"{lead}{head}{gap}{eq}{tail}" for lead, head, gap, eq, tail in cases])


# ---------------------------------------------------------------------------------------
# arrival and release

ARRIVED = re.compile(r"^(?:processing task|slot is processing task|slot [0-9]+ is processing \[task id: [0-9]+\])")
FINISHED = re.compile(r"^(?:stop processing|slot released|slot [0-9]+ released)")


def expected_lifecycle(message: str) -> str | None:
    if ARRIVED.search(message):
        return "request_arrived"
    return "request_finished" if FINISHED.search(message) else None


def assert_lifecycle(messages: list[str]) -> None:
    # each message on a slot's line naming its task (so that a lifecycle line is an event)
    texts = [f"0.{i % 60:02d}.000.000 I slot launch_slot_: id  0 | task {i} | {m}" for i, m in enumerate(messages)]
    ev = parsed_lines("llamacpp", texts).sort("line")
    assert ev.height == len(texts)
    got = [e if e in ("request_arrived", "request_finished") else None for e in ev["event"].to_list()]
    assert [(m, g, w) for m, g, w in zip(messages, got, map(expected_lifecycle, messages)) if g != w] == []


def test_logged_lifecycle_messages_read_the_same():
    messages = [
        *logged_messages("processing task", r"^.*?\| (.*processing task.*)$"),
        *logged_messages("stop processing", r"^.*?\| (stop processing.*)$"),
        *logged_messages("slot ", r"^.*?\| (slot .*)$"),
    ]
    assert len(messages) >= 40
    assert {expected_lifecycle(m) for m in messages} >= {"request_arrived", "request_finished"}
    assert_lifecycle(messages)


LIFECYCLE_NEAR_MISSES = [
    "processing task", "processing task, is_child = 0", "processing tas", " processing task", "Processing task",
    "slot is processing task", "slot is processing tas", "slot  is processing task", "slot 3 is processing [task id: 9]",
    "slot 3 is processing [task id: ]", "slot x is processing [task id: 9]", "slot 3 is processing task",
    "stop processing", "stop processing: n_tokens = 5, truncated = 0", "stop processin", "stop  processing",
    "slot released", "slot released (5 tokens in cache)", "slot 0 released (5 tokens in cache)", "slot 0 release",
    "slot  0 released", "slots released", "processing", "new prompt, processing task",
]


def test_lifecycle_near_misses_read_the_same():
    assert_lifecycle(LIFECYCLE_NEAR_MISSES)
    assert {expected_lifecycle(m) for m in LIFECYCLE_NEAR_MISSES} == {None, "request_arrived", "request_finished"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(
    st.sampled_from(["", "slot ", "slot 4 ", "slot x ", " "]),
    st.sampled_from(["processing task", "is processing task", "is processing [task id: 12]", "stop processing",
                     "released", "released (3 tokens in cache)", "processing", "stop"]),
    st.sampled_from(["", ", is_child = 0", ": n_tokens = 5, truncated = 1", " x"]),
), min_size=1, max_size=12))
def test_generated_lifecycle_messages_read_the_same(cases):
    assert_lifecycle([f"{a}{b}{c}" for a, b, c in cases])


# ---------------------------------------------------------------------------------------
# the model's name from the loader's metadata

GENERAL_NAME = re.compile(r"general\.name\s+(?:str\s+)?=\s+(.+?)\s*$")
LOADER = "llama_model_loader: "


def assert_models(lines: list[str]) -> None:
    # each line (`<function>: <message>`) a chunk of its own (the model is carried forward from
    # line to line); the general reading searches the message after the function's name
    got = []
    for line in lines:
        ev = parsed_lines("llamacpp", [line])
        assert ev.height == 1
        got.append(ev["model"][0])
    want = [(m.group(1) if (m := GENERAL_NAME.search(line.split(": ", 1)[1])) else None) for line in lines]
    assert [(line, g, w) for line, g, w in zip(lines, got, want) if g != w] == []


def test_logged_model_names_read_the_same():
    lines = logged_messages("general.name", r"^.*?((?:llama_model_loader|llm_load_print_meta|print_info): .*)$")
    assert len(lines) >= 2
    assert_models(lines)


MODEL_NEAR_MISSES = [LOADER + m for m in (
    "- kv   2:                               general.name str              = Qwen2.5 7B Instruct",
    "- kv   2:                               general.name str              = ",
    "- kv   2:                               general.name = tiny ",
    "- kv   2:                               generalXname str              = Qwen",
    "- kv   2:                               general.name str = ",
    "- kv   2:                               general.names str = Qwen",
    "- kv   2:                               general.name\tstr\t=\tQwen 3",
    "- kv   2: general.name=Qwen",
    "general.name",
)] + ["print_info: general.name     = Llama 3", "llm_load_print_meta: general.name = x y  ", "llm_load_print_meta: general_name = x"]


def test_model_near_misses_read_the_same():
    assert_models(MODEL_NEAR_MISSES)
    assert len([m for m in MODEL_NEAR_MISSES if GENERAL_NAME.search(m)]) >= 5
