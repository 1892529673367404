"""Datadog log exports in JSON: the Logs Search API's response (`POST /api/v2/logs/events/search`,
printed indented, or compact on one line) and its logs one a line (`jq -c '.data[]'`).

    {"attributes": {"message": "INFO 06-10 14:23:45 ...", "timestamp": "2026-06-10T14:23:45.123Z",
                    "host": "node-1", "service": "vllm", "status": "info",
                    "tags": ["kube_namespace:serving", "pod_name:vllm-0", "kube_container_name:server", ...],
                    "attributes": {...}},
     "id": "AQAAAY...", "type": "log"}

`message` is the engine line and `timestamp` (ms) the time; the Agent's Kubernetes tags
`pod_name`, `kube_namespace`, `kube_container_name` and the `host`, `service` and `status`
become labels. The API returns the newest first: entries are put back in time order per
pod. (The Log Explorer's CSV download is read by csvexport.)"""

from __future__ import annotations

import polars as pl

from ._export import Entries, decode_objects, pretty_printed, time_order
from ._frame import line_of, rfc3339_ns_of, set_time

NAME = "datadog"
DOC = "Datadog Logs Search API JSON (`{\"data\":[{\"attributes\":{\"message\",\"timestamp\",\"host\",\"service\",\"tags\"},\"type\":\"log\"}]}`, indented, compact, or one log a line): `message`, `timestamp` (ms); labels `pod`, `namespace`, `container` from the Agent's tags, `host`, `service`, `severity`; newest first put back in time order per pod"
JOINS = True
NEEDS = ('"attributes"',)

_ATTRS = pl.Struct({"message": pl.String, "timestamp": pl.String, "host": pl.String, "service": pl.String,
                    "status": pl.String, "tags": pl.List(pl.String)})
_LOG = pl.Struct({"attributes": _ATTRS, "type": pl.String})
_DTYPE = pl.Struct({"attributes": _ATTRS, "type": pl.String, "data": pl.List(_LOG)})
_TAGS = {"pod_name": "pod", "kube_namespace": "namespace", "kube_container_name": "container"}
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_host"]


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.strip_chars().str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    log = s.str.contains(r'"type"\s*:\s*"log"')
    attrs = s.str.contains(r'"attributes"\s*:')
    if not log.any() or not attrs.any() or not s.str.contains(r'"message"\s*:').any():
        return 0.0
    one_line = s.str.contains(r"^\s*\{.*\}\s*,?$")
    if one_line.mean() > 0.5:
        return float((one_line & log & attrs).mean())
    return 1.0 if pretty_printed(s) else 0.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    fast = _members(df)
    if fast is not None:
        df = fast
        msg, ts = pl.col("_msg"), pl.col("_ts")
        tag = {v: pl.col(f"_tag_{v}") for v in _TAGS.values()}
        host, service, status = pl.col("_host"), pl.col("_service"), pl.col("_status")
    else:
        df = _objects(df)
        a = pl.col("_j").struct.field("attributes").struct.field
        msg, ts, host, service, status = a("message"), a("timestamp"), a("host"), a("service"), a("status")
        tag = {v: a("tags").list.eval(pl.element().filter(pl.element().str.starts_with(f"{k}:")).str.slice(len(k) + 1)).list.first()
               for k, v in _TAGS.items()}
    # (a line's own newline, which most messages do not keep, is cut where some does)
    ends = df.select((msg.str.ends_with("\n") | msg.str.ends_with("\r")).any()).item() if df.height else False
    line = line_of(msg) if ends else msg
    df = df.with_columns(
        pl.when(msg.is_not_null()).then(line).otherwise(pl.col("text")).alias("text"),
        set_time(df, rfc3339_ns_of(df, ts)),
        *[e.alias(f"_lab_{v}") for v, e in tag.items()],
        host.alias("_lab_host"), service.alias("_lab_service"), status.alias("_lab_severity"),
    )
    df = df.drop("_j") if fast is None else df.drop("_msg", "_ts", "_host", "_service", "_status", *[f"_tag_{v}" for v in _TAGS.values()])
    return time_order(df, _KEYS)


def _objects(df: pl.DataFrame) -> pl.DataFrame:
    """Each entry decoded whole into `_j` (any form: indented, compact, one a line)."""
    df = decode_objects(df, _DTYPE)
    # a compact response holds every log on its one line
    data = pl.col("_j").struct.field("data")
    if df.select(data.is_not_null().any()).item():
        one = pl.concat_list(pl.struct(pl.col("_j").struct.field("attributes"), pl.col("_j").struct.field("type")))
        df = df.with_columns(pl.when(data.list.len() > 0).then(data).otherwise(one).alias("_l"))
        df = df.explode("_l", empty_as_null=True, keep_nulls=True).with_columns(pl.col("_l").alias("_j")).drop("_l")
        last = pl.int_range(pl.len()) == pl.len() - 1
        df = df.with_columns((pl.col("_open") & last).alias("_open"))
    return df


def _members(df: pl.DataFrame) -> pl.DataFrame | None:
    """The indented response as printed: each entry's members read from their own lines
    (None, and the entries decoded whole, for anything else)."""
    e = Entries.of(df)
    if e is None:
        return None
    try:
        parts = e.members(("attributes",), {k: pl.String for k in ("message", "timestamp", "host", "service", "status")})
        items = e.items(("attributes", "tags"))
    except pl.exceptions.PolarsError:
        return None
    # every entry a log with its message, or the entries are decoded whole
    if parts[0].height != e.heads.height or parts[0]["message"].null_count():
        return None
    it = pl.col("_item")
    for k, v in _TAGS.items():
        parts.append(items.filter(it.str.starts_with(f"{k}:")).unique("_g", keep="first", maintain_order=True)
                     .select("_g", it.str.slice(len(k) + 1).alias(f"_tag_{v}")))
    out = e.joined(*parts[:5])
    if out is None:
        return None
    for p in parts[5:]:
        out = out.join(p, on="_g", how="left", maintain_order="left")
    out = out.rename({"message": "_msg", "timestamp": "_ts", "host": "_host", "service": "_service", "status": "_status"}).with_columns(
        pl.col("_msg").alias("text"), pl.lit(False).alias("_open"))
    labels = [c for c in df.columns if c.startswith("_lab_")]
    return out.select("line", "text", "_n", "_wts", "_stream", "_open", "_pre", *labels, "_msg", "_ts", "_host", "_service", "_status",
                      *[f"_tag_{v}" for v in _TAGS.values()])
