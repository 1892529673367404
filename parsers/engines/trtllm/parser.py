"""TensorRT-LLM parser: C++ runtime `[TensorRT-LLM][LEVEL]` lines, the Python logger
(`[MM/DD/YYYY-HH:MM:SS] [TRT-LLM] [I]`, `[TRT]`, MPI-rank and newest `MM-DD-YYYY ...` forms),
Triton glog wrappers (`I0514 21:01:55.276668 160 file.cc:813] msg`, quoted or not), Triton
status tables, the import banner, numbered C++ backtraces and Python tracebacks, Open MPI
`[1,0]<stdout>:` prefixes, and the iteration statistics in every form (see
`stats.py`), into the common schema. This module owns line anatomy (record starts,
prefix peeling, time, level); `events.py` says what each record means. Docker times,
compose prefixes and ANSI codes are undone before, by the decoding stage (parsers/wrappers).

Choices worth knowing (the formats are TensorRT-LLM's and Triton's own, as real logs show them):
- `[TensorRT-LLM][...]` lines carry no time: `ts` stays null and `finalize` inherits it.
- Stats carry their own timestamp, which becomes `ts` (wins over the wrapper's time).
- Sizes: MiB/GiB are binary (2^20/2^30); `GB`/`MB` as printed by the design-note lines
  are taken as decimal (10^9/10^6). Bytes go to `attrs` as `*_bytes`.
- `Inference batch: N requests, total_input_tokens=I, total_output_tokens=O` (design-note
  line): batch_size=N, prompt_tokens=I, output_tokens=O, batch_tokens=I+O (the total).
- PyTorch `iter =` lines: `num_generation_tokens` includes CUDA-graph padding, so it goes
  to attrs as `generation_tokens_padded`, never into `batch_tokens`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import polars as pl

from ...base import ParseContext, group_records
from .events import (
    FRAME_RE,
    PY_EXC_RE,
    TABLE_RE,
    TB_START_RE,
    access_events,
    iter_events,
    other_events,
    plain_access,
    stats_events,
)
from .stats import PYTORCH_ITER_RE, any_row, safe_json_decode, split_stats

NAME = "trtllm"

# --- line anatomy ----------------------------------------------------------------------
# Prefixes are matched on the first 200 characters only (see `_peel_text`).
GLOG_PREFIX = (
    r"(?P<gl>[IWEF])(?P<gmon>\d{2})(?P<gday>\d{2}) (?P<gtime>\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)"
    r"\s+(?P<gpid>\d+) (?P<gsrc>[\w.+-]+:\d+)\] ?"
)
CPP_PREFIX = r"\[TensorRT-LLM\]\[(?P<clevel>TRACE|DEBUG|INFO|WARNING|ERROR)\](?:\[(?P<crank>\d+)\])? ?"
PY_PREFIX = (
    r"\s*(?:\[(?P<pyts>\d{2}/\d{2}/\d{4}-\d{2}:\d{2}:\d{2})\]\s+"
    r"|(?P<cts>\d{2}-\d{2}-\d{4} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)\s+)?"
    r"\[(?P<who>TRT-LLM|TRT)\]\s+(?:\[MPI_Rank (?P<mpirank>\d+)\]\s+)?"
    r"\[(?P<sev>[FEWIVD])\]\s?"
)
TORCH_TAG_PREFIX = r"(?:\[_torch\])?\[RANK (?P<trank>\d+)\]\s*"
BANNER_RE = r"\[TensorRT-LLM\] TensorRT-LLM version: (\d[\w.+]*)"
BANNER_LITERAL = "[TensorRT-LLM] TensorRT-LLM version: "
# Open MPI `--tag-output`: `[1,0]<stdout>:` (job, rank)
MPI_TAG_RE = r"^\[\d+,(\d+)\]<std(?:out|err)>:"
GLOG_HEADER_RE = r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?\s+\d+ [\w.+-]+:\d+\]\s*$"
INDENTED_RE = r"^\s{2,}\S"
WHAT_RE = r"^\s+what\(\):"  # after `terminate called ...`

_CPP_LEVEL = {
    "TRACE": "DEBUG",
    "DEBUG": "DEBUG",
    "INFO": "INFO",
    "WARNING": "WARNING",
    "ERROR": "ERROR",
}
_PY_LEVEL = {
    "F": "CRITICAL",
    "E": "ERROR",
    "W": "WARNING",
    "I": "INFO",
    "V": "DEBUG",
    "D": "DEBUG",
}
_GLOG_LEVEL = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}

# ---------------------------------------------------------------------------------------
# contract


def detect(lines: list[str]) -> float:
    """High for TensorRT-LLM / Triton-tensorrtllm / stats-JSON lines, ~0 otherwise."""
    if not lines:
        return 0.0
    s = pl.Series("t", lines, dtype=pl.String)
    strong = (
        s.str.contains(r"\[TensorRT-LLM\]|\[TRT-LLM\]")
        | s.str.contains(
            r'"(?:Active Request Count|Iteration Counter|iterLatencyMS|numActiveRequests)"'
        )
        | (
            s.str.contains(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}")
            & s.str.contains(r"(?i)tensorrt_?llm")
        )
        | s.str.contains(r"\[TRT\] \[[FEWIV]\]")
        | s.str.contains(PYTORCH_ITER_RE)
    )
    hits = int(strong.sum())
    if hits == 0:
        return 0.0
    return min(1.0, 0.6 + 0.4 * hits / len(lines))


def record_starts(text: pl.Series) -> pl.Series:
    """False for continuation lines: numbered C++ backtrace frames, Python traceback bodies
    (indented lines after `Traceback ...` and the exception line closing them), and Triton
    status-table rows that follow a glog header or another table row.

    Traceback bodies and table rows are looked for only when a `Traceback` line or a
    table row occurs in the chunk: most chunks hold neither."""
    return _record_starts(text).starts


class _Starts(NamedTuple):
    starts: pl.Series
    has_banner: bool  # some line holds the import banner: `parse` looks for it only then


def _record_starts(text: pl.Series) -> _Starts:
    """`record_starts`, and what it learnt about the chunk on the way."""
    df = pl.DataFrame({"t": text})
    t = pl.col("t")
    # a rank's import banner printed into another rank's traceback must not break it
    has_banner = any_row(df, t.str.contains(BANNER_LITERAL, literal=True))
    if has_banner:
        df = df.with_columns(t.str.replace_all(BANNER_RE, ""))
    # every continuation shape (or its opener) starts with one of these characters
    if not any_row(df, t.str.contains(r"^[\d+|Tt]")):
        # `what():` on the first line has no line before it to tell: unknown (null)
        first_what = df.height and any_row(df.head(1), t.str.contains(WHAT_RE))
        starts = pl.repeat(True, df.height, dtype=pl.Boolean, eager=True).alias("starts")
        if first_what:
            starts = starts.scatter(0, None)
        return _Starts(starts, has_banner)
    df = df.select(
        t.str.contains(FRAME_RE).alias("frame"),
        t.str.contains(TABLE_RE).alias("table"),
        t.str.contains(TB_START_RE).alias("tb"),
        t.str.starts_with("terminate called").alias("terminate"),
        t,
    )
    what = t.str.contains(WHAT_RE) & pl.col("terminate").shift(1)
    cont = pl.col("frame") | what
    if any_row(df, pl.col("table")):
        header = t.str.contains(GLOG_HEADER_RE)
        cont = cont | (pl.col("table") & (pl.col("table") | header).shift(1).fill_null(False))
    if any_row(df, pl.col("tb")):
        # inside a Python traceback: from `Traceback` through the indented lines after it
        ind = t.str.contains(INDENTED_RE)
        in_tb = (
            pl.when(pl.col("tb"))
            .then(True)
            .when(ind)
            .then(None)
            .otherwise(False)
            .forward_fill()
            .fill_null(False)
        )
        exc = t.str.contains(PY_EXC_RE)
        cont = (
            cont
            | (ind & in_tb & ~pl.col("tb"))
            | (exc & (in_tb & ind).shift(1).fill_null(False))
        )
    starts = (~df.select(cont.alias("c"))["c"]).alias("starts")
    return _Starts(starts, has_banner)


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return lines.select(
            "line", pl.lit("unparsed").alias("event"), pl.col("text").alias("message")
        )
    starts, has_banner = _record_starts(lines["text"])
    if starts.all():  # no continuation line: what group_records returns, without its window
        df = lines.select(
            "line", pl.lit(1, pl.Int32).alias("n_lines"), "text", pl.col("text").alias("first")
        )
    else:
        df = group_records(lines, starts)
    df = _clean(df)
    df = _peel_wrappers(df)
    df = _peel(df, pl.col("clean"), GLOG_PREFIX, "gmsg")
    df, unquoted = _unquote_glog(df)
    df = _banner(df, has_banner or unquoted)  # JSON escapes may hide it in the raw line
    # each later prefix holds a literal: only rows with it are read
    body = pl.col("body")
    df = _peel(df, body, CPP_PREFIX, "cmsg", body.str.starts_with("[TensorRT-LLM]["))
    df = _peel(df, body, PY_PREFIX, "pmsg", body.str.contains("[TRT", literal=True))
    df = _peel(
        df,
        pl.coalesce("cmsg", "pmsg", "body"),
        TORCH_TAG_PREFIX,
        "tmsg",
        body.str.contains("[RANK ", literal=True),  # cmsg and pmsg are tails of body
    )
    df = df.with_columns(_message())
    df = _glog_time(df)

    # Stats JSON: decoded in vectorised calls (see split_stats); one event per element (an
    # executor array shares its line span). Stats rows skip the message regexes.
    stats, other = split_stats(df, "msg")
    access = plain_access(other)
    n_access = int(access.sum())
    plain, other = (other.filter(access), other.filter(~access)) if n_access else (other.head(0), other)
    is_iter = pl.col("msg").str.contains(PYTORCH_ITER_RE) & ~pl.col("_level").is_in(
        ["ERROR", "CRITICAL"]
    )
    other = other.with_columns(is_iter.alias("_iter"))
    families = [
        (stats_events, stats),
        (iter_events, other.filter(pl.col("_iter"))),
        (other_events, other.filter(~pl.col("_iter"))),
        (access_events, plain),
    ]
    # an empty family is skipped: building its columns has a cost even for no rows
    out = pl.concat(
        [build(rows) for build, rows in families if rows.height], how="diagonal_relaxed"
    )
    if any_row(out, pl.col("line").diff() < 0):  # families interleave (one family: in order)
        out = out.sort("line", maintain_order=True)
    return out.with_row_index("_seq")


# ---------------------------------------------------------------------------------------
# the expression pipeline


def _clean(df: pl.DataFrame) -> pl.DataFrame:
    """`clean`: the first line without a stray `\\r`. Staged columns: eager polars
    re-evaluates an expression at every use."""
    df = df.with_columns(pl.col("first").alias("clean"))
    if any_row(df, pl.col("clean").str.ends_with("\r")):
        df = df.with_columns(pl.col("clean").str.strip_chars_end("\r"))
    return df


def _peel_wrappers(df: pl.DataFrame) -> pl.DataFrame:
    """Take an Open MPI `--tag-output` prefix (`[1,0]<stdout>:`, rank in `_mpitag`) off
    `clean`. It is tested on the whole line first: the pattern is anchored and fits well
    inside the slice the extraction reads, so the test matches exactly where the slice would."""
    src = pl.col("clean")
    if not any_row(df, src.str.contains(MPI_TAG_RE)):
        return df.with_columns(pl.lit(None, pl.String).alias("_mpitag"))
    df = df.with_columns(src.str.slice(0, 30).str.extract(MPI_TAG_RE, 1).alias("_mpitag"))
    return df.with_columns(
        pl.when(pl.col("_mpitag").is_not_null())
        .then(src.str.replace(MPI_TAG_RE, ""))
        .otherwise(src)
        .alias("clean")
    )


def _peel(
    df: pl.DataFrame, src: pl.Expr, prefix_re: str, rest: str, maybe: pl.Expr | None = None
) -> pl.DataFrame:
    """Match `prefix_re` (named groups) at the start of `src`; add its groups as columns
    and the text after it as column `rest` (null where the prefix is absent). `maybe`: a
    cheap per-row test that holds wherever the prefix can match; only those rows are read
    (a few rows are peeled apart and scattered back: most passes cost per row, even null)."""
    mask = None if maybe is None else df.select(maybe.fill_null(False))[:, 0]
    if mask is None or mask.all():
        text = df.select(src.alias("_src"))["_src"]
        return df.with_columns(_peel_text(text, prefix_re, rest).get_columns())
    names = [*re.compile(prefix_re).groupindex, rest]
    n = int(mask.sum())
    rows = mask.arg_true()
    peeled = _peel_text(df.filter(mask).select(src)[:, 0], prefix_re, rest) if n else None
    return df.with_columns(
        pl.Series(c, [], pl.String).extend_constant(None, len(mask)).scatter(rows, peeled[c])
        if n
        else pl.lit(None, pl.String).alias(c)
        for c in names
    )


def _peel_text(text: pl.Series, prefix_re: str, rest: str) -> pl.DataFrame:
    r"""The groups of `prefix_re` at the start of each `text`, and the `rest` after it.

    One capture pass over the first 200 characters (captures running to the end of long
    JSON lines cost 10x more). Rows whose head is pure ASCII use the regex in ASCII mode: on
    ASCII text `\d`, `\w`, `\s` match the same characters, and the Unicode classes make
    capturing ~2x slower. Rows with other characters there keep the Unicode regex."""
    src = pl.col("_src")
    df = pl.DataFrame({"_src": text}).with_columns(src.str.slice(0, 200).alias("_head"))
    df = df.with_columns((pl.col("_head").str.len_bytes() == pl.col("_head").str.len_chars()).alias("_ascii"))
    head, is_ascii = pl.col("_head"), pl.col("_ascii")
    pattern = "^(?P<_pre>" + prefix_re + ")"
    n_ascii = int(df["_ascii"].sum())
    n_other = df.height - n_ascii - df["_ascii"].null_count()
    if n_other == 0:
        groups = head.str.extract_groups("(?-u)" + pattern)
    elif n_ascii == 0:
        groups = head.str.extract_groups(pattern)
    else:  # each regex reads only its own rows (the other rows are null)
        groups = (
            pl.when(is_ascii)
            .then(pl.when(is_ascii).then(head).str.extract_groups("(?-u)" + pattern))
            .otherwise(pl.when(~is_ascii).then(head).str.extract_groups(pattern))
        )
    df = df.with_columns(groups.alias("_grp")).unnest("_grp")
    return df.select(
        pl.exclude("_src", "_head", "_ascii", "_pre"),
        src.str.strip_prefix(pl.col("_pre")).alias(rest),  # null where `_pre` is
    )


def _unquote_glog(df: pl.DataFrame) -> tuple[pl.DataFrame, bool]:
    """Newer Triton JSON-quotes glog messages: decode them as JSON strings. Also says
    whether any was."""
    gmsg = pl.col("gmsg")
    if not any_row(df, gmsg.str.starts_with('"')):
        return df, False
    is_quoted = gmsg.str.contains(r'^".*"$')
    if not any_row(df, is_quoted):
        return df, False
    quoted = pl.when(is_quoted).then(pl.concat_str([pl.lit('{"m":'), gmsg, pl.lit("}")]))
    unq = safe_json_decode(df.select(quoted.alias("q"))["q"], pl.Struct({"m": pl.String}))
    return df.with_columns(pl.coalesce(unq.struct.field("m"), gmsg).alias("gmsg")), True


def _banner(df: pl.DataFrame, maybe: bool) -> pl.DataFrame:
    """`body`: the message after the glog prefix (or the whole line), the import banner
    taken out of it and its version into `_version` (looked for if it may be there)."""
    df = df.with_columns(pl.coalesce(pl.col("gmsg"), pl.col("clean")).alias("body"))
    if not (maybe and any_row(df, pl.col("body").str.contains(BANNER_LITERAL, literal=True))):
        return df.with_columns(pl.lit(None, pl.String).alias("_version"))  # the usual case
    df = df.with_columns(pl.col("body").str.extract(BANNER_RE, 1).alias("_version"))
    # The banner is printed by every MPI rank and lands mid-line in others' output:
    # cut it out and parse what remains.
    version, body0 = pl.col("_version"), pl.col("body")
    cut = body0.str.replace_all(BANNER_RE, "").str.strip_chars()
    body = (
        pl.when(version.is_null())
        .then(body0)
        .when(cut == "")
        .then(pl.concat_str([pl.lit("TensorRT-LLM version: "), version]))
        .otherwise(cut)
    )
    return df.with_columns(body.alias("body"))


def _glog_time(df: pl.DataFrame) -> pl.DataFrame:
    """`ts_noyear` from the glog prefix (`I0514 21:01:55.276668`), in year 2000.

    Date and time are parsed apart (the few distinct dates hit polars' parse cache), which
    is faster than one datetime parse but reads a leap second `23:59:60` as null: rows
    left null that way get the one-string parse, which rolls it into the next day."""
    g = pl.col
    date = pl.concat_str([pl.lit("2000-"), g("gmon"), pl.lit("-"), g("gday")])
    parts = date.str.to_date("%Y-%m-%d", strict=False).dt.combine(
        g("gtime").str.to_time("%H:%M:%S%.f", strict=False), time_unit="us"
    )
    df = df.with_columns(parts.alias("ts_noyear"))
    missed = g("ts_noyear").is_null() & g("gtime").is_not_null()
    if not any_row(df, missed):
        return df
    whole = pl.concat_str([date, pl.lit(" "), g("gtime")]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S%.f", time_unit="us", strict=False
    )
    return df.with_columns(pl.coalesce(g("ts_noyear"), pl.when(missed).then(whole)).alias("ts_noyear"))


def _message() -> list[pl.Expr]:
    g = pl.col
    level = pl.coalesce(
        g("clevel").replace_strict(_CPP_LEVEL, default=None, return_dtype=pl.String),
        g("sev").replace_strict(_PY_LEVEL, default=None, return_dtype=pl.String),
        g("gl").replace_strict(_GLOG_LEVEL, default=None, return_dtype=pl.String),
    )
    line_ts = pl.coalesce(
        g("pyts").str.to_datetime("%m/%d/%Y-%H:%M:%S", time_unit="us", strict=False),
        g("cts").str.to_datetime("%m-%d-%Y %H:%M:%S%.f", time_unit="us", strict=False),
    )
    return [
        pl.coalesce("tmsg", "cmsg", "pmsg", "body").alias("msg"),
        level.alias("_level"),
        line_ts.alias("_line_ts"),
        (
            g("gl").is_not_null()
            | g("clevel").is_not_null()
            | g("sev").is_not_null()
            | g("_version").is_not_null()
        ).alias("_prefixed"),
        pl.coalesce(g("crank"), g("mpirank"), g("trank"), g("_mpitag"))
        .cast(pl.Int64, strict=False)
        .alias("_rank"),
    ]
