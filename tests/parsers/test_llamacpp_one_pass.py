"""The cheap readings of llama.cpp's common line parts say what the general readings say:

- the relative time and the level letter after it, read by one pattern (the level letter
  was a test of the two characters after the time);
- the usual release line `stop processing: n_tokens = N, truncated = T`, read by one
  anchored pattern (the field patterns still read any other release line).

On every such line of the fixtures and sample logs, on generated lines and on near misses,
the parsed values are those the line's own text gives, read here by Python's `re` one
field at a time."""

from __future__ import annotations

import json
import re

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.common import REPO, SAMPLE_LOGS, logged_messages, parsed_lines

LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "D": "DEBUG", "T": "DEBUG"}
REL = re.compile(r"(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")


def events(texts: list[str]) -> pl.DataFrame:
    ev = parsed_lines("llamacpp", texts).sort("line")
    assert ev.height == len(texts)
    return ev


def attrs(row: dict) -> dict:
    return json.loads(row["attrs"]) if row["attrs"] else {}


# ---------------------------------------------------------------------------------------
# the relative time and the level letter


def expected_head(line: str) -> tuple:
    """(rel_s, level letter) as the line's text gives them: the time's four numbers (minutes
    past ten million are damage: no time), then a level letter and a space after the time,
    or, without a time, a level letter before a server tag."""
    m = REL.match(line)
    rel = None
    if m:
        minutes, s, ms, us = (int(g) for g in m.groups())
        if minutes < 10_000_000:
            rel = ((minutes * 60 + s) * 1000 + ms) * 1000 + us
    if rel is not None:
        rest = line[m.end():]
        letter = rest[0] if len(rest) >= 2 and rest[0] in "IWEDT" and rest[1] == " " else None
    else:
        letter = line[0] if re.match(r"[IWEDT] (?:slot|srv|que|res|cmn) ", line) else None
    return (None if rel is None else round(rel / 1e6, 6)), letter


def parsed_heads(lines: list[str]) -> list[tuple]:
    ev = events(lines)
    return [(attrs(r).get("rel_s"), r["level"]) for r in ev.iter_rows(named=True)]


def assert_heads(lines: list[str]) -> None:
    got = parsed_heads(lines)
    diff = []
    for line, (rel_s, level) in zip(lines, got):
        want_rel, letter = expected_head(line)
        # (a line without a letter may take a level from its message: an error, a cancel)
        if rel_s != want_rel or (letter is not None and level != LEVELS[letter]):
            diff.append((line, (rel_s, level), (want_rel, letter)))
    assert diff == []


def logged_timed_lines() -> list[str]:
    """The lines of tests/fixtures and sample_logs that open with a relative time, each
    file's lines in order (as the parser reads them), the files one after another."""
    out = []
    for d in (REPO / "tests" / "fixtures", SAMPLE_LOGS):
        for p in sorted(d.rglob("*.log")):
            for line in p.read_bytes().decode("utf-8", errors="replace").splitlines():
                if REL.match(line):
                    out.append(line.rstrip("\r"))
    return out


def test_logged_timed_lines_read_the_same():
    lines = logged_timed_lines()
    assert len(lines) >= 200
    assert len({line.split(" ", 2)[1] for line in lines if len(line.split(" ", 2)) > 2}) >= 3
    assert_heads(lines)


HEAD_NEAR_MISSES = [
    "0.00.001.000  I slot update_slots: id  0 | task 1 | hello",
    "0.00.001.000 X slot update_slots: id  0 | task 1 | hello",
    "0.00.001.000 I",
    "0.00.001.000 Islot update_slots: id  0 | task 1 | hello",
    "0.0.001.000 I slot update_slots: id  0 | task 1 | hello",
    "0.00.01.000 I slot update_slots: id  0 | task 1 | hello",
    "0.00.001.000I slot update_slots: id  0 | task 1 | hello",
    "12345678.00.000.000 I slot update_slots: id  0 | task 1 | hello",
    "9999999.59.999.999 T slot update_slots: id  0 | task 1 | hello",
    "I slot update_slots: id  0 | task 1 | hello",
    "W srv  log_server_r: done request: GET /health 127.0.0.1 200",
    "I hello",
    "E  slot update_slots: id  0 | task 1 | hello",
    "0.00.001.000 D D slot update_slots: id  0 | task 1 | hello",
    "0.00.001.000 W",
]


def test_head_near_misses_read_the_same():
    assert_heads(HEAD_NEAR_MISSES)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(
    st.integers(0, 10**8), st.integers(0, 99), st.integers(0, 999), st.integers(0, 999),
    st.sampled_from(["I ", "W ", "E ", "D ", "T ", "", "X ", "I  ", "i "]),
    st.sampled_from(["slot update_slots: id  0 | task 7 | hello", "srv  log_server_r: done request: GET / 1.2.3.4 200", "main: loading model", ""]),
), min_size=1, max_size=12))
def test_generated_heads_read_the_same(cases):
    assert_heads([f"{m}.{s:02d}.{ms:03d}.{us:03d} {lvl}{rest}" for m, s, ms, us, lvl, rest in cases])


# ---------------------------------------------------------------------------------------
# the release line

# the shape the parser reads in one pass (pinned here: the test of its coverage below)
RELEASE = re.compile(r"stop processing: n_tokens = [0-9]+, truncated = [0-9]+")
INT64_MAX = 2**63 - 1


def field(pattern: str, message: str) -> int | None:
    m = re.search(pattern, message)
    # (a number past Int64 is no number)
    return int(m.group(1)) if m and int(m.group(1)) <= INT64_MAX else None


def expected_release(message: str) -> tuple:
    truncated = field(r"truncated = ([0-9]+)", message)
    return field(r"n_(?:tokens|past) = ([0-9]+)", message), None if truncated is None else truncated != 0


def parsed_releases(messages: list[str], between: list[str] = ()) -> list[tuple]:
    texts = []
    for i, m in enumerate(messages):
        texts.append(f"0.{i % 60:02d}.000.000 I slot      release: id  0 | task {i} | {m}")
        texts.extend(between)
    ev = events(texts)
    rows = ev.filter(pl.col("message").str.starts_with("stop processing")).iter_rows(named=True)
    out = []
    for r in rows:
        assert r["event"] == "request_finished"
        a = attrs(r)
        out.append((a.get("n_tokens_used"), a.get("truncated")))
    assert len(out) == len(messages)
    return out


def assert_releases(messages: list[str]) -> None:
    want = [expected_release(m) for m in messages]
    assert [(m, g, w) for m, g, w in zip(messages, parsed_releases(messages), want) if g != w] == []


def test_logged_release_lines_read_the_same_and_most_are_of_the_shape():
    messages = logged_messages("stop processing", r"^.*?\| (stop processing.*)$")
    assert len(messages) >= 20
    assert_releases(messages)
    # the commonest form of the logs is the shape: the one-pass reading is what reads it
    shaped = [m for m in messages if RELEASE.fullmatch(m)]
    assert len(shaped) * 2 >= len(messages)


RELEASE_NEAR_MISSES = [
    "stop processing: n_tokens = 827, truncated = 0 ",
    "stop processing: n_tokens = 827, truncated = 1, extra = 2",
    "stop processing: n_tokens = 827,truncated = 0",
    "stop processing: n_tokens = , truncated = 0",
    "stop processing: truncated = 1, n_tokens = 5",
    "stop processing: n_past = 5, truncated = 0",
    "stop processing: n_tokens = 5",
    "stop processing: n_tokens = 5, truncated = 2",
    "stop processing: n_tokens = 99999999999999999999, truncated = 0",
    "stop processing: n_tokens = 12, truncated = 99999999999999999999",
    "stop processing:  n_tokens = 12, truncated = 0",
    "stop processing: n_tokens = 12, truncated = 0, n_tokens = 13",
    "stop processing, n_tokens = 12, truncated = 1",
]


def test_release_near_misses_read_the_same():
    assert_releases(RELEASE_NEAR_MISSES)
    # three are of the shape (a count past Int64, a truncated count past 1): the one-pass
    # reading's own edges; the others are read by the field patterns
    assert len([m for m in RELEASE_NEAR_MISSES if RELEASE.fullmatch(m)]) == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(
    st.integers(0, 10**7), st.integers(0, 3), st.sampled_from(["", " ", ", x = 1", "x"]),
    st.sampled_from(["n_tokens", "n_past"]),
), min_size=1, max_size=12))
def test_generated_release_lines_read_the_same(cases):
    assert_releases([f"stop processing: {key} = {n}, truncated = {t}{tail}" for n, t, tail, key in cases])


def test_the_release_shape_is_read_the_same_among_the_other_lines_of_a_request():
    messages = ["stop processing: n_tokens = 455, truncated = 0"] + RELEASE_NEAR_MISSES[:3]
    between = [
        "0.59.000.001 I srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200",
        "0.59.000.002 I slot print_timing: id  1 | task 90 | n_decoded =    197, tg =  65.67 t/s, tg_3s =  65.67 t/s",
    ]
    assert parsed_releases(messages, between) == [expected_release(m) for m in messages]
