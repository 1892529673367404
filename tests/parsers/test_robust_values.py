"""Extreme values in every numeric and time field of every engine's real lines: the parser
never raises, every line stays covered by exactly one event span, and no impossible value
reaches the store (domain.py).

The lines are every fixture line of every registered engine (tests/fixtures/<engine>/), so
a parser added later is tested by adding its fixtures. A "field" is any run of digits in the
line (counts, durations, percentages, ids, times); dates get impossible years too."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers import ENGINES, get_parser
from servelens.parsers.base import (
    ParseContext,
    check_events,
    finalize,
    lines_frame,
    parse_lines,
    uncovered_lines,
)
from servelens.parsers.domain import MAX_TS, MIN_TS, NUMERIC_RULES

FIX = Path(__file__).parents[1] / "fixtures"
ENGINE_LINES = {
    name: sorted(
        {ln for p in (FIX / name).glob("*.log") for ln in p.read_text(errors="replace").split("\n") if ln.strip()}
    )
    for name in ENGINES
    if (FIX / name).is_dir()
}
NUMBER = re.compile(r"\d+(?:\.\d+)?")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}")
EXTREME = [
    "9223372036854775808",  # 2**63: one past Int64
    "18446744073709551616",
    "99999999999999999999999999999999",
    "-1",
    "-9223372036854775809",
    "0",
    "000000000000000000000000000000001",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "1e400",
    "1.7976931348623157e+309",
    "",
    "-0.5",
    "4294967296",
    "2147483648",
]
YEARS = ["-2026", "0000", "+12026", "9999", "0001", "1969", "99999"]

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def mutate(line: str, picks: list[tuple[int, str]], year: str | None) -> str:
    """Replace some digit runs of `line` by extreme values (and a date's year)."""
    spans = [m.span() for m in NUMBER.finditer(line)]
    out, last = [], 0
    chosen = {i % len(spans): v for i, v in picks} if spans else {}
    for i, (a, b) in enumerate(spans):
        if i in chosen:
            out += [line[last:a], chosen[i]]
            last = b
    out.append(line[last:])
    text = "".join(out)
    if year is not None:
        text = DATE.sub(lambda m: year + m.group(0)[4:], text, count=1)
    return text


def parse_raw(engine: str, texts: list[str]) -> pl.DataFrame:
    """The engine's own parse (no failure isolation: a raise is a bug this test finds)."""
    ctx = ParseContext(engine=engine, source="p", instance="p", year=2026)
    parser = get_parser(engine)
    ev = finalize(parser.parse(lines_frame(texts), ctx), ctx, carry=getattr(parser, "CARRY_FORWARD", ()))
    check_events(ev)
    return ev


def assert_domain(ev: pl.DataFrame) -> None:
    ts = ev["ts"].drop_nulls()
    if len(ts):
        assert ts.min() >= MIN_TS and ts.max() < MAX_TS
    for name, (lo, hi) in NUMERIC_RULES.items():
        col = ev[name].drop_nulls()
        if not len(col):
            continue
        if col.dtype.is_float():
            assert col.is_finite().all(), name
        if lo is not None:
            assert col.min() >= lo, (name, col.min())
        if hi is not None:
            assert col.max() <= hi, (name, col.max())
    for a in ev["attrs"].drop_nulls():
        assert isinstance(json.loads(a), dict)
    # every stored time converts to a Python datetime (the dashboard and report do)
    ev["ts"].to_list()


mutation = st.tuples(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from(EXTREME)), min_size=1, max_size=4),
    st.one_of(st.none(), st.sampled_from(YEARS)),
)


@pytest.mark.parametrize("engine", sorted(ENGINE_LINES))
@SETTINGS
@given(data=st.data())
def test_extreme_values_in_every_field(engine, data):
    pool = ENGINE_LINES[engine]
    idx = data.draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=12))
    texts = []
    for i in idx:
        picks, year = data.draw(mutation)
        texts.append(mutate(pool[i], picks, year))
    ev = parse_raw(engine, texts)
    assert uncovered_lines(ev, 1, len(texts)) == []
    assert_domain(ev)


@pytest.mark.parametrize("engine", sorted(ENGINE_LINES))
def test_every_field_of_every_line_at_2_pow_63(engine):
    """Deterministic sweep: each digit run of each fixture line, in turn, set to 2**63 and
    to -1 (the property test samples; this one visits every field once)."""
    texts = []
    for line in ENGINE_LINES[engine]:
        for i in range(len(NUMBER.findall(line))):
            texts.append(mutate(line, [(i, "9223372036854775808")], None))
            texts.append(mutate(line, [(i, "-1")], None))
    for start in range(0, len(texts), 500):
        chunk = texts[start : start + 500]
        ev = parse_raw(engine, chunk)
        assert uncovered_lines(ev, 1, len(chunk)) == []
        assert_domain(ev)


def test_trtllm_batch_count_past_int64_is_null_and_noted():
    """The issue's line: the count past 2**63 is null with its text kept; the file goes on."""
    from servelens.parsers.text import parse_text

    ev = parse_text(
        "trtllm",
        "[TensorRT-LLM][INFO] Inference batch: 16 requests, total_input_tokens=1024, total_output_tokens=9223372036854775808\n"
        "[TensorRT-LLM][INFO] Inference batch: 8 requests, total_input_tokens=512, total_output_tokens=40\n",
    )
    assert ev["event"].to_list() == ["batch", "batch"]
    assert ev["batch_size"].to_list() == [16, 8]
    assert ev["prompt_tokens"].to_list() == [1024, 512]
    assert ev["output_tokens"].to_list() == [None, 40]
    assert ev["batch_tokens"].to_list() == [None, 552]
    assert json.loads(ev["attrs"][0])["invalid"] == {"output_tokens": "9223372036854775808"}


@pytest.mark.parametrize("year", ["-2026", "0000", "+12026"])
def test_tgi_json_impossible_year_is_null_and_time_inferred(year):
    from servelens.parsers.text import parse_text

    line = '{"timestamp":"%s-05-12T08:01:39.331095Z","level":"INFO","fields":{"message":"Waiting for shard to be ready..."},"target":"text_generation_launcher"}'
    ev = parse_text("tgi", "\n".join([line % "2026", line % year, line % "2026"]) + "\n")
    assert ev.height == 3
    assert ev["event"].to_list() == ["log"] * 3
    # the bad time is dropped and inherited from the line before, as for a line without one
    assert ev["ts"].to_list()[1] == dt.datetime(2026, 5, 12, 8, 1, 39, 331095, tzinfo=dt.timezone.utc)
    assert ev["ts_inferred"].to_list() == [False, True, False]
    assert json.loads(ev["attrs"][1])["invalid"]["ts"].startswith(year)


def test_impossible_values_become_null_with_a_note():
    """Negative counts, KV usage of 150%, NaN throughput: null, noted, counted."""
    ctx = ParseContext(engine="vllm", source="p", instance="p", year=2026)
    raw = pl.DataFrame(
        {
            "line": [1, 2, 3, 4],
            "event": ["engine_stats"] * 4,
            "running": [3, -2, 5, 1],
            "waiting": [0, 1, -7, 2],
            "kv_usage": [0.5, 1.5, -0.01, 1.0],
            "gen_tps": [10.0, float("nan"), float("inf"), 12.5],
            "batch_size": [4, 4, -1, 2],
            "attrs": [None, '{"a":1}', None, '{"b":"x"}'],
        }
    )
    ev = finalize(raw, ctx)
    check_events(ev)
    assert ev["running"].to_list() == [3, None, 5, 1]
    assert ev["waiting"].to_list() == [0, 1, None, 2]
    assert ev["kv_usage"].to_list() == [0.5, None, None, 1.0]
    assert ev["gen_tps"].to_list() == [10.0, None, None, 12.5]
    assert ev["batch_size"].to_list() == [4, 4, None, 2]
    attrs = [json.loads(a) if a else None for a in ev["attrs"]]
    assert attrs[0] is None
    assert attrs[1] == {"a": 1, "invalid": {"running": "-2", "kv_usage": "1.5", "gen_tps": "NaN"}}
    assert attrs[2] == {"invalid": {"waiting": "-7", "kv_usage": "-0.01", "gen_tps": "inf", "batch_size": "-1"}}
    assert attrs[3] == {"b": "x"}
    assert ctx.invalid == {"running": 1, "waiting": 1, "kv_usage": 2, "gen_tps": 2, "batch_size": 1}


class _Fragile:
    """A parser that raises on any chunk holding a line with `BOOM`."""

    NAME = "fragile"

    @staticmethod
    def record_starts(text: pl.Series) -> pl.Series:
        return ~text.str.starts_with(" ")  # indented lines continue a record

    @staticmethod
    def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
        if lines["text"].str.contains("BOOM").any():
            raise ValueError("cannot take BOOM")
        return lines.select("line", pl.lit("log").alias("event"), pl.col("text").alias("message"))


def test_a_failing_record_costs_only_itself():
    texts = [f"line {i}" for i in range(1, 101)]
    texts[40] = "record BOOM"
    texts[41] = "  its continuation"
    texts[90] = "BOOM again"
    ctx = ParseContext(engine="fragile", source="p", instance="p", year=2026)
    ev = parse_lines(_Fragile, lines_frame(texts), ctx)
    check_events(ev)
    assert uncovered_lines(ev, 1, 100) == []
    bad = ev.filter(pl.col("event") == "unparsed")
    assert bad["line"].to_list() == [41, 91]
    assert bad["n_lines"].to_list() == [2, 1]
    assert bad["message"].to_list() == ["record BOOM\n  its continuation", "BOOM again"]
    assert "cannot take BOOM" in json.loads(bad["attrs"][0])["parse_error"]
    assert ev.filter(pl.col("event") == "log").height == len(texts) - 3  # all but the bad records' lines


def _mutations(line: str) -> st.SearchStrategy[str]:
    """A real line cut, spliced, with characters dropped, doubled or replaced."""
    n = len(line)
    pos = st.integers(0, max(n, 1))
    junk = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=12)
    return st.one_of(
        pos.map(lambda i: line[:i]),  # cut short
        pos.map(lambda i: line[i:]),  # start lost
        st.tuples(pos, junk).map(lambda t: line[: t[0]] + t[1] + line[t[0] :]),  # inserted
        st.tuples(pos, pos).map(lambda t: line[: min(t)] + line[max(t) :]),  # a span dropped
        st.tuples(pos, junk).map(lambda t: line[: t[0]] + t[1] + line[t[0] + len(t[1]) :]),  # overwritten
        pos.map(lambda i: line[:i] + line[i:i + 20] * 3 + line[i + 20 :]),  # doubled
        st.just(line.upper()),
        st.just(line.replace('"', "")),
        st.just(line.replace(":", "")),
    )


random_line = st.text(
    st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=200
)


@pytest.mark.parametrize("engine", sorted(ENGINE_LINES))
@SETTINGS
@given(data=st.data())
def test_fuzz_random_and_mutated_lines(engine, data):
    """Random text and mutated real lines (of this engine and the others), mixed: the
    parser never raises and covers every line with exactly one span."""
    every = [ln for lines in ENGINE_LINES.values() for ln in lines]
    texts = []
    for _ in range(data.draw(st.integers(1, 15))):
        kind = data.draw(st.sampled_from(["random", "own", "other", "real"]))
        if kind == "random":
            texts.append(data.draw(random_line))
        else:
            pool = ENGINE_LINES[engine] if kind in ("own", "real") else every
            line = data.draw(st.sampled_from(pool))
            texts.append(line if kind == "real" else data.draw(_mutations(line)))
    ev = parse_raw(engine, texts)
    assert uncovered_lines(ev, 1, len(texts)) == []
    assert_domain(ev)
