"""TensorRT-LLM parser: C++ runtime `[TensorRT-LLM][LEVEL]` lines, the Python logger
(`[MM/DD/YYYY-HH:MM:SS] [TRT-LLM] [I]`, `[TRT]`, MPI-rank and newest `MM-DD-YYYY ...` forms),
Triton glog wrappers (`I0514 21:01:55.276668 160 file.cc:813] msg`, quoted or not), Triton
status tables, the import banner, numbered C++ backtraces and Python tracebacks, docker /
compose / Open MPI `[1,0]<stdout>:` prefixes, and the iteration statistics in every form
(see `trtllm_stats.py`), into the common schema. This module owns line anatomy (record
starts, prefix peeling, time, level); `trtllm_events.py` says what each record means.

Format reference: shared/formats/trtllm.md. Choices worth knowing:
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

import polars as pl

from .base import ANSI_RE, RFC3339_RE, ParseContext, group_records, rfc3339_to_ts
from .trtllm_events import (
    FRAME_RE,
    PY_EXC_RE,
    TABLE_RE,
    TB_START_RE,
    iter_events,
    other_events,
    stats_events,
)
from .trtllm_stats import (
    PYTORCH_ITER_RE,
    safe_json_decode,
    split_stats,
)

NAME = "trtllm"

# --- line anatomy ----------------------------------------------------------------------
# Prefixes are matched on the first 200 characters only and the message is sliced off by
# length: capture groups running to the end of long JSON lines cost 10x more.
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
DOCKER_TS_RE = r"^(" + RFC3339_RE + r") "
COMPOSE_RE = r"^[A-Za-z0-9][\w.-]*\s+\|\s?(?:\[|[IWEF]\d{4} |\{|\d{4}-\d{2}-\d{2}T)"
GLOG_HEADER_RE = r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?\s+\d+ [\w.+-]+:\d+\]\s*$"
INDENTED_RE = r"^\s{2,}\S"

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
    s = pl.Series("t", lines, dtype=pl.String).str.replace_all(ANSI_RE, "")
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
    status-table rows that follow a glog header or another table row."""
    # a rank's import banner printed into another rank's traceback must not break it
    t = text.str.replace_all(ANSI_RE, "").str.replace_all(BANNER_RE, "")
    df = pl.DataFrame({"t": t}).select(
        pl.col("t").str.contains(FRAME_RE).alias("frame"),
        pl.col("t").str.contains(TABLE_RE).alias("table"),
        pl.col("t").str.contains(GLOG_HEADER_RE).alias("header"),
        pl.col("t").str.contains(TB_START_RE).alias("tb"),
        pl.col("t").str.contains(INDENTED_RE).alias("ind"),
        pl.col("t").str.contains(PY_EXC_RE).alias("exc"),
        (
            pl.col("t").str.contains(r"^\s+what\(\):")
            & pl.col("t").shift(1).str.starts_with("terminate called")
        ).alias("what"),
    )
    # inside a Python traceback: from `Traceback` through the indented lines after it
    in_tb = (
        pl.when(pl.col("tb"))
        .then(True)
        .when(pl.col("ind"))
        .then(None)
        .otherwise(False)
        .forward_fill()
        .fill_null(False)
    )
    cont = df.select(
        (
            pl.col("frame")
            | pl.col("what")
            | (
                pl.col("table")
                & (pl.col("table") | pl.col("header")).shift(1).fill_null(False)
            )
            | (pl.col("ind") & in_tb & ~pl.col("tb"))
            | (pl.col("exc") & (in_tb & pl.col("ind")).shift(1).fill_null(False))
        ).alias("c")
    )["c"]
    return (~cont).alias("starts")


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return lines.select(
            "line", pl.lit("unparsed").alias("event"), pl.col("text").alias("message")
        )
    df = group_records(lines, record_starts(lines["text"]))
    df = _clean(df)
    df = _peel(df, pl.col("clean"), GLOG_PREFIX, "gmsg")

    # Newer Triton JSON-quotes glog messages: decode them as JSON strings.
    quoted = pl.when(pl.col("gmsg").str.contains(r'^".*"$')).then(
        pl.concat_str([pl.lit('{"m":'), pl.col("gmsg"), pl.lit("}")])
    )
    unq = safe_json_decode(
        df.select(quoted.alias("q"))["q"], pl.Struct({"m": pl.String})
    )
    df = df.with_columns(
        pl.coalesce(unq.struct.field("m"), pl.col("gmsg")).alias("gmsg")
    )
    df = _banner(df)
    df = _peel(df, pl.col("body"), CPP_PREFIX, "cmsg")
    df = _peel(df, pl.col("body"), PY_PREFIX, "pmsg")
    df = _peel(df, pl.coalesce("cmsg", "pmsg", "body"), TORCH_TAG_PREFIX, "tmsg")
    df = df.with_columns(_message())

    # Stats JSON: decode every candidate in one vectorised call; one event per element
    # (an executor array shares its line span). Stats rows skip the message regexes.
    stats, other = split_stats(df, "msg")
    is_iter = pl.col("msg").str.contains(PYTORCH_ITER_RE) & ~pl.col("_level").is_in(
        ["ERROR", "CRITICAL"]
    )
    other = other.with_columns(is_iter.alias("_iter"))
    out = pl.concat(
        [
            stats_events(stats),
            iter_events(other.filter(pl.col("_iter"))),
            other_events(other.filter(~pl.col("_iter"))),
        ],
        how="diagonal_relaxed",
    )
    return out.sort("line", maintain_order=True).with_row_index("_seq")


# ---------------------------------------------------------------------------------------
# the expression pipeline


def _clean(df: pl.DataFrame) -> pl.DataFrame:
    """`clean`: the first line without ANSI codes and a docker-compose service prefix (a
    `docker logs --timestamps` RFC 3339 prefix is peeled in `_peel` as it carries the time).
    Staged columns: eager polars re-evaluates an expression at every use."""
    df = df.with_columns(
        pl.col("first")
        .str.replace_all(ANSI_RE, "")
        .str.strip_chars_end("\r")
        .alias("clean")
    )
    raw = pl.col("clean")
    return df.with_columns(
        pl.when(raw.str.contains(COMPOSE_RE))
        .then(raw.str.replace(r"^[A-Za-z0-9][\w.-]*\s+\|\s?", ""))
        .otherwise(raw)
        .alias("clean")
    )


def _peel(df: pl.DataFrame, src: pl.Expr, prefix_re: str, rest: str) -> pl.DataFrame:
    """Match `prefix_re` (named groups) at the start of `src`; add its groups as columns
    and the text after it as column `rest` (null where the prefix is absent)."""
    if rest == "gmsg":  # the first peel also takes a docker timestamp off
        df = df.with_columns(
            src.str.slice(0, 40).str.extract(DOCKER_TS_RE, 1).alias("_docker")
        )
        df = df.with_columns(
            pl.when(pl.col("_docker").is_not_null())
            .then(src.str.slice(pl.col("_docker").str.len_chars() + 1))
            .otherwise(src)
            .alias("clean"),
            rfc3339_to_ts(pl.col("_docker")).alias("_ts_docker"),
        ).drop("_docker")
        src = pl.col("clean")
        # Open MPI `--tag-output`: `[1,0]<stdout>:` (job, rank)
        tag = r"^\[\d+,(\d+)\]<std(?:out|err)>:"
        df = df.with_columns(src.str.slice(0, 30).str.extract(tag, 1).alias("_mpitag"))
        df = df.with_columns(
            pl.when(pl.col("_mpitag").is_not_null())
            .then(src.str.replace(tag, ""))
            .otherwise(src)
            .alias("clean")
        )
    df = df.with_columns(
        src.str.slice(0, 200).str.extract("^(" + prefix_re + ")", 1).alias("_pre")
    )
    return (
        df.with_columns(
            pl.col("_pre").str.extract_groups("^" + prefix_re).alias("_grp"),
            pl.when(pl.col("_pre").is_not_null())
            .then(src.str.slice(pl.col("_pre").str.len_chars()))
            .alias(rest),
        )
        .unnest("_grp")
        .drop("_pre")
    )


def _banner(df: pl.DataFrame) -> pl.DataFrame:
    df = df.with_columns(
        pl.coalesce(pl.col("gmsg"), pl.col("clean")).alias("body"),
    ).with_columns(pl.col("body").str.extract(BANNER_RE, 1).alias("_version"))
    if (
        df["_version"].null_count() == df.height
    ):  # column-level shortcut, the usual case
        return df
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


def _message() -> list[pl.Expr]:
    g = pl.col
    level = pl.coalesce(
        g("clevel").replace_strict(_CPP_LEVEL, default=None, return_dtype=pl.String),
        g("sev").replace_strict(_PY_LEVEL, default=None, return_dtype=pl.String),
        g("gl").replace_strict(_GLOG_LEVEL, default=None, return_dtype=pl.String),
    )
    noyear = pl.concat_str(
        [pl.lit("2000-"), g("gmon"), pl.lit("-"), g("gday"), pl.lit(" "), g("gtime")]
    ).str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="us", strict=False)
    line_ts = pl.coalesce(
        g("pyts").str.to_datetime("%m/%d/%Y-%H:%M:%S", time_unit="us", strict=False),
        g("cts").str.to_datetime("%m-%d-%Y %H:%M:%S%.f", time_unit="us", strict=False),
        g("_ts_docker").dt.replace_time_zone(None),
    )
    return [
        pl.coalesce("tmsg", "cmsg", "pmsg", "body").alias("msg"),
        level.alias("_level"),
        noyear.alias("ts_noyear"),
        line_ts.alias("_line_ts"),
        (
            g("gl").is_not_null()
            | g("clevel").is_not_null()
            | g("sev").is_not_null()
            | g("_version").is_not_null()
        ).alias("_prefixed"),
        pl.coalesce(g("crank"), g("mpirank"), g("trank"), g("_mpitag"))
        .cast(pl.Int64)
        .alias("_rank"),
    ]
