"""Google Cloud Logging exports: `gcloud logging read --format=json` (a pretty-printed array
of LogEntry, newest first by default), the Logs Explorer's JSON download, and one LogEntry
per line (`--format=json` piped through `jq -c '.[]'`, a log sink's files).

    {"insertId": "...", "logName": "projects/p/logs/stdout",
     "resource": {"type": "k8s_container", "labels": {"pod_name": "vllm-0", "container_name": "vllm",
                  "namespace_name": "serving", "cluster_name": "c1", ...}},
     "severity": "INFO", "textPayload": "INFO 06-10 14:23:45 ...", "timestamp": "2026-06-10T14:23:45.123456789Z",
     "receiveTimestamp": "..."}

The engine line is `textPayload`, or `jsonPayload.message` when the agent parsed the line as
JSON. `timestamp` (nanoseconds) is the wrapper time; the resource labels that name the
instance become labels (`pod`, `container`, `namespace`, `node`, `cluster`), with `severity`."""

from __future__ import annotations

import polars as pl

from ._export import join_objects, time_order
from ._frame import rfc3339_ns_of, set_time

NAME = "gcp-logging"
DOC = "Google Cloud Logging JSON (`gcloud logging read --format=json`, Logs Explorer download, one LogEntry per line): `textPayload` / `jsonPayload.message`, `timestamp` (ns); labels `pod`, `container`, `namespace`, `node`, `cluster`, `severity`; newest-first put back in time order per pod"
JOINS = True

# the members only a LogEntry has, on a line of its own (pretty-printed) or in one object
_HINT = r'"(?:textPayload|jsonPayload|logName|receiveTimestamp|insertId)"\s*:'
_RES = {"pod_name": "pod", "container_name": "container", "namespace_name": "namespace", "node_name": "node", "cluster_name": "cluster"}
_DTYPE = pl.Struct({
    "textPayload": pl.String,
    "jsonPayload": pl.Struct({"message": pl.String}),
    "timestamp": pl.String,
    "severity": pl.String,
    "resource": pl.Struct({"labels": pl.Struct({k: pl.String for k in _RES})}),
})
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container"]


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.strip_chars().str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    # a LogEntry has a payload and a time; pretty-printed, one member a line
    entries = s.str.contains(r'"(?:textPayload|jsonPayload)"\s*:').sum()
    marks = s.str.contains(r'"(?:logName|insertId|receiveTimestamp)"\s*:').sum()
    if entries == 0 or marks == 0:
        return 0.0
    one_line = s.str.contains(r"^\s*\{.*\}\s*,?$")
    return float((one_line & s.str.contains(_HINT)).mean()) if one_line.mean() > 0.5 else 1.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = join_objects(df)
    obj = pl.col("text").str.starts_with("{")
    try:
        df = df.with_columns(pl.when(obj).then(pl.col("text")).str.json_decode(_DTYPE).alias("_j"))
    except pl.exceptions.PolarsError:
        # an object cut short (a truncated download) leaves its text to the engine parser
        df = df.with_columns(pl.col("text").map_elements(_decode_one, return_dtype=_DTYPE).alias("_j"))
    f = pl.col("_j").struct.field
    msg = pl.coalesce(f("textPayload"), f("jsonPayload").struct.field("message"))
    res = f("resource").struct.field("labels").struct.field
    df = df.with_columns(
        pl.when(msg.is_not_null()).then(msg.str.strip_suffix("\n").str.strip_suffix("\r")).otherwise(pl.col("text")).alias("text"),
        set_time(df, rfc3339_ns_of(df, f("timestamp"))),
        *[res(k).alias(f"_lab_{v}") for k, v in _RES.items()],
        f("severity").alias("_lab_severity"),
    ).drop("_j")
    return time_order(df, _KEYS)


def _decode_one(text: str | None):
    import json

    if not text or not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
