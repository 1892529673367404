"""Ground truth: what really happened in the simulation, as Parquet beside the logs.

`truth_requests.parquet`: one row per request, times as UTC timestamps (ns) and the derived
latencies in seconds, computed from integer nanoseconds so they agree exactly with what the
logs print. `truth_state.parquet`: the server state in force from `ts` until the next row of
the same instance (every engine iteration, or a grid when asked).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .lines import ts_expr

NS = 1_000_000_000


def to_ns(start_ns: int, t: np.ndarray) -> pl.Series:
    """Seconds from the start (NaN = never) -> epoch ns, null where NaN."""
    out = pl.Series(np.round(np.nan_to_num(t) * NS).astype(np.int64) + start_ns)
    return out.set(pl.Series(np.isnan(t)), None) if np.isnan(t).any() else out


def request_frame(
    instance: str, ids: list[str], start_ns: int, arrival, qstart, res, prompt, max_tokens, target
) -> pl.DataFrame:
    """Per-request integer-ns times of one instance (the writers' input, too)."""
    status = np.where(res.failed, "error", np.where(np.isnan(res.finish), "unfinished", "ok"))
    reason = np.where(
        status == "ok", np.where(res.generated >= max_tokens, "length", "stop"), None
    )
    return pl.DataFrame(
        {
            "instance": pl.Series([instance] * len(ids), dtype=pl.String),
            "request_id": pl.Series(ids, dtype=pl.String),
            "arrival_ns": to_ns(start_ns, arrival),
            "queue_start_ns": to_ns(start_ns, qstart),
            "start_ns": to_ns(start_ns, res.start),
            "first_token_ns": to_ns(start_ns, res.first_token),
            "finish_ns": to_ns(start_ns, res.finish),
            "prompt_tokens": pl.Series(prompt, dtype=pl.Int64),
            "output_tokens": pl.Series(res.generated, dtype=pl.Int64),
            "max_tokens": pl.Series(max_tokens, dtype=pl.Int64),
            "target_tokens": pl.Series(target, dtype=pl.Int64),
            "status": pl.Series(status, dtype=pl.String),
            # a list, not the object array: polars cannot cast one whose first value is None
            "finish_reason": pl.Series(reason.tolist(), dtype=pl.String),
            "preemptions": pl.Series(res.preemptions, dtype=pl.Int64),
        }
    )


def truth_requests(req: pl.DataFrame) -> pl.DataFrame:
    s = lambda a, b: (pl.col(a) - pl.col(b)) / NS  # noqa: E731
    ok_tail = (pl.col("output_tokens") > 1) & pl.col("first_token_ns").is_not_null()
    return req.select(
        "instance",
        "request_id",
        ts_expr(pl.col("arrival_ns")).alias("arrival_ts"),
        ts_expr(pl.col("queue_start_ns")).alias("queue_start"),
        ts_expr(pl.col("start_ns")).alias("start_ts"),
        ts_expr(pl.col("first_token_ns")).alias("first_token_ts"),
        ts_expr(pl.col("finish_ns")).alias("finish_ts"),
        "prompt_tokens",
        "output_tokens",
        "max_tokens",
        "status",
        "finish_reason",
        "preemptions",
        s("finish_ns", "arrival_ns").alias("e2e_s"),
        s("queue_start_ns", "arrival_ns").alias("validation_s"),
        s("start_ns", "queue_start_ns").alias("queue_s"),
        s("first_token_ns", "arrival_ns").alias("ttft_s"),
        pl.when(ok_tail)
        .then((pl.col("finish_ns") - pl.col("first_token_ns")) / (pl.col("output_tokens") - 1) / NS)
        .alias("tpot_s"),
        s("finish_ns", "start_ns").alias("inference_s"),
    ).sort("arrival_ts", "instance")


def state_frame(instance: str, start_ns: int, res, total_blocks: int, grid_s: float | None) -> pl.DataFrame:
    df = pl.DataFrame(
        {
            "t": res.st_ts,
            "running": res.st_running,
            "waiting": res.st_waiting,
            "kv_blocks_used": res.st_blocks,
            "preemptions_cum": res.st_preempt_cum,
            "iteration": res.st_iter,
            "prefill_requests": res.st_ctx_reqs,
            "prefill_tokens": res.st_ctx_tokens,
        }
    )
    if grid_s:
        end = float(res.st_ts[-1]) if len(res.st_ts) else 0.0
        grid = pl.DataFrame({"t": np.arange(0.0, end + grid_s, grid_s)})
        df = grid.join_asof(df.drop("iteration", "prefill_requests", "prefill_tokens"), on="t")
    return df.select(
        ts_expr(pl.lit(start_ns, pl.Int64) + (pl.col("t") * NS).round().cast(pl.Int64)).alias("ts"),
        pl.lit(instance, pl.String).alias("instance"),
        pl.exclude("t"),
        (pl.col("kv_blocks_used") / total_blocks).alias("kv_usage"),
        pl.lit(total_blocks, pl.Int64).alias("kv_blocks_total"),
    )
