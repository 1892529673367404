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
   run that ends the file; a tailer anchors a growing file once and later lines follow;
   A run before a restart, with no anchor of its own, ends where the next process started
   (still reported as `mtime`: that is where its time comes from).

1 and 2 are found within a chunk, here. 3 needs the whole file, so rows left without an
anchor carry their relative time as the `ts_rel_us` helper column, which `base.finalize`
anchors (`finalize._resolve_relative`). Before any chunk is parsed, ingest lets the parser read
the file once cheaply (`scan_file` -> `file_runs`): where each run starts and where its
relative times end, so every chunk of a file longer than one read block is anchored from
the file's end, not its own. Each event reports the anchor (`ts_anchor` in attrs) and the
relative time itself (`rel_s`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import polars as pl

from ...finalize import run_offsets

# the relative time `M.SS.mmm.uuu ` (and the level letter after it, if any), matched whole: no
# groups, as each group captured costs about as much as a search of its own
REL_HEAD_RE = r"^\d+\.\d{2}\.\d{3}\.\d{3} "
REL_LVL_HEAD_RE = REL_HEAD_RE + "(?:[IWEDT] )?"
_TS = pl.Datetime("us", "UTC")
_STR = pl.String


def rel_digits(head: pl.Expr) -> pl.Expr:
    """The digits of a match of REL_HEAD_RE or REL_LVL_HEAD_RE (null: none) as one number,
    M * 10^8 + SS * 10^6 + mmm * 10^3 + uuu, for `rel_us` (a column first: it reads it three
    times). A digit of another script fails the cast: null, as a damaged value."""
    return head.str.strip_chars_end(" IWEDT").str.replace_all(".", "", literal=True).cast(pl.Int64, strict=False)


def rel_us(digits: pl.Expr) -> pl.Expr:
    """Microseconds since process start from `rel_digits`: its last eight digits are the
    microseconds within the minute, the others the minutes."""
    # minutes beyond ten million (19 years) are damage, and would overflow microseconds
    return pl.when(digits < 10_000_000 * 100_000_000).then(digits // 100_000_000 * 60_000_000 + digits % 100_000_000)


def anchor(df: pl.DataFrame) -> pl.DataFrame:
    """Add `_ts` (wall clock, where the chunk anchors it), `_anchor` and `ts_rel_us` (the
    relative time of rows left for finalize to anchor) from `_rel` (µs since start, null for
    lines without), `_abs` (an absolute time the line carries) and `_wrap` (the wrapper's
    time). Lines without a relative time keep their own absolute time."""
    rel = pl.col("_rel")
    own = pl.coalesce(pl.col("_wrap"), pl.col("_abs"))
    if df["_rel"].null_count() == df.height:
        return df.with_columns(own.alias("_ts"), pl.lit(None, _STR).alias("_anchor"),
                               pl.lit(None, pl.Int64).alias("ts_rel_us"))
    # runs: a step back in the relative time is a restart
    prev = rel.forward_fill().shift(1)
    df = df.with_columns(((rel < prev).fill_null(False)).cast(pl.Int32).cum_sum().alias("_run"))
    wrap_off = pl.col("_wrap").dt.epoch("us") - rel
    abs_off = pl.col("_abs").dt.epoch("us") - rel
    # a wrapper stamps a line when its reader takes it, never before it was written: a reader
    # starved of CPU stamps a batch of lines with one late time. The line stamped closest to
    # its writing (the smallest stamp - relative time) anchors the run.
    df = df.with_columns(
        wrap_off.min().over("_run").alias("_wrap_off"),
        abs_off.drop_nulls().first().over("_run").alias("_abs_off"),
    )
    off = pl.coalesce(pl.col("_wrap_off"), pl.col("_abs_off"))
    how = (
        pl.when(pl.col("_wrap_off").is_not_null()).then(pl.lit("wrapper"))
        .when(pl.col("_abs_off").is_not_null()).then(pl.lit("absolute"))
        # (placed by finalize from the file's mtime, through any restarts after it: the
        # label cannot depend on where the chunk ends)
        .otherwise(pl.lit("mtime"))
    )
    rel_ts = pl.from_epoch(off + rel, time_unit="us").dt.replace_time_zone("UTC")
    return df.with_columns(
        pl.when(rel.is_not_null()).then(rel_ts).otherwise(own).cast(_TS).alias("_ts"),
        pl.when(rel.is_not_null()).then(how).alias("_anchor"),
        pl.when(rel.is_not_null() & off.is_null()).then(rel).alias("ts_rel_us"),
    ).drop("_run", "_wrap_off", "_abs_off")


def file_runs(frames: Iterable[tuple[pl.Series, pl.Series]], ctx) -> dict:
    """The file's process runs from (line numbers, relative µs) frames in file order: each
    run's first line and the offset (µs) that anchors it, as `_resolve_relative` uses them.
    The run that ends the file ends at its mtime, a run before a restart ends where the next
    process started, and a first run that continues what an earlier read of the file
    anchored (a grown file, `rel_offset_us` in the state) keeps that anchor."""
    starts: list[int] = []
    firsts: list[int] = []
    lasts: list[int] = []
    end_line = None
    for line, rel in frames:
        if len(line):
            end_line = int(line[-1])
        known = rel.is_not_null()
        if not known.any():
            continue
        ln, r = line.filter(known), rel.filter(known)
        prev = r.shift(1, fill_value=lasts[-1]) if lasts else r.shift(1)
        new = np.flatnonzero((r < prev).fill_null(not lasts).to_numpy())
        r_np, ln_np = r.to_numpy(), ln.to_numpy()
        for i in new:  # one step per restart, not per line
            if lasts and i > 0:
                lasts[-1] = int(r_np[i - 1])
            starts.append(int(ln_np[i]))
            firsts.append(int(r_np[i]))
            lasts.append(int(r_np[i]))
        lasts[-1] = int(r_np[-1])
    offsets = run_offsets(firsts, lasts, ctx)
    return {"start_line": np.array(starts, dtype=np.int64), "offset": offsets, "end_line": end_line or 0}
