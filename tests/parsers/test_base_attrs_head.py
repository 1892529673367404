"""parsers/base.py `attrs_column` encodes a shape whose fields hold one value on every row once
(from its first row), and reads a row's shape from 32-bit or 64-bit sums of its set fields'
bits: the JSON must be what encoding every row whole gives (`attrs_json`, the general reading),
on made-up frames, near misses (a float that is 0.0 on one row and -0.0 on another, text that
needs escaping, first and last rows alike but not the middle, 31 and 32 fields) and every
engine's logged lines in tests/fixtures and sample_logs."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from servelens.parsers import base, get_parser
from servelens.parsers.base import ParseContext, attrs_column, attrs_json

REPO = Path(__file__).resolve().parents[2]


def whole(df: pl.DataFrame, keys: list[str]) -> pl.Series:
    return df.select(attrs_json(**{k: pl.col(k) for k in keys}).alias("attrs")).to_series()


N = 300  # above the rows per shape under which attrs_column takes the regex


def frame(**cols) -> pl.DataFrame:
    return pl.DataFrame({k: (v * N)[:N] if isinstance(v, list) else v for k, v in cols.items()})


CASES = {
    "constant head, float tail": frame(process=["APIServer"], pid=[7], src=["a.py:1"], kv=[0.5, 0.25, 1e-7, 3.0]),
    "constant head, varying text": frame(process=["APIServer"], path=["/a", "/b\"q", "/c\\d", "/$1{}é"]),
    "all constant": frame(process=["Eng \"x\" $0 {"], pid=[1], ok=[True]),
    "varying first": frame(pid=[1, 2], process=["A"]),
    "signed zero first": frame(kv=[0.0, -0.0], process=["A"]),
    "nulls make shapes": frame(process=["A"], pid=[1, None, 3], rank=[None, 2], kv=[0.5, float("nan"), None]),
    "constant bool then int": frame(ok=[True], n=[1, 2, 3], s=["x"]),
    "escapes in head": frame(process=["\n\t\"\\/\u0001é"], n=[1, 2]),
    # two shapes over N rows: the per-shape path, not the regex (NaN and infinities unset)
    "non-finite floats unset": frame(process=["A"], kv=[0.5, float("nan"), float("inf"), -float("inf")], n=[1, 2]),
    # the first and last rows agree (row N-1 is N-1 % 3 == 2 of the cycle) but not every row
    "ends alike, middle not": frame(process=["A", "B", "A"], pid=[7]),
    # the highest bit of a 32-bit shape, then too many fields for one
    "31 fields": frame(**{f"f{i}": [i, None] if i % 2 or i == 30 else [i] for i in range(31)}),
    "32 fields": frame(**{f"f{i}": [None, i] if i % 2 else ["x"] for i in range(32)}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_attrs_column_is_the_whole_encoding(name):
    df = CASES[name]
    keys = df.columns
    got = attrs_column(df, keys)
    assert got.to_list() == whole(df, keys).to_list()
    keep = pl.Series(range(N)) % 3 != 0
    got = attrs_column(df, keys, keep=pl.lit(keep))
    want = df.select(pl.when(pl.lit(keep)).then(attrs_json(**{k: pl.col(k) for k in keys}))).to_series()
    assert got.to_list() == want.to_list()


def _encode_whole(rows: pl.DataFrame, keys: list[str], bits: int) -> pl.Series:
    present = [k for i, k in enumerate(keys) if bits >> i & 1]
    if not present:
        return pl.repeat(None, rows.height, dtype=pl.String, eager=True).alias("attrs")
    return rows.select(pl.struct(present).struct.json_encode().alias("attrs")).to_series()


def _logs() -> list[tuple[str, Path]]:
    out = []
    engines = ("vllm", "tgi", "trtllm", "sglang", "llamacpp")
    for d in (REPO / "tests" / "fixtures", REPO / "sample_logs"):
        for p in sorted(d.rglob("*")):
            if not p.is_file() or p.suffix not in (".log", ".gz") or p.name.endswith(".json.gz"):
                continue
            engine = next((e for e in engines if e in p.relative_to(REPO).parts or e in p.name), None)
            if engine:
                out.append((engine, p))
    return out


@pytest.mark.parametrize("engine,path", _logs(), ids=lambda x: str(x.relative_to(REPO)) if isinstance(x, Path) else x)
def test_every_engine_logged_attrs_read_the_same(engine, path, monkeypatch):
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    text = raw.decode("utf-8", errors="replace").splitlines()
    lines = base.lines_frame(text)
    parser = get_parser(engine)

    def parse() -> pl.DataFrame:
        ctx = ParseContext(engine=engine, source=str(path), instance="t", year=2026)
        return base.parse_isolated(parser, lines, ctx)

    got = parse()
    monkeypatch.setattr(base, "_encode_shape", _encode_whole)
    assert got.equals(parse())
