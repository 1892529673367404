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

from ._export import decode_objects, sniff_export, time_order
from ._frame import rfc3339_ns_of, set_time

NAME = "gcp-logging"
DOC = "Google Cloud Logging JSON (`gcloud logging read --format=json`, Logs Explorer download, one LogEntry per line): `textPayload` / `jsonPayload.message`, `timestamp` (ns); labels `pod`, `container`, `namespace`, `node`, `cluster`, `severity`; newest-first put back in time order per pod"
JOINS = True

# the members only a LogEntry has, on a line of its own (pretty-printed) or in one object
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
    return sniff_export(texts, "textPayload|jsonPayload", "logName|insertId|receiveTimestamp")


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = decode_objects(df, _DTYPE)
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

