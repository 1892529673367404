"""The block hold-back: where a block is cut so that no record is split across chunks.

`last_record_start` looks only at the block's last lines when the parser declares its
`RECORD_LOOKBACK`; it must give exactly what the parser's `record_starts` over the whole
block gives, for every engine's real multi-line records (tracebacks, tables, dumps)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import get_parser
from servelens.pipeline.sources import lines as L

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _fixture_lines(engine: str) -> list[str]:
    texts: list[str] = []
    for path in sorted((FIXTURES / engine).glob("*.log")):
        texts += path.read_text(encoding="utf-8").splitlines()
    return texts


def _long_python_traceback(frames: int) -> list[str]:
    body = ["Traceback (most recent call last):"]
    for k in range(frames):
        body += [f'  File "/app/mod{k}.py", line {k + 1}, in f{k}', f"    g{k}()"]
    return body + ["RuntimeError: CUDA error: out of memory"]


@pytest.mark.parametrize("window", [1, 2, 16])
@pytest.mark.parametrize("engine", ["vllm", "tgi", "trtllm"])
def test_the_tail_windows_give_the_whole_block_answer(engine, window, monkeypatch):
    monkeypatch.setattr(L, "TAIL_WINDOW_LINES", window)
    parser = get_parser(engine)
    if engine in ("vllm", "tgi"):  # the engines whose look-back lets ingest use a window
        assert getattr(parser, "RECORD_LOOKBACK", None) is not None
    texts, whole = _whole_block_answers(engine)
    assert len(texts) > 50
    # every block end inside the fixtures: cuts inside tracebacks, tables and dumps included
    for n in range(2, len(texts) + 1):
        block = pl.Series("text", texts[:n], dtype=pl.String)
        assert L.last_record_start(parser, block) == whole[n], (engine, n)


@cache
def _whole_block_answers(engine: str) -> tuple[list[str], dict[int, int]]:
    """The engine's fixture lines and, per head of them, its last record start asked of the
    whole head (the same for every window: computed once per process)."""
    texts = _fixture_lines(engine)
    parser = get_parser(engine)
    return texts, {n: L._last_start(parser, pl.Series("text", texts[:n], dtype=pl.String)) for n in range(2, len(texts) + 1)}


@pytest.mark.parametrize(
    "engine, head, record",
    [
        # TensorRT-LLM: the traceback is a record of its own (line 2)
        ("trtllm", "[TensorRT-LLM][INFO] Loaded engine size: 12 MiB", 2),
        # vLLM: it continues the ERROR line behind the same header (line 1)
        ("vllm", "ERROR 06-10 14:23:45 [core.py:343] EngineCore hit an exception", 1),
    ],
)
def test_a_traceback_longer_than_the_window_is_not_cut(engine, head, record, monkeypatch):
    """A block that ends inside a traceback longer than the window: no frame is taken for
    a record start, so the traceback stays one record."""
    monkeypatch.setattr(L, "TAIL_WINDOW_LINES", 4)
    parser = get_parser(engine)
    frames = _long_python_traceback(40)
    if engine == "vllm":  # vLLM prints each traceback line behind the same header
        frames = [head.replace("EngineCore hit an exception", "") + f for f in frames]
    texts = ["INFO 06-10 14:23:44 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s", head, *frames]
    block = pl.Series("text", texts, dtype=pl.String)
    expected = L._last_start(parser, block)
    assert expected == record
    assert L.last_record_start(parser, block) == expected


@pytest.mark.parametrize("engine", ["vllm", "tgi"])
def test_lines_known_to_start_nothing_are_not_asked_again_and_the_answer_holds(engine, monkeypatch):
    """A held block (from a record start on) whose first lines were asked before and begin no
    record: asked from there on only, it gives the whole block's answer, for every block end
    and every such count of known lines."""
    monkeypatch.setattr(L, "TAIL_WINDOW_LINES", 2)
    parser = get_parser(engine)
    texts, _ = _whole_block_answers(engine)
    starts = parser.record_starts(pl.Series("text", texts, dtype=pl.String)).fill_null(True).to_list()
    firsts = [i for i, s in enumerate(starts) if s][::2]
    checked = 0
    for s in firsts:
        for n in range(2, min(len(texts) - s, 120) + 1, 3):
            block = pl.Series("text", texts[s:s + n], dtype=pl.String)
            whole = L._last_start(parser, block)
            own = parser.record_starts(block).fill_null(True).to_list()
            # the lines after the first, up to its next start, begin none
            none_before = next((i for i in range(1, n) if own[i]), n)
            for asked in {2, none_before // 2, none_before}:
                if 1 < asked <= none_before:
                    assert L.last_record_start(parser, block, asked) == whole, (engine, s, n, asked)
                    checked += 1
    assert checked > 100


def test_a_record_held_over_many_blocks_is_asked_about_its_new_lines_only():
    """A traceback longer than many read blocks: each block asks about the lines it adds
    (with their look-back), not the whole held record again, and the record stays whole."""
    import io

    vllm = get_parser("vllm")

    class Counting:
        def __init__(self):
            self.asked = 0

        def __getattr__(self, name):
            return getattr(vllm, name)

        def record_starts(self, text):
            self.asked += len(text)
            return vllm.record_starts(text)

    head = "ERROR 06-10 14:23:45 [core.py:343] EngineCore hit an exception\nTraceback (most recent call last):\n"
    frames = "".join(f'  File "/app/mod{k}.py", line {k + 1}, in f{k}\n    g{k}()\n' for k in range(20_000))
    data = (head + frames + "RuntimeError: boom\nINFO 06-10 14:23:46 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s\n").encode()
    parser = Counting()
    chunks = list(L._split_chunks(io.BytesIO(data), parser, offset=0, next_line=1, block_bytes=32 * 1024,
                                  hold_partial_line=False, hold_last_record=False))
    n_lines = data.count(b"\n")
    assert sum(c[3] for c in chunks) == n_lines
    # the traceback (its `Traceback` line on) is one chunk's: no cut inside it (the file's
    # last line, read with it at the end, is in that chunk too)
    assert [c[3] for c in chunks] == [1, n_lines - 1]
    # each line asked about a few times at most (it was ~30 times per line, once per block)
    assert parser.asked < 3 * n_lines
