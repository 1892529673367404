"""The OpenTelemetry Collector's file exporter (OTLP JSON): one line per export batch,

    {"resourceLogs":[{"resource":{"attributes":[{"key":"k8s.pod.name","value":{"stringValue":"vllm-0"}},...]},
      "scopeLogs":[{"scope":{},"logRecords":[{"timeUnixNano":"1781101425123456789","severityText":"INFO",
        "body":{"stringValue":"INFO 06-10 14:23:45 ..."}}, ...]}]}]}

Each log record's `body.stringValue` is an engine line (one physical line gives many);
`timeUnixNano` (or `observedTimeUnixNano` when the source set none) is the wrapper time;
the resource attributes `k8s.pod.name`, `k8s.container.name`, `k8s.namespace.name`,
`k8s.node.name` and `service.name` become labels. Batches are put back in time order per pod."""

from __future__ import annotations

import polars as pl

from ._export import time_order
from ._frame import WTS, set_time, share

NAME = "otlp"
DOC = "OpenTelemetry Collector file exporter (OTLP JSON `resourceLogs` > `scopeLogs` > `logRecords`): `body.stringValue`, `timeUnixNano`; labels `pod`, `container`, `namespace`, `node`, `service`, `host` from the resource attributes, `severity` from `severityText`"
JOINS = True
NEEDS = ('{"resourceLogs"',)

_HINT = r'^\{"resourceLogs"\s*:'
_ATTR = pl.List(pl.Struct({"key": pl.String, "value": pl.Struct({"stringValue": pl.String})}))
_RECORD = pl.Struct({"timeUnixNano": pl.String, "observedTimeUnixNano": pl.String, "severityText": pl.String,
                     "body": pl.Struct({"stringValue": pl.String})})
_DTYPE = pl.Struct({"resourceLogs": pl.List(pl.Struct({
    "resource": pl.Struct({"attributes": _ATTR}),
    "scopeLogs": pl.List(pl.Struct({"logRecords": pl.List(_RECORD)})),
}))})
_ATTRS = {"k8s.pod.name": "pod", "k8s.container.name": "container", "k8s.namespace.name": "namespace",
          "k8s.node.name": "node", "service.name": "service", "host.name": "host"}
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_service", "_lab_host"]


def sniff(texts: list[str]) -> float:
    return share(texts, _HINT)


def decode(df: pl.DataFrame) -> pl.DataFrame:
    ours = pl.col("text").str.contains(_HINT)
    try:
        df = df.with_columns(pl.when(ours).then(pl.col("text")).str.json_decode(_DTYPE).alias("_j"))
    except pl.exceptions.PolarsError:
        from ._export import decoder

        df = df.with_columns(pl.col("text").map_elements(decoder(_DTYPE), return_dtype=_DTYPE).alias("_j"))
        df = df.with_columns(pl.when(ours & pl.col("_j").is_null()).then(pl.lit("not a whole JSON object (the export cut short?)"))
                             .alias("_lab_decode_error"))
    # one row per resource, then per scope, then per record; a line that is no batch stays
    df = df.with_columns(pl.col("_j").struct.field("resourceLogs").alias("_r")).explode("_r", empty_as_null=True, keep_nulls=True)
    attrs = pl.col("_r").struct.field("resource").struct.field("attributes")
    labels = [
        attrs.list.eval(pl.element().filter(pl.element().struct.field("key") == k).struct.field("value").struct.field("stringValue")).list.first().alias(f"_lab_{v}")
        for k, v in _ATTRS.items()
    ]
    df = df.with_columns(*labels, pl.col("_r").struct.field("scopeLogs").alias("_s")).explode("_s", empty_as_null=True, keep_nulls=True)
    df = df.with_columns(pl.col("_s").struct.field("logRecords").alias("_rec")).explode("_rec", empty_as_null=True, keep_nulls=True)
    rec = pl.col("_rec").struct.field
    body = rec("body").struct.field("stringValue")
    ns = pl.coalesce(rec("timeUnixNano").cast(pl.Int64, strict=False).replace(0, None), rec("observedTimeUnixNano").cast(pl.Int64, strict=False))
    # a record without a body, or a resource or scope without records, keeps its own JSON:
    # the batch's line, copied to each of them, would grow with their count times its length
    own = pl.col("_rec"), pl.col("_s"), pl.col("_r")
    text = pl.when(body.is_not_null()).then(body.str.strip_suffix("\n"))
    for part in own:
        text = text.when(part.is_not_null()).then(part.struct.json_encode())
    df = df.with_columns(
        text.otherwise(pl.col("text")).alias("text"),
        set_time(df, ns.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").cast(WTS)),
        rec("severityText").alias("_lab_severity"),
    ).drop("_j", "_r", "_s", "_rec")
    # a batch's records come from one physical line: only the last may be unfinished
    last = pl.int_range(pl.len()) == pl.len() - 1
    df = df.with_columns((pl.col("_open") & last).alias("_open"))
    return time_order(df, _KEYS)
