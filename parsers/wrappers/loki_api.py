"""Grafana Loki's HTTP API saved to a file: the response of `/loki/api/v1/query_range` (or
`/query`) as `curl` writes it (one line), or printed by `jq .` (indented).

    {"status":"success","data":{"resultType":"streams","result":[
      {"stream":{"pod":"vllm-0","namespace":"serving"},"values":[["1781101425123456789","INFO 06-10 ..."],...]}],
     "stats":{...}}}

Each stream names its labels once, then its entries as `[time in ns, line]` pairs, newest first
unless the query asked `direction=forward`. Entries are put back in time order per stream.
Indented, each pair is four lines (`[`, the time, the line, `]`): they are read where they
stand, the stream's labels carried down to them, so an event points at its own lines. A
response is at most the server's entry limit (5,000 by default): one read block."""

from __future__ import annotations

import polars as pl

from ._export import decode_objects, pretty_printed, time_order
from ._frame import WTS, json_literal, label_columns, set_time
from .loki import KEYS, LABELS

NAME = "loki-api"
DOC = "Grafana Loki HTTP API responses (`/loki/api/v1/query_range`, as curl saves them or `jq .` prints them): `data.result[].stream` labels, `values` of `[ns, line]`; labels as `loki`; newest first put back in time order per stream"
JOINS = True
NEEDS = ('"resultType"',)

_RESULT = r'"resultType"\s*:\s*"streams"'
_STREAM = pl.Struct({"stream": pl.Struct({k: pl.String for k in LABELS}), "values": pl.List(pl.List(pl.String))})
# an indented pair: its time alone on a line (a JSON string of digits), the line on the next
_TIME = r'^\s*"([0-9]{1,19})",\s*$'
# a pair's time, the last of the pair (the line missing)
_ANY_TIME = r'^\s*"([0-9]{1,19})",?\s*$'
_TEXT = r'^\s*(".*")\s*$'
_LABEL = r'^\s*"([^"\\]+)"\s*:\s*(".*"),?\s*$'


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.strip_chars().str.len_bytes() > 0)
    # (a response on one line opens with its brace: JSON-shaped too)
    if not s.str.contains(_RESULT).any() or not pretty_printed(s):
        return 0.0
    return 1.0 if (s.str.contains(r'"values"\s*:').any() or s.str.contains(r'"result"\s*:\s*\[').any()) else 0.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    if df.height and bool(df.select(pl.col("text").str.contains(_TIME).any()).item()):
        return _indented(df)
    return _compact(df)


def _labels(stream: pl.Expr) -> list[pl.Expr]:
    return label_columns(LABELS, stream.struct.field)


def _compact(df: pl.DataFrame) -> pl.DataFrame:
    """A response on one line (or several, one per page): one row per stream, then one per
    entry (all on the response's line)."""
    df = decode_objects(df, _STREAM, envelope=("data", "result"))
    j = pl.col("_j")
    df = df.with_columns(j.struct.field("values").alias("_v"), *_labels(j.struct.field("stream"))).drop("_j")
    # a stream without entries gives none; a line that is no stream keeps its text
    df = df.filter(~(pl.col("_v").is_not_null() & (pl.col("_v").list.len() == 0))).explode("_v")
    pair = pl.col("_v")
    ns = pair.list.get(0, null_on_oob=True).cast(pl.Int64, strict=False)
    # (a pair without its line, `["<ns>"]`, is kept as its own JSON: the text the engine
    # parser leaves unparsed, never no text at all)
    df = df.with_columns(
        pl.when(pair.is_not_null()).then(pl.coalesce(pair.list.get(1, null_on_oob=True), json_literal(pair))).otherwise(pl.col("text")).alias("text"),
        set_time(df, ns.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").cast(WTS)),
    ).drop("_v")
    return time_order(df, KEYS)


def _string(quoted: str | None) -> str | None:
    import json

    try:
        value = json.loads(quoted) if quoted is not None else None
    except (ValueError, RecursionError):
        return quoted
    return value if isinstance(value, str) else quoted


def _indented(df: pl.DataFrame) -> pl.DataFrame:
    """`jq .` of a response: each pair's time line and line, with the labels of the stream
    above them; the envelope's other lines give nothing."""
    text = pl.col("text")
    opens = text.str.contains(r'^\s*"stream"\s*:\s*\{\s*$')
    closes = text.str.contains(r"^\s*\},?\s*$")
    within = pl.when(opens).then(True).when(closes).then(False).forward_fill().fill_null(False)
    df = df.with_columns(opens.cum_sum().alias("_s"), (within & ~opens).alias("_in"))
    # the labels of each stream, one column per label this decoder knows
    lab = df.filter(pl.col("_in")).select("_s", text.str.extract_groups(_LABEL).alias("_kv")).select(
        "_s", pl.col("_kv").struct.field("1").alias("k"), pl.col("_kv").struct.field("2").str.json_decode(pl.String).alias("v"))
    lab = lab.filter(pl.col("k").is_in(list(LABELS)))
    wide = lab.pivot(on="k", index="_s", values="v", aggregate_function="first") if lab.height else lab.select("_s")
    for k in LABELS:
        if k not in wide.columns:
            wide = wide.with_columns(pl.lit(None, pl.String).alias(k))
    wide = wide.select("_s", *_labels(pl.struct([pl.col(k) for k in LABELS])))
    # a pair: the time's line, the line after it (its `[` before, `]` after)
    nxt = text.shift(-1)
    is_time = text.str.contains(_TIME) & nxt.str.contains(_TEXT).fill_null(False)
    # a pair without its line (`[`, the time, then `]` or a `null`): its own JSON is its text
    bare = text.shift(1).str.contains(r"^\s*\[\s*$").fill_null(False) & text.str.contains(_ANY_TIME) & ~is_time
    pairs = df.with_columns(is_time.alias("_t"), bare.alias("_b"), nxt.str.extract(_TEXT, 1).alias("_line"),
                            nxt.str.strip_chars().str.strip_suffix(",").alias("_nx")).filter(pl.col("_t") | pl.col("_b"))
    try:
        line = pairs.select(pl.col("_line").str.json_decode(pl.String))[:, 0]
    except pl.exceptions.PolarsError:
        # some line is no whole JSON string: that one keeps its text as it is
        line = pairs["_line"].map_elements(_string, return_dtype=pl.String)
    closed = pl.col("_nx").str.starts_with("]").fill_null(True)
    t = text.str.strip_chars().str.strip_suffix(",")
    own = pl.when(closed).then(pl.concat_str([pl.lit("["), t, pl.lit("]")])).otherwise(pl.concat_str([pl.lit("["), t, pl.lit(","), pl.col("_nx"), pl.lit("]")]))
    pairs = pairs.with_columns(pl.when(pl.col("_b")).then(own).otherwise(line).alias("_line"),
                               pl.when(pl.col("_b") & closed).then(3).otherwise(4).cast(pl.Int32).alias("_n"))
    last_open = bool(df["_open"][-1]) if df.height else False
    out = pairs.select(
        (pl.col("line") - 1).alias("line"),
        pl.col("_line").alias("text"),
        "_n",
        text.str.extract(_ANY_TIME, 1).cast(pl.Int64).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").cast(WTS).alias("_wts"),
        "_stream", pl.lit(False).alias("_open"), "_pre", "_s",
    ).join(wide, on="_s", how="left", maintain_order="left").drop("_s")
    if last_open and out.height:
        out = out.with_columns((pl.int_range(pl.len()) == pl.len() - 1).alias("_open"))
    return time_order(out, KEYS)
