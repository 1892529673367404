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
from ._frame import cut_suffix, line_of, rfc3339_ns_of, set_time

NAME = "gcp-logging-yaml"
DOC = "Google Cloud Logging YAML (`gcloud logging read`'s default output, `---` before each LogEntry): `textPayload` / `jsonPayload.message` in any YAML scalar style, `timestamp` (ns); labels `pod`, `container`, `namespace`, `node`, `cluster`, `severity`; newest-first put back in time order per pod"
JOINS = True
NEEDS = ('textPayload:', 'jsonPayload:')

_RES = {"pod_name": "pod", "container_name": "container", "namespace_name": "namespace", "node_name": "node", "cluster_name": "cluster"}
# a Compute Engine VM (resource `gce_instance`) names the host: by the name the Ops Agent puts
# in the entry's labels, else by the resource's numeric id
_VM_NAME, _VM_ID = "compute.googleapis.com/resource_name", "instance_id"
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_host"]
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
    # (each test over every line is a prefix comparison; patterns run on the few lines kept)
    top = ~t.str.starts_with(" ") & (t != "")
    sep = t == "---"
    df = df.with_columns(sep.cum_sum().alias("_g"), top.alias("_top"))
    # the top-level key each line is under (one forward fill for all of them)
    keys = ("textPayload:", "resource:", "labels:", "jsonPayload:")
    code = pl.when(t.str.starts_with(keys[0])).then(pl.lit(1, pl.Int8))
    for i, key in enumerate(keys[1:], 2):
        code = code.when(t.str.starts_with(key)).then(pl.lit(i, pl.Int8))
    df = df.with_columns(pl.when(pl.col("_top")).then(code.otherwise(pl.lit(0, pl.Int8))).forward_fill().fill_null(0).alias("_sec"))
    sec = pl.col("_sec")
    json_payload = bool(df.select((sec == 4).any()).item())
    marks = [(sec == 1).alias("_in_text"), (sec == 2).alias("_in_res"), (sec == 3).alias("_in_lab")]
    if json_payload:
        # jsonPayload's own members, one level in: the lines of its `message`
        sub = pl.when(pl.col("_top")).then(pl.lit(None, pl.Boolean)).when(t.str.contains(r"^  [A-Za-z_]")).then(
            t.str.starts_with("  message:")).forward_fill().fill_null(False)
        marks.append(((sec == 4) & sub).alias("_in_msg"))
    df = df.with_columns(marks)
    in_msg = pl.col("_in_msg") if json_payload else pl.lit(False)
    payload = df.filter(pl.col("_in_text") | in_msg).select(
        "_g", "text", pl.when(pl.col("_in_text")).then(0).otherwise(2).alias("_base"),
        (t.str.starts_with("textPayload:") | t.str.starts_with("  message:")).alias("_head"),
    )
    text = _scalars(payload)
    meta = _meta_values(df)
    # one row per document: its first line (`---`, or a block's first line before any)
    first = df.filter(sep | (pl.int_range(pl.len()) == 0))
    heads = first.select(
        "_g", "line", pl.col("text").alias("_first"), "_wts", "_stream", "_pre", *labels_in,
        (pl.col("line").shift(-1).fill_null(df["line"][-1] + 1) - pl.col("line")).cast(pl.Int32).alias("_n_all"),
    ).unique("_g", keep="last", maintain_order=True)
    out = heads.join(text, on="_g", how="left").join(meta, on="_g", how="left")
    for k in (*_RES, _VM_ID, _VM_NAME, "_ts", "_sev"):
        if k not in out.columns:
            out = out.with_columns(pl.lit(None, pl.String).alias(k))
    # (a document whose payload could not be found keeps its first line: `unparsed`)
    out = out.with_columns(
        pl.coalesce(line_of(pl.col("_msg")), pl.col("_first")).alias("text"),
        pl.col("_n_all").alias("_n"),
        pl.lit(False).alias("_open"),
        set_time(out, rfc3339_ns_of(out, pl.col("_ts"))),
        *[pl.col(k).alias(f"_lab_{v}") for k, v in _RES.items()],
        pl.coalesce(_VM_NAME, _VM_ID).alias("_lab_host"),
        pl.col("_sev").alias("_lab_severity"),
    )
    cols = ["line", "text", "_n", "_wts", "_stream", "_open", "_pre"]
    labels = sorted({*labels_in, *[f"_lab_{v}" for v in _RES.values()], "_lab_host", "_lab_severity"})
    return time_order(out.select(*cols, *labels), _KEYS)


def _meta_values(df: pl.DataFrame) -> pl.DataFrame:
    """Each document's `timestamp` and `severity` (`_ts`, `_sev`: one line each, a time is
    never folded) and the instance's names (the resource's lines four in, the entry's labels'
    two in, then their keys: a key holds no `: `), one row per document, from one filter."""
    t, top = pl.col("text"), pl.col("_top")
    rows = df.filter((top & (t.str.starts_with("timestamp: ") | t.str.starts_with("severity: ")))
                     | (pl.col("_in_res") & t.str.starts_with("    "))
                     | (pl.col("_in_lab") & t.str.starts_with(f"  {_VM_NAME}: "))).select("_g", "text")
    # (each document repeats its resource's lines: each distinct line is read once; a line
    # starting at its key is one of the entry's own)
    kv = rows.select(t.unique()).select("text", t.str.strip_chars_start(" ").str.split_exact(": ", 1).alias("_kv"))
    # (the entry's own two keep names no resource key can take: a resource's `timestamp`
    # label is not the entry's)
    k = pl.col("_kv").struct.field("field_0")
    kv = kv.select("text", pl.when(~t.str.starts_with(" ")).then(pl.when(k == "timestamp").then(pl.lit("\x00ts"))
                                                                  .otherwise(pl.lit("\x00sev"))).otherwise(k).alias("k"),
                   pl.col("_kv").struct.field("field_1").alias("v")).filter(
        pl.col("k").is_in([*_RES, _VM_ID, _VM_NAME, "\x00ts", "\x00sev"]) & pl.col("v").is_not_null())
    kv = kv.with_columns(_unquote_of(kv, pl.col("v")))
    rows = rows.join(kv, on="text", how="inner", maintain_order="left")
    if not rows.height:
        return pl.DataFrame({"_g": pl.Series([], dtype=df["_g"].dtype)})
    return rows.pivot(on="k", index="_g", values="v", aggregate_function="first").rename(
        {"\x00ts": "_ts", "\x00sev": "_sev"}, strict=False)


def _unquote_of(df: pl.DataFrame, v: pl.Expr) -> pl.Expr:
    """`_unquote(v)` over `df`, with only the quoting styles its values use (a double-quoted
    string's escapes are a dozen passes over the column; a time is always single-quoted,
    a label plain)."""
    name = v.meta.output_name()
    w = v.str.strip_chars_end()
    # (a value opens with its quote whether or not white space ends it: asked of the value
    # itself, which is not copied)
    single, double, doubled = df.select(v.str.starts_with("'").any().alias("s"), v.str.starts_with('"').any().alias("d"),
                                        v.str.contains("''", literal=True).any().alias("q")).row(0) if df.height else (False, False, False)
    if double:
        return _unquote(v).alias(name)
    if not single:
        return w.alias(name)
    inner = w.str.strip_prefix("'").str.strip_suffix("'")
    inner = inner.str.replace_all("''", "'", literal=True) if doubled else inner
    return pl.when(w.str.starts_with("'") & w.str.ends_with("'")).then(inner).otherwise(w).alias(name)


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
    lines after it, in order; `_base` is the key's indentation (0 `textPayload`, 2 `message`)."""
    t, base, is_head = pl.col("text"), pl.col("_base"), pl.col("_head")
    # the head's value: after `textPayload: ` (13) or `  message: ` (11)
    hv = t.str.slice(pl.when(base == 0).then(13).otherwise(11))
    # most documents hold the line on the head alone (the head's value cut out of those
    # rows only: the others are the long folded lines)
    alone = is_head & is_head.shift(-1).fill_null(True)
    p = p.with_columns(alone.alias("_alone"))
    one = p.filter(pl.col("_alone")).select("_g", hv.alias("_piece")).with_columns(pl.col("_piece").str.head(1).alias("_style"))
    more = p.filter(~pl.col("_alone"))
    if more.height:
        more = more.with_columns(pl.when(is_head).then(hv).alias("_hv"))
        more = more.with_columns(pl.col("_hv").forward_fill().alias("_hv_all")).filter(pl.col("_hv_all").is_not_null())
    if more.height:
        more = _joined(more)
    parts = pl.concat([one, more.select(one.columns)]) if more.height else one
    v = pl.col("_piece")
    out = []
    # (only the styles the block holds are cut out of it)
    styles = set(parts["_style"].unique().to_list())
    for style, fn in (("'", _single_quoted), ('"', lambda sub, v: _unescape(v.str.strip_chars_end().str.strip_prefix('"').str.strip_suffix('"'))),
                      ("|", lambda sub, v: v), (">", lambda sub, v: v)):
        if style in styles:
            sub = parts.filter(pl.col("_style") == style)
            out.append(sub.select("_g", fn(sub, v).alias("_msg")))
    if styles - {"'", '"', "|", ">"} or not out:
        plain = parts.filter(~pl.col("_style").is_in(["'", '"', "|", ">"]).fill_null(True))
        out.append(plain.select("_g", v.str.strip_chars_end().alias("_msg")))
    return pl.concat(out)


def _single_quoted(df: pl.DataFrame, v: pl.Expr) -> pl.Expr:
    """A single-quoted scalar's text: its quotes cut off (the string's bytes kept, not
    copied), a doubled quote made one where some value holds one."""
    w = v.str.strip_chars_end()
    inner = cut_suffix(pl.when(w.str.starts_with("'")).then(w.str.slice(1)).otherwise(w), "'")
    doubled = df.select(v.str.contains("''", literal=True).any()).item()
    return inner.str.replace_all("''", "'", literal=True) if doubled else inner


def _joined(p: pl.DataFrame) -> pl.DataFrame:
    """The documents whose scalar runs over several lines: folded (flow styles) or kept
    line by line (a literal block), one `_piece` per document. (Each style's rows apart:
    a branch not taken would still copy every line's text.)"""
    t, is_head = pl.col("text"), pl.col("_head")
    # (a document's lines follow one another: grouped as runs of a sorted key)
    p = p.with_columns(pl.col("_hv_all").str.head(1).alias("_style"), pl.col("_g").set_sorted())
    style = pl.col("_style")
    block = p.filter(style.is_in(["|", ">"]))
    flow = p.filter(~style.is_in(["|", ">"]))
    parts, done = [], []
    if block.height:
        # a block's indentation: the key's and 2, or the digit the indicator gives
        digit = pl.col("_hv_all").str.extract(r"^[|>][+-]?([1-9])", 1).cast(pl.Int64, strict=False)
        ind = pl.col("_base") + digit.fill_null(2)
        body = pl.when(t.str.len_chars() >= ind).then(t.str.slice(ind)).otherwise(pl.lit(""))
        # most blocks hold one line (a line that kept its newline): its text is the block's,
        # taken as it is (its newline is cut from every message at the end, and a line holds
        # none of its own)
        g = pl.col("_g")
        first = (g != g.shift(1)).fill_null(True)
        one = ~is_head & is_head.shift(1).fill_null(False) & first.shift(1).fill_null(False) & (g != g.shift(-1)).fill_null(True)
        block = block.with_columns(one.alias("_one"))
        done.append(block.filter(pl.col("_one")).select("_g", body.alias("_piece"), "_style"))
        block = block.filter(~(pl.col("_one") | pl.col("_one").shift(-1).fill_null(False)))
        parts.append(block.select("_g", "_style", pl.when(is_head).then(pl.lit("")).otherwise(body + pl.lit("\n")).alias("_piece")))
    if flow.height:
        # continuation lines lose their indentation; folding joins them with a space, an
        # empty line stands for a newline, a double-quoted line ending in `\` joins as it is
        fp = pl.when(is_head).then(pl.col("_hv")).otherwise(t.str.strip_chars_start(" "))
        flow = flow.with_columns(fp.alias("_fp"))
        fp = pl.col("_fp")
        esc = (style == '"') & fp.str.ends_with("\\") & ~fp.str.ends_with("\\\\")
        flow = flow.with_columns(esc.alias("_esc"), (fp == "").alias("_empty"))
    if flow.height and not flow.select((pl.col("_esc") | pl.col("_empty")).any()).item():
        # folded at single spaces only (the usual case): the pieces joined with a space
        done.append(flow.group_by("_g", maintain_order=True).agg(fp.str.join(" ").alias("_piece"), pl.col("_style").first()))
    elif flow.height:
        glue = (is_head | pl.col("_empty") | pl.col("_empty").shift(1).fill_null(False)
                | pl.col("_esc").shift(1).fill_null(False))
        piece = pl.when(pl.col("_empty")).then(pl.lit("\n")).when(glue).then(fp).otherwise(pl.lit(" ") + fp)
        piece = pl.when(pl.col("_esc")).then(piece.str.strip_suffix("\\")).otherwise(piece)
        parts.append(flow.select("_g", "_style", piece.alias("_piece")))
    # (a document's lines are all of one style: each part is joined on its own, in order)
    return pl.concat([q.group_by("_g", maintain_order=True).agg(pl.col("_piece").str.join(""), pl.col("_style").first())
                      for q in parts] + done)
