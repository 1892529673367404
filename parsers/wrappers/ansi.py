"""ANSI colour codes: with the ESC byte, as CloudWatch/SageMaker render it (`#033[0m`), or
with the ESC byte lost (`[2m`); see parsers/base.py ANSI_RE."""

from __future__ import annotations

import polars as pl

from ..base import ANSI_RE

NAME = "ansi"
DOC = "ANSI colour codes (`\\x1b[32m`, `#033[0m`, `[2m`), removed everywhere in the line"
JOINS = False


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    # escape sequences with the ESC byte (or its `#033` rendering) on any line are enough;
    # the bare `[2m` form must be on a good share of them, or `[1m` in a prompt would count
    if s.str.contains(r"(?:\x1b|#033)\[[0-9;]*[A-Za-z]").any():
        return 1.0
    n = max(1, int((s.str.len_bytes() > 0).sum()))
    return float(s.str.contains(r"\[\d{1,3}(?:;\d{1,3})*m").sum()) / n


def decode(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(pl.col("text").str.replace_all(ANSI_RE, ""))
