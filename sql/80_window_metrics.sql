-- window_metrics: everything the signals judge, per instance and time window.
-- Grain: one row per (engine, instance, window) of the `windows` grid.
-- Engines: all; a column is null where the instance's logs do not give it (see
--   metric_availability).
-- Columns: window_start, window_end (UTC), window_s (s), engine, instance,
--   waiting_avg, waiting_max (requests, over queue_depth samples in the window),
--   waiting_estimated (true when reconstructed), running_avg, running_max (requests),
--   fill_avg, fill_max (fraction of max_num_seqs), kv_avg, kv_max (fraction),
--   preemptions (count in the window: logged counts + preemption warnings; null when the
--   instance never logged any preemption data), arrived, finished (requests),
--   requests_per_s, throughput (the best rate the log gives: logged generation tokens/s,
--   else output tokens/s of finished requests, else finished requests/s, else HTTP
--   requests/s), throughput_unit ('tokens/s' | 'requests/s'), n_latency (finished requests
--   with e2e_s), p99_e2e_s, p99_ttft_s (s, all models together), e2e_estimated,
--   n_errors, n_severe_errors (engine_dead + cuda_oom), idle (true when nothing shows
--   activity: no arrivals, finishes or HTTP requests, nothing running or waiting, no
--   generation throughput; null for engine `unknown`).
create or replace view window_metrics as
with

-- materialized: joined by every CTE below
grid as materialized (
    select * from windows
),

queue as (
    select
        w.engine, w.instance, w.window_start,
        avg(q.waiting) as waiting_avg,
        max(q.waiting) as waiting_max,
        bool_or(q.estimated) as waiting_estimated,
    from grid as w
    join queue_depth as q
        on q.engine = w.engine and q.instance = w.instance
        and q.ts >= w.window_start and q.ts < w.window_end
    group by all
),

batch as (
    select
        w.engine, w.instance, w.window_start,
        avg(b.running) as running_avg,
        max(b.running) as running_max,
        avg(b.fill) as fill_avg,
        max(b.fill) as fill_max,
    from grid as w
    join batch_fill as b
        on b.engine = w.engine and b.instance = w.instance
        and b.ts >= w.window_start and b.ts < w.window_end
    group by all
),

preemption_instances as (
    select distinct engine, instance from kv_cache where preemptions is not null or preemption_lines > 0
),

kv as (
    select
        w.engine, w.instance, w.window_start,
        avg(k.kv_usage) as kv_avg,
        max(k.kv_usage) as kv_max,
        cast(coalesce(sum(k.preemptions), 0) + sum(k.preemption_lines) as bigint) as preemptions,
    from grid as w
    join kv_cache as k
        on k.engine = w.engine and k.instance = w.instance
        and k.ts >= w.window_start and k.ts < w.window_end
    group by all
),

latency as (
    select
        w.engine, w.instance, w.window_start,
        count(r.e2e_s) as n_latency,
        quantile_cont(r.e2e_s, 0.99) as p99_e2e_s,
        quantile_cont(r.ttft_s, 0.99) as p99_ttft_s,
        bool_or(r.e2e_estimated) as e2e_estimated,
    from grid as w
    join requests as r
        on r.engine = w.engine and r.instance = w.instance
        and r.finish_ts >= w.window_start and r.finish_ts < w.window_end
        and r.status = 'finished'
    group by all
),

errs as (
    select
        engine, instance, window_start,
        cast(sum(n_errors) as bigint) as n_errors,
        cast(coalesce(sum(n_errors) filter (where kind in ('engine_dead', 'cuda_oom')), 0) as bigint) as n_severe_errors,
    from errors
    group by all
),

joined as (
    select
        w.window_start,
        w.window_end,
        w.window_s,
        w.engine,
        w.instance,
        q.waiting_avg,
        q.waiting_max,
        q.waiting_estimated,
        b.running_avg,
        b.running_max,
        b.fill_avg,
        b.fill_max,
        k.kv_avg,
        k.kv_max,
        case when pi.instance is not null then coalesce(k.preemptions, 0) end as preemptions,
        t.arrived,
        t.finished,
        t.requests_per_s,
        t.http_requests,
        coalesce(t.gen_tps_logged, t.output_tokens_per_s, t.requests_per_s, t.http_requests_per_s) as throughput,
        case
            when coalesce(t.gen_tps_logged, t.output_tokens_per_s) is not null then 'tokens/s'
            when coalesce(t.requests_per_s, t.http_requests_per_s) is not null then 'requests/s'
        end as throughput_unit,
        t.gen_tps_logged,
        coalesce(l.n_latency, 0) as n_latency,
        l.p99_e2e_s,
        l.p99_ttft_s,
        coalesce(l.e2e_estimated, false) as e2e_estimated,
        coalesce(e.n_errors, 0) as n_errors,
        coalesce(e.n_severe_errors, 0) as n_severe_errors,
    from grid as w
    left join queue as q using (engine, instance, window_start)
    left join batch as b using (engine, instance, window_start)
    left join kv as k using (engine, instance, window_start)
    left join preemption_instances as pi using (engine, instance)
    left join latency as l using (engine, instance, window_start)
    left join errs as e using (engine, instance, window_start)
    left join throughput as t using (engine, instance, window_start)
),

final as (
    select
        * exclude (gen_tps_logged, http_requests),
        -- a file no parser recognised tells nothing about activity: neither idle nor busy
        case when engine <> 'unknown' then
            coalesce(arrived, 0) = 0
            and coalesce(finished, 0) = 0
            and coalesce(http_requests, 0) = 0
            and coalesce(waiting_max, 0) = 0
            and coalesce(running_max, 0) = 0
            and coalesce(gen_tps_logged, 0) = 0
        end as idle,
    from joined
)

select * from final
