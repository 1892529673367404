"""The cheaper readings of a llama.cpp line's prefix, and of a chunk's timing roles, say what
the general readings say:

- the relative time `M.SS.mmm.uuu ` read as one number from its whole match (the general
  reading: its four groups captured, the level letter a fifth), and the level letter and the
  body's start from the same match;
- a chunk whose lines all open with the relative time leaves out the lead and router-prefix
  cuts (`_header`), and the first pass over a file (`_relative`) reads such lines as they are;
- a chunk without a timing header (`slot print_timing:` with nothing after the task) leaves
  out the pairing of continuation lines with their header.

Each compared with the general reading on every line of the llama.cpp fixtures and sample
logs, on near misses and on generated lines."""

from __future__ import annotations

import contextlib
import re

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.engines.llamacpp import parser as P

from tests.helpers.common import engine_logs

# the general reading of the relative time: its groups, and the level letter after it
GROUPS = r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) (?:([IWEDT]) )?"


def general_timed_head(df: pl.DataFrame) -> pl.DataFrame:
    """`_timed_head` by the four groups: what `_header` read before (`_g` the match, `_g1` the
    level letter, `_rel` the time)."""
    g = pl.col("_groups")
    df = df.with_columns(pl.col("_body").str.extract_groups(GROUPS).alias("_groups"))
    f = lambda i: g.struct.field(str(i)).cast(pl.Int64, strict=False)  # noqa: E731
    # the minutes, 2 + 3 + 3 digits, 3 dots, a space; and the level letter with its space
    length = g.struct.field("1").str.len_chars() + 12 + pl.when(g.struct.field("5").is_not_null()).then(2).otherwise(0)
    return df.with_columns(
        pl.col("_body").str.slice(0, length).alias("_g"),
        g.struct.field("5").alias("_g1"),
        pl.when(f(1) < 10_000_000).then(((f(1) * 60 + f(2)) * 1000 + f(3)) * 1000 + f(4)).alias("_rel"),
    ).drop("_groups")


@contextlib.contextmanager
def general_reading():
    """`_header` as it read every chunk before the shortcuts: the relative time by its groups,
    and the lead and router-prefix cuts always tried."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(P, "_timed_head", general_timed_head)
        mp.setattr(P, "_opens_timed", lambda text: False)
        yield


def assert_prefix_reads_the_same(texts: list[str]) -> None:
    s = pl.Series(texts, dtype=pl.String)
    got = P._header(s)
    with general_reading():
        want = P._header(s)
    assert got.equals(want), [
        (t, g, w) for t, g, w in zip(texts, got.rows(), want.rows()) if g != w
    ][:5]
    assert P._relative(s).equals(want["_rel"], check_names=False)
    assert P._relative_apart(s).equals(want["_rel"], check_names=False)
    # and Python's reading of the lines that open with the time (those with a colour code are
    # read once the codes are cut)
    for t, rel, lvl, body in zip(texts, got["_rel"], got["_lvl"], got["_body"]):
        if rel is not None and not re.search(r"\x1b|#033|\[", t) and (m := re.match(GROUPS, t)):
            minutes, s_, ms, us = map(int, m.groups()[:4])
            assert (rel, lvl, body) == ((((minutes * 60 + s_) * 1000 + ms) * 1000 + us), m.group(5), t[m.end():])


def logged_files() -> list[list[str]]:
    """The lines of each llama.cpp log of tests/fixtures and sample_logs."""
    return [p.read_text(errors="replace").splitlines() for p in engine_logs("llamacpp")]


def test_logged_lines_read_the_same():
    files = logged_files()
    assert len(files) >= 60
    timed = 0
    for lines in files:
        if not lines:
            continue
        assert_prefix_reads_the_same(lines)  # the file as one chunk, as the parser reads it
        # its lines that open with a relative time as a chunk of their own: the shortcut
        opening = [line for line in lines if line[:1].isdigit()]
        if opening:
            assert_prefix_reads_the_same(opening)
            timed += P._header(pl.Series(opening))["_rel"].null_count() == 0
    # (the shortcut taken on many of them)
    assert timed >= 10


NEAR_MISSES = [
    "0.00.000.000 I x", "0.00.000.000 x", "0.00.000.000 Ix", "0.00.000.000 I", "0.00.000.000 I ",
    "0.00.000.000  I x", "0.00.000.000 X x", "0.00.000.000 T slot a: id  0 | task 1 | b",
    "12.34.567.890 W srv  x: y", "59.59.999.999 E  x", "0.99.999.999 D x",
    "00000000000000000000000001.00.000.000 I a", "9999999.59.999.999 I a", "10000000.00.000.000 I a",
    "99999999999.00.000.000 I a", "999999999999999999999.00.000.000 I a",
    "\u0661.00.000.000 I a", "1.0\u0661.000.000 I a", "1.00.000.00\u0661 I a",
    "1.00.000.00 I a", "1.00.000.0000 I a", ".00.000.000 I a", "1.00.000.000", "1.00.000.000I a", "1.00.000 I a",
    "\x1b[32m0.01.000.000 I srv  x: y\x1b[0m", "0.01.000.000 \x1b[32mI srv  x: y", "0.01.000.000 I \x1b[1msrv  x: y",
    "[  42] 3.00.000.001 W slot a: id  1 | task 2 | b", "I slot x: id  0 | task 1 | y", "W srv  x: y",
    "llama-Qwen:[1351]: 0.01.000.000 I srv  x: y", "svc | 0.01.000.000 I srv  x: y", " 0.01.000.000 I x",
    "  0.01.000.000 I x", "1.2.3.4 no", "", "prompt eval time =  1.00 ms /  2 tokens",
]


@pytest.mark.parametrize("first", ["", "0.00.000.001 I srv  load: a", "not timed"])
def test_near_misses_read_the_same(first):
    # together, each after a timed line (the shortcut tried), and each on its own
    assert_prefix_reads_the_same([first, *NEAR_MISSES] if first else NEAR_MISSES)
    for line in NEAR_MISSES:
        assert_prefix_reads_the_same([first, line] if first else [line])
    # (the near misses hold times the general reading takes and times it does not)
    with general_reading():
        rel = P._header(pl.Series(NEAR_MISSES))["_rel"]
    assert 10 <= rel.null_count() <= len(NEAR_MISSES) - 10


PIECES = st.tuples(
    st.sampled_from(["", " ", "[ 7] ", "\x1b[2m", "x: ", "\u0661"]),
    st.sampled_from(["0", "7", "59", "0001", "123", "9999999", "10000000", "99999999999999", ""]),
    st.sampled_from([".00", ".59", ".99", ".5", ".0\u0661", ""]),
    st.sampled_from([".000", ".999", ".12", ""]),
    st.sampled_from([".000", ".001", ".1234", ""]),
    st.sampled_from([" ", "  ", "", "\t"]),
    st.sampled_from(["I ", "W ", "E ", "D ", "T ", "X ", "I", "", "\x1b[32mI "]),
    st.sampled_from(["slot update_slots: id  3 | task 9 | new prompt", "srv  x: y", "", " x", "I a"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, min_size=1, max_size=12), st.booleans())
def test_generated_lines_read_the_same(cases, timed_first):
    lines = ["".join(c) for c in cases]
    assert_prefix_reads_the_same((["1.00.000.000 I srv  a: b"] if timed_first else []) + lines)


# ---------------------------------------------------------------------------------------
# a chunk without a timing header

# a header with its parts to come as lines of their own (2024-09..2026-05): after every line of
# a chunk, it makes the chunk one that holds a header, and changes none of the lines before it
HEADER = "slot print_timing: id  0 | task 1 | "


def classified(lines: list[str]) -> pl.DataFrame:
    return P._classified(P._header(pl.Series(lines, dtype=pl.String)).with_columns(
        pl.Series("line", range(1, len(lines) + 1), dtype=pl.Int64)))


def assert_roles_read_the_same(lines: list[str]) -> bool:
    """Whether the chunk took the shortcut (no header); its roles those of the general reading."""
    got = classified(lines)
    want = classified([*lines, HEADER])
    assert want["_part"][-1] == "header"
    assert got.equals(want.head(len(lines)))
    return not (got["_part"] == "header").any()


def test_logged_chunks_without_a_header_read_the_same():
    files = [lines for lines in logged_files() if lines]
    shortcut = [assert_roles_read_the_same(lines) for lines in files]
    # (most files hold no header: the 2026 ones, the 2024 records)
    assert sum(shortcut) >= 20
    parts = sum(classified(lines)["_part"].is_not_null().sum() > 0 for lines, s in zip(files, shortcut) if s)
    assert parts >= 10


ROLE_NEAR_MISSES = [
    "0.20.000.000 I slot print_timing: id  0 | task 5 | prompt eval time =  10.00 ms /  20 tokens",
    "0.20.000.001 I slot print_timing: id  0 | task 5 |        eval time =  30.00 ms /   4 tokens",
    "0.20.000.002 I slot print_timing: id  0 | task 5 |       total time =  40.00 ms /  24 tokens",
    "0.20.000.003 I slot print_timing: id  0 | task 5 | x",
    "0.20.000.004 I slot print_timing: id  0 | task 5 |  ",
    "0.20.000.005 I slot print_timin: id  0 | task 5 | ",
    "0.20.000.006 I srv  print_timing: id  0 | task 5 | ",
    "prompt eval time =  10.00 ms /  20 tokens", "       eval time =  30.00 ms /   4 tokens", "[100B blob data]",
    "[  7] 0.20.000.007 I slot print_timing: id  1 | task 6 | prompt eval time =  1.00 ms /  2 tokens",
    '{"tid":"1","timestamp":1,"level":"INFO","function":"print_timings","line":1,"msg":"prompt eval time     =  1.00 ms /  2 tokens","id_slot":0,"id_task":3}',
]


def test_role_near_misses_read_the_same():
    assert_roles_read_the_same(ROLE_NEAR_MISSES)
    for line in ROLE_NEAR_MISSES:
        assert_roles_read_the_same([line])
    # a header among them: both readings are the general one, and agree
    assert not assert_roles_read_the_same([*ROLE_NEAR_MISSES[:3], HEADER, *ROLE_NEAR_MISSES[7:10]])
