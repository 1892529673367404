"""uvicorn's lines, as the OpenAI-compatible HTTP front ends of vLLM and SGLang print them (one
definition for every engine behind uvicorn)."""

from __future__ import annotations

import polars as pl

# `INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK`; a paste may drop
# the level word (the client then has to be `host:port`)
ACCESS = (
    r'^(?:(?P<ulevel>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<client>\S+)|(?P<bare>\S+:[0-9]+)) - '
    r'"(?P<method>[A-Z]+) (?P<path>\S+) (?P<proto>HTTP/[\d.]+)" (?P<status>\d{3})\b'
)
# uvicorn pads `LEVEL:` to 9 columns
OTHER = r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+\S"


# the access line as uvicorn prints it (a level, a client, printable ASCII only), as a pattern
# that never has two ways on (one-pass: its captures cost about one search; ACCESS's
# alternatives and Unicode classes make capturing several times dearer). Where it matches,
# ACCESS matches by its first alternative with the same captures (each class is a part of
# ACCESS's, and each field ends where ACCESS's must); other lines are read by ACCESS
_ACCESS_ASCII = (
    r'^(?P<ulevel>DEBUG|INFO|WARNING|ERROR|CRITICAL):[ ]+(?P<client>[!-~]+) - '
    r'"(?P<method>[A-Z]+) (?P<path>[!-~]+) (?P<proto>HTTP/[0-9.]+)" (?P<status>[0-9]{3})(?: |$)'
)
_ACCESS_FIELDS = ("ulevel", "client", "bare", "method", "path", "proto", "status")


def access_groups(message: pl.Series) -> pl.Series:
    """`message.str.extract_groups(ACCESS)`, the lines of the usual form read by a cheaper
    pattern."""
    fast = message.str.extract_groups(_ACCESS_ASCII).struct.unnest()
    miss = fast["method"].is_null()
    fast = fast.with_columns(pl.lit(None, pl.String).alias("bare")).select(_ACCESS_FIELDS)
    if miss.any():
        idx = miss.arg_true()
        slow = message.gather(idx).str.extract_groups(ACCESS).struct.unnest()
        fast = fast.with_columns(fast[f].scatter(idx, slow[f]) for f in _ACCESS_FIELDS)
    return fast.to_struct(message.name)


def access_columns(sub: pl.DataFrame, message: pl.Expr, groups: pl.Series | None = None) -> tuple[pl.DataFrame, dict, dict]:
    """An access line's event columns and attrs: `sub` with the capture added, the columns
    (event, level, http_status) and the extra fields (method, path, client, protocol).
    `groups`: `access_groups` of the rows' messages, when the caller has read them."""
    if groups is None:
        groups = access_groups(sub.select(message).to_series())
    sub = sub.with_columns(groups.alias("_uv"))
    uv = pl.col("_uv").struct
    cols = {
        "event": pl.lit("http_access"),
        # uvicorn's access logger writes at INFO
        "level": pl.coalesce(uv.field("ulevel"), pl.when(uv.field("bare").is_not_null()).then(pl.lit("INFO"))),
        "http_status": uv.field("status").cast(pl.Int32, strict=False),
    }
    extra = {
        "method": uv.field("method"),
        "path": uv.field("path"),
        "client": pl.coalesce(uv.field("client"), uv.field("bare")),
        "protocol": uv.field("proto"),
    }
    return sub, cols, extra
