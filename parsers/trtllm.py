"""TensorRT-LLM parser: C++ runtime `[TensorRT-LLM][LEVEL]` lines, the Python logger
(`[MM/DD/YYYY-HH:MM:SS] [TRT-LLM] [I]`, `[TRT]`, MPI-rank and newest `MM-DD-YYYY ...` forms),
Triton glog wrappers (`I0514 21:01:55.276668 160 file.cc:813] msg`, quoted or not), Triton
status tables, the import banner, numbered C++ backtraces and Python tracebacks, and the
iteration statistics in every form (see `trtllm_stats.py`), into the common schema.

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
from .trtllm_stats import (
    PYTORCH_ITER_RE,
    STATS_DTYPE,
    with_attrs,
    json_list_text,
    json_stats_columns,
    pytorch_iter_columns,
    safe_json_decode,
)

NAME = "trtllm"

# --- line anatomy ----------------------------------------------------------------------
# Prefixes are matched on the first 200 characters only and the message is sliced off by
# length: capture groups running to the end of long JSON lines cost 10x more.
GLOG_PREFIX = (
    r"(?P<gl>[IWEF])(?P<gmon>\d{2})(?P<gday>\d{2}) (?P<gtime>\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)"
    r"\s+(?P<gpid>\d+) (?P<gsrc>[\w.+-]+:\d+)\] ?"
)
CPP_PREFIX = (
    r"\[TensorRT-LLM\]\[(?P<clevel>TRACE|DEBUG|INFO|WARNING|ERROR)\](?:\[(?P<crank>\d+)\])? ?"
)
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
FRAME_RE = r"^\d+\s+0x[0-9a-fA-F]+ "
TABLE_RE = r"^(?:\+[-=+]+\+|\|.*\|)\s*$"
GLOG_HEADER_RE = r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?\s+\d+ [\w.+-]+:\d+\]\s*$"
TB_START_RE = r"^Traceback \(most recent call last\):"
INDENTED_RE = r"^\s{2,}\S"
PY_EXC_RE = r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)(?::|$)"
HTTP_RE = r'^INFO:\s+\S+:\d+ - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})'

_CPP_LEVEL = {"TRACE": "DEBUG", "DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARNING", "ERROR": "ERROR"}
_PY_LEVEL = {"F": "CRITICAL", "E": "ERROR", "W": "WARNING", "I": "INFO", "V": "DEBUG", "D": "DEBUG"}
_GLOG_LEVEL = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}

# --- message patterns (capacity and the design-note lines) ------------------------------
_N = r"(\d+)"
_X = r"([\d.]+)"
CAP = {
    "engine_mib": r"^Loaded engine size: " + _N + " MiB",
    "engine_from": r"^Loaded engine from (\S+?),\s*max_batch_size=" + _N,
    "kv_gib_tokens": r"^\[MemUsageChange\] Allocated " + _X + r" GiB for max tokens in paged KV cache \(" + _N + r"\)",
    "using_tokens": r"^Using " + _N + " tokens in paged KV cache",
    "kv_bytes": r"^Allocate " + _N + " bytes for k/v cache",
    "primary": r"^Number of blocks in KV cache primary pool: " + _N,
    "secondary": r"^Number of blocks in KV cache secondary pool: " + _N,
    "pages_per_seq": r"^Max KV cache pages per sequence: " + _N,
    "blocks_per_seq": (
        r"^Max KV cache blocks per sequence: " + _N + r"(?: \[window size=(\d+)\])?"
        r"(?:, tokens per block=(\d+))?(?:, primary blocks=(\d+))?(?:, secondary blocks=(\d+))?"
    ),
    "tokens_per_block": r"^Number of tokens per block: " + _N,
    "max_num_seqs": r"^TRTGptModel (?:maxNumSequences|maxBatchSize): " + _N,
    "max_num_tokens": r"^TRTGptModel maxNumTokens: " + _N,
    "mem_calc": r"^Memory usage when calculating max tokens in paged kv cache: total: " + _X + r" GiB, available: " + _X + " GiB",
}
BATCH_RE = r"^Inference batch: (\d+) requests?, total_input_tokens=(\d+), total_output_tokens=(\d+)"
GPU_MEM_FULL_RE = r"^GPU memory usage: ([\d.]+)\s*([KMGT]i?B) / ([\d.]+)\s*([KMGT]i?B), KV cache: ([\d.]+)\s*([KMGT]i?B)"
SRC_LOC_RE = r"\(([^()\s]+\.(?:h|hpp|cpp|cc|cu|cuh)):(\d+)\)"


def _bytes(num: pl.Expr, unit: pl.Expr) -> pl.Expr:
    """Number + unit (`GB`, `GiB`, `MiB`, ...) -> bytes (decimal for xB, binary for xiB)."""
    mult = (
        pl.when(unit == "KB").then(1e3).when(unit == "MB").then(1e6)
        .when(unit == "GB").then(1e9).when(unit == "TB").then(1e12)
        .when(unit == "KiB").then(2.0**10).when(unit == "MiB").then(2.0**20)
        .when(unit == "GiB").then(2.0**30).when(unit == "TiB").then(2.0**40)
    )
    return (num.cast(pl.Float64, strict=False) * mult).round(0).cast(pl.Int64)


# ---------------------------------------------------------------------------------------
# contract


def detect(lines: list[str]) -> float:
    """High for TensorRT-LLM / Triton-tensorrtllm / stats-JSON lines, ~0 otherwise."""
    if not lines:
        return 0.0
    s = pl.Series("t", lines, dtype=pl.String).str.replace_all(ANSI_RE, "")
    strong = (
        s.str.contains(r"\[TensorRT-LLM\]|\[TRT-LLM\]")
        | s.str.contains(r'"(?:Active Request Count|Iteration Counter|iterLatencyMS|numActiveRequests)"')
        | (s.str.contains(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}") & s.str.contains(r"(?i)tensorrt_?llm"))
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
        pl.when(pl.col("tb")).then(True).when(pl.col("ind")).then(None).otherwise(False)
        .forward_fill().fill_null(False)
    )
    cont = df.select(
        (
            pl.col("frame")
            | pl.col("what")
            | (pl.col("table") & (pl.col("table") | pl.col("header")).shift(1).fill_null(False))
            | (pl.col("ind") & in_tb & ~pl.col("tb"))
            | (pl.col("exc") & (in_tb & pl.col("ind")).shift(1).fill_null(False))
        ).alias("c")
    )["c"]
    return (~cont).alias("starts")


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return lines.select("line", pl.lit("unparsed").alias("event"), pl.col("text").alias("message"))
    df = group_records(lines, record_starts(lines["text"]))
    df = df.with_columns(_clean(pl.col("first")).alias("clean"))
    df = _peel(df, pl.col("clean"), GLOG_PREFIX, "gmsg")

    # Newer Triton JSON-quotes glog messages: decode them as JSON strings.
    quoted = pl.when(pl.col("gmsg").str.contains(r'^".*"$')).then(
        pl.concat_str([pl.lit('{"m":'), pl.col("gmsg"), pl.lit("}")])
    )
    unq = safe_json_decode(df.select(quoted.alias("q"))["q"], pl.Struct({"m": pl.String}))
    df = df.with_columns(pl.coalesce(unq.struct.field("m"), pl.col("gmsg")).alias("gmsg"))
    df = df.with_columns(_banner())
    df = _peel(df, pl.col("body"), CPP_PREFIX, "cmsg")
    df = _peel(df, pl.col("body"), PY_PREFIX, "pmsg")
    df = _peel(df, pl.coalesce("cmsg", "pmsg", "body"), TORCH_TAG_PREFIX, "tmsg")
    df = df.with_columns(_message())

    # Stats JSON: decode every candidate in one vectorised call; one event per element
    # (an executor array shares its line span). Stats rows skip the message regexes.
    decoded = safe_json_decode(df.select(json_list_text(pl.col("msg")).alias("j"))["j"], STATS_DTYPE)
    df = df.with_columns(decoded.alias("_st"), decoded.list.len().alias("_st_n"))
    stats = df.filter(pl.col("_st_n").is_not_null()).explode("_st", empty_as_null=True)
    other = df.filter(pl.col("_st_n").is_null())
    is_iter = pl.col("msg").str.contains(PYTORCH_ITER_RE) & ~pl.col("_level").is_in(["ERROR", "CRITICAL"])
    other = other.with_columns(is_iter.alias("_iter"))
    out = pl.concat(
        [
            _stats_events(stats),
            _iter_events(other.filter(pl.col("_iter"))),
            _other_events(other.filter(~pl.col("_iter"))),
        ],
        how="diagonal_relaxed",
    )
    return out.sort("line", maintain_order=True).with_row_index("_seq")


# ---------------------------------------------------------------------------------------
# the expression pipeline


def _clean(raw: pl.Expr) -> pl.Expr:
    """ANSI codes and a docker-compose service prefix off (a `docker logs --timestamps`
    RFC 3339 prefix is peeled in `_peel` as it carries the time)."""
    raw = raw.str.replace_all(ANSI_RE, "").str.strip_chars_end("\r")
    return pl.when(raw.str.contains(COMPOSE_RE)).then(
        raw.str.replace(r"^[A-Za-z0-9][\w.-]*\s+\|\s?", "")
    ).otherwise(raw)


def _peel(df: pl.DataFrame, src: pl.Expr, prefix_re: str, rest: str) -> pl.DataFrame:
    """Match `prefix_re` (named groups) at the start of `src`; add its groups as columns
    and the text after it as column `rest` (null where the prefix is absent)."""
    if rest == "gmsg":  # the first peel also takes a docker timestamp off
        df = df.with_columns(src.str.slice(0, 40).str.extract(DOCKER_TS_RE, 1).alias("_docker"))
        df = df.with_columns(
            pl.when(pl.col("_docker").is_not_null())
            .then(src.str.slice(pl.col("_docker").str.len_chars() + 1))
            .otherwise(src).alias("clean"),
            rfc3339_to_ts(pl.col("_docker")).alias("_ts_docker"),
        ).drop("_docker")
        src = pl.col("clean")
    df = df.with_columns(src.str.slice(0, 200).str.extract("^(" + prefix_re + ")", 1).alias("_pre"))
    return df.with_columns(
        pl.col("_pre").str.extract_groups("^" + prefix_re).alias("_grp"),
        pl.when(pl.col("_pre").is_not_null())
        .then(src.str.slice(pl.col("_pre").str.len_chars()))
        .alias(rest),
    ).unnest("_grp").drop("_pre")


def _banner() -> list[pl.Expr]:
    body0 = pl.coalesce(pl.col("gmsg"), pl.col("clean"))
    version = body0.str.extract(BANNER_RE, 1)
    # The banner is printed by every MPI rank and lands mid-line in others' output:
    # cut it out and parse what remains.
    cut = body0.str.replace_all(BANNER_RE, "").str.strip_chars()
    body = (
        pl.when(version.is_null()).then(body0)
        .when(cut == "").then(pl.concat_str([pl.lit("TensorRT-LLM version: "), version]))
        .otherwise(cut)
    )
    return [body.alias("body"), version.alias("_version")]


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
            g("gl").is_not_null() | g("clevel").is_not_null()
            | g("sev").is_not_null() | g("_version").is_not_null()
        ).alias("_prefixed"),
        pl.coalesce(g("crank"), g("mpirank"), g("trank")).cast(pl.Int64).alias("_rank"),
    ]


def _common_attrs() -> dict[str, pl.Expr]:
    return dict(
        trtllm_version=pl.col("_version"),
        logger=pl.col("who"),
        mpi_rank=pl.col("_rank"),
        glog_pid=pl.col("gpid").cast(pl.Int64, strict=False),
        glog_src=pl.col("gsrc"),
    )


_OUT = [
    "line", "n_lines", "ts", "ts_noyear", "level", "event", "prompt_tokens", "output_tokens",
    "running", "waiting", "batch_size", "batch_tokens", "kv_usage", "kv_blocks_used",
    "kv_blocks_total", "max_num_seqs", "max_batch_tokens", "kv_capacity_tokens",
    "http_status", "message", "attrs",
]


def _select_out(df: pl.DataFrame) -> pl.DataFrame:
    return df.select([c for c in _OUT if c in df.columns])


def _stats_events(df: pl.DataFrame) -> pl.DataFrame:
    cols, attrs = json_stats_columns("_st")
    is_stats = pl.col("_st").is_not_null()
    df = df.with_columns(
        pl.col("_level").alias("level"),
        # an empty executor array (`[]` before the first request) is a log line
        pl.when(is_stats).then(pl.lit("engine_stats")).otherwise(pl.lit("log")).alias("event"),
        pl.coalesce(cols.pop("ts"), pl.col("_line_ts")).alias("ts"),
        pl.col("msg").alias("message"),
        **cols,
    )
    return _select_out(with_attrs(df, {**_common_attrs(), **attrs}))


def _iter_events(df: pl.DataFrame) -> pl.DataFrame:
    """PyTorch-backend `iter = N, ...` lines (split off: a dozen regexes only they need)."""
    cols, attrs = pytorch_iter_columns(pl.col("msg"))
    df = df.with_columns(
        pl.col("_level").alias("level"),
        pl.lit("engine_stats").alias("event"),
        pl.coalesce(cols.pop("ts"), pl.col("_line_ts")).alias("ts"),
        pl.col("msg").alias("message"),
        **cols,
    )
    return _select_out(with_attrs(df, {**_common_attrs(), **attrs}))


def _cap(name: str, group: int = 1, dtype: pl.DataType = pl.Int64) -> pl.Expr:
    return pl.col("msg").str.extract(CAP[name], group).cast(dtype, strict=False)


def _other_events(df: pl.DataFrame) -> pl.DataFrame:
    """Every record that is not stats JSON. Staged: flags, then values, then event kind,
    message and attrs from materialised columns (eager polars re-evaluates repeated
    sub-expressions)."""
    msg, text, clean = pl.col("msg"), pl.col("text"), pl.col("clean")
    df = df.with_columns(text.str.slice(pl.col("first").str.len_chars()).alias("_rest"))
    rest = pl.col("_rest")
    df = df.with_columns(
        (
            clean.str.contains(TABLE_RE)
            | ((pl.col("gmsg").str.strip_chars() == "") & rest.str.contains(r"^\n[+|]"))
        ).alias("_table"),
        text.str.contains(r"\[TensorRT-LLM\]\[ERROR\]|\[TRT-LLM\] \[[EF]\]").alias("_trt_err"),
        pl.any_horizontal([msg.str.contains(r) for r in CAP.values()]).alias("_cap"),
        msg.str.extract_groups(BATCH_RE).alias("_batch"),
        msg.str.extract_groups(GPU_MEM_FULL_RE).alias("_mem"),
        msg.str.extract_groups(HTTP_RE).alias("_http"),
        (clean.str.strip_chars() == "").alias("_blank"),
    )
    is_error = (
        pl.col("_level").is_in(["ERROR", "CRITICAL"])
        | pl.col("_trt_err")
        | msg.str.contains(r"Assertion failed")
        | msg.str.contains(TB_START_RE)
        | msg.str.contains(PY_EXC_RE)
        | msg.str.starts_with("terminate called after throwing")
        | clean.str.contains(FRAME_RE)
        | (pl.col("_table") & text.str.contains(r"UNAVAILABLE:"))
    )
    df = df.with_columns(is_error.alias("_error"))
    batch, mem, http = (pl.col(c).struct.field for c in ("_batch", "_mem", "_http"))
    event = (
        pl.when(pl.col("_error")).then(pl.lit("error"))
        .when(pl.col("_cap")).then(pl.lit("capacity"))
        .when(batch("1").is_not_null()).then(pl.lit("batch"))
        .when(mem("1").is_not_null()).then(pl.lit("engine_stats"))
        .when(http("status").is_not_null()).then(pl.lit("http_access"))
        .when(pl.col("_table") | pl.col("_blank") | pl.col("_prefixed")).then(pl.lit("log"))
        .otherwise(pl.lit("unparsed"))
    )
    b_n, b_in, b_out = (batch(k).cast(pl.Int64) for k in ("1", "2", "3"))
    df = df.with_columns(
        event.alias("event"),
        pl.when(pl.col("_level").is_null() & pl.col("_trt_err")).then(pl.lit("ERROR"))
        .otherwise(pl.col("_level")).alias("level"),
        pl.col("_line_ts").alias("ts"),
        b_n.alias("batch_size"),
        (b_in + b_out).alias("batch_tokens"),
        b_in.alias("prompt_tokens"),
        b_out.alias("output_tokens"),
        pl.coalesce(_cap("primary"), _cap("blocks_per_seq", 4)).alias("kv_blocks_total"),
        pl.coalesce(_cap("max_num_seqs"), _cap("engine_from", 2)).alias("max_num_seqs"),
        _cap("max_num_tokens").alias("max_batch_tokens"),
        pl.coalesce(_cap("kv_gib_tokens", 2), _cap("using_tokens")).alias("kv_capacity_tokens"),
        http("status").cast(pl.Int32).alias("http_status"),
    )
    ev, err = pl.col("event"), pl.col("_error")
    df = df.with_columns(
        pl.when(ev == "unparsed").then(text)
        .when(pl.col("_table")).then((pl.coalesce(pl.col("gmsg"), pl.lit("")) + rest).str.strip_chars_start("\n"))
        .when(ev == "error").then(msg + rest)
        .otherwise(msg)
        .alias("message"),
        text.str.count_matches(r"(?m)^(?:\|[^\n]*\|\s+)?\d+\s+0x[0-9a-fA-F]+ ").alias("_frames"),
    )
    error_kind = pl.when(err).then(
        pl.when(text.str.contains(r"(?i)out of memory")).then(pl.lit("oom"))
        .when(text.str.contains("Assertion failed")).then(pl.lit("assertion"))
        .when(text.str.contains(r"CUDA runtime error|CUDA error")).then(pl.lit("cuda"))
        .when(text.str.contains(TB_START_RE) | msg.str.contains(PY_EXC_RE)).then(pl.lit("exception"))
    )
    kv_gib = _cap("kv_gib_tokens", 1, pl.Float64)
    attrs = dict(
        _common_attrs(),
        error_kind=error_kind,
        src_file=pl.when(err).then(text.str.extract(SRC_LOC_RE, 1)),
        src_line=pl.when(err).then(text.str.extract(SRC_LOC_RE, 2).cast(pl.Int64, strict=False)),
        # frames also count inside Triton table cells (`|  |  | 1   0x7f38... |`)
        n_frames=pl.when(err & (pl.col("_frames") > 0)).then(pl.col("_frames")),
        engine_size_bytes=_cap("engine_mib") * 2**20,
        engine_path=msg.str.extract(CAP["engine_from"], 1),
        kv_cache_bytes=pl.coalesce(
            (kv_gib * 2.0**30).round(0).cast(pl.Int64), _cap("kv_bytes"), _bytes(mem("5"), mem("6"))
        ),
        kv_blocks_secondary=pl.coalesce(_cap("secondary"), _cap("blocks_per_seq", 5)),
        max_blocks_per_seq=pl.coalesce(_cap("pages_per_seq"), _cap("blocks_per_seq", 1)),
        attention_window=_cap("blocks_per_seq", 2),
        tokens_per_block=pl.coalesce(_cap("tokens_per_block"), _cap("blocks_per_seq", 3)),
        gpu_mem_used_bytes=_bytes(mem("1"), mem("2")),
        gpu_mem_total_bytes=pl.coalesce(
            _bytes(mem("3"), mem("4")),
            (_cap("mem_calc", 1, pl.Float64) * 2.0**30).round(0).cast(pl.Int64),
        ),
        gpu_mem_available_bytes=(_cap("mem_calc", 2, pl.Float64) * 2.0**30).round(0).cast(pl.Int64),
        method=http("method"),
        path=http("path"),
    )
    return _select_out(with_attrs(df, attrs))
