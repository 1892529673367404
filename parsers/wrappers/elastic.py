"""Elasticsearch / OpenSearch documents as people export them: `_source` NDJSON (one
document a line: elasticdump, `jq -c '.hits.hits[]._source'`, Discover's JSON), whole hits
(`{"_index","_id","_source":{...}}` a line), or a search response printed indented.

    {"@timestamp":"2026-06-10T14:23:45.123Z","message":"INFO 06-10 14:23:45 ...","stream":"stdout",
     "kubernetes":{"namespace":"serving","pod":{"name":"vllm-0"},"container":{"name":"server"},"node":{"name":"n1"}},
     "host":{"name":"n1"}}

`message` (Filebeat, Elastic Agent) or `log` (Fluent Bit, Fluentd) is the engine line and
`@timestamp` the time (ms, or finer where the shipper wrote it); the Kubernetes metadata of
Filebeat / Elastic Agent (`kubernetes.pod.name`, `kubernetes.namespace`,
`kubernetes.container.name`, `kubernetes.node.name`) or of Fluent Bit (`kubernetes.pod_name`,
`namespace_name`, `container_name`, `host`) and `host.name` become labels. Exports are
newest first by default: entries are put back in time order per pod."""

from __future__ import annotations

import polars as pl

from ._export import decode_objects, pretty_printed, time_order
from ._frame import line_of, rfc3339_ns_of, set_time

NAME = "elastic"
DOC = "Elasticsearch / OpenSearch `_source` NDJSON, hits, indented search responses: `message` / `log`, `@timestamp`; labels `pod`, `namespace`, `container`, `node` from `kubernetes.*` (Filebeat / Elastic Agent or Fluent Bit), `host` from `host.name`, `severity` from ECS `log.level`, `stream`; newest first put back in time order per pod"
JOINS = True
NEEDS = ('"@timestamp"',)

_NAME = pl.Struct({"name": pl.String})
# members whose type depends on the shipper, renamed before the decode so one type holds
# each: `log` is Fluent Bit's line but ECS's object (`log.file.path`, `log.level`: Filebeat,
# Elastic Agent); `host` is ECS's object but a string for Logstash, Fluentd and Fluent Bit's
# `kubernetes.host`
_LOG_OBJECT, _HOST_TEXT = "servelens.log_object", "servelens.host_text"
_RENAMES = ((r'"log"(\s*:\s*\{)', '"' + _LOG_OBJECT + '"$1'), (r'"host"(\s*:\s*")', '"' + _HOST_TEXT + '"$1'))
_K8S = pl.Struct({
    "pod": _NAME, "container": _NAME, "node": _NAME, "namespace": pl.String,
    "pod_name": pl.String, "namespace_name": pl.String, "container_name": pl.String, _HOST_TEXT: pl.String,
})
_DOC = {"@timestamp": pl.String, "message": pl.String, "log": pl.String, "stream": pl.String,
        "kubernetes": _K8S, "host": _NAME, _HOST_TEXT: pl.String, _LOG_OBJECT: pl.Struct({"level": pl.String})}
_DTYPE = pl.Struct({**_DOC, "_source": pl.Struct(_DOC)})
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_host"]
# a document's own marks besides its time: Elastic's metadata or a shipper's fields
_MARKS = r'"(?:_source|_index|kubernetes|ecs|agent|host|input|fields)"\s*:'


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.strip_chars().str.len_bytes() > 0)
    if len(s) == 0 or not s.str.contains(r'"@timestamp"\s*:').any():
        return 0.0
    entry = s.str.contains(r'"(?:message|log)"\s*:')
    mark = s.str.contains(_MARKS)
    if not entry.any() or not mark.any():
        return 0.0
    one_line = s.str.contains(r"^\s*\{.*\}\s*,?$")
    if one_line.mean() > 0.5:
        return float((one_line & entry & mark & s.str.contains(r'"@timestamp"\s*:')).mean())
    return 1.0 if pretty_printed(s) else 0.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    for pattern, to in _RENAMES:
        if df.height and df.select(pl.col("text").str.contains(pattern).any()).item():
            df = df.with_columns(pl.col("text").str.replace_all(pattern, to))
    df = decode_objects(df, _DTYPE, envelope=("hits", "hits"))
    j = pl.col("_j")
    # a hit's document is its `_source`; a bare document is itself
    s = pl.when(j.struct.field("_source").is_not_null()).then(j.struct.field("_source")).otherwise(pl.struct([j.struct.field(k) for k in _DOC]))
    df = df.with_columns(s.alias("_d"))
    f = pl.col("_d").struct.field
    k = f("kubernetes").struct.field
    msg = pl.coalesce(f("message"), f("log"))
    df = df.with_columns(
        pl.when(msg.is_not_null()).then(line_of(msg)).otherwise(pl.col("text")).alias("text"),
        set_time(df, rfc3339_ns_of(df, f("@timestamp"))),
        pl.coalesce(k("pod").struct.field("name"), k("pod_name")).alias("_lab_pod"),
        pl.coalesce(k("namespace"), k("namespace_name")).alias("_lab_namespace"),
        pl.coalesce(k("container").struct.field("name"), k("container_name")).alias("_lab_container"),
        pl.coalesce(k("node").struct.field("name"), k(_HOST_TEXT)).alias("_lab_node"),
        pl.coalesce(f("host").struct.field("name"), f(_HOST_TEXT)).alias("_lab_host"),
        f(_LOG_OBJECT).struct.field("level").alias("_lab_severity"),
        pl.coalesce(pl.col("_stream"), f("stream")).alias("_stream"),
    ).drop("_j", "_d", strict=False)
    return time_order(df, _KEYS)
