"""Placing llama.cpp's relative times on the wall clock.

Since 2026-05 (#23021) llama-server prefixes lines with `M.SS.mmm.uuu`: minutes, seconds,
milliseconds and microseconds since the process started (`--log-timestamps` before that).
There is no date anywhere, so each process run (the value starts again near 0 at a restart)
needs an anchor, the wall-clock time of its relative 0. In order of trust:

1. `wrapper`: a time the line's wrapper gave (journald, docker, CRI), as the `wrapper_ts`
   column of the lines frame (the decoding stage supplies it);
2. `absolute`: an absolute time on another line of the same run (2024 records carry unix
   seconds; a later absolute time anchors the lines before it too);
3. `mtime`: the file's modification time is when its last line was written, so it anchors the
   run that ends the chunk (exact for a file read in one chunk; a file longer than one
   ingest block is anchored per chunk, see docs);
4. `restart`: a run before a restart, with no anchor of its own, ends where the next run
   starts.

The anchor used is reported per event (`ts_anchor` in attrs) with the relative time itself
(`rel_s`), so a user can always see how a time was made. Without any anchor `ts` stays null.
"""

from __future__ import annotations

import datetime as dt

import polars as pl

REL_RE = r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) "
_TS = pl.Datetime("us", "UTC")


def rel_us(groups: pl.Expr) -> pl.Expr:
    """The struct of REL_RE's four groups -> microseconds since process start."""
    f = lambda i: groups.struct.field(str(i)).cast(pl.Int64)  # noqa: E731
    return ((f(1) * 60 + f(2)) * 1000 + f(3)) * 1000 + f(4)


def anchor(df: pl.DataFrame, mtime: dt.datetime | None) -> pl.DataFrame:
    """Add `_ts` (wall clock) and `_anchor` from `_rel` (µs since start, null for lines
    without), `_abs` (an absolute time the line carries, or null) and `_wrap` (the wrapper's
    time, or null). Lines without a relative time keep their own absolute time."""
    if df["_rel"].null_count() == df.height:
        own = pl.coalesce(pl.col("_wrap"), pl.col("_abs"))
        how = pl.when(pl.col("_wrap").is_not_null()).then(pl.lit("wrapper")).when(
            pl.col("_abs").is_not_null()).then(pl.lit("absolute"))
        return df.with_columns(own.alias("_ts"), pl.when(pl.col("_rel").is_not_null()).then(how).alias("_anchor"))
    rel = pl.col("_rel")
    # a run: a stretch of lines whose relative time does not go back (by more than the 1 s
    # the async log thread may reorder... it does not; any step back is a restart)
    prev = rel.forward_fill().shift(1)
    df = df.with_columns(((rel < prev).fill_null(False)).cast(pl.Int32).cum_sum().alias("_run"))
    wrap_off = pl.col("_wrap").dt.epoch("us") - rel
    abs_off = pl.col("_abs").dt.epoch("us") - rel
    runs = df.group_by("_run").agg(
        wrap_off.drop_nulls().first().alias("_wrap_off"),
        abs_off.drop_nulls().first().alias("_abs_off"),
        rel.drop_nulls().first().alias("_first"),
        rel.drop_nulls().last().alias("_last"),
    ).sort("_run")
    offsets: list[int | None] = []
    kinds: list[str | None] = []
    rows = runs.rows(named=True)
    # runs are few (one per restart): walk them from the last back, each run's anchor may
    # come from the next run's start
    nxt_start: int | None = None
    for i in range(len(rows) - 1, -1, -1):
        r = rows[i]
        if r["_wrap_off"] is not None:
            off, kind = r["_wrap_off"], "wrapper"
        elif r["_abs_off"] is not None:
            off, kind = r["_abs_off"], "absolute"
        elif i == len(rows) - 1 and mtime is not None and r["_last"] is not None:
            off, kind = int(mtime.timestamp() * 1_000_000) - r["_last"], "mtime"
        elif nxt_start is not None and r["_last"] is not None:
            off, kind = nxt_start - r["_last"], "restart"
        else:
            off, kind = None, None
        offsets.append(off)
        kinds.append(kind)
        # a new process starts at relative 0: the run before it ended by then
        nxt_start = off
    runs = runs.select("_run").with_columns(
        pl.Series("_off", offsets[::-1], dtype=pl.Int64), pl.Series("_how", kinds[::-1], dtype=pl.String)
    )
    df = df.join(runs, on="_run", how="left")
    rel_ts = pl.from_epoch(pl.col("_off") + rel, time_unit="us").dt.replace_time_zone("UTC")
    return df.with_columns(
        pl.when(rel.is_not_null()).then(rel_ts).otherwise(pl.coalesce(pl.col("_wrap"), pl.col("_abs"))).cast(_TS).alias("_ts"),
        pl.when(rel.is_not_null()).then(pl.col("_how")).alias("_anchor"),
    ).drop("_run", "_off", "_how")
