"""Per-window views at a coarser width, derived from their rows stored at the base width.

`windows`, `errors` and `throughput` at a width that is a whole multiple of the base width
are sums, minima and unions of the base windows they cover: each base window lies in
exactly one coarser window (floor(floor(t / b) * b / w) = floor(t / w) when w / b is a
whole number). They are derived here from the base width's rollups (tens of thousands of
rows) instead of from the events and the requests (millions), with the same rows and types
as the views' SQL gives. What does not sum (percentiles, averages over samples) is not
derived: `latency_percentiles` and `window_metrics` are still computed by their SQL.

The rows are exactly the view's:
- windows: the grid of the coarser width is the image of the base grid, as long as the
  silence after which the grid stops (`window_max_gap_s`) is a whole number of coarser
  windows, so that the empty windows after an instance's last event end at the same time;
- errors: counts summed, the first error of a coarser window the first of its base
  windows' first errors (the same (time, line) order);
- throughput: one row per window of that grid (so under the same condition), the counts summed (each count column is null for a whole instance or for
  none: the views decide it per instance), the token rates from the token counts they were
  divided from (whole numbers), the logged rates averaged again from `engine_stats` (the
  samples, not the base windows' averages, which do not average).
"""

from __future__ import annotations

from typing import Any, Mapping

from .stored import literal

# the views derived here, in the order they are read (throughput reads this width's windows
# grid through the base rows, not through the table)
DERIVED = ("windows", "errors", "throughput")
# what max_gap_s is when nobody sets it (sql/staging/windows.sql)
DEFAULT_MAX_GAP_S = 86400.0


def _whole(x: float) -> bool:
    return x > 0 and float(x).is_integer()


def derivable(view: str, base_s: float, window_s: float, variables: Mapping[str, Any]) -> bool:
    """Whether `view` at `window_s` can be derived from its rows at `base_s`."""
    if view not in DERIVED or window_s <= base_s or not _whole(window_s / base_s) or not _whole(base_s):
        return False
    if view in ("windows", "throughput"):  # throughput's rows are the windows grid's
        gap = variables.get("window_max_gap_s")
        try:
            gap = DEFAULT_MAX_GAP_S if gap is None else float(gap)
        except (TypeError, ValueError):
            return False
        # the grid's last empty windows end after the same silence at both widths
        return _whole(gap / window_s) and _whole(gap / base_s)
    return True


def derive_sql(view: str, base_file: str, base_s: float, window_s: float) -> str:
    """The query giving `view`'s rows at `window_s` from its rollup file at `base_s`
    (`derivable` must hold). `throughput` reads the `engine_stats` view of the connection."""
    src = f"read_parquet({literal(base_file)})"
    w = f"cast({float(window_s)!r} as double)"
    b = f"cast({float(base_s)!r} as double)"
    if view == "windows":
        return f"""
            select engine, instance, window_index,
                   to_timestamp(window_index * {w}) as window_start,
                   to_timestamp((window_index + 1) * {w}) as window_end,
                   {w} as window_s,
            from (select distinct engine, instance,
                         cast(floor(window_index * {b} / {w}) as bigint) as window_index
                  from {src})
        """
    if view == "errors":
        return f"""
            select to_timestamp(window_start_s) as window_start,
                   to_timestamp(window_start_s + {w}) as window_end,
                   engine, instance, kind,
                   cast(sum(n_errors) as bigint) as n_errors,
                   min(first_ts) as first_ts,
                   arg_min(first_message, (first_ts, first_line)) as first_message,
                   arg_min(first_source, (first_ts, first_line)) as first_source,
                   arg_min(first_line, (first_ts, first_line)) as first_line,
            from (select *, floor(epoch(window_start) / {w}) * {w} as window_start_s from {src})
            group by window_start_s, engine, instance, kind
        """
    if view == "throughput":
        # the token counts summed over the base windows: each base rate is a whole count
        # divided by the base width
        return f"""
            with base as (
                select *, cast(floor(epoch(window_start) / {w}) as bigint) as window_index,
                from {src}
            ),
            sums as (
                select
                    engine, instance, window_index,
                    cast(sum(arrived) as bigint) as arrived,
                    cast(sum(finished) as bigint) as finished,
                    cast(sum(aborted) as bigint) as aborted,
                    sum(round(prompt_tokens_per_s * {b})) as prompt_tokens,
                    sum(round(output_tokens_per_s * {b})) as output_tokens,
                    cast(sum(http_requests) as bigint) as http_requests,
                    cast(sum(http_errors) as bigint) as http_errors,
                    cast(sum(failed) as bigint) as failed,
                from base
                group by all
            ),
            logged_rates as (
                select
                    engine,
                    instance,
                    cast(floor(epoch(ts) / {w}) as bigint) as window_index,
                    avg(prompt_tps) as prompt_tps_logged,
                    avg(gen_tps) as gen_tps_logged,
                from engine_stats
                group by all
            )
            select
                to_timestamp(s.window_index * {w}) as window_start,
                to_timestamp((s.window_index + 1) * {w}) as window_end,
                s.engine,
                s.instance,
                s.arrived,
                s.finished,
                s.aborted,
                s.finished / {w} as requests_per_s,
                s.prompt_tokens / {w} as prompt_tokens_per_s,
                s.output_tokens / {w} as output_tokens_per_s,
                lr.prompt_tps_logged,
                lr.gen_tps_logged,
                s.http_requests,
                s.http_errors,
                s.http_requests / {w} as http_requests_per_s,
                s.failed,
            from sums as s
            left join logged_rates as lr using (engine, instance, window_index)
        """
    raise ValueError(f"{view} is not derived from its base width")


def summary_sql(stored_file: str) -> str:
    """The whole store's incident_summary at the connection's window width, from its rows
    stored at the base width: only `slo_breach_minutes` (the SLO signal episodes) and
    `surge_ts` (the first window of a surge in arrivals) depend on the width, so they are
    taken from this width's `scaling_signals` and `throughput` as the view's `slo` and `surge`
    compute them with no range set (sql/signals/incident_summary.sql: keep them alike), the
    other columns (request counts, the queue's peak, the first error and crash, read from
    every request and sample) from the stored rows."""
    return f"""
        with
        params as (
            select coalesce(try_cast(getvariable('surge_factor') as double), 1.5) as surge_factor,
        ),
        slo as (
            select engine, instance, sum(duration_s) / 60.0 as slo_breach_minutes,
            from scaling_signals
            where signal in ('latency_slo_e2e', 'latency_slo_ttft')
            group by engine, instance
        ),
        surge as (
            select engine, instance, min(window_start) as surge_ts,
            from (
                select
                    engine,
                    instance,
                    window_start,
                    arrived,
                    min(case when arrived > 0 then arrived end) over (
                        partition by engine, instance order by window_start
                        rows between unbounded preceding and 1 preceding
                    ) as fewest_before,
                from throughput
            ), params as p
            where arrived >= p.surge_factor * fewest_before
            group by engine, instance
        )
        select s.* replace (coalesce(slo.slo_breach_minutes, 0.0) as slo_breach_minutes, su.surge_ts as surge_ts),
        from read_parquet({literal(stored_file)}) as s
        left join slo using (engine, instance)
        left join surge as su using (engine, instance)
        order by s.instance, s.engine
    """
