"""journald's JSON export (`journalctl -o json`): one JSON object per entry.

    {"__REALTIME_TIMESTAMP":"1781101425123456","MESSAGE":"INFO 06-10 ...","_HOSTNAME":"gpu-1",
     "SYSLOG_IDENTIFIER":"vllm","_SYSTEMD_UNIT":"vllm.service","_PID":"4242",...}

The time is microseconds since the epoch. Docker's journald driver marks the pieces of a line
longer than its buffer with `CONTAINER_PARTIAL_MESSAGE=true`; they join up to the next entry
without it. (`journalctl -o short-iso` / `short-precise` are syslog-shaped: see syslog.py.)"""

from __future__ import annotations

import polars as pl

from ._frame import WTS, join_fragments, set_time, share
from .docker_json import decode_json

NAME = "journald"
DOC = "journald JSON (`journalctl -o json`): `MESSAGE`, `__REALTIME_TIMESTAMP`, host/unit/identifier as labels"
JOINS = True
NEEDS = ('"__REALTIME_TIMESTAMP"',)

_HINT = r'^\{.*"__REALTIME_TIMESTAMP"\s*:'
_LABELS = {"_HOSTNAME": "host", "_SYSTEMD_UNIT": "unit", "SYSLOG_IDENTIFIER": "ident", "_PID": "pid", "CONTAINER_NAME": "container"}
_DTYPE = pl.Struct(
    {"MESSAGE": pl.String, "__REALTIME_TIMESTAMP": pl.String, "CONTAINER_PARTIAL_MESSAGE": pl.String}
    | {k: pl.String for k in _LABELS}
)


def sniff(texts: list[str]) -> float:
    return share(texts, _HINT)


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = decode_json(df, _HINT, _DTYPE)
    j = pl.col("_j")
    msg = j.struct.field("MESSAGE")
    ok = msg.is_not_null()
    us = j.struct.field("__REALTIME_TIMESTAMP").cast(pl.Int64, strict=False)
    ts = (us * 1000).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").cast(WTS)
    df = df.with_columns(
        pl.when(ok).then(msg.str.strip_suffix("\n")).otherwise(pl.col("text")).alias("text"),
        set_time(df, ts),
        (j.struct.field("CONTAINER_PARTIAL_MESSAGE") != "true").fill_null(True).alias("_ends"),
        *[j.struct.field(k).alias(f"_lab_{v}") for k, v in _LABELS.items()],
    ).drop("_j")
    return join_fragments(df, pl.col("_ends")).drop("_ends", strict=False)
