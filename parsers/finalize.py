"""finalize: what every parser's events go through after the engine's own `parse`, in file
order: domain checks, relative times anchored to their process run, timestamps given their
year (rollover, inheritance), request ids scoped to their run, carried columns filled, and the
result conformed to the one schema (parsers/schema.py).

Chunks are parsed in parallel but finalized in file order, so this is where state crosses
chunk boundaries (kept in `ctx.state`)."""

from __future__ import annotations

import calendar
import datetime as dt
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from . import domain
from .schema import POLARS_SCHEMA

if TYPE_CHECKING:  # base imports this module: no import cycle at run time
    from .base import ParseContext

def finalize(events: pl.DataFrame, ctx: ParseContext, carry: tuple[str, ...] = ()) -> pl.DataFrame:
    """Resolve timestamps (year inference, rollover, inheritance), carry the `carry`
    columns forward (a parser's CARRY_FORWARD: e.g. the model named at start-up applies to
    the rest of the file, across chunks) and conform to the schema.

    Chunks are finalized in file order, so this is where state crosses chunk boundaries;
    `parse` itself must not depend on earlier chunks (chunks are parsed in parallel)."""
    if events.height == 0:
        return pl.DataFrame(schema=POLARS_SCHEMA)
    if "_seq" not in events.columns:
        events = events.with_row_index("_seq")
    # a decoded export put back in time order is walked in that order (parsers/wrappers)
    key, seq = pl.col("_order" if "_order" in events.columns else "line"), pl.col("_seq")
    # a parser's events mostly come in that order already: the sort (a copy of every column)
    # only when some pair of rows is not strictly in it
    in_order = events.select(
        key.is_not_null().all() & seq.is_not_null().all()
        & ((key > key.shift(1)) | ((key == key.shift(1)) & (seq > seq.shift(1)))).all()
    ).item()
    if not in_order:
        events = events.sort([key, seq])
    if "_parse_failed" in events.columns:
        ctx.parse_failures += int(events["_parse_failed"].fill_null(False).sum())
    events = domain.apply(events, ctx.invalid)
    events = _resolve_relative(events, ctx)
    events = _resolve_timestamps(events, ctx)
    events = _scope_request_ids(events, ctx)
    seeds = ctx.file.get("carry_seed", {})
    for col in carry:
        if col not in events.columns:
            continue
        if col in seeds and "wrapper_ts" in events.columns:
            events = _seeded(events, col, seeds[col])
        if "_carry_by" in events.columns and col != "instance":
            # an export of several pods: a value one pod names is not another's
            events = _carry_by_pod(events, col, ctx, use_prior=col not in seeds)
            continue
        filled = pl.col(col).forward_fill()
        # (a seeded value is the file's own: a chunk read before this one on disk is newer)
        prior = ctx.state.get(f"carry_{col}") if col not in seeds else None
        if prior is not None:
            filled = filled.fill_null(pl.lit(prior, events.schema[col]))
        events = events.with_columns(filled.alias(col))
        last = events[col].drop_nulls()
        if len(last):
            ctx.state[f"carry_{col}"] = last[-1]

    if "_carry_by" in events.columns:
        events = events.drop("_carry_by")
    consts = {
        "engine": ctx.engine,
        "source": ctx.source,
        "instance": ctx.instance,
    }
    exprs = []
    for name, dtype in POLARS_SCHEMA.items():
        if name in consts and name not in events.columns:
            exprs.append(pl.lit(consts[name], dtype).alias(name))
        elif name in consts:
            exprs.append(pl.col(name).fill_null(consts[name]).cast(dtype).alias(name))
        elif name == "n_lines" and name not in events.columns:
            exprs.append(pl.lit(1, dtype).alias(name))
        elif name in events.columns:
            # not strict: domain.apply has nulled (and noted) what does not convert
            exprs.append(pl.col(name).cast(dtype, strict=False).alias(name))
        else:
            exprs.append(pl.lit(None, dtype).alias(name))
    out = events.select(exprs)
    return out


def _seeded(events: pl.DataFrame, col: str, seed: pl.DataFrame) -> pl.DataFrame:
    """`col` where it is null: the value named last, at or before the event's platform time,
    in the whole file (`seed`: `_seed_ts`, `_seed_pod`, `_seed`, read before its chunks by
    the reader of a newest-first export, whose blocks come newest first)."""
    need = pl.col(col).is_null() & pl.col("wrapper_ts").is_not_null()
    if not events.select(need.any()).item():
        return events
    pod = pl.col("_carry_by").fill_null("") if "_carry_by" in events.columns else pl.lit("")
    want = events.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("_ri"), need.alias("_need"),
                         pl.col("wrapper_ts").cast(seed.schema["_seed_ts"]).alias("_t"), pod.alias("_seed_pod"))
    want = want.filter("_need").drop("_need").sort("_t")
    got = want.join_asof(seed, left_on="_t", right_on="_seed_ts", by="_seed_pod", strategy="backward",
                         check_sortedness=False)
    # each value put in its event's row (a join back on the row would copy every column)
    dtype = events.schema[col]
    found = pl.repeat(None, events.height, dtype=dtype, eager=True).scatter(got["_ri"], got["_seed"].cast(dtype))
    return events.with_columns(pl.coalesce(pl.col(col), found).alias(col))


def _carry_by_pod(events: pl.DataFrame, col: str, ctx: ParseContext, use_prior: bool = True) -> pl.DataFrame:
    """`col` carried forward within each pod (`_carry_by`), and across chunks per pod
    (`use_prior`: not where the file's own values were seeded)."""
    key = f"carry_{col}_by_pod"
    prior: dict = dict(ctx.state.get(key) or {})
    if not use_prior:
        prior = {}
    by = pl.col("_carry_by").fill_null("")
    filled = pl.col(col).forward_fill().over(by)
    if prior:
        known = pl.DataFrame({"_carry_by": list(prior), "_prior": list(prior.values())},
                             schema={"_carry_by": pl.String, "_prior": events.schema[col]})
        events = events.with_columns(by.alias("_carry_by")).join(known, on="_carry_by", how="left", maintain_order="left")
        filled = filled.fill_null(pl.col("_prior"))
    events = events.with_columns(filled.alias(col)).drop("_prior", strict=False)
    last = events.filter(pl.col(col).is_not_null()).group_by(by, maintain_order=True).agg(pl.col(col).last())
    prior.update(dict(zip(last.to_series(0).to_list(), last[col].to_list())))
    ctx.state[key] = prior
    return events


def run_offsets(firsts: list[int], lasts: list[int], ctx: ParseContext) -> list[int | None]:
    """The anchor offset (us to add to a relative time) of each run, given each run's first
    and last relative time, in order: the rules `_resolve_relative` states. Also used by a
    parser's whole-file pass (engines/llamacpp/clock.file_runs), so both anchor alike."""
    prior_off, prior_last = ctx.state.get("rel_offset_us"), ctx.state.get("rel_last_us")
    continues = bool(firsts) and prior_off is not None and prior_last is not None and firsts[0] >= prior_last
    mtime_us = int(ctx.mtime.timestamp() * 1_000_000) if ctx.mtime is not None else None
    offsets: list[int | None] = [None] * len(firsts)
    for i in range(len(firsts) - 1, -1, -1):
        if i == 0 and continues:
            offsets[i] = prior_off
        elif i == len(firsts) - 1:
            offsets[i] = None if mtime_us is None else mtime_us - lasts[i]
        elif offsets[i + 1] is not None:
            offsets[i] = offsets[i + 1] - lasts[i]
    return offsets


def _resolve_relative(events: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """Wall-clock `ts` for the `ts_rel_us` helper column (time since process start).

    A run is a stretch of lines whose relative time does not go back (a step back is a
    restart). A run that continues the previous chunk's last run keeps its anchor (a tailer
    anchors a growing file once, at the mtime it saw, and later chunks follow it); the run
    that ends the chunk otherwise ends at the file's mtime; a run before a restart ends when
    the next process started (its relative 0). Those rules need the whole file: a chunk's
    last run may go on, or restart, after the chunk. So where the parser's `scan_file` found
    the file's runs (`ctx.file["rel_runs"]`: first line and anchor offset of each run, up to
    `end_line`), a row takes its run's offset from there; the chunk's own runs serve only
    lines written after that pass."""
    if "ts_rel_us" not in events.columns or events["ts_rel_us"].null_count() == events.height:
        return events
    rel = events["ts_rel_us"]
    known = rel.drop_nulls()
    run_of = (known < known.shift(1)).fill_null(False).cast(pl.Int32).cum_sum()
    bounds = pl.DataFrame({"r": known, "run": run_of}).group_by("run", maintain_order=True).agg(
        pl.col("r").first().alias("first"), pl.col("r").last().alias("last")
    )
    offsets = run_offsets(bounds["first"].to_list(), bounds["last"].to_list(), ctx)
    # each row's run: the run count at the last non-null relative time at or before it
    runs = pl.Series([None] * events.height, dtype=pl.Int32).scatter(
        np.flatnonzero(rel.is_not_null().to_numpy()), run_of
    )
    off = pl.Series(offsets, dtype=pl.Int64).gather(runs)
    whole = ctx.file.get("rel_runs")
    if whole is not None and len(whole["start_line"]):
        # the file's own runs (scan_file), found by line: exact however the file is chunked
        line = events["line"].to_numpy()
        k = np.searchsorted(whole["start_line"], line, side="right") - 1
        covered = pl.Series((k >= 0) & (line <= whole["end_line"]))
        file_off = pl.Series(whole["offset"], dtype=pl.Int64).gather(np.clip(k, 0, None))
        off = pl.select(pl.when(covered).then(file_off).otherwise(off)).to_series()
    last = int(np.flatnonzero(rel.is_not_null().to_numpy())[-1])
    if off[last] is not None:
        ctx.state["rel_offset_us"], ctx.state["rel_last_us"] = off[last], rel[last]
    anchored = pl.from_epoch(off + rel, time_unit="us").dt.replace_time_zone("UTC")
    ts = events["ts"] if "ts" in events.columns else None
    if ts is not None:
        anchored = _as_utc_series(ts).fill_null(anchored)
    return events.with_columns(anchored.alias("ts"))


def _scope_request_ids(events: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """Request ids that start again with each process (llama.cpp's task ids) made distinct
    per run: a parser marks the lines where a server starts (`run_start` helper column).
    The requests of the first run that has any keep their ids; those of the k-th such run
    become `<id>@run<k>`. Runs without requests (start-up lines printed twice, a crash
    before any request) count for nothing, and the count carries on across chunks and to a
    rotated file's successor (`carry_` state, see checkpoint.inherit_lineage)."""
    if "run_start" not in events.columns:
        return events
    run = events["run_start"].fill_null(False).cast(pl.Int64).cum_sum().to_numpy()
    done = int(ctx.state.get("carry_runs_with_requests", 0))
    has = np.zeros(int(run[-1]) + 1, dtype=bool) if len(run) else np.zeros(1, dtype=bool)
    if "request_id" in events.columns:
        has[np.unique(run[events["request_id"].is_not_null().to_numpy()])] = True
    has[0] |= bool(ctx.state.get("carry_run_has_requests", False))
    before = done + np.concatenate([[0], np.cumsum(has)[:-1]])  # such runs before each run
    ctx.state["carry_runs_with_requests"] = int(done + has[:-1].sum())
    ctx.state["carry_run_has_requests"] = bool(has[-1])
    if "request_id" not in events.columns or not before.any():
        return events.drop("run_start")
    rid, k = pl.col("request_id"), pl.col("_runs_before")
    return events.with_columns(pl.Series("_runs_before", before[run])).with_columns(
        pl.when(rid.is_not_null() & (k > 0)).then(pl.concat_str(rid, pl.lit("@run"), (k + 1).cast(pl.String)))
        .otherwise(rid).alias("request_id")
    ).drop("run_start", "_runs_before")


def _as_utc_series(ts: pl.Series) -> pl.Series:
    return pl.DataFrame({"t": ts}).select(as_utc(pl.col("t"), ts.dtype)).to_series()


def _resolve_timestamps(events: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    cols = events.columns
    full = pl.col("ts") if "ts" in cols else pl.lit(None, pl.Datetime("us", "UTC"))
    full = as_utc(full, events.schema.get("ts"))

    if "ts_noyear" in cols and events["ts_noyear"].null_count() < events.height:
        noyear = pl.col("ts_noyear")
        month = events.select(noyear.dt.month().cast(pl.Int32)).to_series()
        first_month = month.drop_nulls()[0]
        if ctx.year_base is None:
            if ctx.year is not None:
                ctx.year_base = ctx.year
            else:
                ref = ctx.mtime or dt.datetime.now(dt.timezone.utc)
                # a file whose first month is after its mtime's month started last year
                ctx.year_base = ref.year - (1 if first_month > ref.month else 0)
            ctx.last_month = None
        prev = month.forward_fill().shift(1)
        if ctx.last_month is not None and len(prev):
            prev = prev.scatter(0, ctx.last_month) if prev[0] is None else prev
        # a jump back of more than six months (Dec -> Jan) is a new year
        rolled = ((month < prev - 6).fill_null(False)).cast(pl.Int32).cum_sum()
        year = ctx.year_base + ctx.rollovers
        years = rolled + year
        ctx.rollovers += int(rolled[-1]) if len(rolled) else 0
        last = month.drop_nulls()
        if len(last):
            ctx.last_month = int(last[-1])
        one_year = events.schema["ts_noyear"] == pl.Datetime("us") and not (len(rolled) and rolled[-1])
        shift = _year_shift(year, month, events) if one_year else None
        if shift is not None:
            # one year for the whole chunk: the header's time moved from 2000 to it by whole
            # days (the same instant pl.datetime builds from its parts, without the parts)
            from_noyear = (noyear + pl.duration(days=shift)).dt.replace_time_zone("UTC")
        else:
            events = events.with_columns(years.alias("_year"))
            y = pl.col("_year")
            # 29 February of a year without one (a wrong --year, or a year guessed from the
            # file's mtime): that line's own time is unknown, and it takes the time before it
            # (ts_inferred) instead of failing the whole chunk
            no_such_day = (noyear.dt.month() == 2) & (noyear.dt.day() == 29) & ~pl.date(y, 1, 1).dt.is_leap_year()
            from_noyear = pl.when(~no_such_day).then(pl.datetime(
                y,
                noyear.dt.month(),
                pl.when(no_such_day).then(28).otherwise(noyear.dt.day()),
                noyear.dt.hour(),
                noyear.dt.minute(),
                noyear.dt.second(),
                noyear.dt.microsecond(),
                time_unit="us",
                time_zone="UTC",
            ))
        full = pl.coalesce(full, from_noyear)

    events = events.with_columns(full.alias("_ts_own"))
    filled = pl.col("_ts_own").forward_fill()
    if ctx.last_ts is not None:
        filled = filled.fill_null(pl.lit(ctx.last_ts, pl.Datetime("us", "UTC")))
    events = events.with_columns(
        filled.alias("ts"),
        (pl.col("_ts_own").is_null() & filled.is_not_null()).alias("ts_inferred"),
    )
    last = events["ts"].drop_nulls()
    if len(last):
        ctx.last_ts = last[-1]
    return events


def _year_shift(year: int, month: pl.Series, events: pl.DataFrame) -> pl.Expr | None:
    """Days from a time of year 2000 (`ts_noyear`, parsed as 2000: a leap year) to the same
    date and time of `year`: one figure before March, one from March on (None when `year`
    is out of Python's range, or has no 29 February that a line names: then the date is
    built from its parts)."""
    if not dt.MINYEAR <= year <= dt.MAXYEAR:
        return None
    leap = calendar.isleap(year)
    if not leap and events.select(
        ((pl.col("ts_noyear").dt.month() == 2) & (pl.col("ts_noyear").dt.day() == 29)).any()
    ).item():
        return None
    days = (dt.date(year, 1, 1) - dt.date(2000, 1, 1)).days
    return pl.when(pl.lit(month) >= 3).then(days + (0 if leap else -1)).otherwise(days)


def as_utc(expr: pl.Expr, dtype: pl.DataType | None) -> pl.Expr:
    if dtype is None or not isinstance(dtype, pl.Datetime):
        return expr.cast(pl.Datetime("us", "UTC"))
    if dtype.time_zone is None:
        return expr.cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    return expr.dt.convert_time_zone("UTC").cast(pl.Datetime("us", "UTC"))
