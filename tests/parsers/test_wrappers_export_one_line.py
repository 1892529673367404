"""A one-line Grafana JSON download (parsers/wrappers/grafana.py) is decoded by a shortcut
that makes no eager call on its one row: what it gives is what the general reading of the
same block (the meta-line filter, the JSON test, the whole-array decode or the entry cutting)
gives, on real engine lines and on messages holding every kind of JSON escape; blocks that
are not one whole download are left to the general reading. The decode frame built from the
lines' columns is the one a select over them builds."""

from __future__ import annotations

import json

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from servelens.parsers.wrappers import _frame, grafana

from tests.helpers.wrapping_exports import POD, grafana_json
from tests.parsers.test_wrappers_exports import truth

# messages holding what JSON escapes: quotes, backslashes, a \uXXXX control character, a
# character outside the BMP (a surrogate pair when escaped), newlines, tabs, a `},{"line":`
ESCAPED = ['say "hi" \\ back\\slash', "bell \x07 and nul-ish \x01", "emoji \U0001F600 and é", "two\nlines\r\n",
           "tab\there", 'a },{"line": inside', "ends with a backslash \\"]


def one_line(text: str, line: int = 1, open_: bool = False) -> pl.DataFrame:
    df = _frame.start(pl.DataFrame({"line": [line], "text": [text]}))
    return df.with_columns(pl.lit(open_).alias("_open"))


def general(df: pl.DataFrame, common: str = "") -> pl.DataFrame:
    """The decode with the shortcut refused: the general reading alone."""
    orig = grafana._one_download
    grafana._one_download = lambda df: None
    try:
        return grafana.decode(df, common)
    finally:
        grafana._one_download = orig


def downloads():
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    yield "real", grafana_json(lines, times)
    esc = [*ESCAPED, *lines[:20]]
    t = times[: len(esc)]
    yield "escaped", grafana_json(esc, t)
    # (ensure_ascii: every non-ASCII character as \uXXXX, surrogate pairs included)
    rows = [{"line": ln, "timestamp": str(ts), "fields": {"pod": POD}} for ln, ts in zip(esc, t)]
    yield "ascii-escaped", json.dumps(rows[::-1], ensure_ascii=True)
    yield "spaced", json.dumps(rows[::-1])
    # entries without their `line` (their row keeps the entry's own JSON), a null entry
    yield "bare entries", json.dumps([{"line": "x", "timestamp": "2"}, {"timestamp": "1", "fields": {"pod": POD}}, None,
                                      {"line": "y", "timestamp": "3", "fields": {}}])


@pytest.mark.parametrize("name,text", list(downloads()), ids=[n for n, _ in downloads()])
@pytest.mark.parametrize("line", [1, 40])
def test_a_whole_download_is_decoded_as_the_general_reading_decodes_it(name, text, line):
    df = one_line(text, line)
    assert grafana._one_download(df) is not None  # (the shortcut is what is compared)
    got = grafana.decode(df)
    assert got.height > 1
    assert_frame_equal(got, general(df))
    common = '{"container":"server","namespace":"serving"}'
    assert_frame_equal(grafana.decode(df, common), general(df, common))


def near_misses():
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = grafana_json([*ESCAPED, *lines[:30]], times[: len(ESCAPED) + 30])
    yield "cut short", text[: len(text) * 2 // 3]
    yield "cut after an entry", text[: text.index('},{"line":', len(text) // 2) + 1]
    yield "empty array", "[]"
    yield "no entry list", '[{"line" "x"}]'
    yield "text row", "1781101425123\t2026-06-10T14:23:45.123Z\tINFO 06-10 14:23:45 hello"
    yield "meta line", 'Common labels: {"pod":"vllm-0"}'
    yield "blank", ""
    yield "leading space", " " + text
    yield "an object, not an array", text[1:-1]
    yield "not led by a line", json.dumps([{"timestamp": "1", "fields": {"pod": POD}}, {"line": "x", "timestamp": "2"}])
    yield "a field of another type", json.dumps([{"line": "y", "timestamp": "3", "fields": {"pod": [7]}}])


@pytest.mark.parametrize("name,text", list(near_misses()), ids=[n for n, _ in near_misses()])
@pytest.mark.parametrize("open_", [False, True])
def test_a_block_that_is_no_whole_download_is_read_as_before(name, text, open_):
    df = one_line(text, 1, open_)
    if name != "leading space":
        assert grafana._one_download(df) is None
    assert_frame_equal(grafana.decode(df), general(df))


def test_several_rows_are_never_taken_by_the_shortcut():
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = grafana_json(lines[:10], times[:10])
    df = _frame.start(pl.DataFrame({"line": [1, 2], "text": [text, text]}))
    assert grafana._one_download(df) is None
    assert grafana.decode(df).height == 20


@pytest.mark.parametrize("texts", [["a", None, "c"], ["x" * 100_000], [], [None]])
def test_the_decode_frame_is_the_one_a_select_builds(texts):
    lines = pl.DataFrame({"line": pl.int_range(1, len(texts) + 1, eager=True), "text": pl.Series(texts, dtype=pl.String)})
    want = lines.select(
        "line", pl.col("text").fill_null(""), pl.lit(1, pl.Int32).alias("_n"), pl.lit(None, _frame.WTS).alias("_wts"),
        pl.lit(None, pl.String).alias("_stream"), pl.lit(False).alias("_open"), pl.lit(None, pl.String).alias("_pre"))
    assert_frame_equal(_frame.start(lines), want)


@pytest.mark.parametrize("reading", ["shortcut", "general", "cut short"])
def test_entries_without_their_line_keep_only_their_own_json(reading):
    """Each entry that lacks `line` once copied the whole download as its text: 20,000 of
    them in a 360 KB line made a 7 GB column. Each keeps its own entry now."""
    n = 20_000
    text = '[{"line": "x", "timestamp": "2"},' + ",".join(['{"timestamp":"1"}'] * n) + ',{"line":"y"},null]'
    if reading == "cut short":
        text = text[: len(text) - len(',{"line":"y"},null]') + len(',{"line":"y')]
    df = one_line(text)
    got = general(df) if reading != "shortcut" else grafana.decode(df)
    texts = got["text"].to_list()
    bare = '{"line":null,"timestamp":"1","fields":null}'
    if reading == "cut short":
        # cut into entries at each `},{"line":`: the bare ones stay in one broken piece
        # (kept once), and the unfinished entry keeps its own piece
        assert texts.count(bare) == 0 and '{"line":"y' in texts
        assert got["text"].str.len_bytes().sum() < 2 * len(text)
    else:
        assert texts.count(bare) == n and {"x", "y", "null"} <= set(texts) and len(texts) == n + 3
        assert got["text"].str.len_bytes().sum() < 50 * n  # never the download's length per row
