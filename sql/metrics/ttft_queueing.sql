-- ttft_queueing: how much of the tail time to first token is queueing, and what the queue was
--   when the slow requests arrived.
-- Grain: one row per (engine, instance) with at least one request carrying a TTFT.
-- TTFT per request: its best (requests.ttft_s): the benchmark client's own (exact) where a
--   client results file names the request, else the server log's (TGI-like engines log it;
--   vLLM V1 with `--enable-log-outputs` gives it estimated to the log's time resolution), of
--   the requests that finished (as the client's own percentiles are over its successes).
-- Queue at arrival: the last engine_stats snapshot (data-parallel engines summed) at or
--   before the client sent the request (client-matched requests, requests.waiting_at_arrival),
--   else before the server logged its arrival (vLLM prints one every 10 s by default, so this
--   is the queue up to one stats period before the request came in).
-- Queueing in the tail: a request that waits for nobody gets its first token after its
--   prefill alone, so the median TTFT of the requests that arrived to an empty queue
--   (waiting = 0) is the no-queue baseline; what the p99 TTFT has beyond it, less the time
--   the slow requests took to reach the server (frontend_at_p99_s), is time spent waiting
--   for the batch. Where the engine logs each request's queue time (queue_s, TGI),
--   the slow requests' mean queue_s is used instead.
-- Columns: engine, instance, ttft_source ('client' | 'server_log' | 'mixed'; the server
--   log's figures timed by a container wrapper count as 'server_log'), n_requests,
--   p50_ttft_s, p90_ttft_s, p99_ttft_s (s), baseline_ttft_s (s; median TTFT of requests that
--   arrived to an empty queue, null when none did), queueing_at_p99_s (s), queueing_share_p99
--   (fraction 0..1 of the p99 TTFT), n_slow (requests with TTFT >= p99), slow_waiting_avg,
--   slow_waiting_max, slow_running_avg (requests; the queue and batch when the slow requests
--   arrived), all_waiting_avg (requests; the same over every request), first_slow_arrival_ts,
--   last_slow_arrival_ts (UTC), ttft_estimated (true when any TTFT came from 1 s log times),
--   frontend_at_p99_s (s; null without client-matched requests): how long the slow requests
--   took to reach the server (requests.frontend_delay_s, client send -> the server's arrival)
--   beyond what the requests that found no queue took (the clocks' offset, not a delay), the
--   part of the p99 spent before any engine saw the request: an API server short of CPU, a
--   proxy's queue; queueing_at_p99_s leaves it out. frontend_share_p99 (fraction 0..1).
create or replace view ttft_queueing as
with

served as (
    select
        engine, instance, request_key, arrival_ts, queue_s,
        ttft_s as ttft,
        case when latency_source = 'client' then 'client' else 'server_log' end as ttft_from,
        ttft_estimated as estimated,
        waiting_at_arrival, running_at_arrival, frontend_delay_s,
    from requests
    where ttft_s is not null and arrival_ts is not null and status = 'finished' and engine <> 'client'
),

-- (data-parallel engines summed: engine_stats folds their lines of one period)
stats_series as (
    select engine, instance, ts, waiting, running from engine_stats where kind = 'engine_stats'
),

-- the queue at arrival for every request with a TTFT (requests carries it for client-matched
-- ones only: an ASOF join over every request of a large store costs seconds)
with_queue as (
    select
        s.* exclude (waiting_at_arrival, running_at_arrival),
        coalesce(s.waiting_at_arrival, q.waiting) as waiting,
        coalesce(s.running_at_arrival, q.running) as running,
    from served as s
    asof left join stats_series as q on q.engine = s.engine and q.instance = s.instance and s.arrival_ts >= q.ts
),

tails as (
    select
        engine, instance,
        case when count(distinct ttft_from) > 1 then 'mixed' else any_value(ttft_from) end as ttft_source,
        count(*) as n_requests,
        quantile_cont(ttft, 0.50) as p50_ttft_s,
        quantile_cont(ttft, 0.90) as p90_ttft_s,
        quantile_cont(ttft, 0.99) as p99_ttft_s,
        quantile_cont(ttft, 0.50) filter (where waiting = 0) as baseline_ttft_s,
        -- what the clocks put between a request that waited for nobody and the server: the
        -- client's placement on the wall clock and the log's whole seconds, not a delay
        quantile_cont(frontend_delay_s, 0.50) filter (where waiting = 0) as baseline_frontend_s,
        avg(waiting) as all_waiting_avg,
        bool_or(estimated) as ttft_estimated,
    from with_queue
    group by engine, instance
),

slow as (
    select
        w.engine, w.instance,
        count(*) as n_slow,
        avg(w.waiting) as slow_waiting_avg,
        max(w.waiting) as slow_waiting_max,
        avg(w.running) as slow_running_avg,
        avg(w.queue_s) as slow_queue_s,
        avg(w.frontend_delay_s) as slow_frontend_s,
        min(w.arrival_ts) as first_slow_arrival_ts,
        max(w.arrival_ts) as last_slow_arrival_ts,
    from with_queue as w
    join tails as t using (engine, instance)
    where w.ttft >= t.p99_ttft_s
    group by w.engine, w.instance
),

split as (
    select
        t.*,
        s.* exclude (engine, instance),
        case when s.slow_frontend_s is not null
             then greatest(s.slow_frontend_s - coalesce(t.baseline_frontend_s, 0), 0) end as frontend_at_p99_s,
    from tails as t
    left join slow as s using (engine, instance)
),

final as (
    select
        t.engine, t.instance, t.ttft_source, t.n_requests,
        t.p50_ttft_s, t.p90_ttft_s, t.p99_ttft_s, t.baseline_ttft_s,
        coalesce(t.slow_queue_s, greatest(t.p99_ttft_s - t.baseline_ttft_s - coalesce(t.frontend_at_p99_s, 0), 0)) as queueing_at_p99_s,
        least(coalesce(t.slow_queue_s, greatest(t.p99_ttft_s - t.baseline_ttft_s - coalesce(t.frontend_at_p99_s, 0), 0)) / nullif(t.p99_ttft_s, 0), 1) as queueing_share_p99,
        t.n_slow, t.slow_waiting_avg, t.slow_waiting_max, t.slow_running_avg, t.all_waiting_avg,
        t.first_slow_arrival_ts, t.last_slow_arrival_ts, t.ttft_estimated,
        t.frontend_at_p99_s,
        least(t.frontend_at_p99_s / nullif(t.p99_ttft_s, 0), 1) as frontend_share_p99,
    from split as t
)

select * from final
