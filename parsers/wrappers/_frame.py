"""The frame every wrapper decoder reads and returns, and the helpers they share.

A decoder takes logical lines and returns logical lines. Besides `line` (the 1-based number
of the line's first physical line) and `text`, the frame carries:

    _n       Int32              physical lines joined into this logical line (P/F fragments,
                                docker split pieces); 1 for almost every line
    _wts     Datetime(ns, UTC)  the wrapper's time (the outermost wrapper that gave one)
    _stream  String             stdout / stderr, when the wrapper says
    _open    Boolean            the last logical line is unfinished: its final fragment has
                                not been written yet (the reader holds it back)
    _pre     String             text cut off before an engine header no decoder knows
    _lab_*   String             labels (compose service, syslog host, journald unit...)
"""

from __future__ import annotations

from typing import Callable

import polars as pl

WTS = pl.Datetime("ns", "UTC")
FRAME_COLS = ("line", "text", "_n", "_wts", "_stream", "_open", "_pre")


def start(lines: pl.DataFrame) -> pl.DataFrame:
    """The decode frame of plain physical lines."""
    text = lines["text"]
    text = text.fill_null("") if text.null_count() else text
    n = lines.height
    # (built from the columns, not by an eager call on `lines`: polars takes a one-row
    # frame's columns as single values, copying a long line, a one-line JSON download's)
    return pl.DataFrame([
        lines["line"],
        text.alias("text"),
        pl.repeat(1, n, dtype=pl.Int32, eager=True).alias("_n"),
        pl.repeat(None, n, dtype=WTS, eager=True).alias("_wts"),
        pl.repeat(None, n, dtype=pl.String, eager=True).alias("_stream"),
        pl.repeat(False, n, eager=True).alias("_open"),
        pl.repeat(None, n, dtype=pl.String, eager=True).alias("_pre"),
    ])


def rfc3339_ns(expr: pl.Expr) -> pl.Expr:
    """`2026-06-10T14:23:45.123456789Z` / `...+00:00` / `...+0000` -> Datetime(ns, UTC); a
    time without its zone (`aws logs tail --format short`) is UTC."""
    norm = expr.str.replace(",", ".", literal=True).str.replace(r"Z$", "+00:00").str.replace(
        r"([+-][0-9]{2})([0-9]{2})$", "$1:$2"
    ).str.replace(r"(T[0-9:.]+)$", "${1}+00:00")
    return norm.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", time_unit="ns", time_zone="UTC", strict=False)


def rfc3339_ns_of(df: pl.DataFrame, expr: pl.Expr) -> pl.Expr:
    """`rfc3339_ns` of `expr` over `df`, in one pass when every time is UTC with a `Z` and
    a `.` (the runtimes' own form), instead of the three rewrites that bring the others to
    one format."""
    fast = df.select(expr.str.ends_with("Z").all() & ~expr.str.contains(",", literal=True).any()).item() if df.height else False
    if fast:
        return expr.str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="ns", strict=False).dt.replace_time_zone("UTC")
    return rfc3339_ns(expr)


def cut_suffix(expr: pl.Expr, suffix: str) -> pl.Expr:
    """`expr.str.strip_suffix(suffix)` for an ASCII `suffix`, without writing the strings
    anew (a string's head is a view of its bytes; strip_suffix copies every string)."""
    return pl.when(expr.str.ends_with(suffix)).then(expr.str.head(-len(suffix))).otherwise(expr)


def json_literal(value: pl.Expr) -> pl.Expr:
    """A value as its JSON text: the JSON of a one-member struct `{"v":...}` with the key
    and the braces cut off."""
    return pl.struct(value.alias("v")).struct.json_encode().str.slice(5).str.strip_suffix("}")


def line_of(expr: pl.Expr) -> pl.Expr:
    """A platform's message as the server's line: without the newline (and carriage
    return) that ended it."""
    return cut_suffix(cut_suffix(expr, "\n"), "\r")


def set_time(df: pl.DataFrame, ts: pl.Expr) -> pl.Expr:
    """The outer wrapper's time wins; an inner one fills only where the outer gave none."""
    return pl.coalesce(pl.col("_wts"), ts).alias("_wts")


def peel(df: pl.DataFrame, pattern: str, fields: dict[str, str], hint: str | None = None) -> pl.DataFrame:
    """Cut an anchored prefix `pattern` (named groups) off `text` where it matches.

    `fields` maps a named group to the frame column it fills: `_lab_<name>` columns and
    `_stream` are filled as they are; `_time` is parsed as RFC 3339 into `_wts`. Lines the
    pattern does not match keep their text and columns."""
    groups = pl.col("text").str.extract_groups(f"^(?P<_all>{pattern})")
    df = df.with_columns(groups.alias("_g")).unnest("_g")
    hit = pl.col("_all").is_not_null()
    out = [pl.when(hit).then(pl.col("text").str.slice(pl.col("_all").str.len_chars())).otherwise(pl.col("text")).alias("text")]
    for group, col in fields.items():
        if col == "_wts":
            out.append(set_time(df, rfc3339_ns_of(df, pl.col(group))))
        elif col == "_stream":
            out.append(pl.coalesce(pl.col("_stream"), pl.col(group)).alias("_stream"))
        else:
            out.append(pl.col(group).alias(col))
    df = df.with_columns(out)
    return df.drop(["_all"] + [g for g in groups_of(pattern) if g not in fields.values()])


def peel_labels(df: pl.DataFrame, pattern: str, labels: tuple[str, ...]) -> pl.DataFrame:
    """`peel` of a per-line prefix whose named groups are the `_lab_*` columns `labels`; an
    outer layer's value of a label wins over this one's."""
    prior = {c: df[c] for c in labels if c in df.columns}
    df = peel(df.drop(list(prior)), pattern, {c: c for c in labels})
    return df.with_columns([pl.coalesce(s, pl.col(c)).alias(c) for c, s in prior.items()]) if prior else df


def label_columns(names: dict[str, str], of: Callable[[str], pl.Expr], constants: dict[str, str] | None = None) -> list[pl.Expr]:
    """A `_lab_<label>` column for each label that `names` (a platform's field -> the label it
    gives) names: the first of its fields present (`of(field)`, in the order of `names`), else
    the file's constant for that label (`constants`)."""
    out = []
    for label in dict.fromkeys(names.values()):
        fields = [of(k) for k, w in names.items() if w == label]
        if constants is not None:
            fields.append(pl.lit(constants.get(label), pl.String))
        out.append(pl.coalesce(fields).alias(f"_lab_{label}"))
    return out


def any_line(texts: list[str], pattern: str) -> float:
    """1 when some sample line matches `pattern`: a per-line prefix is decoded on the lines
    that carry it only, so a file where only some lines do is read too."""
    return 1.0 if share(texts, pattern) > 0 else 0.0


def groups_of(pattern: str) -> list[str]:
    import re

    return re.findall(r"\(\?P<([A-Za-z_]\w*)>", pattern)


def join_fragments(df: pl.DataFrame, ends: pl.Expr) -> pl.DataFrame:
    """Join fragments of one line (CRI `P` records before their `F`, docker json-file pieces
    without their `\\n`) into one logical line. `ends`: this fragment ends its line.

    Fragments join only while they follow one another on one stream: a fragment of the
    other stream in between ends the run (the joined line must cover consecutive physical
    lines). The last line is `_open` when its last fragment does not end it."""
    df = df.with_columns(ends.fill_null(True).alias("_end"))
    if df.height == 0 or bool(df["_end"].all()):
        return df.drop("_end")
    stream = pl.col("_stream").fill_null("")
    brk = pl.col("_end").shift(1).fill_null(True) | (stream != stream.shift(1)).fill_null(True)
    df = df.with_columns(brk.cum_sum().alias("_frag"))
    # only the fragments' rows are grouped (a line in one record, by far the most common,
    # passes as it is): a row is in a group of several when it does not end its line or the
    # row before it did not
    in_group = (~pl.col("_end") & (pl.col("_frag") == pl.col("_frag").shift(-1)).fill_null(False)) | (
        pl.col("_frag") == pl.col("_frag").shift(1)
    ).fill_null(False)
    df = df.with_columns(in_group.alias("_grp"))
    labels = [c for c in df.columns if c.startswith("_lab_")]
    single = df.filter(~pl.col("_grp")).with_columns((~pl.col("_end")).alias("_open"))
    multi = df.filter(pl.col("_grp")).group_by("_frag", maintain_order=True).agg(
        pl.col("line").first(),
        pl.col("text").str.join(""),
        pl.col("_n").sum().cast(pl.Int32),
        pl.col("_wts").first(),
        pl.col("_stream").first(),
        (~pl.col("_end").last()).alias("_open"),
        pl.col("_pre").first(),
        *[pl.col(c).first() for c in labels],
    )
    # the decoder's own working columns end here
    cols = ["line", "text", "_n", "_wts", "_stream", "_open", "_pre", *labels]
    out = pl.concat([single.select(cols), multi.select(cols)]).sort("line")
    last = pl.int_range(pl.len()) == pl.len() - 1
    return out.with_columns((pl.col("_open") & last).alias("_open"))


def any_row(df: pl.DataFrame, expr: pl.Expr) -> bool:
    return bool(df.select(expr.any()).item()) if df.height else False


def share(texts: list[str], pattern: str) -> float:
    """Fraction of the non-empty sample lines matching `pattern` (anchored by the caller)."""
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    return float(s.str.contains(pattern).mean())
