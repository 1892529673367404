"""The decode stage (parsers/wrappers): a log wrapped the way production log sources wrap it
gives the same events as the verbatim log, with the wrapper's finer times."""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import get_parser
from servelens.parsers import wrappers as W
from servelens.parsers.base import ParseContext, lines_frame, parse_lines, uncovered_lines
from servelens.parsers.text import parse_text
from servelens.pipeline.sources.lines import parse_stream

from tests.helpers import wrapping as wr
ROOT = Path(__file__).resolve().parents[2]
SAMPLES = [
    ("vllm", "sample_logs/vllm/real/v1_0_11.log"),
    ("vllm", "sample_logs/vllm/real/v0_4.log"),
    ("vllm", "sample_logs/incident/vllm/vllm-b.log"),
    ("tgi", "sample_logs/tgi/real/router_text.log"),
    ("tgi", "sample_logs/tgi/real/launcher_traceback.log"),
    ("tgi", "sample_logs/incident/tgi/tgi-a.log"),
    ("trtllm", "sample_logs/trtllm/real/iteration_stats.log"),
    ("trtllm", "sample_logs/trtllm/real/backtraces.log"),
    ("trtllm", "sample_logs/incident/trtllm/trtllm-a.log"),
]
# wrapping -> (function, the outermost layer and the others detected, its time's precision in ns)
WRAPPINGS = {
    "cri": (wr.to_cri, ("cri",), 1),
    "docker-json": (wr.to_docker_json, ("docker-json",), 1),
    "journald": (wr.to_journald, ("journald",), 1000),
    "syslog": (wr.to_syslog_iso, ("syslog",), 1000),
    "docker-ts": (wr.to_docker_ts, ("docker-ts",), 1),
    "cri>compose>ansi": (wr.nested_cri_compose_ansi, ("cri", "compose"), 1),
}
# what an event says, apart from its time (and the attrs that hold the engine's own time)
SAME = ["event", "line", "n_lines", "level", "request_id", "model", "prompt_tokens", "output_tokens",
        "e2e_s", "running", "waiting", "kv_usage", "max_num_seqs", "http_status", "message"]


def parse(engine: str, text: str) -> tuple[tuple[str, ...], list[str], pl.DataFrame]:
    texts = wr.split_lines(text)
    layers = W.detect(texts[:300])
    ctx = ParseContext(engine=engine, source="t.log", instance="t", year=2026)
    return layers, texts, parse_lines(W.wrap(get_parser(engine), layers), lines_frame(texts), ctx)


@cache
def _verbatim(engine: str, rel: str):
    # the verbatim file's parse is the same for every wrapping of it: once per process
    lines = wr.split_lines((ROOT / rel).read_text())
    return tuple(lines), tuple(wr.line_times(lines, engine)), parse_text(engine, "\n".join(lines) + "\n")


def verbatim(engine: str, rel: str) -> tuple[list[str], list[int], pl.DataFrame]:
    """The lines of a sample, a wrapper time per line (ns), and the events of the file as it is."""
    lines, times, base = _verbatim(engine, rel)
    return list(lines), list(times), base


@pytest.mark.parametrize("engine,rel", SAMPLES, ids=[Path(r).name for _, r in SAMPLES])
@pytest.mark.parametrize("wrapping", list(WRAPPINGS))
def test_wrapped_copy_gives_the_verbatim_events_with_the_wrappers_time(engine, rel, wrapping):
    lines, times, base = verbatim(engine, rel)
    make, expected_layers, precision = WRAPPINGS[wrapping]
    layers, _, ev = parse(engine, make(lines, times=times))
    assert layers[0] == expected_layers[0] and set(expected_layers) <= set(layers)
    assert ev.select(SAME).equals(base.select(SAME))
    assert ev["event"].value_counts(sort=True).equals(base["event"].value_counts(sort=True))
    # every event carries the wrapper's time of its first line
    want = pl.Series([times[k - 1] // precision * precision for k in ev["line"]], dtype=pl.Int64)
    assert ev["wrapper_ts"].cast(pl.Int64).equals(want, check_names=False)
    own = base["ts"]
    whole = own.dt.microsecond() == 0
    took = ev["ts"] == ev["wrapper_ts"].dt.cast_time_unit("us")
    # whole-second engine times give way to the wrapper's; finer ones stay the engine's
    assert (took | ~whole).all()
    assert (ev["ts"] == own).filter(~whole).all()
    if whole.any() and not W.detect(lines[:300]):  # (not for a log wrapped already)
        # the wrapper time lies in the second the engine printed
        assert (ev["ts"].dt.truncate("1s") == own).filter(whole & base["ts_inferred"].not_()).all()
        assert ev.filter(whole & ~base["ts_inferred"])["attrs"].str.contains('"engine_ts"').all()


def test_fixtures_are_the_runtimes_splitting_of_real_logs():
    """tests/fixtures/wrapped/ holds what `python -m tests.helpers.wrapping` writes (no drift)."""
    for name in wr.FIXTURES:
        assert (ROOT / "tests/fixtures/wrapped" / name).read_text() == wr.render_fixture(name, ROOT), name


@pytest.mark.parametrize("name", list(wr.FIXTURES))
def test_fixture_parses_like_its_verbatim_source(name):
    engine, lines = wr.fixture_source(name, ROOT)
    base = parse_text(engine, "\n".join(lines) + "\n")
    layers, texts, ev = parse(engine, (ROOT / "tests/fixtures/wrapped" / name).read_text())
    assert layers and uncovered_lines(ev, 1, len(texts)) == []
    got = ev.select([c for c in SAME if c not in ("line", "n_lines")])
    assert got.equals(base.select(got.columns))
    assert ev["stream"].drop_nulls().unique().to_list() == ["stdout"]


def test_long_line_is_joined_from_the_runtimes_pieces():
    engine, lines = wr.fixture_source("vllm_v1_0_11.cri.log", ROOT)
    for name, pieces in (("vllm_v1_0_11.cri.log", 3), ("vllm_v1_0_11.docker-json.log", 3)):
        text = (ROOT / "tests/fixtures/wrapped" / name).read_text()
        assert len(wr.split_lines(text)) == len(lines) + pieces - 1
        _, texts, ev = parse(engine, text)
        arrived = ev.filter(pl.col("request_id") == "cmpl-long-0")
        # one event over the three physical records, the prompt whole
        assert arrived.select("event", "line", "n_lines").rows() == [("request_arrived", 11, 3)]
        assert arrived["message"][0].count("quick brown fox") == 900
        assert uncovered_lines(ev, 1, len(texts)) == []
        assert ev.filter(pl.col("line") > 11)["line"].min() == 14


def _stream(data: bytes, layers, engine="vllm", ctx=None, offset=0, next_line=1, **kw):
    parser = W.wrap(get_parser(engine), layers)
    # keep_lines: the whole-file parse these are compared with keeps every line's text
    ctx = ctx or ParseContext(engine=engine, source="t", instance="t", year=2026, keep_lines=True)
    return list(parse_stream(io.BytesIO(data), parser, ctx, offset=offset, next_line=next_line, **kw))


@pytest.mark.parametrize("fixture,layers", [("vllm_v1_0_11.cri.log", ("cri",)), ("vllm_v1_0_11.docker-json.log", ("docker-json",))])
def test_a_partial_line_at_the_end_of_a_poll_waits_for_its_last_piece(fixture, layers):
    data = (ROOT / "tests/fixtures/wrapped" / fixture).read_bytes()
    phys = data.split(b"\n")
    cut = len(b"\n".join(phys[:11])) + 1  # after line 11, the first piece of the long line
    ctx = ParseContext(engine="vllm", source="t", instance="t", year=2026, keep_lines=True)
    first = _stream(data[:cut], layers, ctx=ctx, hold_partial_line=True, hold_last_record=True)
    used = first[-1].offset
    assert used == len(b"\n".join(phys[:10])) + 1  # the unfinished line is held back
    assert first[-1].next_line == 11
    assert not any((c.events["request_id"] == "cmpl-long-0").any() for c in first)
    rest = _stream(data[used:], layers, ctx=ctx, offset=used, next_line=11)
    ev = pl.concat([c.events for c in first + rest])
    _, _, whole = parse("vllm", data.decode())
    assert ev.select(SAME).equals(whole.select(SAME))
    assert rest[-1].offset == len(data)


def test_block_boundaries_inside_split_lines_keep_every_line_once():
    data = (ROOT / "tests/fixtures/wrapped/vllm_v1_0_11.docker-json.log").read_bytes()
    _, texts, whole = parse("vllm", data.decode())
    for block in (2048, 5000, 17000):
        chunks = _stream(data, ("docker-json",), block_bytes=block)
        ev = pl.concat([c.events for c in chunks])
        assert ev.select(SAME).equals(whole.select(SAME)), block
        assert sum(c.n_lines for c in chunks) == len(texts)


def test_cri_joins_only_consecutive_fragments_of_one_stream():
    t = "2026-06-10T14:23:45.%09dZ"
    text = "".join([
        f"{t % 1} stdout P INFO 06-10 14:23:45 metrics.py:341] Avg prompt thr",
        f"\n{t % 2} stderr F WARNING 06-10 14:23:45 x.py:1] other stream",
        f"\n{t % 3} stdout F oughput: 1.0 tokens/s\n",
    ])
    _, texts, ev = parse("vllm", text)
    assert uncovered_lines(ev, 1, 3) == []
    assert ev["stream"].to_list() == ["stdout", "stderr", "stdout"]


def test_detect_layers_outside_in():
    line = "INFO 06-10 14:23:45 metrics.py:341] Avg prompt throughput: 1.0 tokens/s"
    cri = "2026-06-10T14:23:45.123456789Z stdout F vllm-1  | \x1b[32mINFO\x1b[0m 06-10 14:23:45 metrics.py:341] x"
    assert W.detect([line] * 5) == ()
    assert W.detect([cri] * 5) == ("cri", "ansi", "compose")
    assert W.decode_texts([cri], ("cri", "ansi", "compose")) == ["INFO 06-10 14:23:45 metrics.py:341] x"]
    # a TGI line opens with its own RFC 3339 time: not a docker wrapper
    tgi = "2024-01-15T08:47:27.123456Z  INFO text_generation_router: router/src/main.rs:1: Connected"
    assert W.detect([tgi] * 5) == ()
    assert W.detect(["2024-01-15T08:47:27.999999999Z " + tgi] * 5) == ("docker-ts",)


PREFIXED = {
    "skypilot": ("tgi", "(task, pid=12148) 2023-10-25T12:24:19.123838Z ERROR text_generation_launcher: Shard 0 failed to start", "error"),
    "python-logger": ("tgi", "INFO:tgi-server:         2024-01-15T08:47:27.123456Z  INFO text_generation_router: router/src/main.rs:292: Connected", "log"),
    # (brackets and a pipe are podman-compose's prefix, a known layer: see the compose test)
    "service-label": ("tgi", "{text-generation-inference} | 2024-01-15T08:47:27.123456Z  WARN text_generation_router: router/src/main.rs:1: no tokenizer", "log"),
    "shell-prompt": ("vllm", "user@gpu-1:~$ INFO 06-10 14:23:45 metrics.py:341] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 1 reqs, GPU KV cache usage: 5.0%, CPU KV cache usage: 0.0%.", "engine_stats"),
    "leading-dots": ("vllm", "...ERROR 06-10 14:23:46 engine.py:1] Engine loop died", "error"),
}


@pytest.mark.parametrize("case", list(PREFIXED))
def test_engine_line_behind_an_unknown_prefix_is_found(case):
    engine, line, kind = PREFIXED[case]
    plain = {"tgi": "2024-01-15T08:47:28.000001Z  INFO text_generation_router: router/src/main.rs:1: Ready",
             "vllm": "INFO 06-10 14:23:47 llm_engine.py:1] ready"}[engine]
    layers, _, ev = parse(engine, line + "\n" + plain + "\n")
    assert layers[-1] == "prefix"
    assert ev["event"].to_list() == [kind, "log"]
    attrs = json.loads(ev["attrs"][0])
    assert line.startswith(attrs["prefix"]) and attrs["prefix"].strip()
    assert "prefix" not in json.loads(ev["attrs"][1] or "{}")


def test_podman_compose_brackets_are_the_compose_layer():
    line = "[text-generation-inference] | 2024-01-15T08:47:27.123456Z  WARN text_generation_router: router/src/main.rs:1: no tokenizer"
    layers, _, ev = parse("tgi", line + "\n")
    assert layers == ("compose",)
    assert ev["event"].to_list() == ["log"] and json.loads(ev["labels"][0]) == {"service": "text-generation-inference"}


def test_engine_prefixes_are_left_to_the_engine():
    line = "(APIServer pid=1) INFO 01-23 15:48:29 [api_server.py:1842] vLLM API server version 0.11.0"
    assert W.detect([line] * 3) == ()


def test_a_prefix_keeps_the_engines_own_prefix_after_it():
    line = "TorchServe MODEL_LOG - (VllmWorkerProcess pid=27) INFO 09-13 22:25:38 model_runner.py:1008] Loading took 7.5 GB"
    assert W.detect([line]) == ("prefix",)
    assert W.decode_texts([line], ("prefix",)) == ["(VllmWorkerProcess pid=27) INFO 09-13 22:25:38 model_runner.py:1008] Loading took 7.5 GB"]
    ev = parse_text("vllm", line + "\n")
    attrs = json.loads(ev["attrs"][0])
    assert (attrs["process"], attrs["pid"], attrs["prefix"]) == ("VllmWorkerProcess", 27, "TorchServe MODEL_LOG - ")


def test_engine_times_and_table_rows_are_not_prefixes():
    trt = ["[11/16/2024-00:05:44] [TRT-LLM] [I] Set gemm_plugin to float16.",
           "07-25-2025 16:54:34.140189 [TRT-LLM] [I] Set logger level to INFO",
           "| tensorrt_llm | 1       | UNAVAILABLE: Internal: [TensorRT-LLM][ERROR] CUDA runtime error |"]
    assert W.detect(trt) == ()
    # TGI's `<time> INFO generate: ...` is its own header, not syslog's `<time> <host> <app>:`
    tgi = "2025-06-10T14:23:45.123Z INFO generate: request_id=abc123, model=gpt2, prompt_tokens=64, generated_tokens=128"
    assert W.detect([tgi] * 3) == ()
    assert W.detect(["2025-06-10T14:23:45.123Z gpu-1 vllm[42]: INFO 06-10 14:23:45 x.py:1] y"] * 3) == ("syslog",)


def test_a_few_wrapped_lines_in_a_file_are_decoded():
    plain = ["INFO 06-10 14:23:4%d llm_engine.py:1] ready" % i for i in range(9)]
    mixed = plain[:4] + ["2026-06-10T14:23:45.123456789Z INFO 06-10 14:23:45 llm_engine.py:1] timed",
                         "vllm-1  | INFO 06-10 14:23:46 llm_engine.py:1] composed"] + plain[4:]
    layers = W.detect(mixed)
    assert layers == ("docker-ts", "compose")
    assert W.decode_texts(mixed, layers) == plain[:4] + ["INFO 06-10 14:23:45 llm_engine.py:1] timed",
                                                         "INFO 06-10 14:23:46 llm_engine.py:1] composed"] + plain[4:]
    ev = parse_text("vllm", "\n".join(mixed) + "\n")
    assert ev["wrapper_ts"].null_count() == ev.height - 1
    assert json.loads(ev["labels"][5]) == {"service": "vllm-1"}


def test_cloudwatch_padding_goes_with_its_time():
    line = "2024-04-18T18:44:03.144-04:00   2024-04-18T22:43:58.111453Z  INFO shard-manager: text_generation_launcher: Waiting"
    assert W.decode_texts([line], ("docker-ts",)) == ["2024-04-18T22:43:58.111453Z  INFO shard-manager: text_generation_launcher: Waiting"]
    frame = "2026-06-10T14:23:45.123456789Z     at foo (bar.py:1)"
    assert W.decode_texts([frame], ("docker-ts",)) == ["    at foo (bar.py:1)"]  # indentation kept


def test_parse_text_decodes_as_ingest_does():
    lines = ["INFO 06-10 14:23:45 llm_engine.py:1] ready", "ERROR 06-10 14:23:46 engine.py:1] Engine loop died"]
    cri = wr.to_cri(lines)
    ev = parse_text("vllm", cri)
    assert ev["event"].to_list() == ["log", "error"] and ev["stream"].to_list() == ["stdout", "stdout"]
    assert ev["message"].to_list() == parse_text("vllm", "\n".join(lines) + "\n")["message"].to_list()
    raw = parse_text("vllm", cri, decode=())  # the engine parser alone
    assert raw["wrapper_ts"].null_count() == raw.height


def test_nim_json_formatter_becomes_vllm_events():
    rows = [
        {"level": "INFO", "time": "02-20 21:54:59.370", "file_path": "/opt/nim/llm/vllm/engine/metrics.py", "line_number": "334",
         "message": "Avg prompt throughput: 12.5 tokens/s, Avg generation throughput: 40.1 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 7.5%, CPU KV cache usage: 0.0%."},
        {"asctime": "2025-02-20 21:55:00,120", "levelname": "ERROR", "name": "vllm.engine", "filename": "engine.py", "lineno": 12,
         "message": "Engine background task failed"},
    ]
    layers, _, ev = parse("vllm", "".join(json.dumps(r) + "\n" for r in rows))
    assert layers == ("jsonfmt",)
    stats, err = ev.row(0, named=True), ev.row(1, named=True)
    assert (stats["event"], stats["running"], stats["waiting"], stats["kv_usage"]) == ("engine_stats", 4, 2, 0.075)
    assert (err["event"], err["level"]) == ("error", "ERROR")
    # the formatter's time with a year is the wrapper time, to the millisecond
    assert err["ts"].isoformat() == "2025-02-20T21:55:00.120000+00:00"
    assert json.loads(err["labels"]) == {"logger": "vllm.engine"}


def test_tgi_own_json_is_left_to_the_tgi_parser():
    text = (ROOT / "sample_logs/tgi/real/json.log").read_text()
    assert W.detect(wr.split_lines(text)) == ()


def test_unknown_wrapper_name_is_refused():
    with pytest.raises(ValueError, match="unknown wrapper format"):
        W.wrap(get_parser("vllm"), ("nope",))


def test_docs_sources_lists_every_wrapper_format():
    text = (ROOT / "docs/sources.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `")}
    assert rows == set(W.DECODERS)


def test_a_registered_engines_header_re_is_found_behind_a_prefix(fake_engine, monkeypatch):
    """A new engine gets prefix recovery by naming its header form (`HEADER_RE`)."""
    from servelens.parsers import detect_engine

    fake = get_parser(fake_engine)
    lines = ["me@box:~$ FAKE 06-10 14:00:00 INFO started", "FAKE 06-10 14:00:01 ERROR boom"]
    assert W.detect(lines) == ()  # its header is no form the decoders know yet
    monkeypatch.setattr(fake, "HEADER_RE", r"FAKE [0-9]{2}-[0-9]{2} ", raising=False)
    layers = W.detect(lines)
    assert layers == ("prefix",)
    assert detect_engine(W.decode_texts(lines, layers))[0] == "fake"
    ctx = ParseContext(engine="fake", source="t", instance="t", year=2026)
    ev = parse_lines(W.wrap(fake, layers), lines_frame(lines), ctx)
    assert ev.select("level", "message").rows() == [("INFO", "started"), ("ERROR", "boom")]
    assert json.loads(ev["attrs"][0])["prefix"] == "me@box:~$ "
