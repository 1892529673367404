"""Grafana Loki's `logcli query` output: `--output jsonl` and the default output (newest
first unless `--forward`; `--output raw` is the bare lines, read as a plain log).

    {"labels":{"namespace":"serving","pod":"vllm-0","container":"server"},"line":"INFO 06-10 ...","timestamp":"2026-06-10T14:23:45.123456789Z"}
    2026-06-10T14:23:45Z {container="server", namespace="serving", pod="vllm-0"}  INFO 06-10 ...

`line` is the engine line and `timestamp` (nanoseconds; the default output prints whole
seconds) the wrapper time; the stream labels that name the instance become labels (`pod`,
`container`, `namespace`, `node`, `job`, `app`). Entries are put back in time order per stream."""

from __future__ import annotations

import polars as pl

from ._export import time_order
from ._frame import label_columns, rfc3339_ns, set_time, share
from .docker_json import decode_json

NAME = "loki"
DOC = "Grafana Loki `logcli query` (`--output jsonl`, default `<time> {labels} <line>`): `line`, `timestamp` (ns; whole seconds in the default output); labels `pod`, `container`, `namespace`, `node`, `job`, `app`, `host`, `severity` (`level`, `detected_level`); newest first put back in time order per stream"
JOINS = False
NEEDS = ('{"labels"', '} ')

_JSONL = r'^\{"labels"\s*:\s*\{.*"line"\s*:'
_DEFAULT = (
    r"^(?P<_t>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(?:Z|[+-][0-9]{2}:[0-9]{2})) "
    r'(?P<_l>\{(?:[A-Za-z_]\w*="(?:[^"\\]|\\.)*"(?:, )?)*\}) '
)
# label -> what it names; a server outside Kubernetes is named by its host (Promtail's and the
# Docker driver's `host`, a journal's `hostname`, Alloy's `instance`), the first present
LABELS = {"pod": "pod", "container": "container", "namespace": "namespace", "node_name": "node", "job": "job", "app": "app",
           "host": "host", "hostname": "host", "instance": "host", "level": "severity", "detected_level": "severity"}
_DTYPE = pl.Struct({"line": pl.String, "timestamp": pl.String, "labels": pl.Struct({k: pl.String for k in LABELS})})
KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_job", "_lab_host"]


def sniff(texts: list[str]) -> float:
    return max(share(texts, _JSONL), share(texts, _DEFAULT))


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = decode_json(df, _JSONL, _DTYPE)
    j = pl.col("_j").struct.field
    line = j("line")
    dflt = pl.col("text").str.extract_groups(_DEFAULT)
    df = df.with_columns(dflt.alias("_d"))
    # logcli pads the labels to the widest of its output, then one space: the line's own
    # indentation (a traceback's) is what follows
    df = df.with_columns(pl.col("_d").struct.field("_l").str.len_chars().max().alias("_w"))
    d = pl.col("_d").struct.field
    lab = j("labels").struct.field
    # the default output prints the labels as `{k="v", ...}`
    labels = label_columns(LABELS, lambda k: pl.coalesce(lab(k), d("_l").str.extract(f'[{{ ]{k}="([^"]*)"', 1)))
    text = (
        pl.when(line.is_not_null()).then(line.str.strip_suffix("\n"))
        .when(d("_t").is_not_null()).then(pl.col("text").str.slice(d("_t").str.len_chars() + pl.col("_w") + 2))
        .otherwise(pl.col("text"))
    )
    broken = pl.col("text").str.starts_with("{") & line.is_null()
    df = df.with_columns(text.alias("text"), set_time(df, rfc3339_ns(pl.coalesce(j("timestamp"), d("_t")))), *labels,
                         pl.when(broken).then(pl.lit("not a whole JSON object (the export cut short?)")).alias("_lab_decode_error"))
    return time_order(df.drop("_j", "_d", "_w"), KEYS)
