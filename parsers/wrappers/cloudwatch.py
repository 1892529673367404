"""AWS CloudWatch Logs exports: `aws logs filter-log-events` / `get-log-events` output (an
indented `{"events": [...]}` envelope, or compact), one event per line, and Logs Insights
results downloaded from the console (`[{"@timestamp": ..., "@message": ..., "@logStream": ...}]`).

    {"logStreamName": "vllm/server/0a1b2c", "timestamp": 1781101425123,
     "message": "INFO 06-10 14:23:45 ...", "ingestionTime": 1781101425200, "eventId": "3782..."}

`message` / `@message` is the engine line; `timestamp` (milliseconds since the epoch) or
`@timestamp` (`2026-06-10 14:23:45.123`, UTC) the wrapper time; the log stream (and the log
group, where Insights names it in `@log`) become labels. Container Insights / Fluent Bit
stream names (`<pod>_<namespace>_<container>-<container id>`) also give `pod`, `namespace` and
`container`. Insights returns the newest first: entries are put back in time order per stream."""

from __future__ import annotations

import polars as pl

from ._export import Entries, decode_objects, explode_whole, sniff_export, time_order
from ._frame import WTS, join_fragments, json_literal, line_of, set_time, share

NAME = "cloudwatch"
DOC = "AWS CloudWatch Logs JSON (`aws logs filter-log-events` / `get-log-events`, Logs Insights results): `message` / `@message`, `timestamp` (ms) / `@timestamp`; labels `log_stream`, `log_group`, and `pod`, `namespace`, `container` from a Kubernetes stream name; put back in time order per stream"
JOINS = True
NEEDS = ('"field"', '"message"', '"@message"')

_DTYPE = pl.Struct({
    "message": pl.String, "timestamp": pl.Int64, "logStreamName": pl.String,
    "@message": pl.String, "@timestamp": pl.String, "@logStream": pl.String, "@log": pl.String,
    "field": pl.String, "value": pl.String,
})
# `aws logs get-query-results`: each row a list of `{"field": "@message", "value": ...}`, the
# record's `@ptr` last
_QUERY_ROW = r'"field"\s*:\s*"@(?:message|ptr)"'

# Fluent Bit / Container Insights name a container's stream after its log file
# (`<host>-application.var.log.containers.<pod>_...`: the host's dots are no pod's)
K8S_STREAM = r"(?:.*\.containers\.|^)(?P<pod>[a-z0-9][-a-z0-9.]*)_(?P<ns>[a-z0-9][-a-z0-9]*)_(?P<ctr>[a-z0-9][-a-z0-9]*)-[0-9a-f]{64}"
_KEYS = ["_lab_log_group", "_lab_log_stream"]


def sniff(texts: list[str]) -> float:
    # indented, or saved on one line (`{"results":[[{"field": ...`)
    if share(texts, _QUERY_ROW) > 0 and share(texts, r'^\s*(?:\{\s*)?"results"\s*:\s*\[') > 0:
        return 1.0
    return sniff_export(texts, "@?message", "ingestionTime|eventId|logStreamName|@timestamp|@logStream|nextForwardToken|searchedLogStreams")


def decode(df: pl.DataFrame) -> pl.DataFrame:
    fast = _members(df)
    df = fast if fast is not None else _query_rows(decode_objects(_compact_results(df), _DTYPE, envelope=("events",)))
    f = pl.col("_j").struct.field
    msg = pl.coalesce(f("message"), f("@message"))
    # an object of the envelope's own (filter-log-events' `searchedLogStreams`) is no event
    df = df.filter(~(pl.col("_j").is_not_null() & msg.is_null() & f("timestamp").is_null() & f("@timestamp").is_null()) | pl.col("_open"))
    ms = (f("timestamp") * 1_000_000).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")
    insights = f("@timestamp").str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False).dt.replace_time_zone("UTC")
    stream = pl.coalesce(f("logStreamName"), f("@logStream"))
    k8s = k8s_of_streams(df, stream)
    df = df.with_columns(
        pl.when(msg.is_not_null()).then(line_of(msg)).otherwise(pl.col("text")).alias("text"),
        set_time(df, pl.coalesce(ms, insights).cast(WTS)),
        stream.alias("_lab_log_stream"),
        f("@log").str.replace(r"^[0-9]+:", "").alias("_lab_log_group"),
        *k8s,
    ).drop("_j")
    return time_order(df, _KEYS)


def k8s_of_streams(df: pl.DataFrame, stream: pl.Expr) -> list[pl.Series]:
    """`_lab_pod`, `_lab_namespace`, `_lab_container` of each row of `df` from its stream
    name `stream` (K8S_STREAM), the pattern run once per distinct name: a file names few."""
    names = df.select(stream.alias("_s"))
    table = names.unique().drop_nulls().with_columns(pl.col("_s").str.extract_groups(K8S_STREAM).alias("_k"))
    k = names.join(table, on="_s", how="left", maintain_order="left")["_k"]
    return [k.struct.field(g).alias(f"_lab_{v}") for g, v in (("pod", "pod"), ("ns", "namespace"), ("ctr", "container"))]


_PAIR = pl.Struct({"field": pl.String, "value": pl.String})


def _compact_results(df: pl.DataFrame) -> pl.DataFrame:
    """`aws logs get-query-results` saved on one line (`{"results":[[{"field","value"},...],...]}`)
    -> one line per row, the row an object `{"@timestamp": ..., "@message": ..., ...}`."""
    out = explode_whole(df, r'^\{.*"results"\s*:\s*\[\s*\[.*\}\s*$', pl.List(_PAIR), ("results",), '"results"')
    if out is None:
        return df
    pair = pl.element().struct.field
    member = json_literal(pair("field")) + pl.lit(":") + json_literal(pair("value"))
    obj = pl.lit("{") + pl.col("_item").list.eval(member).list.join(",") + pl.lit("}")
    return out.with_columns(pl.when(pl.col("_item").is_not_null()).then(obj).otherwise(pl.col("text")).alias("text")).drop("_item")


def _query_rows(df: pl.DataFrame) -> pl.DataFrame:
    """The `{"field", "value"}` objects of a get-query-results row joined into one object
    `{"@timestamp": ..., "@message": ..., ...}` (a row ends with its `@ptr`)."""
    f = pl.col("_j").struct.field
    if df.height == 0 or not df.select(f("field").is_not_null().any()).item():
        return df
    pair = f("field").is_not_null()
    # each pair as `,"<field>":<value as JSON>`, joined per row, read again as one object
    member = json_literal(f("value"))
    key = json_literal(f("field"))
    df = df.with_columns(pl.when(pair).then(pl.lit(",") + key + pl.lit(":") + member).otherwise(pl.col("text")).alias("text"))
    ends = ~pair | (f("field") == "@ptr") | ~pair.shift(-1).fill_null(False)
    df = join_fragments(df.with_columns(ends.alias("_qend")).drop("_j"), pl.col("_qend")).drop("_qend", strict=False)
    row = pl.col("text").str.starts_with(",")
    obj = pl.lit("{") + pl.col("text").str.slice(1) + pl.lit("}")
    return df.with_columns(pl.when(row).then(obj).otherwise(pl.col("text")).alias("text"),
                           pl.when(row).then(obj).str.json_decode(_DTYPE).alias("_j"))


def _members(df: pl.DataFrame) -> pl.DataFrame | None:
    """An indented export as the CLI or the console prints it: each entry's members read
    from their own lines into `_j` (None, and the entries decoded whole, for anything else:
    query rows, a block cut inside an entry)."""
    e = Entries.of(df)
    if e is None:
        return None
    keys = {k: dt for k, dt in _DTYPE.to_schema().items() if k not in ("field", "value")}
    try:
        parts = e.members((), {**keys, "field": pl.String})
    except pl.exceptions.PolarsError:
        return None
    if parts[-1].height:  # get-query-results' rows
        return None
    out = e.joined(*parts[:-1])
    if out is None:
        return None
    # an entry without its line keeps its JSON text (only the envelope's own objects, which
    # have no time either and are left out, may go without)
    timeless = pl.col("timestamp").is_null() & pl.col("@timestamp").is_null()
    if out.select((pl.col("message").is_null() & pl.col("@message").is_null() & ~timeless).any()).item():
        return None
    j = pl.struct(*[pl.col(k) for k in keys], pl.lit(None, pl.String).alias("field"), pl.lit(None, pl.String).alias("value"))
    labels = [c for c in df.columns if c.startswith("_lab_")]
    return out.select("line", pl.lit(None, pl.String).alias("text"), "_n", "_wts", "_stream", pl.lit(False).alias("_open"), "_pre",
                      *labels, j.alias("_j"))
