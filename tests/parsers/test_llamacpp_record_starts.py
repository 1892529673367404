"""llama.cpp `record_starts`: a window of 2026 tagged lines is answered without the line
anatomy (`_tagged_starts`); its answer must be the anatomy's on every window."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers.engines.llamacpp import parser as llamacpp
from servelens.pipeline.sources.lines import TAIL_WINDOW_LINES

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted({
    *ROOT.glob("tests/fixtures/**/llamacpp/**/*.log"),
    *ROOT.glob("sample_logs/llamacpp/**/*.log"),
})
# the reader's first window: its look-back lines and the tail
WINDOW = llamacpp.RECORD_LOOKBACK + TAIL_WINDOW_LINES


def _check(lines: list[str]) -> bool:
    """record_starts equals the anatomy's answer on `lines`; whether the shortcut took them."""
    text = pl.Series(lines, dtype=pl.String)
    tagged = llamacpp._tagged_starts(text) is not None
    if tagged:  # (any other window goes to the anatomy itself)
        got = llamacpp.record_starts(text).to_list()
        assert got == llamacpp._anatomy_starts(text).to_list(), lines
    return tagged


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_window_of_the_fixtures_and_sample_logs(path: Path) -> None:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    tagged = checked = 0
    # every other window end (the reader's window behind it) and every other start between
    # them (a window opening inside a block): each line ends and opens windows of both kinds
    for end in range(1, len(lines) + 1, 2):
        tagged += _check(lines[max(0, end - WINDOW):end])
        checked += 1
    for start in range(2, len(lines), 2):
        tagged += _check(lines[start:start + WINDOW])
        checked += 1
    if path.parent.name == "default" and path.parent.parent.name == "recorded":  # a 2026 log whole
        assert tagged == checked == len(lines) - 1 == 309


def test_the_fixtures_are_found() -> None:
    assert len(FILES) > 90


def _t(i: int, lvl: str, rest: str) -> str:
    return f"0.01.{i % 1000:03d}.000 {lvl + ' ' if lvl else ''}{rest}"


# lines a window of tagged lines may hold, and lines near them the shortcut must leave to the
# anatomy (a colour code inside the tag or the message, a timing header and its unprefixed
# parts, an unreadable relative time, another letter for the level, another era's line)
POOL = [
    "slot launch_slot_: id  0 | task 7 | processing task, is_child = 0",
    "slot update_slots: id  0 | task 7 | new prompt, n_ctx_slot = 4096, n_keep = 0, task.n_tokens = 12",
    "slot print_timing: id  0 | task 7 | prompt eval time =      31.51 ms /   269 tokens (    0.12 ms per token,  8536.70 tokens per second)",
    "slot print_timing: id  0 | task 7 |        eval time =    3499.33 ms /   180 tokens (   19.44 ms per token,    51.44 tokens per second)",
    "slot print_timing: id  0 | task 7 |       total time =    3530.84 ms /   449 tokens",
    "slot print_timing: id  0 | task 7 |    graphs reused =        178",
    "slot print_timing: id  0 | task 7 | draft acceptance = 0.5 ( 2 accepted /  4 generated)",
    "slot print_timings: id  0 | task 7 | prompt eval time = 1.0 ms / 2 tokens",
    "slot      release: id  0 | task 7 | stop processing: n_tokens = 448, truncated = 0",
    "srv  cancel_tasks: cancel task, id_task = 7",
    "srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200",
    "srv  update_slots: prompt eval time = 1.0 ms / 2 tokens",  # not a timing function
    "que    start_loop: processing new tasks",
    "res  send: sending result for task id = 7",
    "slot print_timing: id  0 | task 7 | ",  # a header: its parts follow unprefixed
    "slot print_timing: id  0 | task 7 |   \t",
    "slot print_timing: id  0 | task 7 | \x1b[0mprompt eval time = 1.0 ms / 2 tokens",
    "slot print_timing: id  0 | task 7 | [32mtotal time = 2.0 ms / 3 tokens",
    "slot \x1b[1mprint_timing: id  0 | task 7 | total time = 2.0 ms / 3 tokens",
]
RAW = [
    "prompt eval time =      31.51 ms /   269 tokens (    0.12 ms per token,  8536.70 tokens per second)",
    "       total time =    3530.84 ms /   449 tokens",
    "12345678.01.000.000 I slot print_timing: id  0 | task 7 | prompt eval time = 1.0 ms / 2 tokens",
    "99999999.00.000.000 I slot print_timing: id  0 | task 7 | total time = 2.0 ms / 3 tokens",
    "0.01.000.000 Q slot print_timing: id  0 | task 7 | total time = 2.0 ms / 3 tokens",
    "[42027] 0.01.000.000 I slot print_timing: id  0 | task 7 | total time = 2.0 ms / 3 tokens",
    "slot print_timing: id  0 | task 7 | total time = 2.0 ms / 3 tokens",
    "0.01.000.000 I print_info: file type = Q4_K",
    "0.01.000.000 I example_format: 'a",
]


@pytest.mark.parametrize("seed", range(6))
def test_crafted_windows(seed: int) -> None:
    rng = random.Random(seed)
    tagged = 0
    for _ in range(150):
        # mostly the usual lines, now and then one the shortcut must not take
        n = rng.randint(1, 60)
        lines = [_t(i, rng.choice(["I", "W", "E", "D", "T", ""] if rng.random() < 0.2 else "I"), rng.choice(POOL[:14]))
                 for i in range(n)]
        for _ in range(rng.choice([0, 0, 1, 2])):
            k = rng.randrange(n)
            lines[k] = _t(k, "I", rng.choice(POOL[14:])) if rng.random() < 0.6 else rng.choice(RAW)
        tagged += _check(lines)
    assert tagged > 50


def test_shortcut_values() -> None:
    lines = [_t(i, "I", s) for i, s in enumerate([
        "slot update_slots: id  0 | task 7 | new prompt, n_ctx_slot = 4096, n_keep = 0, task.n_tokens = 12",
        "srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200",
        "slot print_timing: id  0 | task 7 | prompt eval time = 1.0 ms / 2 tokens",
        "slot print_timing: id  0 | task 7 |        eval time = 3.0 ms / 4 tokens",
        "slot print_timing: id  0 | task 7 |       total time = 4.0 ms / 6 tokens",
        "slot      release: id  0 | task 7 | stop processing: n_tokens = 6, truncated = 0",
        "srv  update_slots: all slots are idle",
    ])]
    text = pl.Series(lines)
    assert llamacpp._tagged_starts(text) is not None
    assert llamacpp.record_starts(text).to_list() == [True, False, False, False, False, True, True]
    # a header makes its parts continue it: the anatomy's answer
    header = pl.Series([*lines[:2], _t(2, "I", "slot print_timing: id  0 | task 7 | "), *lines[2:]])
    assert llamacpp._tagged_starts(header) is None
    assert llamacpp.record_starts(header).to_list() == llamacpp._anatomy_starts(header).to_list()
