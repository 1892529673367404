"""Google Cloud Logging as `gcloud logging read` prints it by default: YAML, one LogEntry a
document, each opened by `---`, newest first.

    ---
    insertId: 0000002aabcdef
    logName: projects/proj/logs/stdout
    receiveTimestamp: '2026-06-10T14:23:45.535689789Z'
    resource:
      labels:
        container_name: server
        namespace_name: serving
        pod_name: vllm-0
      type: k8s_container
    severity: INFO
    textPayload: 'INFO 06-10 14:23:45 [loggers.py:123] Engine 000: Avg prompt throughput:
      0.0 tokens/s, ...'
    timestamp: '2026-06-10T14:23:45.123456789Z'

gcloud's printer (ruamel, block style, width 80) writes a string plain, single-quoted or
double-quoted, folded over indented lines at single spaces (a blank line is a newline, a
double-quoted line ending in `\\` joins without one), and a string holding a newline as a
literal block (`|`, `|-`, `|2-`...). The engine line is `textPayload`, or `jsonPayload`'s
`message`; `timestamp` (ns) is the wrapper time; the resource labels name the instance."""

from __future__ import annotations

import polars as pl

from ._export import time_order
from ._frame import rfc3339_ns_of, set_time

NAME = "gcp-logging-yaml"
DOC = "Google Cloud Logging YAML (`gcloud logging read`'s default output, `---` before each LogEntry): `textPayload` / `jsonPayload.message` in any YAML scalar style, `timestamp` (ns); labels `pod`, `container`, `namespace`, `node`, `cluster`, `severity`; newest-first put back in time order per pod"
JOINS = True

_RES = {"pod_name": "pod", "container_name": "container", "namespace_name": "namespace", "node_name": "node", "cluster_name": "cluster"}
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container"]
_TOP = r"^([A-Za-z_][A-Za-z0-9_]*):(?: |$)"
_MARKS = r"^(?:insertId|logName|receiveTimestamp): "
_PAYLOAD = r"^(?:textPayload|jsonPayload):"


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    doc = bool((s == "---").any())
    marks = bool(s.str.contains(_MARKS).any())
    payload = bool(s.str.contains(_PAYLOAD).any())
    return 1.0 if doc and marks and payload else 0.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    labels_in = [c for c in df.columns if c.startswith("_lab_")]
    df = df.with_columns(
        (t == "---").cum_sum().alias("_g"),
        # the top-level member a line belongs to (a document's `---` opens none)
        pl.when(t == "---").then(pl.lit("---")).otherwise(t.str.extract(_TOP, 1)).forward_fill().alias("_key"),
    )
    # jsonPayload's own members, one level in
    sub = pl.when(pl.col("_key") == "jsonPayload").then(
        pl.when(t.str.contains(r"^  [A-Za-z_]\w*:(?: |$)")).then(t.str.extract(r"^  ([A-Za-z_]\w*):", 1))
        .when(t.str.contains(_TOP)).then(pl.lit(""))
    ).forward_fill()
    df = df.with_columns(sub.alias("_sub"))
    key, sk = pl.col("_key"), pl.col("_sub")
    in_text = key == "textPayload"
    in_msg = (key == "jsonPayload") & (sk == "message")
    payload = df.filter((in_text | in_msg) & ~((key == "jsonPayload") & (t == "jsonPayload:"))).select(
        "_g", "text", pl.when(in_text).then(0).otherwise(2).alias("_base"),
        pl.when(in_text).then(t.str.starts_with("textPayload:")).otherwise(t.str.starts_with("  message:")).alias("_head"),
    )
    text = _scalars(payload)
    top = _top_values(df)
    res = df.filter((key == "resource") & t.str.contains(r"^    [a-z_]+: ")).select(
        "_g", t.str.extract(r"^    ([a-z_]+): ", 1).alias("k"), _unquote(t.str.extract(r"^    [a-z_]+: (.*)$", 1)).alias("v"),
    ).filter(pl.col("k").is_in(list(_RES)))
    res = res.pivot(on="k", index="_g", values="v", aggregate_function="first") if res.height else pl.DataFrame(
        {"_g": pl.Series([], dtype=df["_g"].dtype)})
    heads = df.group_by("_g", maintain_order=True).agg(
        pl.col("line").first(), pl.len().cast(pl.Int32).alias("_n_all"),
        pl.col("text").first().alias("_first"),
        pl.col("_wts").first(), pl.col("_stream").first(), pl.col("_pre").first(),
        *[pl.col(c).first() for c in labels_in],
    )
    out = heads.join(text, on="_g", how="left").join(top, on="_g", how="left").join(res, on="_g", how="left")
    for k in _RES:
        if k not in out.columns:
            out = out.with_columns(pl.lit(None, pl.String).alias(k))
    # (a document whose payload could not be found keeps its first line: `unparsed`)
    msg = pl.col("_msg").str.strip_suffix("\n").str.strip_suffix("\r")
    out = out.with_columns(
        pl.coalesce(msg, pl.col("_first")).alias("text"),
        pl.col("_n_all").alias("_n"),
        pl.lit(False).alias("_open"),
    )
    out = out.with_columns(
        set_time(out, rfc3339_ns_of(out, pl.col("_ts"))),
        *[pl.col(k).alias(f"_lab_{v}") for k, v in _RES.items()],
        pl.col("_sev").alias("_lab_severity"),
    )
    cols = ["line", "text", "_n", "_wts", "_stream", "_open", "_pre"]
    labels = sorted({*labels_in, *[f"_lab_{v}" for v in _RES.values()], "_lab_severity"})
    return time_order(out.select(*cols, *labels), _KEYS)


def _top_values(df: pl.DataFrame) -> pl.DataFrame:
    """Each document's `timestamp` and `severity` (one line each: a time is never folded)."""
    t = pl.col("text")
    ts = df.filter(t.str.starts_with("timestamp: ")).select("_g", _unquote(t.str.slice(11)).alias("_ts"))
    sev = df.filter(t.str.starts_with("severity: ")).select("_g", _unquote(t.str.slice(10)).alias("_sev"))
    return ts.join(sev, on="_g", how="full", coalesce=True)


def _unquote(v: pl.Expr) -> pl.Expr:
    v = v.str.strip_chars_end()
    single = v.str.starts_with("'") & v.str.ends_with("'")
    double = v.str.starts_with('"') & v.str.ends_with('"')
    return (pl.when(single).then(v.str.slice(1, v.str.len_chars() - 2).str.replace_all("''", "'", literal=True))
            .when(double).then(_unescape(v.str.slice(1, v.str.len_chars() - 2)))
            .otherwise(v))


def _unescape(v: pl.Expr) -> pl.Expr:
    """A double-quoted YAML string's escapes (those an emitter writes for a log line)."""
    return (v.str.replace_all("\\\\", "\x00", literal=True)
            .str.replace_all('\\"', '"', literal=True).str.replace_all("\\n", "\n", literal=True)
            .str.replace_all("\\t", "\t", literal=True).str.replace_all("\\e", "\x1b", literal=True)
            .str.replace_all("\\r", "\r", literal=True).str.replace_all("\\ ", " ", literal=True)
            .str.replace_all("\\/", "/", literal=True).str.replace_all("\\x1b", "\x1b", literal=True)
            .str.replace_all("\\_", "\u00a0", literal=True)
            .str.replace_all("\x00", "\\", literal=True))


def _scalars(p: pl.DataFrame) -> pl.DataFrame:
    """One scalar per document (`_g`) from its lines: the head line (`key: ...`) and the
    lines after it; `_base` is the key's indentation."""
    t = pl.col("text")
    base = pl.col("_base")
    rest = t.str.slice(base).str.replace(r"^[A-Za-z_]\w*:\s?", "")
    p = p.with_columns(pl.when(pl.col("_head")).then(rest).alias("_hv"))
    p = p.with_columns(pl.col("_hv").forward_fill().over("_g").alias("_hv_all"))
    style = pl.col("_hv_all").str.head(1)
    block = style.is_in(["|", ">"])
    # a block's indentation: the key's and 2, or the digit the indicator gives
    digit = pl.col("_hv_all").str.extract(r"^[|>][+-]?([1-9])", 1).cast(pl.Int64, strict=False)
    ind = base + digit.fill_null(2)
    is_head = pl.col("_head")
    line_txt = pl.when(is_head).then(pl.col("_hv")).otherwise(t)
    # flow scalars: continuation lines lose their indentation; folding joins them with a
    # space, an empty line stands for a newline
    flow_piece = pl.when(is_head).then(line_txt).otherwise(line_txt.str.strip_chars_start(" "))
    p = p.with_columns(flow_piece.alias("_fp"), block.alias("_blk"), ind.alias("_ind"))
    fp = pl.col("_fp")
    prev = fp.shift(1).over("_g")
    prev_escaped = (style == '"') & prev.str.ends_with("\\") & ~prev.str.ends_with("\\\\")
    empty, prev_empty = fp == "", (prev == "").fill_null(False)
    flow_out = (pl.when(is_head).then(fp)
                .when(empty).then(pl.lit("\n"))
                .when(prev_empty | prev_escaped.fill_null(False)).then(fp)
                .otherwise(pl.lit(" ") + fp))
    # a double-quoted line ending in `\` continues without a space: the backslash goes
    flow_out = pl.when((style == '"') & fp.str.ends_with("\\") & ~fp.str.ends_with("\\\\")).then(
        flow_out.str.strip_suffix("\\")).otherwise(flow_out)
    # a literal block: the lines after the head, each without the block's indentation
    block_out = pl.when(is_head).then(pl.lit("")).otherwise(
        pl.when(t.str.len_chars() >= pl.col("_ind")).then(t.str.slice(pl.col("_ind"))).otherwise(pl.lit("")) + pl.lit("\n"))
    p = p.with_columns(pl.when(pl.col("_blk")).then(block_out).otherwise(flow_out).alias("_piece"))
    agg = p.group_by("_g", maintain_order=True).agg(pl.col("_piece").str.join(""), pl.col("_hv_all").first().alias("_style"))
    s, v = pl.col("_style").str.head(1), pl.col("_piece")
    msg = (pl.when(s.is_in(["|", ">"])).then(v)
           .when(s == "'").then(v.str.strip_chars_end().str.strip_prefix("'").str.strip_suffix("'").str.replace_all("''", "'", literal=True))
           .when(s == '"').then(_unescape(v.str.strip_chars_end().str.strip_prefix('"').str.strip_suffix('"')))
           .otherwise(v.str.strip_chars_end()))
    return agg.select("_g", msg.alias("_msg"))
