"""JSON-lines log formatters: one JSON object per record, the engine's message in a field.

    NVIDIA NIM:  {"level": "INFO", "time": "02-20 21:54:59.370", "file_path": ".../vllm/engine/metrics.py",
                  "line_number": "334", "message": "Avg prompt throughput: ..."}
    vLLM --logging-config with python-json-logger:
                 {"asctime": "2025-02-20 21:54:59,370", "levelname": "INFO", "name": "vllm.engine.metrics",
                  "filename": "metrics.py", "lineno": 334, "message": "..."}
    generic:     {"timestamp": "2025-02-20T21:54:59.370Z", "level": "info", "msg": "INFO 02-20 ... metrics.py:334] ..."}

Fields read: the message (`message`, `msg`), the level (`level`, `levelname`, `severity`),
the time (`time`, `timestamp`, `asctime`, `ts`), the source file and line (`file_path`,
`filename`, `pathname`; `line_number`, `lineno`) and the logger (`name`, label `logger`).
A message that already opens with an engine header is handed on as it is. Otherwise, when
the record names its file and line, the line is rebuilt in the Python-logging header form the
engines print as text (`INFO 02-20 21:54:59.370 metrics.py:334] message`), so the engine
parser reads it as it reads a text log. A time with a year becomes the wrapper time.

TGI's own `--json-output` records (a `target`, `fields` or `span`) are TGI's format, read by
the TGI parser itself, and are left alone."""

from __future__ import annotations

import polars as pl

from ._frame import WTS, set_time
from .docker_json import decode_json
from .prefix import HEADER_AT_START

NAME = "jsonfmt"
DOC = "JSON-lines formatters (NIM, python-json-logger, vLLM `--logging-config`): `message`/`msg`, `level`/`levelname`, `time`/`timestamp`/`asctime`, file/line"
JOINS = False
NEEDS = ('"message"', '"msg"')

_HINT = r'^\s*\{.*"(?:message|msg)"\s*:'
# an engine's own JSON format (llama.cpp's 2024 server_log records name their thread `tid`,
# keys sorted or not), or a wrapper handled by another decoder
_NOT_OURS = r'^\s*\{.*"(?:target|fields|span|spans|tid|log|MESSAGE|__REALTIME_TIMESTAMP)"\s*:'
_KEYS = (
    "message", "msg", "level", "levelname", "severity", "time", "timestamp", "asctime", "ts",
    "file_path", "filename", "pathname", "line_number", "lineno", "name",
)
_DTYPE = pl.Struct({k: pl.String for k in _KEYS})
_LEVELS = {"WARN": "WARNING", "FATAL": "CRITICAL", "ERR": "ERROR"}


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    return float((s.str.contains(_HINT) & ~s.str.contains(_NOT_OURS)).mean())


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = df.with_columns(
        (pl.col("text").str.contains(_HINT) & ~pl.col("text").str.contains(_NOT_OURS)).alias("_ours")
    )
    df = decode_json(df, _HINT, _DTYPE, where=pl.col("_ours"))
    j = pl.col("_j")
    f = j.struct.field
    msg = pl.coalesce(f("message"), f("msg"))
    level = pl.coalesce(f("level"), f("levelname"), f("severity")).str.to_uppercase()
    level = level.replace(_LEVELS)
    when = pl.coalesce(f("time"), f("timestamp"), f("asctime"), f("ts"))
    # the time's parts: `[YYYY-]MM-DD[ T]HH:MM:SS[.,frac][zone]`
    parts = when.str.extract_groups(
        r"^(?:(?P<y>[0-9]{4})-)?(?P<md>[0-9]{2}-[0-9]{2})[ T](?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})"
        r"(?:[.,](?P<frac>[0-9]{1,9}))?(?P<tz>Z|[+-][0-9]{2}:?[0-9]{2})?$"
    )
    df = df.with_columns(parts.alias("_p"))
    p = pl.col("_p").struct.field
    src = pl.coalesce(f("file_path"), f("filename"), f("pathname")).str.extract(r"([^/\\]+)$", 1)
    lineno = pl.coalesce(f("line_number"), f("lineno"))
    hms = pl.when(p("frac").is_not_null()).then(pl.concat_str(p("hms"), pl.lit("."), p("frac"))).otherwise(p("hms"))
    rebuilt = pl.concat_str(level, pl.lit(" "), p("md"), pl.lit(" "), hms, pl.lit(" "), src, pl.lit(":"), lineno, pl.lit("] "), msg)
    as_is = msg.str.contains(HEADER_AT_START)
    text = (
        pl.when(msg.is_null()).then(pl.col("text"))
        .when(as_is).then(msg)
        .when(rebuilt.is_not_null()).then(rebuilt)
        .otherwise(msg)
    )
    iso = pl.concat_str(
        p("y"), pl.lit("-"), p("md"), pl.lit("T"), hms,
        pl.when(p("tz").is_null() | (p("tz") == "Z")).then(pl.lit("+00:00")).otherwise(p("tz").str.replace(r"^([+-][0-9]{2}):?([0-9]{2})$", "$1:$2")),
    )
    ts = iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", time_unit="ns", time_zone="UTC", strict=False).cast(WTS)
    df = df.with_columns(
        text.str.strip_suffix("\n").alias("text"),
        set_time(df, pl.when(pl.col("_ours")).then(ts)),
        pl.when(pl.col("_ours")).then(f("name")).alias("_lab_logger"),
    )
    return df.drop("_j", "_p", "_ours")
