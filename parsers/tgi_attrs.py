"""The `attrs` JSON column of the TGI parser (`tgi.py`), built like `base.attrs_json` (the
fields in the given order, nulls omitted, null when nothing is left) but faster.

`attrs_json` encodes every field and then cuts the `"key":null` members out with a regex
over every row's JSON: that regex costs several times the encoding. Rows here fall into a
few shapes (which fields are set), so the rows are grouped by that shape and each group
encodes only its set fields: no member to cut, no regex.
"""

from __future__ import annotations

import polars as pl

from .base import attrs_json

# more distinct shapes than this in one chunk, or fewer rows per shape than that: not
# worth a group each, use attrs_json (its regex costs ~4 us a row, a group ~0.3 ms)
_MAX_SHAPES = 64
_MIN_ROWS_PER_SHAPE = 100


def _is_set(name: str, dtype: pl.DataType) -> pl.Expr:
    """True where the field's value appears in the JSON: the encoder writes NaN and
    infinities as `null` (which attrs_json then drops), so those count as unset."""
    col = pl.col(name)
    if dtype.is_float():
        return col.is_finite().fill_null(False)
    return col.is_not_null()


def attrs_column(df: pl.DataFrame, keys: list[str], keep: pl.Expr) -> pl.Series:
    """`attrs_json(**{k: pl.col(k) for k in keys})` where `keep` is true, else null, as a
    String Series aligned with `df`'s rows."""
    schema = df.schema  # (built anew on each access)
    simple = all(schema[k].is_numeric() or schema[k] in (pl.String, pl.Boolean) for k in keys)
    if not keys or len(keys) > 62 or not simple or df.height < _MIN_ROWS_PER_SHAPE:
        return _attrs_json(df, keys, keep)
    # the shape of a row: bit i set when keys[i] is; 0 for rows that get no attrs. Only
    # the fields set on some rows and not others need a bit: the rest are in every shape.
    always = 0
    bits = []
    for i, k in enumerate(keys):
        if schema[k].is_float():
            bits.append(_is_set(k, schema[k]).cast(pl.Int64) * (1 << i))
        elif df[k].null_count() == 0:
            always |= 1 << i
        else:
            bits.append(pl.col(k).is_not_null().cast(pl.Int64) * (1 << i))
    shape = pl.sum_horizontal(bits) + always if bits else pl.lit(always, pl.Int64)
    rows = df.select(*keys, pl.when(keep).then(shape).otherwise(0).alias("_shape")).with_row_index("_row")
    groups = rows.partition_by("_shape", as_dict=True)
    # each shape costs a pass of its own: with many shapes for few rows, one regex is less
    if len(groups) > _MAX_SHAPES or df.height < _MIN_ROWS_PER_SHAPE * len(groups):
        return _attrs_json(df, keys, keep)
    parts = []
    for (bits,), part in groups.items():
        present = [k for i, k in enumerate(keys) if bits >> i & 1]
        json = pl.struct(present).struct.json_encode() if present else pl.lit(None, pl.String)
        parts.append(part.select("_row", json.alias("attrs")))
    return pl.concat(parts).sort("_row")["attrs"]


def _attrs_json(df: pl.DataFrame, keys: list[str], keep: pl.Expr) -> pl.Series:
    return df.select(pl.when(keep).then(attrs_json(**{k: pl.col(k) for k in keys}))).to_series()
