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

params as (
    select cast(round(coalesce(try_cast(getvariable('queue_sample_s') as double), 1.0) * 1e6) as bigint) as step_us
),

-- each request's three instants as sample indices: the first sample at or after the
-- instant (integer microseconds, so an instant on a sample counts at that sample)
intervals as materialized (
    select
        r.engine,
        r.instance,
        (epoch_us(r.queue_start_ts) + p.step_us - 1) // p.step_us as k_queue,
        (epoch_us(r.inference_start_ts) + p.step_us - 1) // p.step_us as k_inference,
        (epoch_us(r.finish_ts) + p.step_us - 1) // p.step_us as k_finish,
        epoch_us(r.queue_start_ts) // p.step_us as k_queue_floor,
    from requests as r
    cross join params as p
    where r.queue_start_ts is not null
      and r.inference_start_ts is not null
      and r.finish_ts is not null
),

-- busy periods: overlapping request intervals merged, so the sample grid covers the time
-- requests were in the server, not years of silence between them
ordered as (
    select
        engine,
        instance,
        k_queue_floor,
        k_finish,
        max(k_finish) over (
            partition by engine, instance order by k_queue_floor, k_finish
            rows between unbounded preceding and 1 preceding
        ) as prev_end,
    from intervals
),

periods as (
    select engine, instance, min(k_queue_floor) as first_k, max(k_finish) as last_k,
    from (
        select
            *,
            sum(case when prev_end is null or k_queue_floor > prev_end then 1 else 0 end) over (
                partition by engine, instance order by k_queue_floor, k_finish
                rows unbounded preceding
            ) as period,
        from ordered
    )
    group by engine, instance, period
),

-- every sample of every busy period (from its start floored to the step to its end rounded
-- up, where all its requests have finished: the series visibly returns to 0)
grid as (
    select engine, instance, unnest(range(first_k, last_k + 1)) as k,
    from periods
),

-- how many requests enter the queue, start inference and finish at each sample
changes as (
    select engine, instance, k, sum(d_waiting) as d_waiting, sum(d_running) as d_running,
    from (
        select engine, instance, k_queue as k, 1 as d_waiting, 0 as d_running, from intervals
        union all
        select engine, instance, k_inference as k, -1 as d_waiting, 1 as d_running, from intervals
        union all
        select engine, instance, k_finish as k, 0 as d_waiting, -1 as d_running, from intervals
    )
    group by engine, instance, k
),

final as (
    select
        make_timestamptz(g.k * p.step_us) as ts,
        g.engine,
        g.instance,
        cast(sum(coalesce(c.d_waiting, 0)) over w as bigint) as waiting,
        cast(sum(coalesce(c.d_running, 0)) over w as bigint) as running,
    from grid as g
    left join changes as c using (engine, instance, k)
    cross join params as p
    window w as (partition by g.engine, g.instance order by g.k rows unbounded preceding)
)

select * from final
