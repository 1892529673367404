-- request_state: queue depth and running requests RECONSTRUCTED from per-request timings
-- (an estimate, not a logged value).
-- Grain: one row per (engine, instance) per sample instant, every `queue_sample_s` seconds
--   (default 1 s) while requests are in the server: over each busy period (merged request
--   intervals), from its start floored to the step to its end rounded up to the step.
-- Engines: TGI (the `Success` line gives total, queue and inference time, so each request's
--   wait [inference start - queue_s, inference start) and run [inference start, finish) are
--   known to the microsecond). Only requests that finished inside the log are seen: requests
--   still in flight at the end of the log, or that failed, are missing from the count.
-- Columns: ts (UTC sample instant), engine, instance, waiting (requests queued at ts),
--   running (requests in inference at ts). An interval counts at its start, not at its end.
create or replace view request_state as
with

intervals as materialized (
    select engine, instance, queue_start_ts, inference_start_ts, finish_ts,
    from requests
    where queue_start_ts is not null
      and inference_start_ts is not null
      and finish_ts is not null
),

deltas as (
    select engine, instance, queue_start_ts as ts, 1 as d_waiting, 0 as d_running, from intervals
    union all
    select engine, instance, inference_start_ts as ts, -1 as d_waiting, 1 as d_running, from intervals
    union all
    select engine, instance, finish_ts as ts, 0 as d_waiting, -1 as d_running, from intervals
),

steps as (
    select engine, instance, ts, sum(d_waiting) as d_waiting, sum(d_running) as d_running,
    from deltas
    group by engine, instance, ts
),

levels as (
    select
        engine,
        instance,
        ts,
        sum(d_waiting) over (partition by engine, instance order by ts rows unbounded preceding) as waiting,
        sum(d_running) over (partition by engine, instance order by ts rows unbounded preceding) as running,
    from steps
),

sample_step as (
    select coalesce(try_cast(getvariable('queue_sample_s') as double), 1.0) as step_s
),

-- busy periods: overlapping [queue start, finish] intervals merged, so the sample grid
-- covers the time requests were in the server, not years of silence between them
ordered as (
    select
        engine,
        instance,
        queue_start_ts,
        finish_ts,
        max(finish_ts) over (
            partition by engine, instance order by queue_start_ts, finish_ts
            rows between unbounded preceding and 1 preceding
        ) as prev_end,
    from intervals
),

periods as (
    select
        engine,
        instance,
        min(queue_start_ts) as first_ts,
        max(finish_ts) as last_ts,
    from (
        select
            *,
            sum(case when prev_end is null or queue_start_ts > prev_end then 1 else 0 end) over (
                partition by engine, instance order by queue_start_ts, finish_ts
                rows unbounded preceding
            ) as period,
        from ordered
    )
    group by engine, instance, period
),

-- samples from each busy period's start (floored to the step) to its end (rounded up), where
-- every request of the period has finished: the series visibly returns to 0
grid_per_period as (
    select
        p.engine,
        p.instance,
        unnest(generate_series(
            to_timestamp(floor(epoch(p.first_ts) / s.step_s) * s.step_s),
            to_timestamp(ceil(epoch(p.last_ts) / s.step_s) * s.step_s),
            to_microseconds(cast(round(s.step_s * 1e6) as bigint))
        )) as ts,
    from periods as p
    cross join sample_step as s
),

-- the samples are aligned to the step, so periods close together share some: keep one
grid as (
    select distinct engine, instance, ts from grid_per_period
),

final as (
    select
        g.ts,
        g.engine,
        g.instance,
        cast(coalesce(l.waiting, 0) as bigint) as waiting,
        cast(coalesce(l.running, 0) as bigint) as running,
    from grid as g
    asof left join levels as l
        on g.engine = l.engine
        and g.instance = l.instance
        and g.ts >= l.ts
)

select * from final
