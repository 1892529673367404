-- latency_percentiles: request latency percentiles per time window.
-- Grain: one row per (engine, instance, model, window) with at least one finished request;
--   a request belongs to the window in which it FINISHED (finish_ts), windows are
--   `window_s` seconds (default 60) aligned to the Unix epoch.
-- Percentiles are quantile_cont (linear interpolation between the two nearest ranks, like
--   numpy's default), over the requests that carry the value; null when none does.
-- Engines: TGI (e2e, queue, per-token exact to the ns from the `Success` line; TTFT is not
--   logged: null), vLLM (e2e ESTIMATED from the arrival and finish lines at 1 s resolution,
--   for V0 servers that log `Finished request` and V1 servers with --enable-log-outputs, which
--   also give TTFT / TPOT, estimated, for streamed requests; queue null), client (benchmark
--   results files: exact e2e / TTFT / TPOT of requests no server log accounts for),
--   TensorRT-LLM: no per-request lines, no rows. See metric_availability.
-- Columns: window_start, window_end (UTC), engine, instance, model, n (finished requests),
--   n_e2e, n_ttft, n_tpot, n_queue (requests carrying each value),
--   p50_/p90_/p95_/p99_ of ttft_s, tpot_s, e2e_s, queue_s (s), max_e2e_s (s),
--   e2e_estimated (true when any e2e_s in the window was derived from 1 s log timestamps),
--   latency_source (what the window's latencies rest on, requests.latency_source: 'client'
--   (a benchmark client's exact figures), 'wrapper' (a container wrapper's fine timestamps),
--   'log' (the server log), 'scrape' (the server's /metrics histograms), or 'mixed'),
--   ttft_source, tpot_source, e2e_source, queue_source (each metric's: 'scrape' for a bucket
--   estimate, else the window's latency_source; null without a value), bucket_estimate (true
--   when a value of the row is a /metrics histogram's bucket estimate).
-- A metric no request of the window carries (vLLM V1's default log has no per-request
--   latency) comes from the server's /metrics histograms when they were scraped
--   (scraped_latency: PromQL's histogram_quantile over the window's bucket increases, exact
--   only to a bucket's width); n is then the e2e histogram's count of finished requests.
-- Each request counts with its best latency (requests.e2e_s / ttft_s / tpot_s: the client's
--   exact figure where a results file names it, else the server log's).
create or replace view latency_percentiles as
with

params as (
    select coalesce(try_cast(getvariable('window_s') as double), 60.0) as window_s
),

finished as (
    select
        r.*,
        floor(epoch(r.finish_ts) / p.window_s) * p.window_s as window_start_s,
        p.window_s,
    from requests as r
    cross join params as p
    where r.status = 'finished'
      and r.finish_ts is not null
),

-- one quantile pass per metric (a list of four levels), not one per level
quantiles as (
    select
        window_start_s,
        window_s,
        engine,
        instance,
        model,
        count(*) as n,
        count(e2e_s) as n_e2e,
        count(ttft_s) as n_ttft,
        count(tpot_s) as n_tpot,
        count(queue_s) as n_queue,
        quantile_cont(ttft_s, [0.50, 0.90, 0.95, 0.99]) as q_ttft,
        quantile_cont(tpot_s, [0.50, 0.90, 0.95, 0.99]) as q_tpot,
        quantile_cont(e2e_s, [0.50, 0.90, 0.95, 0.99]) as q_e2e,
        max(e2e_s) as max_e2e_s,
        quantile_cont(queue_s, [0.50, 0.90, 0.95, 0.99]) as q_queue,
        coalesce(bool_or(e2e_estimated), false) as e2e_estimated,
        -- two sources or more: their least and greatest differ (a count of distinct values
        -- would cost a second aggregation over every request)
        case when min(latency_source) <> max(latency_source) then 'mixed' else max(latency_source) end as latency_source,
    from finished
    group by window_start_s, window_s, engine, instance, model
),

final as (
    select
        to_timestamp(window_start_s) as window_start,
        to_timestamp(window_start_s + window_s) as window_end,
        engine,
        instance,
        model,
        n,
        n_e2e,
        n_ttft,
        n_tpot,
        n_queue,
        q_ttft[1] as p50_ttft_s,
        q_ttft[2] as p90_ttft_s,
        q_ttft[3] as p95_ttft_s,
        q_ttft[4] as p99_ttft_s,
        q_tpot[1] as p50_tpot_s,
        q_tpot[2] as p90_tpot_s,
        q_tpot[3] as p95_tpot_s,
        q_tpot[4] as p99_tpot_s,
        q_e2e[1] as p50_e2e_s,
        q_e2e[2] as p90_e2e_s,
        q_e2e[3] as p95_e2e_s,
        q_e2e[4] as p99_e2e_s,
        max_e2e_s,
        q_queue[1] as p50_queue_s,
        q_queue[2] as p90_queue_s,
        q_queue[3] as p95_queue_s,
        q_queue[4] as p99_queue_s,
        e2e_estimated,
        latency_source,
    from quantiles
),

-- the server's /metrics histograms (scraped_latency, the same windows), one row per window
scraped as (
    select
        window_start, window_end, engine, instance,
        min(model) as model,
        max(n) filter (where meaning = 'e2e') as n_e2e,
        max(n) filter (where meaning = 'ttft') as n_ttft,
        max(n) filter (where meaning = 'tpot') as n_tpot,
        max(n) filter (where meaning = 'queue') as n_queue,
        max(p50_s) filter (where meaning = 'ttft') as p50_ttft_s,
        max(p90_s) filter (where meaning = 'ttft') as p90_ttft_s,
        max(p95_s) filter (where meaning = 'ttft') as p95_ttft_s,
        max(p99_s) filter (where meaning = 'ttft') as p99_ttft_s,
        max(p50_s) filter (where meaning = 'tpot') as p50_tpot_s,
        max(p90_s) filter (where meaning = 'tpot') as p90_tpot_s,
        max(p95_s) filter (where meaning = 'tpot') as p95_tpot_s,
        max(p99_s) filter (where meaning = 'tpot') as p99_tpot_s,
        max(p50_s) filter (where meaning = 'e2e') as p50_e2e_s,
        max(p90_s) filter (where meaning = 'e2e') as p90_e2e_s,
        max(p95_s) filter (where meaning = 'e2e') as p95_e2e_s,
        max(p99_s) filter (where meaning = 'e2e') as p99_e2e_s,
        max(p50_s) filter (where meaning = 'queue') as p50_queue_s,
        max(p90_s) filter (where meaning = 'queue') as p90_queue_s,
        max(p95_s) filter (where meaning = 'queue') as p95_queue_s,
        max(p99_s) filter (where meaning = 'queue') as p99_queue_s,
    from scraped_latency
    where meaning in ('ttft', 'tpot', 'e2e', 'queue')
    group by all
),

-- each metric of a window from the requests that carry it, else from the histograms
best as (
    select
        window_start,
        window_end,
        engine,
        instance,
        coalesce(l.model, s.model) as model,
        coalesce(l.n, s.n_e2e, 0) as n,
        case when l.n_e2e > 0 then l.n_e2e else coalesce(s.n_e2e, 0) end as n_e2e,
        case when l.n_ttft > 0 then l.n_ttft else coalesce(s.n_ttft, 0) end as n_ttft,
        case when l.n_tpot > 0 then l.n_tpot else coalesce(s.n_tpot, 0) end as n_tpot,
        case when l.n_queue > 0 then l.n_queue else coalesce(s.n_queue, 0) end as n_queue,
        coalesce(l.p50_ttft_s, s.p50_ttft_s) as p50_ttft_s,
        coalesce(l.p90_ttft_s, s.p90_ttft_s) as p90_ttft_s,
        coalesce(l.p95_ttft_s, s.p95_ttft_s) as p95_ttft_s,
        coalesce(l.p99_ttft_s, s.p99_ttft_s) as p99_ttft_s,
        coalesce(l.p50_tpot_s, s.p50_tpot_s) as p50_tpot_s,
        coalesce(l.p90_tpot_s, s.p90_tpot_s) as p90_tpot_s,
        coalesce(l.p95_tpot_s, s.p95_tpot_s) as p95_tpot_s,
        coalesce(l.p99_tpot_s, s.p99_tpot_s) as p99_tpot_s,
        coalesce(l.p50_e2e_s, s.p50_e2e_s) as p50_e2e_s,
        coalesce(l.p90_e2e_s, s.p90_e2e_s) as p90_e2e_s,
        coalesce(l.p95_e2e_s, s.p95_e2e_s) as p95_e2e_s,
        coalesce(l.p99_e2e_s, s.p99_e2e_s) as p99_e2e_s,
        l.max_e2e_s,
        coalesce(l.p50_queue_s, s.p50_queue_s) as p50_queue_s,
        coalesce(l.p90_queue_s, s.p90_queue_s) as p90_queue_s,
        coalesce(l.p95_queue_s, s.p95_queue_s) as p95_queue_s,
        coalesce(l.p99_queue_s, s.p99_queue_s) as p99_queue_s,
        coalesce(l.e2e_estimated and l.p50_e2e_s is not null, false) as e2e_estimated,
        case when l.p50_ttft_s is not null then l.latency_source when s.p50_ttft_s is not null then 'scrape' end as ttft_source,
        case when l.p50_tpot_s is not null then l.latency_source when s.p50_tpot_s is not null then 'scrape' end as tpot_source,
        case when l.p50_e2e_s is not null then l.latency_source when s.p50_e2e_s is not null then 'scrape' end as e2e_source,
        case when l.p50_queue_s is not null then l.latency_source when s.p50_queue_s is not null then 'scrape' end as queue_source,
        -- which values are the histograms' (true: at least one is a bucket estimate)
        (l.p50_ttft_s is null and s.p50_ttft_s is not null) or (l.p50_tpot_s is null and s.p50_tpot_s is not null)
            or (l.p50_e2e_s is null and s.p50_e2e_s is not null) or (l.p50_queue_s is null and s.p50_queue_s is not null)
            as bucket_estimate,
        coalesce(l.p50_ttft_s, l.p50_tpot_s, l.p50_e2e_s, l.p50_queue_s) is not null as any_logged,
        l.latency_source as logged_source,
    from final as l
    full join scraped as s using (window_start, window_end, engine, instance)
)

select
    * exclude (bucket_estimate, any_logged, logged_source),
    case
        when not bucket_estimate then logged_source
        when any_logged then 'mixed'
        else 'scrape'
    end as latency_source,
    bucket_estimate,
from best
