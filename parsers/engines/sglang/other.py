"""What SGLang's other records say: the lines that are neither scheduler stats, capacity,
retractions, PD transfer failures, request logs nor access lines (see sglang.py). Errors
(fatal scheduler messages, tracebacks, exception lines, the watchdog), uvicorn's other lines,
glog lines of C++ libraries, Python warnings and libraries' own logging, start-up progress
bars and memory, plain log lines, and unparsed lines."""

from __future__ import annotations

import polars as pl

from . import fields as F

_LEVEL = "DEBUG|INFO|WARNING|ERROR|CRITICAL"


def other_columns(sub: pl.DataFrame) -> tuple[dict[str, pl.Expr], dict[str, pl.Expr]]:
    """Every other record: errors (fatal scheduler messages, tracebacks, exception lines),
    uvicorn's other lines, start-up progress bars, plain log lines, and unparsed lines."""
    m, hdr = pl.col("m"), pl.col("_hdr")
    sub_exc = m.str.extract_groups(F.EXCEPTION)
    exc_type = pl.coalesce(pl.col("_xt"), sub_exc.struct.field("exc"))
    exc_msg = pl.coalesce(pl.col("_xm"), sub_exc.struct.field("excmsg"))
    # (behind SGLang's `[date time] ` prefix too: the tokenizer process's uvicorn warnings)
    is_uv = m.str.contains(F.UVICORN_OTHER)
    progress = ~hdr & m.str.contains(F.PROGRESS)
    # a library's own Python logging in the same stream (`%(asctime)s - %(levelname)s -
    # %(name)s: `, flashinfer's JIT): `2025-03-27 21:33:31,320 - INFO - flashinfer.jit: ...`
    library = pl.when(~hdr).then(m.str.extract(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - (" + _LEVEL + r") - [\w.]+: ", 1))
    # Python's warnings module: `/path/scheduler.py:1326: UserWarning: message`
    warning = pl.when(~hdr).then(m.str.extract(r"^\S+\.py:\d+: (\w*Warning): ", 1))
    # newer builds: `[time] INFO server_args.py:1565: message` (level and source location)
    located = pl.when(hdr).then(m.str.extract(r"^(" + _LEVEL + r") [\w.-]+\.py:\d+: ", 1))
    glog = pl.when(~hdr).then(m.str.extract(F.GLOG, 1)).replace_strict(
        {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}, default=None, return_dtype=pl.String)
    error = (
        F.IS_FATAL
        | pl.col("has_tb")
        | pl.col("plevel").is_in(["ERROR", "CRITICAL"]).fill_null(False)
        | glog.is_in(["ERROR", "CRITICAL"]).fill_null(False)
        | located.is_in(["ERROR", "CRITICAL"]).fill_null(False)
        | library.is_in(["ERROR", "CRITICAL"]).fill_null(False)
        | (~is_uv & sub_exc.struct.field("exc").is_not_null())
    )
    kind = (
        pl.when(error).then(pl.lit("error"))
        .when(hdr | is_uv | progress | glog.is_not_null() | warning.is_not_null() | library.is_not_null()).then(pl.lit("log"))
        .otherwise(pl.lit("unparsed"))
    )
    # the scheduler refuses a prompt longer than the context (`--allow-auto-truncate` off)
    too_long = pl.when(hdr).then(m).str.extract_groups(
        r"^Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)")
    start_up = pl.when(hdr)
    cols = {
        "event": kind,
        "level": pl.coalesce(
            pl.col("plevel"),
            pl.when(is_uv).then(m.str.extract(r"^(" + _LEVEL + r"):", 1)),
            glog,
            located,
            library,
            pl.when(warning.is_not_null()).then(pl.lit("WARNING")),
            pl.when(error).then(pl.lit("ERROR")),
        ),
        "prompt_tokens": too_long.struct.field("1").cast(pl.Int64, strict=False),
        # the tokenizer manager: output for a request whose state is gone (its client left)
        "request_id": pl.when(hdr).then(m.str.extract(r"^Received output for rid='([^']+)'", 1)),
    }
    extra = {
        "exc_type": pl.when(error).then(exc_type),
        "exc_message": pl.when(error).then(exc_msg),
        "uvicorn": pl.when(is_uv).then(True),
        "progress": pl.when(progress).then(True),
        "max_input_tokens": too_long.struct.field("2").cast(pl.Int64, strict=False),
        "warning_category": warning,
        # a PD decode worker that lost its prefill instance: `Losing connection with prefill
        # instance (bootstrap_addr: host:8998), affected 581 requests`
        "watchdog_timeout_s": pl.when(hdr).then(m.str.extract(r"^Watchdog timeout \(self\.watchdog_timeout=([\d.]+)\)", 1).cast(pl.Float64, strict=False)),
        "affected_reqs": pl.when(hdr).then(m.str.extract(r"\baffected (\d+) requests\b", 1).cast(pl.Int64, strict=False)),
        "bootstrap_addr": pl.when(hdr).then(m.str.extract(r"\(bootstrap_addr: ([^)\s]+)\)", 1)),
        # a PD transfer worker's unexpected error (disaggregation/*/conn.py, with the
        # traceback): the room is the request's bootstrap room
        "bootstrap_room": m.str.extract(r"^Unexpected transfer worker error for room (\d+)", 1).cast(pl.Int64, strict=False),
        # start-up memory: `Load weight begin. avail mem=77.18 GB`, `Memory pool end. avail
        # mem=11.87 GB`, `Capture cuda graph end. Time elapsed: 11.35 s. mem usage=1.04 GB. ...`
        "avail_mem_gb": start_up.then(m.str.extract(r"\bavail mem=([\d.]+) ?GB", 1).cast(pl.Float64, strict=False)),
        "mem_usage_gb": start_up.then(m.str.extract(r"\bmem usage=([\d.]+) ?GB", 1).cast(pl.Float64, strict=False)),
        "elapsed_s": start_up.then(m.str.extract(r"\bTime elapsed: ([\d.]+) ?s\b", 1).cast(pl.Float64, strict=False)),
    }
    return cols, extra
