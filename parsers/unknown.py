"""Fallback for files no engine parser recognises: every line is kept as `unparsed`,
whole, so nothing is lost and `servelens sql` can still search it."""

from __future__ import annotations

import polars as pl

from .base import ParseContext

NAME = "unknown"


def detect(lines: list[str]) -> float:
    return 0.0


def record_starts(text: pl.Series) -> pl.Series:
    return pl.Series("starts", [True] * len(text), dtype=pl.Boolean)


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    return lines.select(
        "line",
        pl.lit("unparsed").alias("event"),
        pl.col("text").alias("message"),
    )
