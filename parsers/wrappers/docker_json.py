"""Docker's json-file log driver: `/var/lib/docker/containers/<id>/<id>-json.log`.

    {"log":"INFO 06-10 14:23:45 ...\\n","stream":"stdout","time":"2026-06-10T14:23:45.123456789Z"}

Docker reads a container's output in a 16 KiB buffer: a longer line is written as several
records that all carry the first piece's time, and only the last ends in `\\n` (moby
daemon/logger/copier.go, PartialLogMetaData). The pieces join back into one line."""

from __future__ import annotations

import polars as pl

from ._frame import join_fragments, rfc3339_ns_of, set_time, share

NAME = "docker-json"
DOC = 'Docker json-file: `{"log": ..., "stream": ..., "time": ...}`, 16 KiB split pieces joined'
JOINS = True
NEEDS = ('"log"',)

_HINT = r'^\{\s*"log"\s*:'
_DTYPE = pl.Struct({"log": pl.String, "stream": pl.String, "time": pl.String})


def sniff(texts: list[str]) -> float:
    return share(texts, _HINT)


def decode_json(df: pl.DataFrame, hint: str, dtype: pl.Struct, where: pl.Expr | None = None) -> pl.DataFrame:
    """Decode the JSON lines (those matching `hint`, and `where`) into the struct column
    `_j`: one native decode; when some line is not valid JSON, one path lookup per field
    instead (null where a line has no such field, or is not JSON)."""
    hit = pl.col("text").str.contains(hint) if where is None else where
    # a file of nothing but JSON records (the usual case) is decoded without a copy
    every = bool(df.select(hit.all()).item()) if df.height else True
    cand = pl.col("text") if every else pl.when(hit).then(pl.col("text"))
    try:
        return df.with_columns(cand.str.json_decode(dtype).alias("_j"))
    except pl.exceptions.PolarsError:
        # (a member that is an object or an array comes back as its JSON text: read in its
        # type, as the whole decode gives it)
        fields = [
            _in_type(cand.str.json_path_match(f"$.{f.name}"), f.dtype).alias(f.name) for f in dtype.fields
        ]
        return df.with_columns(pl.struct(fields).alias("_j"))


def _in_type(value: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    return value.str.json_decode(dtype) if isinstance(dtype, (pl.Struct, pl.List)) else value


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = decode_json(df, _HINT, _DTYPE)
    j = pl.col("_j")
    log = j.struct.field("log")
    ok = log.is_not_null()
    df = df.with_columns(
        pl.when(ok).then(log.str.strip_suffix("\n").str.strip_suffix("\r")).otherwise(pl.col("text")).alias("text"),
        set_time(df, rfc3339_ns_of(df, j.struct.field("time"))),
        pl.coalesce(pl.col("_stream"), j.struct.field("stream")).alias("_stream"),
        (~ok | log.str.ends_with("\n")).alias("_ends"),
    ).drop("_j")
    return join_fragments(df, pl.col("_ends")).drop("_ends", strict=False)
