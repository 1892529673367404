"""A query's DataFrame as CSV (the dashboard's download): binary values as hex text, nested
values (lists, structs, maps, arrays) as JSON text, and cells a spreadsheet would run as
formulas made text. (pipeline/query/sandbox.py has already turned the types polars cannot
hold, such as INTERVAL, into text.) `servelens sql` writes its results without a DataFrame:
pipeline/query/textresult.py.
"""

from __future__ import annotations

import polars as pl

from .textresult import FORMULA_START  # the cells a spreadsheet would run as formulas: one list for both writers

_NESTED = (pl.List, pl.Array, pl.Struct)


def _is_nested(dtype: pl.DataType) -> bool:
    return isinstance(dtype, _NESTED) or dtype.__class__.__name__ == "Map"


def _json_text(name: str) -> pl.Expr:
    """A nested column as one JSON text per row (polars encodes structs only: wrap the value in
    a one-field struct and cut the field name off again)."""
    prefix = len(pl.select(pl.struct(pl.lit(None).alias(name)).struct.json_encode()).item()) - len("null}")
    encoded = pl.struct(pl.col(name)).struct.json_encode()
    return (
        pl.when(pl.col(name).is_null())
        .then(pl.lit(None, dtype=pl.String))
        .otherwise(encoded.str.slice(prefix, encoded.str.len_chars() - prefix - 1))
        .alias(name)
    )


def for_csv(df: pl.DataFrame) -> pl.DataFrame:
    """Columns CSV cannot hold made text: binary as hex, nested as JSON."""
    exprs = []
    for name, dtype in df.schema.items():
        if dtype == pl.Binary:
            exprs.append(pl.col(name).bin.encode("hex"))
        elif _is_nested(dtype):
            exprs.append(_json_text(name))
    return df.with_columns(exprs) if exprs else df


def formulas_as_text(df: pl.DataFrame) -> pl.DataFrame:
    """Text cells that a spreadsheet would run as formulas, prefixed with `'`."""
    exprs = []
    for name, dtype in df.schema.items():
        if dtype == pl.String:
            col = pl.col(name)
            risky = pl.any_horizontal([col.str.starts_with(c) for c in FORMULA_START])
            exprs.append(pl.when(risky).then(pl.lit("'") + col).otherwise(col).alias(name))
    return df.with_columns(exprs) if exprs else df
