-- window_metrics: everything the signals judge, per instance and time window.
-- Grain: one row per (engine, instance, window) of the `windows` grid.
-- Engines: all; a column is null where the instance's logs do not give it (see
--   metric_availability).
-- Columns: window_index (see windows), window_start, window_end (UTC), window_s (s), engine, instance,
--   waiting_avg, waiting_max (requests, over queue_depth samples in the window),
--   waiting_estimated (true when reconstructed), running_avg, running_max (requests),
--   fill_avg, fill_max (fraction of max_num_seqs), kv_avg, kv_max (fraction),
--   preemptions (count in the window: logged counts + preemption warnings; null when the
--   instance never logged any preemption data), arrived, finished (requests),
--   requests_per_s, throughput (the best rate the log gives: logged generation tokens/s,
--   else output tokens/s of finished requests, else finished requests/s, else HTTP
--   requests/s), throughput_unit ('tokens/s' | 'requests/s'), n_latency (finished requests
--   with e2e_s), p99_e2e_s, p99_ttft_s (s, all models together; each request's best latency,
--   requests.e2e_s / ttft_s; where no request of the window carries one, the bucket
--   estimate of the server's /metrics histogram, scraped_latency), e2e_estimated,
--   ttft_estimated (1 s log timestamps), latency_source (as in latency_percentiles:
--   'client' | 'wrapper' | 'log' | 'scrape' | 'mixed'), e2e_source, ttft_source (the source of
--   p99_e2e_s / p99_ttft_s: 'scrape' for a /metrics bucket estimate, else the requests'
--   latency_source; null without a value),
--   n_errors, n_severe_errors (engine_dead + cuda_oom), n_frontend (client-matched requests
--   the server logged arriving in the window), frontend_delay_p90_s, frontend_delay_max_s (s;
--   requests.frontend_delay_s: client send -> the server's arrival; null without a client
--   results file), idle (true when nothing shows
--   activity: no arrivals, finishes or HTTP requests, nothing running or waiting, no
--   generation throughput; null for engine `unknown`), model (the model the instance
--   serves: the one its lines name most, of equally named the first by name; null when
--   they name none).
create or replace view window_metrics as
with

params as (
    select coalesce(try_cast(getvariable('window_s') as double), 60.0) as window_s
),

-- TGI's reconstructed series (request_state, the costly part) is derived once here and
-- shared by the queue and the batch aggregates: read through queue_depth and batch_fill it
-- would be derived twice. The result is that of queue_depth and batch_fill: their logged rows,
-- else the reconstructed samples. An instance is either logged or reconstructed as a whole,
-- so the choice is made on per-window aggregates (thousands of rows) rather than on
-- millions of samples.
state as materialized (
    select
        ts, engine, instance, waiting, running,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
    from request_state, params as p
),

logged_queue as (
    select ts, engine, instance, waiting, estimated, from queue_depth where source <> 'reconstructed'
),

logged_batch as (
    select ts, engine, instance, running, fill, from batch_fill where source <> 'reconstructed'
),

-- as in batch_fill: a reconstructed sample's fill is running / the latest max_num_seqs
-- announced at or before it. TGI announces one only when started with --max-batch-size:
-- the ASOF join (a sort of every sample) runs only when some instance did
seq_limits as (
    select ts, engine, instance, max_num_seqs,
    from events
    where event = 'capacity' and max_num_seqs is not null
),

state_fill as (
    select
        s.engine, s.instance, s.window_index,
        avg(case when q.max_num_seqs > 0 then s.running / q.max_num_seqs end) as fill_avg,
        max(case when q.max_num_seqs > 0 then s.running / q.max_num_seqs end) as fill_max,
    from (select * from state where (select count(*) from seq_limits) > 0) as s
    asof left join seq_limits as q
        on s.engine = q.engine and s.instance = q.instance and s.ts >= q.ts
    group by all
),

state_windows as (
    select
        engine, instance, window_index,
        avg(waiting) as waiting_avg,
        max(waiting) as waiting_max,
        avg(running) as running_avg,
        max(running) as running_max,
    from state
    group by all
),

-- every sample goes to the window holding its time (an equality join on the window index,
-- not a range join: it stays linear on long logs)
queue as (
    select
        engine, instance,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        avg(waiting) as waiting_avg,
        max(waiting) as waiting_max,
        bool_or(estimated) as waiting_estimated,
    from logged_queue, params as p
    group by all
    union all
    select engine, instance, window_index, waiting_avg, waiting_max, true,
    from state_windows
    anti join (select distinct engine, instance from logged_queue) using (engine, instance)
),

batch as (
    select
        engine, instance,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        avg(running) as running_avg,
        max(running) as running_max,
        avg(fill) as fill_avg,
        max(fill) as fill_max,
    from logged_batch, params as p
    group by all
    union all
    select s.engine, s.instance, s.window_index, s.running_avg, s.running_max, f.fill_avg, f.fill_max,
    from state_windows as s
    left join state_fill as f using (engine, instance, window_index)
    anti join (select distinct engine, instance from logged_batch) using (engine, instance)
),

kv_samples as materialized (
    select * from kv_cache
),

preemption_instances as (
    select distinct engine, instance from kv_samples where preemptions is not null or preemption_lines > 0
),

kv as (
    select
        engine, instance,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        avg(kv_usage) as kv_avg,
        max(kv_usage) as kv_max,
        cast(coalesce(sum(preemptions), 0) + sum(preemption_lines) as bigint) as preemptions,
    from kv_samples, params as p
    group by all
),

latency as (
    select
        engine, instance,
        cast(floor(epoch(finish_ts) / p.window_s) as bigint) as window_index,
        count(e2e_s) as n_latency,
        quantile_cont(e2e_s, 0.99) as p99_e2e_s,
        quantile_cont(ttft_s, 0.99) as p99_ttft_s,
        bool_or(e2e_estimated) as e2e_estimated,
        bool_or(ttft_estimated and ttft_s is not null) as ttft_estimated,
        -- two sources or more: their least and greatest differ (a count of distinct values
        -- would cost a second aggregation over every request)
        case when min(latency_source) <> max(latency_source) then 'mixed' else max(latency_source) end as latency_source,
    from requests, params as p
    where status = 'finished' and finish_ts is not null
    group by all
),

-- from the client's send to the server's arrival, per window of the server's arrival
frontend as (
    select
        engine, instance,
        cast(floor(epoch(arrival_ts) / p.window_s) as bigint) as window_index,
        count(frontend_delay_s) as n_frontend,
        quantile_cont(frontend_delay_s, 0.9) as frontend_delay_p90_s,
        max(frontend_delay_s) as frontend_delay_max_s,
    from requests, params as p
    where frontend_delay_s is not null
    group by all
),

-- where no request of the window carries a latency (vLLM V1's default log has none), the
-- server's /metrics histograms: bucket estimates over the requests they counted in the window
scraped_latency_windows as (
    select
        engine, instance,
        cast(round(epoch(window_start) / p.window_s) as bigint) as window_index,
        max(n) filter (where meaning = 'e2e') as n_e2e,
        max(p99_s) filter (where meaning = 'e2e') as p99_e2e_s,
        max(p99_s) filter (where meaning = 'ttft') as p99_ttft_s,
    from scraped_latency, params as p
    where meaning in ('e2e', 'ttft')
    group by all
),

latency_best as (
    select
        engine, instance, window_index,
        case when coalesce(l.n_latency, 0) > 0 then l.n_latency else coalesce(s.n_e2e, 0) end as n_latency,
        coalesce(l.p99_e2e_s, s.p99_e2e_s) as p99_e2e_s,
        coalesce(l.p99_ttft_s, s.p99_ttft_s) as p99_ttft_s,
        l.e2e_estimated and l.p99_e2e_s is not null as e2e_estimated,
        l.ttft_estimated and l.p99_ttft_s is not null as ttft_estimated,
        case when l.p99_e2e_s is not null then l.latency_source when s.p99_e2e_s is not null then 'scrape' end as e2e_source,
        case when l.p99_ttft_s is not null then l.latency_source when s.p99_ttft_s is not null then 'scrape' end as ttft_source,
        case
            when (l.p99_e2e_s is null and s.p99_e2e_s is not null) or (l.p99_ttft_s is null and s.p99_ttft_s is not null)
                then case when l.p99_e2e_s is null and l.p99_ttft_s is null then 'scrape' else 'mixed' end
            else l.latency_source
        end as latency_source,
    from latency as l
    full join scraped_latency_windows as s using (engine, instance, window_index)
),

errs as (
    select
        engine, instance,
        cast(round(epoch(window_start) / p.window_s) as bigint) as window_index,
        -- errors during an orderly shutdown are the server stopping, not a failure
        cast(coalesce(sum(n_errors) filter (where kind <> 'shutdown'), 0) as bigint) as n_errors,
        cast(coalesce(sum(n_errors) filter (where kind in ('engine_dead', 'cuda_oom')), 0) as bigint) as n_severe_errors,
    from errors, params as p
    group by all
),

-- the model each instance serves, kept with its windows so that a reader of the stored rows
-- (fleet_imbalance's deployments) need not scan the events for it
models as (
    select engine, instance, arg_min(model, (-n, model)) as model,
    from (select engine, instance, model, count(*) as n from events where model is not null group by all)
    group by all
),

-- the windows grid, taken from throughput (one row per window of `windows`, with the same
-- bounds) so that the grid is computed once
grid as (
    select
        cast(round(epoch(t.window_start) / p.window_s) as bigint) as window_index,
        t.*,
        p.window_s,
    from throughput as t, params as p
),

joined as (
    select
        w.window_index,
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
        w.arrived,
        w.finished,
        w.requests_per_s,
        w.http_requests,
        coalesce(w.gen_tps_logged, w.output_tokens_per_s, w.requests_per_s, w.http_requests_per_s) as throughput,
        case
            when coalesce(w.gen_tps_logged, w.output_tokens_per_s) is not null then 'tokens/s'
            when coalesce(w.requests_per_s, w.http_requests_per_s) is not null then 'requests/s'
        end as throughput_unit,
        w.gen_tps_logged,
        coalesce(l.n_latency, 0) as n_latency,
        l.p99_e2e_s,
        l.p99_ttft_s,
        coalesce(l.e2e_estimated, false) as e2e_estimated,
        coalesce(l.ttft_estimated, false) as ttft_estimated,
        l.latency_source,
        l.e2e_source,
        l.ttft_source,
        coalesce(e.n_errors, 0) as n_errors,
        coalesce(e.n_severe_errors, 0) as n_severe_errors,
        coalesce(f.n_frontend, 0) as n_frontend,
        f.frontend_delay_p90_s,
        f.frontend_delay_max_s,
    from grid as w
    left join queue as q using (engine, instance, window_index)
    left join batch as b using (engine, instance, window_index)
    left join kv as k using (engine, instance, window_index)
    left join preemption_instances as pi using (engine, instance)
    left join latency_best as l using (engine, instance, window_index)
    left join errs as e using (engine, instance, window_index)
    left join frontend as f using (engine, instance, window_index)
),

final as (
    select
        j.* exclude (gen_tps_logged, http_requests),
        -- a file no parser recognised tells nothing about activity: neither idle nor busy
        case when engine <> 'unknown' then
            coalesce(arrived, 0) = 0
            and coalesce(finished, 0) = 0
            and coalesce(http_requests, 0) = 0
            and coalesce(waiting_max, 0) = 0
            and coalesce(running_max, 0) = 0
            and coalesce(gen_tps_logged, 0) = 0
        end as idle,
        m.model,
    from joined as j
    left join models as m using (engine, instance)
)

select * from final
