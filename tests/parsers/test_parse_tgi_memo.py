"""The TGI parser keeps what it read of each `GenerateParameters` dump (`max_tokens` and
`sampling_params`) for the rest of the process: a dump answered from that memo says what a
dump read anew says, on every dump of the fixtures and sample logs (text and JSON), on
generated dumps and on near misses; and a file parses the same with the memo empty, full,
overflowing or bypassed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.base import ParseContext, lines_frame
from servelens.parsers.engines.tgi import parser as tgi

from tests.helpers.common import engine_logs, logged_messages

ROOT = Path(__file__).parents[2]


def logged_dumps() -> list[str]:
    """The parameters dumps of the logged lines, found by their own regexes: the text span
    from its name to the first span field after the dump, and the JSON span's string."""
    text = logged_messages("{parameters=", r"^.*?([A-Za-z0-9_]+\{parameters=.*?) total_time=")
    quoted = logged_messages('"parameters":"', r'^.*?"parameters":("(?:[^"\\]|\\.)*")')
    return text + [json.loads(q) for q in quoted]


def read_both(dumps: list[str | None]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The dumps read anew, then through the memo twice (empty, then holding them all)."""
    series = pl.Series(dumps, dtype=pl.String)
    anew = tgi.read_parameters(series, memo=False).sort("_params", nulls_last=True)
    tgi.forget_parameters()
    cold = tgi.read_parameters(series).sort("_params", nulls_last=True)
    warm = tgi.read_parameters(series).sort("_params", nulls_last=True)
    return anew, cold, warm


def assert_same(dumps: list[str | None]) -> None:
    anew, cold, warm = read_both(dumps)
    assert cold.schema == anew.schema == warm.schema
    assert cold.rows() == anew.rows()
    assert warm.rows() == anew.rows()


def test_logged_dumps_read_from_the_memo_as_anew():
    dumps = logged_dumps()
    assert len(set(dumps)) > 5
    assert_same(dumps)
    _, cold, _ = read_both(dumps)
    # the logged dumps say something: most give a max_tokens and sampling parameters
    assert cold["max_tokens"].drop_nulls().len() > len(set(dumps)) // 2
    assert cold["sampling_params"].drop_nulls().len() > len(set(dumps)) // 2


NEAR_MISSES = [
    None,
    "",
    "generate{parameters=GenerateParameters { }",
    "generate{parameters=GenerateParameters { max_new_tokens: None, seed: None }",
    "generate{parameters=GenerateParameters { max_new_tokens: Some(20), seed: None }",
    "generate{parameters=GenerateParameters { max_new_tokens: Some(20), seed: None } ",
    "generate{parameters=GenerateParameters { max_new_tokens: 20, temperature: 0.5 }",
    "generate{parameters=GenerateParameters { max_new_tokens: Some(99999999999999999999) }",
    'generate{parameters=GenerateParameters { adapter_id: Some("a\\"b"), top_k: Some(-1) }',
    "GenerateParameters { best_of: Some(2), do_sample: true, watermark: false, details: maybe }",
    "generate{parameters=GenerateParameters { temperature: Some(NaN), top_p: Some(inf) }",
    "generate{parameters=GenerateParameters { temperature: Some(1e-7), top_p: Some(.5) }",
    "generate{parameters=GenerateParameters { stop: [\"µ\", \"\\n\"], grammar: None }",
]


def test_near_misses_read_from_the_memo_as_anew():
    assert_same(NEAR_MISSES)


names = st.sampled_from(
    ["best_of", "temperature", "repetition_penalty", "top_k", "top_p", "do_sample", "max_new_tokens",
     "return_full_text", "truncate", "watermark", "details", "seed", "top_n_tokens", "adapter_id", "stop"]
)
values = st.one_of(
    st.just("None"), st.integers(-5, 10**6).map(str), st.floats(allow_nan=True).map(repr),
    st.booleans().map(lambda b: str(b).lower()), st.integers(0, 10**20).map(lambda i: f"Some({i})"),
    st.floats(0, 2).map(lambda f: f"Some({f})"), st.text(max_size=8).map(lambda t: f"Some({json.dumps(t)})"),
)
dump = st.lists(st.tuples(names, values), max_size=12).map(
    lambda kv: "generate{parameters=GenerateParameters { " + ", ".join(f"{k}: {v}" for k, v in kv) + " }"
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(dump, min_size=1, max_size=20))
def test_generated_dumps_read_from_the_memo_as_anew(dumps):
    assert_same(dumps)


def parse_files(paths: list[Path]) -> list[pl.DataFrame]:
    out = []
    for p in paths:
        ctx = ParseContext(engine="tgi", source=str(p), instance=p.stem, year=2026)
        out.append(tgi.parse(lines_frame(p.read_text(errors="replace").splitlines()), ctx))
    return out


def test_files_parse_the_same_with_the_memo_empty_full_overflowing_or_bypassed(monkeypatch):
    paths = engine_logs("tgi")
    assert len(paths) > 5
    tgi.forget_parameters()
    cold = parse_files(paths)
    assert len(tgi.remembered_parameters()) > 0
    warm = parse_files(paths)
    # a memo smaller than a file's dumps: cleared on the way, never wrong
    monkeypatch.setattr(tgi, "PARAMS_MEMO_DUMPS", 1)
    tgi.forget_parameters()
    overflowing = parse_files(paths)
    # every dump longer than the memo keeps: read at each call, none kept
    monkeypatch.setattr(tgi, "PARAMS_MEMO_DUMPS", 4096)
    monkeypatch.setattr(tgi, "PARAMS_MEMO_DUMP_BYTES", 0)
    tgi.forget_parameters()
    too_long = parse_files(paths)
    assert tgi.remembered_parameters() <= {None}
    # more distinct dumps in a call than the memo takes: read there
    monkeypatch.setattr(tgi, "PARAMS_MEMO_ROWS", 0)
    bypassed = parse_files(paths)
    for got in (warm, overflowing, too_long, bypassed):
        for a, b in zip(cold, got, strict=True):
            assert a.equals(b, null_equal=True)


@pytest.mark.parametrize("name", ["success_text.log", "json.log"])
def test_a_memo_hit_gives_the_requests_their_parameters(name):
    """Parsed twice (the second time every dump from the memo), a file's requests keep
    their max_tokens and sampling_params, which the dumps on their lines say."""
    path = ROOT / "tests" / "fixtures" / "tgi" / name
    tgi.forget_parameters()
    first, again = parse_files([path])[0], parse_files([path])[0]
    req = again.filter(pl.col("event") == "request")
    assert req.height > 0
    assert req["sampling_params"].null_count() < req.height
    assert first.equals(again, null_equal=True)
    # each request's max_tokens is its dump's max_new_tokens, read here by another regex
    lines = path.read_text().splitlines()
    for line_no, got in zip(req["line"], req["max_tokens"]):
        m = re.search(r"max_new_tokens: (?:Some\()?(\d+)", lines[line_no - 1])
        assert got == (int(m.group(1)) if m else None)
