"""The cheap readings of TensorRT-LLM's commonest lines say what the general ones say: a chunk
whose stats rows are all of one form decoded apart from the others (`stats.split_stats`), and
plain uvicorn access lines read by their own pattern (`events.plain_access`,
`events.access_events`), give the events the general path gives (`stats.split_stats_general`,
`events.other_events` on every row), on the lines of the fixtures and sample logs, on
simulated logs of both variants, on generated lines and on near misses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from servelens.parsers.engines.trtllm import parser as P
from servelens.parsers.engines.trtllm import stats as S
from servelens.parsers.engines.trtllm.parser import GLOG_PREFIX

from tests.helpers.common import engine_logs, logged_messages, parsed_lines

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TRT_FILES = engine_logs("trtllm")


def events(texts: list[str]) -> pl.DataFrame:
    return parsed_lines("trtllm", texts, source="t", year=2026)


def no_plain_access(df: pl.DataFrame) -> pl.Series:
    return pl.Series("plain", [False] * df.height, dtype=pl.Boolean)


def general_events(texts: list[str]) -> pl.DataFrame:
    """The events with every cheap reading turned off."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(P, "split_stats", S.split_stats_general)
        mp.setattr(P, "plain_access", no_plain_access)
        return events(texts)


def assert_same(texts: list[str]) -> pl.DataFrame:
    fast = events(texts)
    assert_frame_equal(fast, general_events(texts))
    return fast


# --- held-out readings of which lines are of the common shapes ----------------------------
TRITON_STATS = re.compile(r'^.*?\] (\{"Active Request Count":.*\})\s*$')
EXECUTOR_STATS = re.compile(r'^\s*(\[?\{.*"iterLatencyMS".*\]?)\s*$')
ACCESS = re.compile(r'^.*?(INFO:\s+\S+:\d+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}.*)$')


def logged_access_messages() -> list[str]:
    """Every uvicorn access line of the fixtures and sample logs (of any engine): the text
    from `INFO:` on."""
    return logged_messages("HTTP/", ACCESS.pattern)


def test_every_trtllm_file_reads_the_same_whole_and_by_kind():
    assert len(TRT_FILES) >= 15
    n_stats = n_access = 0
    for path in TRT_FILES:
        lines = path.read_text().splitlines()
        assert_same(lines)
        # each kind alone in a chunk: the form a chunk of a long log has
        stats = [x for x in lines if TRITON_STATS.match(x) or EXECUTOR_STATS.match(x)]
        access = [x for x in lines if ACCESS.match(x)]
        for kind in (stats, access):
            if kind:
                assert_same(kind)
        n_stats, n_access = n_stats + len(stats), n_access + len(access)
    assert n_stats > 400
    assert n_access >= 1


def test_logged_access_lines_read_the_same_and_by_their_pattern():
    messages = logged_access_messages()
    assert len(messages) > 20
    ev = assert_same(messages)
    assert ev["event"].to_list() == ["http_access"] * len(messages)
    # every one is plain: the cheap reading is the one taken
    frame = pl.DataFrame(
        {"msg": messages, "text": messages, "n_lines": [1] * len(messages)},
        schema_overrides={"n_lines": pl.Int32},
    ).with_columns(
        pl.lit(None, pl.String).alias(c) for c in ("_level", "gmsg", "tmsg", "_mpitag", "_version")
    )
    assert P.plain_access(frame).all()
    # and each alone
    for m in messages[:40]:
        assert_same([m])


@pytest.mark.parametrize("variant", ["triton", "executor"])
def test_simulated_logs_read_the_same(tmp_path: Path, variant: str):
    from servelens.pipeline.simulate import simulate

    simulate("trtllm", "incident", "4m", 11, tmp_path, rate=20, instances=1, variant=variant)
    lines = (tmp_path / "trtllm-a.log").read_text().splitlines()
    assert len(lines) > 500
    ev = assert_same(lines)
    assert (ev["event"] == "engine_stats").sum() > 100
    if variant == "executor":
        assert (ev["event"] == "http_access").sum() > 100


NEAR_MISSES = [
    # stats objects: flat, nested, arrays, empty, padded, cut, two on a line, bad values
    '{"Active Request Count":1,"Iteration Counter":2,"Timestamp":"05-12-2026 08:00:00"}',
    '  {"Active Request Count":1,"Iteration Counter":2}  ',
    '{"Active Request Count":1}{"Iteration Counter":2}',
    '{"Active Request Count":1}, {"Iteration Counter":2}',
    '{"Active Request Count":01}',
    '{"Active Request Count":99999999999999999999}',
    '{"Active Request Count":"x"}',
    '{"Active Request Count":1,"Itera',
    '{"Active Request Count":1.5}',
    "[]",
    "  [ ]  ",
    '[{"iterLatencyMS":1.5,"numActiveRequests":2}]',
    '[{"iterLatencyMS":1.5},{"iterLatencyMS":2.5,"kvCacheStats":{"usedNumBlocks":3}}]',
    '{"iterLatencyMS":1.5,"kvCacheStats":{"usedNumBlocks":3,"maxNumBlocks":8}}',
    '{"iterLatencyMS":1.5,"kvCacheStats":{"usedNumBlocks":3}} trailing',
    '{"iterLatencyMS":1.5,"kvCacheStats":{"usedNumBlocks":3}},{"iterLatencyMS":2}',
    '{"cpuMemUsage":0,"kvCacheStats":{"usedNumBlocks":3},"numActiveRequests":4}',
    '{"cpuMemUsage":0,"kvCacheStats":{"usedNumBlocks":3},"note":"iterLatencyMS"}',
    '{"iterLatencyMS":"slow","kvCacheStats":{"usedNumBlocks":3}}',
    '{"iterLatencyMS":1,"kvCacheStats":5}',
    # glog-wrapped, quoted (an escaped newline inside once unquoted) and not
    'I0514 21:01:55.276668 160 model.cc:1] {"Active Request Count":3,"Used KV cache blocks":4}',
    'I0514 21:01:55.276668 160 model.cc:1] "{\\"iterLatencyMS\\":1,\\n\\"numActiveRequests\\":2}"',
    'I0514 21:01:55.276668 160 model.cc:1] "{\\"iterLatencyMS\\":1,\\"kvCacheStats\\":{}}"',
    'I0514 21:01:55.276668 160 model.cc:1] "{\\"cpuMemUsage\\":0,\\n\\"iterLatencyMS\\":1,\\"kvCacheStats\\":{}}"',
    '[TensorRT-LLM][INFO] {"Active Request Count":3}',
    '[05/12/2026-08:00:00] [TRT-LLM] [I] {"iterLatencyMS":1,"kvCacheStats":{"usedNumBlocks":3}}',
    # access lines: plain, then each thing that makes other_events read one otherwise
    'INFO:     127.0.0.1:37375 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    'INFO:     [::1]:8000 - "GET /health HTTP/1.0" 503 Service Unavailable',
    'INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 200 OK requestId 5',
    'INFO:     127.0.0.1:1 - "GET /[TensorRT-LLM][ERROR] HTTP/1.1" 500',
    'INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 500 Assertion failed',
    'INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 200 OK\r',
    'INFO:     127.0.0.1 - "GET /x HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:1 - "get /x HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 2000',
    'INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 20',
    "INFO:     Started server process [1]",
    "INFO:     Shutting down",
    "ERROR:    Exception in ASGI application",
    '[05/12/2026-08:00:00] [TRT-LLM] [E] INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 500',
    '[05/12/2026-08:00:00] [TRT-LLM] [I] INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 200 OK',
    '[RANK 0] INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 200 OK',
    '[1,0]<stdout>:INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 200 OK',
    'I0514 21:01:55.276668 160 http.cc:1] INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 200 OK',
    '[TensorRT-LLM] TensorRT-LLM version: 0.19.0 INFO:     127.0.0.1:1 - "GET / HTTP/1.1" 200 OK',
    "Encountered error for requestId 7: out of memory",
    "Received request chatcmpl-1 at 2026-05-12 08:00:00",
]
# an access line with a continuation line after it is a record of two lines
WITH_FRAME = ['INFO:     127.0.0.1:1 - "GET /x HTTP/1.1" 500', "1       0x7f3a2b1c4d5e foo + 12"]


def test_near_misses_read_the_same_together_and_alone():
    assert_same(NEAR_MISSES)
    assert_same(NEAR_MISSES + WITH_FRAME)
    assert_same(WITH_FRAME)
    for line in NEAR_MISSES:
        assert_same([line])
        # with lines of each common form around it
        assert_same([NEAR_MISSES[0], line, NEAR_MISSES[25]])
        assert_same([NEAR_MISSES[13], line, NEAR_MISSES[25]])


# --- generated lines -----------------------------------------------------------------------
ints = st.one_of(st.integers(0, 2**40), st.integers(-5, 5), st.sampled_from([2**63, -(2**63), 2**64]))
values = st.one_of(ints, st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6), st.none())
TRITON_KEYS = list(S.GPTMANAGER_KEYS)
EXEC_KEYS = [k for k in S.EXECUTOR_KEYS if not isinstance(S.EXECUTOR_KEYS[k], pl.Struct)]


@st.composite
def triton_line(draw) -> str:
    keys = draw(st.lists(st.sampled_from(TRITON_KEYS), min_size=1, max_size=8, unique=True))
    obj = {k: draw(st.sampled_from(["05-12-2026 08:00:00.5", "x"])) if k == "Timestamp" else draw(ints) for k in keys}
    if draw(st.booleans()):  # Triton's own order: the count first
        obj = {"Active Request Count": draw(ints), **obj}
    text = json.dumps(obj, separators=(",", ":"))
    if draw(st.integers(0, 9)) == 0:
        text = text[: draw(st.integers(0, len(text)))]
    glog = draw(st.booleans())
    return f"I0512 08:00:01.{draw(st.integers(0, 999999)):06d} 4521 model_instance_state.cc:1062] {text}" if glog else text


@st.composite
def executor_line(draw) -> str:
    def one() -> dict:
        keys = draw(st.lists(st.sampled_from(EXEC_KEYS), max_size=6, unique=True))
        obj = {k: draw(values) for k in keys}
        obj["iterLatencyMS"] = draw(st.one_of(st.floats(0, 1e4), ints))
        if draw(st.booleans()):
            obj["kvCacheStats"] = {"usedNumBlocks": draw(ints), "maxNumBlocks": draw(ints)}
        return obj

    n = draw(st.integers(0, 3))
    objs = [one() for _ in range(max(n, 1))]
    if n == 0 or draw(st.booleans()):
        return json.dumps(objs[: n], separators=(",", ":"))
    return json.dumps(objs[0], separators=(",", ":"))


@st.composite
def access_line(draw) -> str:
    host = draw(st.sampled_from(["127.0.0.1", "10.0.0.7", "[::1]", "host"]))
    method = draw(st.sampled_from(["GET", "POST", "get", "PUT"]))
    path = draw(st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters='"'), min_size=1, max_size=12))
    status = draw(st.integers(100, 999))
    tail = draw(st.sampled_from(["OK", "Not Found", "", "requestId 3", "x Assertion failed"]))
    line = f'INFO:{" " * draw(st.integers(1, 5))}{host}:{draw(st.integers(1, 65535))} - "{method} /{path} HTTP/1.1" {status} {tail}'
    prefix = draw(st.sampled_from(["", "", "", "[TRT-LLM] [I] ", "[RANK 1] ", "[1,0]<stdout>:"]))
    return prefix + line.rstrip()


@SETTINGS
@given(st.lists(st.one_of(triton_line(), executor_line(), access_line()), min_size=1, max_size=12))
def test_generated_lines_read_the_same(lines: list[str]):
    assert_same(lines)


@SETTINGS
@given(st.lists(triton_line(), min_size=1, max_size=10))
def test_generated_triton_chunks_read_the_same(lines: list[str]):
    assert_same(lines)


@SETTINGS
@given(st.lists(st.one_of(executor_line(), access_line()), min_size=1, max_size=10))
def test_generated_executor_chunks_read_the_same(lines: list[str]):
    assert_same(lines)


# --- the prefix read in ASCII mode where its head is ASCII ---------------------------------
GLOG = re.compile("^" + GLOG_PREFIX)


@pytest.mark.parametrize(
    "tail",
    ["plain", "é" * 3, "x" * 195 + "é", "x" * 300 + "é", "\u00a0é", "\u2003 x"],
)
@pytest.mark.parametrize("src", ["model.cc", "módel.cc", "model_instance_state.cc"])
def test_glog_prefix_read_as_python_reads_it_whatever_the_characters(tail: str, src: str):
    line = f"I0514 21:01:55.276668 160 {src}:813] {tail}"
    ev = events([line])
    m = GLOG.match(line)
    attrs = json.loads(ev["attrs"][0]) if ev["attrs"][0] else {}
    if m is None:
        assert "glog_src" not in attrs
        return
    assert attrs["glog_src"] == m["gsrc"]
    assert attrs["glog_pid"] == int(m["gpid"])
    assert ev["level"][0] == "INFO"
