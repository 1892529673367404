"""uvicorn's lines, as the OpenAI-compatible HTTP front ends of vLLM and SGLang print them (one
definition for every engine behind uvicorn)."""

from __future__ import annotations

import polars as pl

# `INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK`
ACCESS = (
    r'^(?P<ulevel>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<client>\S+) - '
    r'"(?P<method>[A-Z]+) (?P<path>\S+) (?P<proto>HTTP/[\d.]+)" (?P<status>\d{3})\b'
)
# uvicorn pads `LEVEL:` to 9 columns
OTHER = r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+\S"


def access_columns(sub: pl.DataFrame, message: pl.Expr) -> tuple[pl.DataFrame, dict, dict]:
    """An access line's event columns and attrs: `sub` with the capture added, the columns
    (event, level, http_status) and the extra fields (method, path, client, protocol)."""
    sub = sub.with_columns(message.str.extract_groups(ACCESS).alias("_uv"))
    uv = pl.col("_uv").struct
    cols = {
        "event": pl.lit("http_access"),
        "level": uv.field("ulevel"),
        "http_status": uv.field("status").cast(pl.Int32, strict=False),
    }
    extra = {
        "method": uv.field("method"),
        "path": uv.field("path"),
        "client": uv.field("client"),
        "protocol": uv.field("proto"),
    }
    return sub, cols, extra
