"""A chunk whose lines all start with its first line's process prefix has that prefix's
fields read once (parsers/engines/vllm/parser.py): a line reads the same after another as
in a chunk that starts otherwise (a line depends on itself and the line before only)."""

from __future__ import annotations

import itertools

import polars as pl
from servelens.parsers.base import ParseContext
from servelens.parsers.engines.vllm import parser as P

HDR = "INFO 05-12 08:00:00 [logger.py:49] "
LINES = [
    f"(APIServer pid=1) {HDR}Received request a: params: None",
    "(APIServer pid=1) INFO:     10.0.0.1:1 - \"GET / HTTP/1.1\" 200 OK",
    "(APIServer pid=1)",
    "(APIServer pid=1) ",
    f"(APIServer pid=1){HDR}x",
    f"(APIServer pid=1)  {HDR}x",
    "(APIServer pid=1) (x) y",
    "(APIServer pid=1)é x",
    f"(EngineCore_DP0 pid=250) {HDR}x",
    f"(VllmWorker rank=1 pid=5283) {HDR}x",
    "(RayWorkerWrapper pid=1, ip=10.0.0.2) x",
    "(é pid=1) x",
    "(a) b",
    "[rank0]: hello",
    f"[rank0]: (APIServer pid=1) {HDR}x",
    "[rank0]:(Worker pid=2) x",
    "[rank0]: x (y)",
    f"[rank1]: {HDR}x",
]


def events(lines: list[str]) -> list[dict]:
    """The last line's events, their set fields (the columns of a chunk depend on its lines)."""
    ctx = ParseContext(engine="vllm", source="t.log", instance="t", year=2026)
    out = P.parse(pl.DataFrame({"line": range(1, len(lines) + 1), "text": lines}), ctx)
    rows = out.filter(pl.col("line") == len(lines)).drop("line", "_seq", strict=False).rows(named=True)
    return [{k: v for k, v in r.items() if v is not None} for r in rows]


def test_a_line_after_another_reads_the_same_whatever_starts_the_chunk():
    pairs = list(itertools.product(LINES, LINES))
    # `x` has no process prefix: the chunk it starts is not one writer's, and must read the same
    diff = [(a, b) for a, b in pairs if events([a, b]) != events(["x", a, b])]
    assert diff == []
