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
--   'log' (the server log), or 'mixed').
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
        case when count(distinct latency_source) > 1 then 'mixed' else max(latency_source) end as latency_source,
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
)

select * from final
