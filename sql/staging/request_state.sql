-- request_state: queue depth and running requests RECONSTRUCTED from per-request timings
-- (an estimate, not a logged value).
-- Grain: one row per (engine, instance) per sample instant, every `queue_sample_s` seconds
--   (default 1 s) while requests are in the server: over each busy period (merged request
--   intervals), from its start floored to the step to its end rounded up to the step.
-- Engines: TGI (the `Success` line gives total, queue and inference time, so each request's
--   wait [inference start - queue_s, inference start) and run [inference start, finish) are
--   known to the microsecond). Only requests that finished inside the log are seen: requests
--   still in flight at the end of the log, or that failed (requests.status = 'failed': TGI
--   logs a failure without queue or inference times), are missing from the count; the
--   `requests` and `throughput` views count the failed ones.
-- Columns: ts (UTC sample instant), engine, instance, waiting (requests queued at ts; null for
--   an instance whose requests log no queue time, e.g. llama.cpp, whose timing block starts
--   when a slot takes the task), running (requests in inference at ts). An interval counts at
--   its start, not at its end.
create or replace view request_state as
with

params as (
    select cast(round(coalesce(try_cast(getvariable('queue_sample_s') as double), 1.0) * 1e6) as bigint) as step_us
),

-- each request's three instants as sample indices: the first sample at or after the
-- instant (integer microseconds, so an instant on a sample counts at that sample)
intervals as (
    select
        r.engine,
        r.instance,
        -- (no logged queue time, as with llama.cpp: the request counts from its inference start)
        (epoch_us(coalesce(r.queue_start_ts, r.inference_start_ts)) + p.step_us - 1) // p.step_us as k_queue,
        (epoch_us(r.inference_start_ts) + p.step_us - 1) // p.step_us as k_inference,
        (epoch_us(r.finish_ts) + p.step_us - 1) // p.step_us as k_finish,
        epoch_us(coalesce(r.queue_start_ts, r.inference_start_ts)) % p.step_us <> 0 as queue_between_samples,
        r.queue_start_ts is not null as queue_known,
    from requests as r
    cross join params as p
    where r.inference_start_ts is not null
      and r.finish_ts is not null
),

-- a difference array: how many requests enter the queue, start inference and finish at each
-- sample (a group-by on integer sample indices; no interval is expanded into samples)
changes as (
    select
        engine,
        instance,
        k,
        sum(d_waiting) as d_waiting,
        sum(d_running) as d_running,
        -- a request queued strictly between samples k - 1 and k: its interval begins at
        -- sample k - 1 for the grid
        bool_or(opens_before) as opens_before,
        bool_or(queue_known) as queue_known,
    from (
        select
            engine,
            instance,
            unnest([k_queue, k_inference, k_finish]) as k,
            unnest([1, -1, 0]) as d_waiting,
            unnest([0, 1, -1]) as d_running,
            unnest([queue_between_samples, false, false]) as opens_before,
            queue_known,
        from intervals
    )
    group by engine, instance, k
),

-- the state from each change on, until the next change: running sums of the differences
states as (
    select
        engine,
        instance,
        k,
        opens_before,
        sum(d_waiting) over upto as waiting,
        sum(d_running) over upto as running,
        sum(d_waiting) over upto - d_waiting + sum(d_running) over upto - d_running > 0 as busy_before,
        lead(k) over by_k as next_k,
        lag(k) over by_k as prev_k,
        -- the instance logs queue times at all (else its waiting count is unknown)
        bool_or(queue_known) over (partition by engine, instance) as queue_known,
    from changes
    window
        by_k as (partition by engine, instance order by k),
        upto as (by_k rows unbounded preceding)
),

-- the sample grid: the union of every request's samples from its queue start floored to the
-- step to its finish rounded up (busy periods, so years of silence make no rows). That is
-- each change, the samples after it while a request is in the server, and the sample just
-- before a queue start that falls between samples (idle there: nothing else covers it).
samples as (
    select
        engine,
        instance,
        unnest(range(k, case when waiting + running > 0 then next_k else k + 1 end)) as k,
        waiting,
        running,
        queue_known,
    from states
    union all
    select engine, instance, k - 1 as k, 0 as waiting, 0 as running, queue_known,
    from states
    where opens_before
      and (prev_k is null or prev_k < k - 1)
      and not busy_before
),

final as (
    select
        make_timestamptz(s.k * p.step_us) as ts,
        s.engine,
        s.instance,
        case when s.queue_known then cast(s.waiting as bigint) end as waiting,
        cast(s.running as bigint) as running,
    from samples as s
    cross join params as p
)

select * from final
