"""Query results as text: an aligned table for people, CSV and JSON for programs.

Every column type a query can return renders in every format: binary values as hex text,
nested values (lists, structs, maps, arrays) as JSON text in CSV and as JSON in JSON output,
and exact numbers (DECIMAL, and HUGEINT as from `sum()`) as JSON numbers, not strings.
(pipeline/query/sandbox.py has already turned the types polars cannot hold, such as INTERVAL, into
text.)
"""

from __future__ import annotations

import polars as pl

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


def for_json(df: pl.DataFrame) -> pl.DataFrame:
    """Binary as hex text; DECIMAL as a JSON number (whole numbers exactly, as Int128)."""
    exprs = []
    for name, dtype in df.schema.items():
        if dtype == pl.Binary:
            exprs.append(pl.col(name).bin.encode("hex"))
        elif isinstance(dtype, pl.Decimal):
            exprs.append(pl.col(name).cast(pl.Int128 if dtype.scale == 0 else pl.Float64))
    return df.with_columns(exprs) if exprs else df


# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection): a log
# line such as `=HYPERLINK(...)` must arrive as text. OWASP's advice: prefix a single quote.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def formulas_as_text(df: pl.DataFrame) -> pl.DataFrame:
    """Text cells that a spreadsheet would run as formulas, prefixed with `'`."""
    exprs = []
    for name, dtype in df.schema.items():
        if dtype == pl.String:
            col = pl.col(name)
            risky = pl.any_horizontal([col.str.starts_with(c) for c in FORMULA_START])
            exprs.append(pl.when(risky).then(pl.lit("'") + col).otherwise(col).alias(name))
    return df.with_columns(exprs) if exprs else df


def _terminal_safe(df: pl.DataFrame) -> pl.DataFrame:
    """A table for a terminal: control characters in text (a newline that would forge a row,
    an ANSI escape) shown as escapes (pipeline/termsafe.py); nested values holding text as
    JSON text, which escapes them."""
    from ..termsafe import CONTROL_PATTERN, shown

    exprs = []
    for name, dtype in df.schema.items():
        if dtype == pl.String:
            col = pl.col(name)
            for raw, esc in (("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\x1b", "\\x1b")):
                col = col.str.replace_all(raw, esc, literal=True)
            exprs.append(col.str.replace_all(CONTROL_PATTERN, "\ufffd").alias(name))
        elif _is_nested(dtype) and "String" in str(dtype):
            exprs.append(_json_text(name))
    out = df.with_columns(exprs) if exprs else df
    names = [shown(n) for n in out.columns]
    return out.rename(dict(zip(out.columns, names))) if names != out.columns else out


def render(df: pl.DataFrame, fmt: str, *, safe_csv: bool = True) -> str:
    if fmt == "csv":
        out = for_csv(df)
        return (formulas_as_text(out) if safe_csv else out).write_csv()
    if fmt == "json":
        return for_json(df).write_json() + "\n"
    if df.width == 0:
        return "(no result)\n"
    df = _terminal_safe(df)
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
