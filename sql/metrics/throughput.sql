-- throughput: requests and tokens per second, per time window.
-- Grain: one row per (engine, instance, window) of the `windows` grid (empty windows
--   included). Counts are null, not 0, for an instance whose log has no lines of that kind
--   at all (we cannot tell "no requests" from "requests not logged"): e.g. vLLM V1 logs
--   arrivals but never a finish, and TensorRT-LLM only the requests that failed, so their
--   finished / requests_per_s are null.
-- Engines: vLLM (arrivals/finishes from request lines when request logging is on; logged
--   prompt/generation tokens/s averaged from the stats lines), TGI (finished requests from
--   `Success` lines; tokens when the parser could tell them), TensorRT-LLM (logged rates
--   only where its stats carry them; HTTP access lines of trtllm-serve), any engine with
--   HTTP access lines (http_requests).
-- Columns: window_start, window_end (UTC), engine, instance, arrived, finished, aborted
--   (requests), requests_per_s (finished / window_s), prompt_tokens_per_s,
--   output_tokens_per_s (tokens/s, summed over requests finished in the window),
--   prompt_tps_logged, gen_tps_logged (tokens/s: mean of the engine's logged averages in the
--   window), http_requests, http_errors (HTTP status >= 500), http_requests_per_s,
--   failed (requests that failed in the window: an error line about them, or their engine
--   died with them in it; counted apart from `aborted`, which are client aborts and
--   cancellations; null for an instance that logs no per-request lines).
create or replace view throughput as
with

params as (
    select coalesce(try_cast(getvariable('window_s') as double), 60.0) as window_s
),

-- read twice (arrivals, finishes) rather than materialised: copying millions of rows costs
-- more than a second scan of the columns
reqs as not materialized (
    select engine, instance, arrival_ts, finish_ts, status, prompt_tokens, output_tokens,
    from requests
),

http as (
    select engine, instance, ts, http_status,
    from events
    where event = 'http_access' and ts is not null
),

http_instances as (
    select distinct engine, instance from http
),

-- each fact goes to the window holding its time (an equality join, not a range join)
arrivals as (
    select
        engine,
        instance,
        cast(floor(epoch(arrival_ts) / p.window_s) as bigint) as window_index,
        count(*) as arrived,
    from reqs, params as p
    where arrival_ts is not null
    group by all
),

finishes as (
    select
        engine,
        instance,
        cast(floor(epoch(finish_ts) / p.window_s) as bigint) as window_index,
        count(*) filter (where status = 'finished') as finished,
        count(*) filter (where status = 'aborted') as aborted,
        count(*) filter (where status = 'failed') as failed,
        sum(prompt_tokens) filter (where status = 'finished') as prompt_tokens,
        sum(output_tokens) filter (where status = 'finished') as output_tokens,
    from reqs, params as p
    where finish_ts is not null
    group by all
),

request_instances as (
    -- which request facts the instance logs at all: vLLM V1 logs arrivals but never a finish
    -- (read off the per-window counts, not the millions of requests again)
    select
        engine,
        instance,
        bool_or(arrived > 0) as logs_arrivals,
        bool_or(finished > 0) as logs_finishes,
        bool_or(aborted > 0) as logs_aborts,
        bool_or(failed > 0) as logs_failures,
    from (
        select engine, instance, arrived, 0 as finished, 0 as aborted, 0 as failed, from arrivals
        union all
        select engine, instance, 0, finished, aborted, failed, from finishes
    )
    group by engine, instance
),

logged_rates as (
    select
        engine,
        instance,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        avg(prompt_tps) as prompt_tps_logged,
        avg(gen_tps) as gen_tps_logged,
    from engine_stats, params as p
    group by all
),

http_counts as (
    select
        engine,
        instance,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        count(*) as http_requests,
        count(*) filter (where http_status >= 500) as http_errors,
    from http, params as p
    group by all
),

final as (
    select
        w.window_start,
        w.window_end,
        w.engine,
        w.instance,
        case when ri.logs_arrivals then coalesce(a.arrived, 0) end as arrived,
        case when ri.logs_finishes then coalesce(f.finished, 0) end as finished,
        case when ri.logs_finishes or ri.logs_aborts or ri.logs_failures then coalesce(f.aborted, 0) end as aborted,
        case when ri.logs_finishes then coalesce(f.finished, 0) / w.window_s end as requests_per_s,
        f.prompt_tokens / w.window_s as prompt_tokens_per_s,
        f.output_tokens / w.window_s as output_tokens_per_s,
        lr.prompt_tps_logged,
        lr.gen_tps_logged,
        case when hi.instance is not null then coalesce(h.http_requests, 0) end as http_requests,
        case when hi.instance is not null then coalesce(h.http_errors, 0) end as http_errors,
        case when hi.instance is not null then coalesce(h.http_requests, 0) / w.window_s end as http_requests_per_s,
        case when ri.logs_arrivals or ri.logs_finishes or ri.logs_aborts or ri.logs_failures
            then coalesce(f.failed, 0) end as failed,
    from windows as w
    left join request_instances as ri using (engine, instance)
    left join http_instances as hi using (engine, instance)
    left join arrivals as a using (engine, instance, window_index)
    left join finishes as f using (engine, instance, window_index)
    left join logged_rates as lr using (engine, instance, window_index)
    left join http_counts as h using (engine, instance, window_index)
)

select * from final
