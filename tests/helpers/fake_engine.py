"""A tiny engine used only by the foundation tests, so the framework (chunking, multi-line
records, year inference) is tested apart from any real engine's format.

Format: `FAKE MM-DD HH:MM:SS LEVEL message`; lines starting with whitespace continue the
previous record.
"""

from __future__ import annotations

import polars as pl

from servelens.parsers.base import ParseContext, group_records

NAME = "fake"


def detect(lines: list[str]) -> float:
    return sum(ln.startswith("FAKE ") for ln in lines) / max(1, len(lines))


def record_starts(text: pl.Series) -> pl.Series:
    return ~text.str.contains(r"^\s")


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    recs = group_records(lines, record_starts(lines["text"]))
    parts = recs["first"].str.extract_groups(
        r"^FAKE (?<md>\d\d-\d\d \d\d:\d\d:\d\d) (?<level>[A-Z]+) (?<msg>.*)$"
    )
    return recs.with_columns(parts.struct.unnest()).select(
        "line",
        "n_lines",
        ("2000-" + pl.col("md")).str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False).alias("ts_noyear"),
        "level",
        pl.when(pl.col("md").is_null())
        .then(pl.lit("unparsed"))
        .when(pl.col("n_lines") > 1)
        .then(pl.lit("error"))
        .otherwise(pl.lit("log"))
        .alias("event"),
        pl.when(pl.col("md").is_null()).then(pl.col("text")).otherwise(pl.col("msg")).alias("message"),
    )
