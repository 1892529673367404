"""Query results as text: an aligned table for people, CSV and JSON for programs."""

from __future__ import annotations

import polars as pl


def render(df: pl.DataFrame, fmt: str) -> str:
    if fmt == "csv":
        return df.write_csv()
    if fmt == "json":
        return df.write_json() + "\n"
    if df.width == 0:
        return "(no result)\n"
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        fmt_str_lengths=80,
        tbl_width_chars=10_000,
        tbl_formatting="ASCII_MARKDOWN",
        float_precision=None,
    ):
        text = str(df)
    return text + f"\n({df.height} row{'s' if df.height != 1 else ''})\n"
