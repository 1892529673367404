"""The vLLM parser reads a chunk's process prefixes and headers by one of several paths
(parsers/engines/vllm/parser.py): the one prefix of every line that has one read once, with
lines without a prefix among them (uvicorn's own); the prefixes of several writers read per
distinct line start; the header read in place behind the one known prefix, or per distinct
line start. Every path must read a line as the others do: a line reads the same whatever
path its chunk takes (a line depends on itself and the line before only)."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import polars as pl
import pytest
from servelens.parsers.base import ParseContext
from servelens.parsers.engines.vllm import parser as P

REPO = Path(__file__).resolve().parents[2]
HDR = "INFO 05-12 08:00:00 [logger.py:49] "
LINES = [
    f"(APIServer pid=1) {HDR}Received request a: params: None",
    "(APIServer pid=1) INFO:     10.0.0.1:1 - \"GET / HTTP/1.1\" 200 OK",
    'INFO:     127.0.0.1:58928 - "GET /health HTTP/1.1" 200 OK',
    f"{HDR}Added request b.",
    "WARNING 05-12 08:00:01 [loggers.py:7] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 5.0%",
    "(APIServer pid=1)",
    f"(APIServer pid=1){HDR}x",
    f"(APIServer pid=1)  {HDR}x",
    "(APIServer pid=1)é x",
    f"(APIServer pid=1)x{HDR}x",
    f"(EngineCore_DP0 pid=250) {HDR}x",
    f"(VllmWorker rank=1 pid=5283) {HDR}x",
    f"(a b c) {HDR}x",
    "(a) b",
    f"[rank0]: (APIServer pid=1) {HDR}x",
    f"[rank1]: {HDR}x",
    "  File \"x.py\", line 1, in f",
    "",
]
# two writers open the chunk: every line start is taken apart on its own
SEVERAL = ["(Other pid=9) x", "(Else pid=8) y"]


def events(lines: list[str], lead: list[str]) -> list[dict]:
    """The last line's events in a chunk `lead + lines`, their set fields."""
    text = lead + lines
    ctx = ParseContext(engine="vllm", source="t.log", instance="t", year=2026)
    out = P.parse(pl.DataFrame({"line": range(1, len(text) + 1), "text": text}), ctx)
    rows = out.filter(pl.col("line") == len(text)).drop("line", "_seq", strict=False).rows(named=True)
    return [{k: v for k, v in r.items() if v is not None} for r in rows]


# the leads: none; a line without a prefix; two writers; headers that repeat (the header
# then read per distinct start)
LEADS = {"none": [], "bare": ["x"], "several": SEVERAL, "repeated": [f"{HDR}x"] * 8}


def test_a_line_reads_the_same_whatever_path_its_chunk_takes():
    # (each pair read once without a lead, the reading every lead's is compared with)
    diff = {lead: [] for lead in LEADS if lead != "none"}
    for a, b in itertools.product(LINES, LINES):
        alone = events([a, b], [])
        for lead, found in diff.items():
            if events([a, b], LEADS[lead]) != alone:
                found.append((a, b))
    assert diff == {lead: [] for lead in diff}


def test_the_header_reads_the_same_in_place_and_per_distinct_start(monkeypatch):
    lines = [a for a in LINES for _ in range(3)]
    ctx = ParseContext(engine="vllm", source="t.log", instance="t", year=2026)
    frame = pl.DataFrame({"line": range(1, len(lines) + 1), "text": lines})
    got = {}
    for distinct in (True, False):
        monkeypatch.setattr(P, "_mostly_distinct", lambda starts, d=distinct: d)
        got[distinct] = P.parse(frame, ctx)
    assert got[True].equals(got[False])


def _vllm_logs() -> list[Path]:
    out = []
    for d in (REPO / "tests" / "fixtures", REPO / "sample_logs"):
        for p in sorted(d.rglob("*.log*")):
            if "vllm" in str(p.relative_to(REPO)) and p.suffix in (".log", ".gz") and p.is_file():
                out.append(p)
    return out


@pytest.mark.parametrize("path", _vllm_logs(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_logged_vllm_line_reads_the_same_by_every_path(path, monkeypatch):
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    text = raw.decode("utf-8", errors="replace").splitlines()
    assert text
    ctx = ParseContext(engine="vllm", source="t.log", instance="t", year=2026)

    def parse(lead: list[str]) -> pl.DataFrame:
        lines = lead + text
        out = P.parse(pl.DataFrame({"line": range(1, len(lines) + 1), "text": lines}), ctx)
        # the lead's own events out, the file's lines numbered as alone
        out = out.filter(pl.col("line") > len(lead)).with_columns(pl.col("line") - len(lead))
        return out.drop("_seq", strict=False)

    alone = parse([])
    for distinct in (True, False):
        monkeypatch.setattr(P, "_mostly_distinct", lambda starts, d=distinct: d)
        for lead in (["x"], SEVERAL):
            assert parse(lead).equals(alone), (distinct, lead)
