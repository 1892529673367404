"""The text half of the TGI parser (`tgi.py`): records whose first line has a TGI header
(RFC 3339 time and level), in the router's tracing "Full" format (`[spans: ]target:
file.rs:N: msg`) or the compact one of the launcher and other tracing lines (`[spans: ]
target: msg`), turned into the columns the JSON path (`json_format.py`) also produces.

Speed: the router's `Success` line is most of a busy log (~650 bytes, most of it the
parameters dump). Its parts are found by literal searches and cut out at the offsets
they give (`find_slice`); the same few tails are split once per distinct value; one
regex reads the five durations and the seed.
"""

from __future__ import annotations

import functools

import polars as pl

from ...base import RFC3339_RE, find_len, find_slice
from .fields import DURATION_FIELDS, TIMING_RE, duration_struct, span_field

# base.RFC3339_RE with ASCII classes: Unicode-aware \d, \w, \s and \b keep the regex
# engine off its fast path, which costs several times over long router lines
TS = RFC3339_RE.replace(r"\d", "[0-9]")
LEVEL = r"(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR)"

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z0-9_]+)*"
# router "Full" format: [spans: ]target: file.rs:line: message -> the tail from target on
_ROUTER_TAIL_RE = rf"(?:^|: )({_IDENT}: [^ \t:]+\.rs:[0-9]+:(?: .*)?)$"
# launcher compact format: [span:span: ]text_generation_launcher: message[ rank=N]
_LAUNCHER_RE = r"^(?:(?P<spans>[A-Za-z0-9_-]+(?::[A-Za-z0-9_-]+)*): )?(?P<target>text_generation_launcher): ?(?P<msg>.*)$"
# any other compact tracing line: [spans: ]target: message
_COMPACT_RE = (
    rf"^(?:(?P<spans>[A-Za-z_][A-Za-z0-9_-]*(?:\{{[^{{}}]*\}})?(?::[A-Za-z_][A-Za-z0-9_-]*(?:\{{[^{{}}]*\}})?)*): )?"
    rf"(?P<target>{_IDENT}): (?P<msg>.*)$"
)

_STR = pl.String


def text_records(recs: pl.DataFrame) -> pl.DataFrame:
    if recs.height == 0:
        return recs
    routed, compact = _split_records(_locate_tail(recs))
    recs = pl.concat([p for p in (routed, compact) if p.height], how="diagonal_relaxed")
    return _span_fields(recs)


def _locate_tail(recs: pl.DataFrame) -> pl.DataFrame:
    """`_ts`, `_lvl`, and offsets into `_first` (in `str.find`'s unit): `_rest_at` (after
    the head) and `_tail_at` (the router tail `target: file.rs:N: msg`, found by a literal
    search)."""
    head, rest_at, tail_at, tail = _locate_exprs()
    recs = recs.with_columns(head).unnest("_h").with_columns(rest_at).drop("_head")
    return recs.with_columns(tail_at).with_columns(tail)


@functools.cache
def _locate_exprs() -> tuple[pl.Expr, ...]:
    first = pl.col("_first")
    # one anchored capture over the line's head; the rest of the line is then addressed
    # by offsets into `_first` (slicing copies: only the pieces needed are cut out)
    head = first.str.extract_groups(rf"^(?P<_head>(?P<_ts>{TS})[ \t]+(?P<_lvl>{LEVEL})[ \t]+)")
    rest_at = pl.col("_rest_at")
    # router "Full" format `[spans: ]target: file.rs:N: msg`. TGI's own targets all start
    # with `text_generation_`, so a literal search finds the tail on almost every line; the
    # regex search (slower over a long span chain) only runs on the lines left over. (The
    # head holds neither literal, so a search from the line's start finds them in the rest;
    # and the first `text_generation_` is at the rest's start when the rest starts with it:
    # the head is ASCII, so its length in bytes is its length in characters: an offset in
    # either unit `str.find` may count in.)
    tail_at = (
        pl.when(rest_at.is_null()).then(None)
        .when(first.str.slice(rest_at, 16) == "text_generation_").then(rest_at)
        .otherwise(first.str.find(": text_generation_", literal=True) + 2)
    )
    return (
        head.alias("_h"), pl.col("_head").str.len_bytes().alias("_rest_at"),
        tail_at.alias("_tail_at"), find_slice(first, pl.col("_tail_at")).alias("_tail"),
    )


def _split_records(recs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Router "Full" records (`_spans`, `target`, `file`, `_msg`) and the other, compact
    ones (launcher and plain tracing lines: `_spans`, `target`, `_msg`)."""
    first, rest_at = pl.col("_first"), pl.col("_rest_at")
    # a server logs the same few tails (`target: file.rs:N: msg`) over and over: each
    # distinct one is tested and split once
    routed_tails = (
        recs.lazy().select(pl.col("_tail").drop_nulls().unique())
        .filter(pl.col("_tail").str.contains(rf"^{_IDENT}: [^ \t:]+\.rs:[0-9]+:(?: |$)"))
        .collect().to_series()
    )
    recs = recs.with_columns(pl.col("_tail").is_in(routed_tails.implode()).fill_null(False).alias("_routed"))
    tail = pl.col("_tail")
    # the spans: what precedes `: tail`
    spans = find_slice(first, rest_at, (pl.col("_tail_at").cast(pl.Int64) - 2 - rest_at).clip(0))
    if recs["_routed"].all():
        routed, others = recs.with_columns(spans.alias("_spans")), recs.clear()
    else:
        routed = recs.filter(pl.col("_routed")).with_columns(spans.alias("_spans"))
        # the head is ASCII: its length in bytes is its length in chars
        others = recs.filter(~pl.col("_routed")).with_columns(first.str.slice(rest_at).alias("_rest"))
    rest = pl.col("_rest")
    compact = others
    if others.height:
        others = others.with_columns(rest.str.extract(_ROUTER_TAIL_RE, 1).alias("_tail"))
        compact = others
        if others["_tail"].null_count() < others.height:
            routed = pl.concat([
                routed,
                others.filter(tail.is_not_null()).with_columns(
                    rest.str.strip_suffix(tail).str.strip_suffix(": ").alias("_spans")
                ),
            ], how="diagonal_relaxed")
            compact = others.filter(tail.is_null())
    routed = routed.join(
        _router_tail_fields(routed.select(tail.unique())), on="_tail", how="left"
    ).with_columns(pl.when(pl.col("_spans") != "").then(pl.col("_spans")).alias("_spans"))
    if compact.height:
        la = rest.str.extract_groups(_LAUNCHER_RE)
        c = rest.str.extract_groups(_COMPACT_RE)
        compact = compact.with_columns(la.alias("_la"), c.alias("_c")).with_columns(
            *[
                pl.when(pl.col("_la").struct.field("target").is_not_null())
                .then(pl.col("_la").struct.field(f))
                .otherwise(pl.col("_c").struct.field(f))
                .alias(alias)
                for f, alias in (("spans", "_spans"), ("target", "target"), ("msg", "_msg"))
            ],
            pl.lit(None, _STR).alias("file"),
        ).drop("_la", "_c")
    return routed, compact


def _span_fields(recs: pl.DataFrame) -> pl.DataFrame:
    """From the span chain: the parameters dump (`_params`), the root batch span's size
    and the request span's durations (`_d_*` parts) and seed."""
    cut, pieces, batch, timing, slow = _span_exprs()
    # (a chunk without a `batch{..}` root span, or whose every record had its durations
    # read by the one regex, skips the search for them)
    if not recs["_spans"].str.starts_with("batch{").any():
        batch = pl.lit(None, pl.Int64).alias("batch_size")
    recs = recs.with_columns(cut).with_columns(*pieces, batch)
    recs = recs.with_columns(timing).unnest("_tg")
    if recs["_d_total_u"].null_count():
        recs = recs.with_columns(slow)
    if "_slow" in recs.columns and recs["_slow"].any():
        t = pl.col("_timing")
        slow = recs.filter(pl.col("_slow")).drop(
            *[c for c in recs.columns if c.startswith("_d_")], "_seed"
        ).with_columns(
            *[duration_struct(span_field(t, f), p) for f, p in DURATION_FIELDS.items()],
            span_field(t, "seed").alias("_seed"),
        ).unnest(*DURATION_FIELDS.values())
        recs = pl.concat([recs.filter(~pl.col("_slow")), slow.select(recs.columns)])
    scratch = ("_rest", "_rest_at", "_routed", "_tail", "_tail_at", "_cut", "_timing", "_slow")
    return recs.drop(*scratch, strict=False)


@functools.cache
def _span_exprs() -> tuple[pl.Expr, tuple[pl.Expr, ...], pl.Expr, pl.Expr, pl.Expr]:
    spans = pl.col("_spans")
    # string-recorded span fields follow the parameters dump: cut there (a literal search,
    # cheap) so the field regexes scan only the short tail and the dump can be de-duplicated
    cut = pl.col("_cut")
    pieces = (
        # without the cut both are the whole chain
        find_slice(spans, 0, pl.coalesce(cut, find_len(spans))).alias("_params"),
        find_slice(spans, cut.fill_null(0)).alias("_timing"),
    )
    # `batch` is a root span (parent: None): it heads the chain
    batch = spans.str.extract(r"^batch\{batch_size=([0-9]+)\}", 1).cast(pl.Int64, strict=False).alias("batch_size")
    # one regex for all durations; lines in another shape (fields missing, reordered) are
    # read field by field (a line naming none of the fields keeps the nulls)
    missed = pl.col("_d_total_u").is_null()
    slow = missed & pl.when(missed).then(pl.col("_timing")).str.contains_any(
        ['_time="', 'time_per_token="', 'seed="']
    ).fill_null(False)
    return (
        spans.str.find(" total_time=", literal=True).alias("_cut"), pieces, batch,
        pl.col("_timing").str.extract_groups(TIMING_RE).alias("_tg"), slow.alias("_slow"),
    )


def _router_tail_fields(tails: pl.DataFrame) -> pl.DataFrame:
    """Distinct router tails `_tail` = `target: file.rs:N: msg` -> `target`, `file`, `_msg`."""
    fields = rf"^(?P<target>{_IDENT}): (?P<file>[^ \t:]+\.rs:[0-9]+): ?(?P<_msg>.*)$"
    return tails.with_columns(pl.col("_tail").str.extract_groups(fields).alias("_f")).unnest("_f")
