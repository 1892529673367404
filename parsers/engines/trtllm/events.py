"""TensorRT-LLM event builders: what each kind of record means once `trtllm.py` has peeled
its prefixes (level, time, message). Stats JSON rows, PyTorch `iter =` rows and all other
records are built separately, so each family pays only for its own regexes.

Message patterns and units (see the module docstring of `trtllm.py` for the choices).
"""

from __future__ import annotations

from functools import cache

import polars as pl

from ...base import attrs_column
from .stats import json_stats_columns, pytorch_iter_columns

# line shapes shared with record_starts in trtllm.py
FRAME_RE = r"^\d+\s+0x[0-9a-fA-F]+ "
TABLE_RE = r"^(?:\+[-=+]+\+|\|.*\|)\s*$"
TB_START_RE = r"^Traceback \(most recent call last\):"
PY_EXC_RE = r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)(?::|$)"
HTTP_RE = r'^INFO:\s+\S+:\d+ - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})'
# trtllm-serve runs uvicorn: its start-up and shut-down lines are understood, carry no metric
UVICORN_LIFECYCLE_RE = (
    r"^(?P<level>INFO|WARNING|ERROR):\s+(?:Started server process|Waiting for application"
    r"|Application startup complete|Uvicorn running on|Shutting down|Application shutdown complete"
    r"|Finished server process)"
)

# --- message patterns (capacity and the design-note lines) ------------------------------
# Anchored at the message start; group 1 (and on) are the values. Units: MiB/GiB binary.
CAP = {
    "engine_mib": r"^Loaded engine size: (\d+) MiB",
    "engine_from": r"^Loaded engine from (\S+?),\s*max_batch_size=(\d+)",
    "kv_gib_tokens": r"^\[MemUsageChange\] Allocated ([\d.]+) GiB for max tokens in paged KV cache \((\d+)\)",
    "using_tokens": r"^Using (\d+) tokens in paged KV cache",
    "kv_bytes": r"^Allocate (\d+) bytes for k/v cache",
    "primary": r"^Number of blocks in KV cache primary pool: (\d+)",
    "secondary": r"^Number of blocks in KV cache secondary pool: (\d+)",
    "pages_per_seq": r"^Max KV cache pages per sequence: (\d+)",
    "blocks_per_seq": (
        r"^Max KV cache blocks per sequence: (\d+)(?: \[window size=(\d+)\])?"
        r"(?:, tokens per block=(\d+))?(?:, primary blocks=(\d+))?(?:, secondary blocks=(\d+))?"
    ),
    "tokens_per_block": r"^Number of tokens per block: (\d+)",
    "max_num_seqs": r"^TRTGptModel (?:maxNumSequences|maxBatchSize): (\d+)",
    "max_num_tokens": r"^TRTGptModel maxNumTokens: (\d+)",
    # PyTorch backend start-up summary (py_executor_creator): max_num_requests is the
    # executor's max_batch_size; max_num_tokens may print None
    "executor": r"^max_seq_len=(\d+|None), max_num_requests=(\d+), max_num_tokens=(\d+|None)",
    "mem_calc": r"^Memory usage when calculating max tokens in paged kv cache: total: ([\d.]+) GiB, available: ([\d.]+) GiB",
}
BATCH_RE = r"^Inference batch: (\d+) requests?, total_input_tokens=(\d+), total_output_tokens=(\d+)"
GPU_MEM_FULL_RE = r"^GPU memory usage: ([\d.]+)\s*([KMGT]i?B) / ([\d.]+)\s*([KMGT]i?B), KV cache: ([\d.]+)\s*([KMGT]i?B)"
SRC_LOC_RE = r"\(([^()\s]+\.(?:h|hpp|cpp|cc|cu|cuh)):(\d+)\)"
TRT_ERR_RE = r"\[TensorRT-LLM\]\[ERROR\]|\[TRT-LLM\] \[[EF]\]"


_UNIT = {
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
    "TiB": 2.0**40,
}


def _bytes(num: pl.Expr, unit: pl.Expr) -> pl.Expr:
    """Number + unit (`GB`, `GiB`, `MiB`, ...) -> bytes (decimal for xB, binary for xiB)."""
    mult = unit.replace_strict(_UNIT, default=None, return_dtype=pl.Float64)
    return (num.cast(pl.Float64, strict=False) * mult).round(0).cast(pl.Int64, strict=False)


def _common_attrs() -> dict[str, pl.Expr]:
    return {
        "trtllm_version": pl.col("_version"),
        "logger": pl.col("who"),
        "mpi_rank": pl.col("_rank"),
        "glog_pid": pl.col("gpid").cast(pl.Int64, strict=False),
        "glog_src": pl.col("gsrc"),
    }


_OUT = [
    "line",
    "n_lines",
    "ts",
    "ts_noyear",
    "level",
    "event",
    "request_id",
    "prompt_tokens",
    "output_tokens",
    "running",
    "waiting",
    "batch_size",
    "batch_tokens",
    "kv_usage",
    "kv_blocks_used",
    "kv_blocks_total",
    "max_num_seqs",
    "max_batch_tokens",
    "kv_capacity_tokens",
    "http_status",
    "message",
    "attrs",
]


def _select_out(df: pl.DataFrame) -> pl.DataFrame:
    return df.select([c for c in _OUT if c in df.columns])


def _with_attrs(df: pl.DataFrame, fields: dict[str, pl.Expr]) -> pl.DataFrame:
    """Add `attrs` (base.attrs_column) of the fields."""
    values = df.select(**fields)
    return df.with_columns(attrs_column(values, values.columns))


def stats_events(df: pl.DataFrame) -> pl.DataFrame:
    columns, attrs = _stats_exprs()
    return _select_out(_with_attrs(df.with_columns(columns), attrs))


@cache
def _stats_exprs() -> tuple[list[pl.Expr], dict[str, pl.Expr]]:
    """`stats_events`'s columns and attrs fields, built once per process."""
    cols, attrs = json_stats_columns("_st")
    is_stats = pl.col("_st").is_not_null()
    columns = [
        pl.col("_level").alias("level"),
        # an empty executor array (`[]` before the first request) is a log line
        pl.when(is_stats)
        .then(pl.lit("engine_stats"))
        .otherwise(pl.lit("log"))
        .alias("event"),
        pl.coalesce(cols.pop("ts"), pl.col("_line_ts")).alias("ts"),
        pl.col("msg").alias("message"),
        *(e.alias(name) for name, e in cols.items()),
    ]
    return columns, {**_common_attrs(), **attrs}


def iter_events(df: pl.DataFrame) -> pl.DataFrame:
    """PyTorch-backend `iter = N, ...` lines (split off: a dozen regexes only they need)."""
    cols, attrs = pytorch_iter_columns(pl.col("msg"))
    df = df.with_columns(
        pl.col("_level").alias("level"),
        pl.lit("engine_stats").alias("event"),
        pl.coalesce(cols.pop("ts"), pl.col("_line_ts")).alias("ts"),
        pl.col("msg").alias("message"),
        **cols,
    )
    return _select_out(_with_attrs(df, {**_common_attrs(), **attrs}))


def plain_access(df: pl.DataFrame) -> pl.Series:
    """Which rows are uvicorn access lines (`INFO:     host:port - "GET /p HTTP/1.1" 200 OK`)
    with no prefix, alone in their record and naming no error or request: what
    `other_events` makes of each is then fixed (`access_events`), and the dozens of
    message patterns it tries on every row need not run on them (the executor writes one
    such line per request). The literal head and the prefix columns come first: the
    pattern runs only where they hold."""
    g = pl.col
    head = (
        g("msg").str.starts_with("INFO:")
        & (g("n_lines") == 1)
        & g("_level").is_null()  # no C++, Python or glog level prefix
        & g("gmsg").is_null()
        & g("tmsg").is_null()
        & g("_mpitag").is_null()
        & g("_version").is_null()
    ).fill_null(False)
    rows = df.select(head.alias("h"), g("msg"), g("text"))
    if not rows["h"].any():
        return rows["h"]
    msg, text = g("msg"), g("text")
    plain = (
        msg.str.contains(HTTP_RE)
        & ~text.str.contains(TRT_ERR_RE)
        & ~msg.str.contains("Assertion failed", literal=True)
        & ~msg.str.contains("requestId", literal=True)
    )
    return rows.select(pl.when(g("h")).then(plain).otherwise(False).fill_null(False))[:, 0]


def access_events(df: pl.DataFrame) -> pl.DataFrame:
    """The events of `plain_access` rows: what `other_events` gives them."""
    http = pl.col("msg").str.extract_groups(HTTP_RE)
    df = df.with_columns(http.alias("_http")).with_columns(
        pl.lit("INFO").alias("level"),
        pl.lit("http_access").alias("event"),
        pl.col("_line_ts").alias("ts"),
        pl.col("_http").struct.field("status").cast(pl.Int32, strict=False).alias("http_status"),
        pl.col("msg").alias("message"),
    )
    f = pl.col("_http").struct.field
    return _select_out(_with_attrs(df, {**_common_attrs(), "method": f("method"), "path": f("path")}))


def _cap(name: str, group: int = 1, dtype: pl.DataType = pl.Int64) -> pl.Expr:
    return pl.col("msg").str.extract(CAP[name], group).cast(dtype, strict=False)


def other_events(df: pl.DataFrame) -> pl.DataFrame:
    """Every record that is not stats JSON. Staged: flags, then values, then event kind,
    message and attrs from materialised columns (eager polars re-evaluates repeated
    sub-expressions)."""
    stages, attrs = _other_stages()
    for stage in stages:
        df = df.with_columns(stage)
    return _select_out(_with_attrs(df, attrs))


@cache
def _other_stages() -> tuple[list[list[pl.Expr]], dict[str, pl.Expr]]:
    """`other_events`'s stages and attrs fields, built once per process: building them
    costs about as much as running them on the few rows a chunk usually has."""
    msg, text, clean = pl.col("msg"), pl.col("text"), pl.col("clean")
    stage_rest = [text.str.slice(pl.col("first").str.len_chars()).alias("_rest")]
    rest = pl.col("_rest")
    stage_flags = [
        (
            clean.str.contains(TABLE_RE)
            | ((pl.col("gmsg").str.strip_chars() == "") & rest.str.contains(r"^\n[+|]"))
        ).alias("_table"),
        text.str.contains(TRT_ERR_RE).alias("_trt_err"),
        pl.any_horizontal([msg.str.contains(r) for r in CAP.values()]).alias("_cap"),
        msg.str.extract_groups(BATCH_RE).alias("_batch"),
        msg.str.extract_groups(GPU_MEM_FULL_RE).alias("_mem"),
        msg.str.extract_groups(HTTP_RE).alias("_http"),
        msg.str.extract(UVICORN_LIFECYCLE_RE, 1).alias("_uvicorn_level"),
        # the executor failing one request (e.g. after the CUDA OOM that killed the step)
        pl.coalesce(
            msg.str.extract(r"\brequestId (\d+)", 1),
            # trtllm-serve request logging (NVIDIA/TensorRT-LLM PR #5891, unmerged)
            msg.str.extract(r"^(?:Received request|Response started) (\S+) at \d", 1),
        ).alias("request_id"),
        (clean.str.strip_chars() == "").alias("_blank"),
    ]
    is_error = (
        pl.col("_level").is_in(["ERROR", "CRITICAL"])
        | pl.col("_trt_err")
        | msg.str.contains(r"Assertion failed")
        | msg.str.contains(TB_START_RE)
        | msg.str.contains(PY_EXC_RE)
        | msg.str.starts_with("terminate called after throwing")
        | msg.str.contains(r"^Signal \(\d+\) received")  # Triton dying
        | clean.str.contains(FRAME_RE)
        | (pl.col("_table") & text.str.contains(r"UNAVAILABLE:"))
    )
    stage_error = [is_error.alias("_error")]
    batch, mem, http = (pl.col(c).struct.field for c in ("_batch", "_mem", "_http"))
    event = (
        pl.when(msg.str.starts_with("Encountered error for requestId"))
        .then(pl.lit("request_aborted"))
        .when(
            msg.str.starts_with("Received request ")
            & pl.col("request_id").is_not_null()
        )
        .then(pl.lit("request_arrived"))
        .when(pl.col("_error"))
        .then(pl.lit("error"))
        .when(pl.col("_cap"))
        .then(pl.lit("capacity"))
        .when(batch("1").is_not_null())
        .then(pl.lit("batch"))
        .when(mem("1").is_not_null())
        .then(pl.lit("engine_stats"))
        .when(http("status").is_not_null())
        .then(pl.lit("http_access"))
        .when(
            pl.col("_table") | pl.col("_blank") | pl.col("_prefixed") | pl.col("_uvicorn_level").is_not_null()
        )
        .then(pl.lit("log"))
        .otherwise(pl.lit("unparsed"))
    )
    # kept as text: a count past 2**63 becomes null with a note (domain.py), not a failure
    b_n, b_in, b_out = (batch(k) for k in ("1", "2", "3"))
    b_sum = b_in.cast(pl.Int64, strict=False) + b_out.cast(pl.Int64, strict=False)
    stage_values = [
        event.alias("event"),
        pl.when(pl.col("_level").is_null() & pl.col("_trt_err"))
        .then(pl.lit("ERROR"))
        .otherwise(
            pl.coalesce(
                pl.col("_level"),
                pl.col("_uvicorn_level"),
                pl.when(http("status").is_not_null()).then(pl.lit("INFO")),  # HTTP_RE reads `INFO:`
            )
        )
        .alias("level"),
        pl.col("_line_ts").alias("ts"),
        b_n.alias("batch_size"),
        b_sum.alias("batch_tokens"),
        b_in.alias("prompt_tokens"),
        b_out.alias("output_tokens"),
        pl.coalesce(_cap("primary"), _cap("blocks_per_seq", 4)).alias(
            "kv_blocks_total"
        ),
        pl.coalesce(_cap("max_num_seqs"), _cap("engine_from", 2), _cap("executor", 2)).alias("max_num_seqs"),
        pl.coalesce(_cap("max_num_tokens"), _cap("executor", 3)).alias("max_batch_tokens"),
        pl.coalesce(_cap("kv_gib_tokens", 2), _cap("using_tokens")).alias(
            "kv_capacity_tokens"
        ),
        http("status").cast(pl.Int32, strict=False).alias("http_status"),
    ]
    ev, err = pl.col("event"), pl.col("_error")
    stage_message = [
        pl.when(ev == "unparsed")
        .then(text)
        .when(pl.col("_table"))
        .then(
            (pl.coalesce(pl.col("gmsg"), pl.lit("")) + rest).str.strip_chars_start("\n")
        )
        .when(ev.is_in(["error", "request_aborted"]))
        .then(msg + rest)
        .otherwise(msg)
        .alias("message"),
        text.str.count_matches(r"(?m)^(?:\|[^\n]*\|\s+)?\d+\s+0x[0-9a-fA-F]+ ").alias(
            "_frames"
        ),
    ]
    error_kind = pl.when(err).then(
        pl.when(text.str.contains(r"(?i)out of memory"))
        .then(pl.lit("oom"))
        .when(text.str.contains("Assertion failed"))
        .then(pl.lit("assertion"))
        .when(text.str.contains(r"CUDA runtime error|CUDA error"))
        .then(pl.lit("cuda"))
        .when(text.str.contains(TB_START_RE) | msg.str.contains(PY_EXC_RE))
        .then(pl.lit("exception"))
    )
    kv_gib = _cap("kv_gib_tokens", 1, pl.Float64)
    attrs = dict(
        _common_attrs(),
        error_kind=error_kind,
        src_file=pl.when(err).then(text.str.extract(SRC_LOC_RE, 1)),
        src_line=pl.when(err).then(
            text.str.extract(SRC_LOC_RE, 2).cast(pl.Int64, strict=False)
        ),
        # frames also count inside Triton table cells (`|  |  | 1   0x7f38... |`)
        n_frames=pl.when(err & (pl.col("_frames") > 0)).then(pl.col("_frames")),
        engine_size_bytes=_cap("engine_mib") * 2**20,
        engine_path=msg.str.extract(CAP["engine_from"], 1),
        max_seq_len=_cap("executor", 1),
        kv_cache_bytes=pl.coalesce(
            (kv_gib * 2.0**30).round(0).cast(pl.Int64, strict=False),
            _cap("kv_bytes"),
            _bytes(mem("5"), mem("6")),
        ),
        kv_blocks_secondary=pl.coalesce(_cap("secondary"), _cap("blocks_per_seq", 5)),
        max_blocks_per_seq=pl.coalesce(
            _cap("pages_per_seq"), _cap("blocks_per_seq", 1)
        ),
        attention_window=_cap("blocks_per_seq", 2),
        tokens_per_block=pl.coalesce(
            _cap("tokens_per_block"), _cap("blocks_per_seq", 3)
        ),
        gpu_mem_used_bytes=_bytes(mem("1"), mem("2")),
        gpu_mem_total_bytes=pl.coalesce(
            _bytes(mem("3"), mem("4")),
            (_cap("mem_calc", 1, pl.Float64) * 2.0**30).round(0).cast(pl.Int64, strict=False),
        ),
        gpu_mem_available_bytes=(_cap("mem_calc", 2, pl.Float64) * 2.0**30)
        .round(0)
        .cast(pl.Int64, strict=False),
        method=http("method"),
        path=http("path"),
    )
    return [stage_rest, stage_flags, stage_error, stage_values, stage_message], attrs
