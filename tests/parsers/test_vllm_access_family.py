"""The vLLM parser tells uvicorn's access lines among the lines without a header by reading
them (`uvicorn.access_groups`: a line is one when its method is read) and hands those
captures on to the access events (parsers/engines/vllm/parser.py). That must tell the lines
that `uvicorn.ACCESS` matches, and the events must be those of the whole family chain, on
every logged line, made-up lines and near misses."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from servelens.parsers import uvicorn
from servelens.parsers.base import ParseContext
from servelens.parsers.engines.vllm import parser as P

REPO = Path(__file__).resolve().parents[2]

STATS = (
    "(APIServer pid=7) INFO 05-12 08:00:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 5.0%"
)
MADE_UP = [
    'INFO:     127.0.0.1:58928 - "GET /health HTTP/1.1" 200 OK',
    'WARNING:  10.0.0.1:1 - "POST /v1/completions HTTP/2" 503 Service Unavailable',
    '10.0.0.1:1 - "GET /metrics HTTP/1.1" 200',
    'INFO:     127.0.0.1:5 - "GET /é HTTP/1.1" 200 OK',
    'INFO:\t127.0.0.1:5 - "GET / HTTP/1.1" 200',
    # near misses
    'INFO:     127.0.0.1:5 - "get / HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:5 - "GET / HTTP/1.1" 20 OK',
    'INFO:     127.0.0.1:5 - "GET / HTTP/1.1" 2000',
    'INFO:     127.0.0.1:5 "GET / HTTP/1.1" 200 OK',
    'INFO: 127.0.0.1:5 - "GET /  HTTP/1.1" 200 OK',
    'INFO:     Started server process [1]',
    'host - "GET / HTTP/1.1" 200',
    'INFO:     args: - "GET / HTTP/1.1" 200',
    "",
    "  File \"x.py\", line 1, in f",
]


def _logged_lines() -> list[str]:
    out = []
    for d in (REPO / "tests" / "fixtures", REPO / "sample_logs"):
        for p in sorted(d.rglob("*")):
            if p.is_file() and p.suffix in (".log", ".gz") and not p.name.endswith(".json.gz"):
                raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
                out += [line for line in raw.decode("utf-8", errors="replace").splitlines() if " - \"" in line]
    return out


def test_a_line_is_read_as_access_where_uvicorn_access_matches():
    lines = pl.Series(_logged_lines() + MADE_UP, dtype=pl.String)
    assert lines.len() > 1000
    read = uvicorn.access_groups(lines).struct.field("method").is_not_null()
    assert read.to_list() == lines.str.contains(uvicorn.ACCESS).to_list()


def _chunks() -> list[list[str]]:
    """Made-up chunks past the size where the family tests run side by side, and every
    logged vLLM file."""
    mixed = []
    for i in range(700):
        mixed += [STATS.format(s=i % 60), MADE_UP[i % len(MADE_UP)]]
    # an access line among the lines holding a stats or capacity word is read on that side
    hot = mixed + ['INFO:     127.0.0.1:5 - "GET /args: HTTP/1.1" 200 OK']
    out = [mixed, hot]
    for d in (REPO / "tests" / "fixtures", REPO / "sample_logs"):
        for p in sorted(d.rglob("*")):
            if p.is_file() and "vllm" in str(p.relative_to(REPO)) and p.suffix in (".log", ".gz"):
                if p.name.endswith(".json.gz"):
                    continue
                raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
                out.append(raw.decode("utf-8", errors="replace").splitlines())
    return out


@pytest.mark.parametrize("i", range(len(_chunks())))
def test_the_events_are_those_of_the_whole_chain(i, monkeypatch):
    lines = _chunks()[i]
    frame = pl.DataFrame({"line": range(1, len(lines) + 1), "text": lines})
    ctx = ParseContext(engine="vllm", source="t.log", instance="t", year=2026)
    got = P.parse(frame, ctx)
    monkeypatch.setattr(P, "_families", lambda rec: (rec.select(P._family().alias("_fam")).to_series(), None))
    assert got.equals(P.parse(frame, ctx))
