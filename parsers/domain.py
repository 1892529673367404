"""Domain checks: values no engine can truly have printed become null, with a note.

Every engine's events pass through here (from `finalize`), so the rules are one table driven
by the schema's units, not per engine: a parser added later (SGLang, llama.cpp) is checked
the same way without a line here.

- a value that does not convert to its column's type (an integer past 2**63, a string in a
  numeric column) is null;
- NaN and infinities are null;
- durations, token counts, request counts (batch sizes, queue lengths), block counts and
  throughputs are non-negative;
- fractions (`kv_usage`) are in [0, 1];
- timestamps are between MIN_TS and MAX_TS (a year like `-2026`, `0000` or `+12026` cannot be
  a log line's time, and would break every reader converting it to a Python datetime).

The original text of each value removed is kept in `attrs` under `invalid` (e.g.
`{"invalid":{"kv_usage":"1.5"}}`), and counted per column in `ctx.invalid`, which ingest
reports in its summary. Nothing is clamped: a value that cannot be true is not made up.
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from .schema import COLUMNS, POLARS_SCHEMA

# the attrs key holding the removed values
INVALID_KEY = "invalid"

# Plausible times: no log line was written before 1970 or after 2100. Year inference and
# --year stay inside this easily; a clock reset to the epoch still passes.
MIN_TS = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MAX_TS = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)

# units whose values cannot be negative (durations, counts, rates)
# (units other helpers' columns may use are listed too: a column appended to the schema with
# one of these units is checked without a line here)
NON_NEGATIVE_UNITS = {"s", "ms", "tokens", "requests", "blocks", "bytes", "tokens/s", "requests/s", "count"}
FRACTION_UNITS = {"fraction 0..1"}
# columns with a range of their own (lo, hi inclusive)
COLUMN_RANGES: dict[str, tuple[float, float]] = {
    "http_status": (100, 599),
}
# the framework's own columns (the line span), never a parser's value to judge
NOT_CHECKED = {"line", "n_lines"}
# a fraction a hair above 1 is rounding (`100.0%` of a float), not an impossible value
FRACTION_SLACK = 1e-9


def _range(name: str, unit: str) -> tuple[float | None, float | None]:
    if name in COLUMN_RANGES:
        return COLUMN_RANGES[name]
    if unit in FRACTION_UNITS:
        return 0.0, 1.0 + FRACTION_SLACK
    if unit in NON_NEGATIVE_UNITS:
        return 0.0, None
    return None, None


# column -> (lo, hi) for every numeric column of the schema
NUMERIC_RULES: dict[str, tuple[float | None, float | None]] = {
    c.name: _range(c.name, c.unit)
    for c in COLUMNS
    if POLARS_SCHEMA[c.name].is_numeric() and c.name not in NOT_CHECKED
}


def _bad_number(name: str, dtype: pl.DataType) -> pl.Expr | None:
    """True where the column holds a value that is not a valid `name`; None when the
    column's type cannot hold a wrong value (e.g. an all-null column)."""
    target = POLARS_SCHEMA[name]
    col = pl.col(name)
    if dtype == pl.Null or (dtype == pl.Boolean and target.is_integer()):
        return None
    conds = []
    if not dtype.is_numeric():
        # strings (or anything else): whatever does not convert, then the range
        value = col.cast(target, strict=False)
        conds.append(value.is_null())
    else:
        value = col
        if dtype.is_float():
            conds.append(~col.is_finite())
        if dtype != target and not target.is_float():
            # narrowing (Int64 -> Int32, Float64 -> Int64): out of range does not convert
            conds.append(col.cast(target, strict=False).is_null())
    if target.is_float():
        conds.append(~value.is_finite())
    lo, hi = NUMERIC_RULES[name]
    if lo is not None:
        conds.append(value < lo)
    if hi is not None:
        conds.append(value > hi)
    return col.is_not_null() & pl.any_horizontal(conds).fill_null(True)


def _bad_time(name: str, dtype: pl.DataType) -> pl.Expr | None:
    if not isinstance(dtype, pl.Datetime):
        return None
    col = pl.col(name)
    if dtype.time_zone is None:
        lo, hi = MIN_TS.replace(tzinfo=None), MAX_TS.replace(tzinfo=None)
    else:
        lo, hi = MIN_TS, MAX_TS
        col = col.dt.convert_time_zone("UTC")
    lit = lambda t: pl.lit(t, pl.Datetime(dtype.time_unit or "us", dtype.time_zone and "UTC"))  # noqa: E731
    return col.is_not_null() & ((col < lit(lo)) | (col >= lit(hi))).fill_null(False)


def apply(events: pl.DataFrame, counts: dict[str, int] | None = None) -> pl.DataFrame:
    """Null every impossible value of `events` (any columns, before they are cast to the
    schema; `ts` as the parser gave it), note it in `attrs`, count it in `counts`.

    The common case, nothing wrong, costs one pass of comparisons and no copy."""
    schema = events.schema
    checks: dict[str, pl.Expr] = {}
    for name, dtype in schema.items():
        if name == "ts":
            bad = _bad_time(name, dtype)
        elif name in NUMERIC_RULES:
            bad = _bad_number(name, dtype)
        else:
            continue
        if bad is not None:
            checks[name] = bad
    if not checks:
        return events
    flags = events.select(**{f"_bad_{k}": v for k, v in checks.items()})
    n_bad = {k: int(flags[f"_bad_{k}"].sum()) for k in checks}
    wrong = [k for k, n in n_bad.items() if n]
    if not wrong:
        return events
    if counts is not None:
        for k in wrong:
            counts[k] = counts.get(k, 0) + n_bad[k]
    flags = flags.select(f"_bad_{k}" for k in wrong)
    events = events.with_columns(flags)
    note = pl.struct(
        [pl.when(pl.col(f"_bad_{k}")).then(pl.col(k).cast(pl.String)).alias(k) for k in wrong]
    ).struct.json_encode()
    # `{"a":null,"b":"1.5"}` -> `{"b":"1.5"}` (keys are column names, values strings)
    note = note.str.replace_all(r'"[a-z_0-9]+":null,?', "").str.replace(r",\}$", "}")
    any_bad = pl.any_horizontal([pl.col(f"_bad_{k}") for k in wrong])
    member = pl.concat_str([pl.lit(f'"{INVALID_KEY}":'), note])
    attrs = pl.col("attrs") if "attrs" in schema and schema["attrs"] == pl.String else None
    if attrs is None:
        new_attrs = pl.concat_str([pl.lit("{"), member, pl.lit("}")])
        merged = pl.when(any_bad).then(new_attrs)
        if "attrs" in schema:  # a non-string attrs column: keep what it holds as text
            merged = merged.otherwise(pl.col("attrs").cast(pl.String, strict=False))
    else:
        with_member = pl.when(attrs.is_null() | (attrs.str.strip_chars() == "{}")).then(
            pl.concat_str([pl.lit("{"), member, pl.lit("}")])
        ).otherwise(
            pl.concat_str([attrs.str.strip_chars_end().str.strip_suffix("}"), pl.lit(","), member, pl.lit("}")])
        )
        merged = pl.when(any_bad).then(with_member).otherwise(attrs)
    nulled = [
        pl.when(pl.col(f"_bad_{k}")).then(None).otherwise(pl.col(k)).alias(k) for k in wrong
    ]
    # numbers that did not convert stay in their own type here; finalize's cast then
    # succeeds because the value is gone
    return events.with_columns(*nulled, merged.alias("attrs")).drop(f"_bad_{k}" for k in wrong)
