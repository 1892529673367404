"""Triton's flat stats objects read by their first row's template (`stats.read_flat_by_template`)
say what the JSON decoder says of them (`stats._decode_flat`, the general reading): on every
logged object of the fixtures and sample logs, on simulated logs, on generated objects and on
near misses. Where the template does not apply it must say so (None), never read otherwise."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal, assert_series_equal
from servelens.parsers.engines.trtllm import stats as S

from tests.helpers.common import engine_logs, parsed_lines

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TRT_FILES = engine_logs("trtllm")
# held out: a flat object opening with Triton's first key, after a glog prefix or alone
TRITON_OBJECT = re.compile(r'^(?:.*?\] )?(\{"Active Request Count":[^{}]*\})\s*$')


def general(texts: list[str]) -> pl.Series:
    return S._decode_flat(pl.Series("_st", texts, dtype=pl.String))


def template(texts: list[str]) -> pl.Series | None:
    return S.read_flat_by_template(pl.Series("_st", texts, dtype=pl.String))


def assert_template_agrees(texts: list[str]) -> bool:
    """The template's reading equals the decoder's wherever it gives one, on rows that
    `split_stats` would decode as flat objects; whether it did."""
    fast = template(texts)
    if fast is None:
        return False
    frame = pl.DataFrame({"j": texts})
    assert frame.select((S._flat(pl.col("j")) & pl.col("j").str.ends_with("}")).all()).item()
    slow = general(texts)
    assert slow.null_count() == 0  # a row the decoder refuses is never read by the template
    assert_series_equal(fast, slow)
    return True


def logged_objects() -> dict[Path, list[str]]:
    found = {}
    for path in TRT_FILES:
        objs = [m[1] for x in path.read_text().splitlines() if (m := TRITON_OBJECT.match(x))]
        if objs:
            found[path] = objs
    return found


def test_every_logged_triton_object_reads_the_same():
    found = logged_objects()
    assert sum(map(len, found.values())) > 400
    read = 0
    for objs in found.values():
        assert_template_agrees(objs)  # a file's chunk: one template, or None
        for obj in objs:  # each alone: always its own template
            assert assert_template_agrees([obj])
            read += 1
        # the file's objects grouped by key order: each group is read by its template
        by_keys: dict[tuple, list[str]] = {}
        for obj in objs:
            by_keys.setdefault(tuple(json.loads(obj)), []).append(obj)
        for group in by_keys.values():
            assert assert_template_agrees(group)
    assert read > 400


@pytest.mark.parametrize("scenario", ["steady", "incident"])
def test_simulated_triton_logs_read_by_the_template(tmp_path: Path, scenario: str):
    from servelens.pipeline.simulate import simulate

    simulate("trtllm", scenario, "4m", 11, tmp_path, rate=20, instances=1, variant="triton")
    lines = (tmp_path / "trtllm-a.log").read_text().splitlines()
    objs = [m[1] for x in lines if (m := TRITON_OBJECT.match(x))]
    assert len(objs) > 100
    assert assert_template_agrees(objs)
    # and the events of the whole log with the template turned off are the same
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(S, "read_flat_by_template", lambda obj: None)
        slow = parsed_lines("trtllm", lines, source="t", year=2026)
    assert_frame_equal(parsed_lines("trtllm", lines, source="t", year=2026), slow)


BASE = (
    '{"Active Request Count":3,"Iteration Counter":18870,"Max Request Count":256,'
    '"Timestamp":"05-12-2026 13:56:44","Used KV cache blocks":100}'
)
NEAR_MISSES = [
    # values the decoder reads otherwise or refuses
    BASE.replace(":3,", ":03,"),
    BASE.replace(":3,", ":+3,"),
    BASE.replace(":3,", ":-3,"),
    BASE.replace(":3,", ":-0,"),
    BASE.replace(":3,", ":-03,"),
    BASE.replace(":3,", ": 3,"),
    BASE.replace(":3,", ":3 ,"),
    BASE.replace(":3,", ":3.0,"),
    BASE.replace(":3,", ":3e0,"),
    BASE.replace(":3,", ":null,"),
    BASE.replace(":3,", ":true,"),
    BASE.replace(":3,", ':"3",'),
    BASE.replace(":3,", ":9223372036854775807,"),
    BASE.replace(":3,", ":9223372036854775808,"),
    BASE.replace(":3,", ":-9223372036854775808,"),
    BASE.replace(":3,", ":-9223372036854775809,"),
    BASE.replace(":3,", ":,"),
    BASE.replace("13:56:44", "13:56:44.123456"),
    BASE.replace("13:56:44", "13,56,44"),
    BASE.replace("13:56:44", "13}56"),
    BASE.replace("13:56:44", '13\\"56'),
    BASE.replace("13:56:44", "13\\u003a56"),
    BASE.replace("13:56:44", "13\\\\56"),
    BASE.replace("13:56:44", "13\t56"),
    BASE.replace("13:56:44", "13\u00e956\u2003"),
    BASE.replace("13:56:44", ""),
    BASE.replace('"05-12-2026 13:56:44"', "5"),
    BASE.replace('"05-12-2026 13:56:44"', "null"),
    # keys: order, spelling, repeats, extra or missing ones, spaces
    BASE.replace('"Iteration Counter":18870,"Max Request Count":256', '"Max Request Count":256,"Iteration Counter":18870'),
    BASE.replace('"Iteration Counter"', '"Iteration  Counter"'),
    BASE.replace('"Iteration Counter"', '"Iteration\\u0020Counter"'),
    BASE.replace('"Max Request Count":256', '"Iteration Counter":256'),
    BASE.replace('"Max Request Count":256,', ""),
    BASE.replace('"Max Request Count":256', '"Max Request Count":256,"Paused Requests":0'),
    BASE.replace('"Max Request Count":256', '"Max Request Count":256,"KV cache transfer time":1.5'),
    BASE.replace('"Max Request Count":256', '"Max Request Count":256,"numActiveRequests":2'),
    BASE.replace(',"Iteration', ', "Iteration'),
    # a key left out before its value (a bare value where the key should open the piece), and
    # the same with the key's bytes made up elsewhere in the row
    BASE.replace('"Max Request Count":256', "256"),
    BASE.replace('"Max Request Count":256', "256")[:-1] + ',"Max Request Count":0}',
    BASE.replace('"Max Request Count":256', "256").replace('"Iteration Counter":', '"Max Request Count":"Iteration Counter":'),
    BASE.replace('":', '" :', 1),
    # the object's ends
    BASE[:-1],
    BASE + " ",
    " " + BASE,
    BASE + "}",
    BASE[:-1] + ",}",
    BASE + ',{"Active Request Count":1}',
    BASE + "{}",
    BASE.replace("{", "{{", 1),
    "{}",
    '{"Active Request Count":1}',
]


def test_near_misses_read_the_same_alone_and_after_the_template():
    # the unchanged object is read by the template (else nothing below is tested)
    assert assert_template_agrees([BASE, BASE.replace(":3,", ":4,")])
    refused = 0
    for near in NEAR_MISSES:
        assert_template_agrees([near])
        # after a row that sets the template: the near miss must not be read as it
        if not assert_template_agrees([BASE, near]):
            refused += 1
        assert_template_agrees([near, BASE])
    assert refused > 30


def test_near_misses_give_the_events_the_decoder_gives():
    lines = [f"I0512 13:56:45.000000 4521 model_instance_state.cc:1062] {x}" for x in [BASE, *NEAR_MISSES]]
    for chunk in ([*lines], *([lines[0], x] for x in lines[1:])):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(S, "read_flat_by_template", lambda obj: None)
            slow = parsed_lines("trtllm", chunk, source="t", year=2026)
        assert_frame_equal(parsed_lines("trtllm", chunk, source="t", year=2026), slow)


# --- generated objects ----------------------------------------------------------------------
INT_TEXTS = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["0", "-0", "00", "01", "+1", "1.0", "1e3", " 1", "1 ", "", "null", "true", '"1"']),
)
STRING_TEXTS = st.one_of(
    st.text(max_size=8).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.text(max_size=8).map(json.dumps),
    st.text(alphabet='ab,:}{"\\ \t', max_size=6).map(lambda s: f'"{s}"'),
    st.sampled_from(['"05-12-2026 13:56:44"', '"05-12-2026 13:56:44.5"', "null", "5", '""']),
)
KEYS = [k for k, t in S.GPTMANAGER_KEYS.items() if t in (pl.Int64, pl.String)]


@st.composite
def template_chunk(draw) -> list[str]:
    """Rows over one key list (sometimes another), values canonical or not."""
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=8, unique=True))

    def row(keys: list[str]) -> str:
        def text(k: str) -> str:
            if S.GPTMANAGER_KEYS[k] == pl.String:
                return draw(STRING_TEXTS)
            return draw(st.one_of(st.integers(0, 2**40).map(str), INT_TEXTS))

        body = ",".join(f"{json.dumps(k)}:{text(k)}" for k in keys)
        return "{" + body + "}"

    rows = [row(keys) for _ in range(draw(st.integers(1, 6)))]
    if draw(st.booleans()):
        other = draw(st.permutations(keys)) if draw(st.booleans()) else keys + draw(st.lists(st.sampled_from(KEYS), max_size=2))
        rows.insert(draw(st.integers(0, len(rows))), row(list(other)))
    return rows


@SETTINGS
@given(template_chunk())
def test_generated_chunks_read_the_same(rows: list[str]):
    assert_template_agrees(rows)


@SETTINGS
@given(st.lists(st.sampled_from(KEYS), min_size=1, max_size=10, unique=True), st.data())
def test_generated_canonical_chunks_are_read_by_the_template(keys: list[str], data):
    """Canonical rows (integers as JSON writes them, strings with nothing to unescape and no
    comma) are what the template is for: it reads them, as the decoder does."""
    plain = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters='"\\},'), max_size=8)
    rows = []
    for _ in range(data.draw(st.integers(1, 5))):
        obj = {
            k: data.draw(plain) if S.GPTMANAGER_KEYS[k] == pl.String else data.draw(st.integers(-(2**63), 2**63 - 1))
            for k in keys
        }
        rows.append(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))
    assert assert_template_agrees(rows)


def test_the_parse_takes_the_template_on_a_triton_chunk():
    """The template is what `split_stats` reads a chunk of Triton stats lines with."""
    lines = [f"I0512 13:56:45.{i:06d} 4521 model_instance_state.cc:1062] {BASE.replace(':3,', f':{i},')}" for i in range(50)]
    calls = []
    read = S.read_flat_by_template

    def spy(obj):
        out = read(obj)
        calls.append(out is not None)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(S, "read_flat_by_template", spy)
        ev = parsed_lines("trtllm", lines, source="t", year=2026)
    assert calls == [True]
    assert ev["running"].to_list() == list(range(50))
    assert ev["kv_blocks_used"].to_list() == [100] * 50
