"""Grafana Explore's "Download logs": text and JSON (Loki, Elasticsearch or any logs source).

Text: the query's meta (`Common labels: {"pod":"vllm-0",...}`, `Line limit: ...`), two blank
lines, then a row per log line, as the panel shows them (newest first by default):

    1781101425123\t2026-06-10T14:23:45.123Z\tINFO 06-10 14:23:45 ...

(older Grafana wrote `2026-06-10 14:23:45.123\t<line>`, the time in the browser's zone, read
as UTC). JSON: one line holding the array `[{"line": ..., "timestamp": "<ns>", "date": ...,
"fields": {<labels and parsed fields>}}, ...]`.

The line is the engine line; the time is in ms (text) or ns (JSON); the labels that name the
instance (`pod`, `container`, `namespace`, `node`, `job`, `app`) come from the JSON's
`fields` or the text's common labels, kept with the layer (`grafana-explore:<labels>`) so
that every block of the file gets them. Entries are put back in time order per stream."""

from __future__ import annotations

import json

import polars as pl

from ._export import one_stream_order, time_order
from ._frame import WTS, cut_suffix, label_columns, set_time, share

NAME = "grafana-explore"
DOC = "Grafana Explore \"Download logs\" text (`<ms>\\t<ISO time>\\t<line>` after the common labels) and JSON (`[{\"line\",\"timestamp\",\"date\",\"fields\"}]`): time (ms text, ns JSON); labels `pod`, `container`, `namespace`, `node`, `job`, `app`, `host`; newest first put back in time order per stream"
JOINS = False
NEEDS = ('[{"line"', '\t')

_ROW = r"^(?P<_ms>[0-9]{10,16})\t(?P<_iso>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z)\t"
_OLD = r"^(?P<_old>[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3})\t"
_JSON = r'^\[\{"line"\s*:'
_META = r'^[A-Z][A-Za-z ]*: (?:\{.*\}|".*"|[0-9.]+)$'
_LABELS = {"pod": "pod", "container": "container", "namespace": "namespace", "node_name": "node", "job": "job", "app": "app",
           "k8s_pod_name": "pod", "k8s_container_name": "container", "k8s_namespace_name": "namespace",
           "host": "host", "hostname": "host", "instance": "host", "level": "severity", "detected_level": "severity"}
_DTYPE = pl.List(pl.Struct({"line": pl.String, "timestamp": pl.String, "fields": pl.Struct({k: pl.String for k in _LABELS})}))
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_job", "_lab_host"]


def sniff(texts: list[str]) -> float:
    if share(texts, _JSON) > 0:
        return 1.0
    rows = [t for t in texts if t and not _is_meta(t)]
    return max(share(rows, _ROW), share(rows, _OLD))


def _is_meta(t: str) -> bool:
    import re

    return re.match(_META, t) is not None


def layer(texts: list[str]) -> str:
    """The common labels of a text download, kept with the layer."""
    for t in texts:
        if t.startswith("Common labels: {"):
            try:
                labels = json.loads(t.removeprefix("Common labels: "))
            except (ValueError, RecursionError):
                break
            keep = {_LABELS[k]: str(v) for k, v in labels.items() if k in _LABELS}
            if keep:
                return f"{NAME}:{json.dumps(keep, sort_keys=True, separators=(',', ':'))}"
        if _is_meta(t) or not t:
            continue
        break
    return NAME


def decode(df: pl.DataFrame, common: str = "") -> pl.DataFrame:
    text = pl.col("text")
    rows = _text_rows(df, common)
    if rows is not None:
        return rows
    one = _one_download(df)
    if one is not None:
        df = one
    else:
        df = _cut(df)
    j = pl.col("_j").struct.field
    fields = j("fields").struct.field
    # (a JSON entry's row still holds the whole array: the text rows' patterns skip it)
    plain = pl.when(~pl.col("_isj")).then(text)
    # each pattern matched once, its groups kept as columns (an expression used several
    # times in one eager call is computed each time); the older form's only where a row is
    # not of the newer one
    df = df.with_columns(plain.str.extract_groups(_ROW).alias("_row"))
    row = pl.col("_row").struct.field
    df = df.with_columns(pl.when(row("_ms").is_null()).then(plain).str.extract(_OLD, 1).alias("_old"))
    old = pl.col("_old")
    ms = (row("_ms").cast(pl.Int64, strict=False) * 1_000_000).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")
    oldts = old.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False).dt.replace_time_zone("UTC")
    ns = j("timestamp").cast(pl.Int64, strict=False).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")
    const = json.loads(common) if common else {}
    labels = label_columns(_LABELS, fields, const)
    out = (
        pl.when(j("line").is_not_null()).then(cut_suffix(j("line"), "\n"))
        .when(row("_ms").is_not_null()).then(text.str.slice(row("_ms").str.len_bytes() + row("_iso").str.len_bytes() + 2))
        .when(old.is_not_null()).then(text.str.slice(old.str.len_bytes() + 1))
        .otherwise(text)
    )
    # (a row's ISO time is its ms time again: the row pattern holds both, so the ms is never
    # missing where the ISO time is there, and the ISO time is not parsed)
    df = df.with_columns(out.alias("text"), set_time(df, pl.coalesce(ns, ms, oldts).cast(WTS)), *labels).drop("_j", "_isj", "_row", "_old")
    last = pl.int_range(pl.len()) == pl.len() - 1
    df = df.with_columns((pl.col("_open") & last).alias("_open"))
    return time_order(df, _KEYS)


# a text row's time and tab-separated prefix, matched whole (`_ROW` without its groups)
_ROW_PREFIX = r"^([0-9]{10,16}\t[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z\t)"
# the lines a text download's first block opens with before its rows are few: its first row
# is looked for among these first (the whole block only where none is one)
_HEAD_ROWS = 64


def _text_rows(df: pl.DataFrame, common: str) -> pl.DataFrame | None:
    """`decode` of a block of a text download (no line opens a JSON download) in a few
    calls: the labels are the layer's constants, so the block is one stream, and each row's
    prefix is matched once. None for any other block (the general reading takes it)."""
    if df.height < 2:
        return None
    text = pl.col("text")
    if df.select(text.str.starts_with("[{").any()).item():
        return None
    if int(df["line"][0]) == 1:
        df = _without_meta(df)
    const = json.loads(common) if common else {}
    labels = [pl.lit(const.get(label), pl.String).alias(f"_lab_{label}") for label in dict.fromkeys(_LABELS.values())]
    pre = pl.col("_pre_row")
    last = pl.int_range(pl.len()) == pl.len() - 1
    df = df.with_columns(text.str.extract(_ROW_PREFIX, 1).alias("_pre_row"))
    ms = (pre.str.head(pre.str.find("\t", literal=True)).cast(pl.Int64, strict=False) * 1_000_000).cast(
        pl.Datetime("ns")).dt.replace_time_zone("UTC")
    if df["_pre_row"].null_count():
        # some row is not of the newer form: the older form's where it is not
        df = df.with_columns(pl.when(pre.is_null()).then(text).str.extract(_OLD, 1).alias("_old"))
        old = pl.col("_old")
        oldts = old.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False).dt.replace_time_zone("UTC")
        out = (pl.when(pre.is_not_null()).then(text.str.slice(pre.str.len_bytes()))
               .when(old.is_not_null()).then(text.str.slice(old.str.len_bytes() + 1)).otherwise(text))
        ts = pl.coalesce(ms, oldts)
    else:
        out, ts = text.str.slice(pre.str.len_bytes()), ms
    # (the columns where the general reading leaves them: an outer layer's label replaced in
    # its place, this layer's others after)
    new = {"text": out.alias("text"), "_wts": set_time(df, ts.cast(WTS)), "_open": (pl.col("_open") & last).alias("_open"),
           **{e.meta.output_name(): e for e in labels}}
    cols = [new.pop(c, pl.col(c)) for c in df.columns if c not in ("_pre_row", "_old")]
    return one_stream_order(df.select(*cols, *new.values()))


def _without_meta(df: pl.DataFrame) -> pl.DataFrame:
    """The file's first block without the meta and blank lines before its first row (the
    first row looked for among the block's first lines, then in all of it)."""
    text = pl.col("text")
    is_row = text.str.contains(_ROW) | text.str.contains(_OLD) | text.str.contains(_JSON)
    at = df.head(_HEAD_ROWS).select(is_row.arg_true().first()).item()
    if at is None:
        at = df.select(is_row.arg_true().first()).item() or 0
    if at == 0:
        return df
    # (a blank line has no character but white space: found without copying a long line)
    meta = df.head(at).select(text.str.contains(_META) | ~text.str.contains(r"\S")).to_series()
    keep = (~meta | df["_open"].head(at)).append(pl.repeat(True, df.height - at, eager=True))
    return df.filter(keep)


def _one_download(df: pl.DataFrame) -> pl.DataFrame | None:
    """A block that is one whole JSON download (the file is one line: the usual case), as
    `_cut` gives it, one row per entry, asked and decoded without an eager call on the
    block itself: polars takes a one-row frame's columns as single values, and each call
    copies the download's line. None for any other block."""
    if df.height != 1:
        return None
    import pyarrow.compute as pc  # (here: every command reading logs imports this module)

    line = df["text"].to_arrow()
    if not pc.match_substring_regex(line, _JSON)[0].as_py():
        return None
    try:
        items = pl.Series(line).str.json_decode(_DTYPE)
    except pl.exceptions.PolarsError:
        return None
    n = items.list.len()[0]
    if not n:
        return None
    entries = items.explode()
    # (an entry without its `line` keeps its own JSON as its text, as in `_cut`)
    bare = entries.struct.field("line").is_null()
    text = pl.Series("text", [None] * n, dtype=pl.String)
    if bare.any():
        text = text.scatter(bare.arg_true(), entries.filter(bare).struct.json_encode())
    cols = {c: (text if c == "text" else pl.repeat(df[c][0], n, dtype=df.schema[c], eager=True).alias(c)) for c in df.columns}
    return pl.DataFrame({**cols, "_isj": pl.repeat(True, n, eager=True), "_j": entries})


def _cut(df: pl.DataFrame) -> pl.DataFrame:
    """The block without the text download's meta lines before its rows (in the file's
    first block), each JSON download line cut into its entries (`_j`, `_isj`)."""
    text = pl.col("text")
    # the meta lines and blank lines before the rows are Grafana's, not the server's
    if df.height and int(df["line"][0]) == 1:
        df = _without_meta(df)
    # JSON: one line holding every entry, decoded whole, or else cut into its entries
    df = df.with_columns(text.str.contains(_JSON).alias("_isj"))
    if not df.select(pl.col("_isj").any()).item():  # a text download: no entry to cut
        return df.with_columns(pl.lit(None, _DTYPE.inner).alias("_j"))
    whole = _whole_arrays(df)
    return whole if whole is not None else _entries(df)


def _whole_arrays(df: pl.DataFrame) -> pl.DataFrame | None:
    """Each download line decoded whole, one row per entry (None when some array is not
    whole: a head read for detection, a download cut short). Asked only of a block that
    holds a download line (`_cut`)."""
    try:
        items = df.select(pl.when(pl.col("_isj")).then(pl.col("text")).str.json_decode(_DTYPE))[:, 0]
    except pl.exceptions.PolarsError:
        return None
    if items.filter(df["_isj"]).list.len().min() == 0:
        return None
    df = df.with_columns(items.alias("_j")).explode("_j", empty_as_null=True, keep_nulls=True)
    return df.with_columns(_own_text(pl.col("_isj")).alias("text"))


def _own_text(entry: pl.Expr) -> pl.Expr:
    """The text of rows where `entry` holds: an entry without its `line` keeps its own JSON
    (as read: `null` for a null entry), never the download's line, which would be copied
    once for each such entry."""
    j = pl.col("_j")
    return pl.when(entry & j.struct.field("line").is_null()).then(j.struct.json_encode()).otherwise(pl.col("text"))


def _entries(df: pl.DataFrame) -> pl.DataFrame:
    """A download line cut into its entries (JSON.stringify writes no spaces; `},{"line":`
    cannot occur inside a string, whose quotes are escaped), each decoded on its own, so
    that a download cut short (or the head that detection reads) keeps its whole entries."""
    text = pl.col("text")
    is_json = pl.col("_isj")
    df = df.with_columns(pl.when(is_json).then(text.str.strip_prefix("[").str.split('},{"line":'))
                         .otherwise(pl.concat_list(pl.lit(None, pl.String))).alias("_p"))
    df = df.with_columns(pl.col("_p").list.len().alias("_np")).explode("_p")
    k = pl.int_range(pl.len()).over("line")
    piece = pl.when(k > 0).then(pl.lit('{"line":') + pl.col("_p")).otherwise(pl.col("_p"))
    piece = pl.when(k < pl.col("_np") - 1).then(piece + "}").otherwise(piece.str.strip_suffix("]"))
    df = df.with_columns(pl.when(pl.col("_p").is_not_null()).then(piece).alias("_p"))
    try:
        df = df.with_columns(pl.col("_p").str.json_decode(_DTYPE.inner).alias("_j"))
    except pl.exceptions.PolarsError:
        from ._export import decoder

        df = df.with_columns(pl.col("_p").map_elements(decoder(_DTYPE.inner), return_dtype=_DTYPE.inner).alias("_j"))
    # an entry that is no whole object keeps its text (the engine parser keeps it unparsed);
    # the last one is unfinished (a head read for detection, or a download cut short)
    broken = pl.col("_p").is_not_null() & pl.col("_j").is_null()
    last = pl.int_range(pl.len()) == pl.len() - 1
    # an entry with its `line` is read from that alone (decode): its row does not keep the
    # download's line as its text, and the broken pieces are put in apart, since a column
    # mixing the pieces and that line holds a copy of the line for every entry
    kept = df.select(
        pl.when(~is_json).then(text).when(pl.col("_j").struct.field("line").is_null() & ~broken)
        .then(_own_text(is_json))
    ).to_series()
    at = df.select(pl.arg_where(broken)).to_series()
    df = df.with_columns(kept.scatter(at, df["_p"].gather(at)).alias("text"), (pl.col("_open") | (broken & last)).alias("_open"))
    df = df.drop("_p", "_np")
    return df
