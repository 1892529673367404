"""Splunk search results exported as JSON: Splunk Web's export, or the REST API's
`/services/search/jobs/export?output_mode=json`, one result a line, newest first.

    {"preview":false,"offset":0,"result":{"_raw":"INFO 06-10 14:23:45 ...","_time":"2026-06-10T14:23:45.123+00:00",
     "host":"gpu-a","source":"/var/log/vllm/server.log","sourcetype":"vllm","pod":"vllm-0"}}

`_raw` is the engine's line (a multi-line event's lines joined by newlines) and `_time` the
wrapper time; `host` and the Kubernetes fields of Splunk Connect for Kubernetes (`pod`,
`namespace`, `container_name`) or of the Splunk OpenTelemetry Collector (`k8s.pod.name`...)
become labels. The CSV export (`_raw`, `_time`, `host`, ...) is read by csvexport."""

from __future__ import annotations

import polars as pl

from ._export import decode_objects, message_lines, time_order
from ._frame import label_columns, rfc3339_ns_of, set_time, share

NAME = "splunk"
DOC = "Splunk search results as JSON (Splunk Web export, REST `search/jobs/export?output_mode=json`): `result._raw`, `result._time`; labels `host`, `pod`, `namespace`, `container` (Splunk Connect for Kubernetes or the Splunk OTel Collector's fields); newest first put back in time order per pod"
JOINS = True
NEEDS = ('"_raw"',)

# result field -> label, the first present wins for each label
_FIELDS = {"pod": "pod", "k8s.pod.name": "pod", "namespace": "namespace", "k8s.namespace.name": "namespace",
           "container_name": "container", "k8s.container.name": "container", "host": "host"}
_DTYPE = pl.Struct({"result": pl.Struct({"_raw": pl.String, "_time": pl.String, **{k: pl.String for k in _FIELDS}})})
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_host"]
_LINE = r'^\{.*"result"\s*:\s*\{.*"_raw"\s*:'


def sniff(texts: list[str]) -> float:
    return share(texts, _LINE)


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = decode_objects(df, _DTYPE)
    r = pl.col("_j").struct.field("result").struct.field
    raw = r("_raw")
    df = df.with_columns(
        pl.when(raw.is_not_null()).then(raw.str.strip_suffix("\n")).otherwise(pl.col("text")).alias("text"),
        set_time(df, rfc3339_ns_of(df, r("_time"))),
        *label_columns(_FIELDS, r),
    ).drop("_j")
    return message_lines(time_order(df, _KEYS))
