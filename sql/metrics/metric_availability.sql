-- metric_availability: which metrics the logs of each engine can give, and why not.
-- Grain: one row per (engine, metric) for every engine present in `events` (except
--   `unknown`).
-- Columns: engine, metric, view (where the metric lives), available (true when this store
--   has at least one non-null value), n_values (values present), estimated (true when any
--   value present is reconstructed or derived rather than logged; for a metric with no
--   values, whether it would be), reason (readable: where the
--   value comes from, or why it is null), sources (the request latencies e2e_s / ttft_s /
--   tpot_s: how many values rest on each source, requests.latency_source, most first,
--   e.g. 'client 220, log 3'; any metric some of whose values the server's /metrics gave
--   where the log has none: those too, as 'scrape N' (latencies: the observations the
--   histograms counted in windows where no request carries the value); else null).
create or replace view metric_availability as
with

catalogue(engine, metric, view, estimated, provides, missing) as (
    -- each engine's rows, from its folder (parsers/engines/<engine>/availability.toml),
    -- written in when the view is loaded
    values $engine_availability
),

engines as (
    select distinct engine from events where engine is not null and engine <> 'unknown'
),

-- each view read once, the columns used below: DuckDB plans a view anew at every place a
-- query names it, and these are read by several branches each
request_rows as materialized (
    select engine, e2e_s, ttft_s, tpot_s, queue_s, e2e_estimated, ttft_estimated, latency_source, from requests
),
queue_rows as materialized (select engine, waiting, estimated, source, from queue_depth),
batch_rows as materialized (select engine, running, fill, estimated, source, from batch_fill),
kv_rows as materialized (select engine, kv_usage, preemptions, preemption_lines, source, from kv_cache),
latency_rows as materialized (
    select engine, n_e2e, n_ttft, n_tpot, n_queue, e2e_source, ttft_source, tpot_source, queue_source,
    from latency_percentiles
),

observed as (
    select engine, 'e2e_s' as metric, count(e2e_s) as n_values, bool_or(e2e_estimated) as est, from request_rows group by engine
    union all select engine, 'ttft_s', count(ttft_s), coalesce(bool_or(ttft_estimated and ttft_s is not null), false), from request_rows group by engine
    union all select engine, 'tpot_s', count(tpot_s), coalesce(bool_or(ttft_estimated and tpot_s is not null), false), from request_rows group by engine
    union all select engine, 'queue_s', count(queue_s), false, from request_rows group by engine
    union all select engine, 'waiting', count(waiting), bool_or(estimated), from queue_rows group by engine
    union all select engine, 'running', count(running), bool_or(estimated), from batch_rows group by engine
    union all select engine, 'fill', count(fill), bool_or(estimated and fill is not null), from batch_rows group by engine
    union all select engine, 'kv_usage', count(kv_usage), false, from kv_rows group by engine
    union all
    select engine, 'preemptions', count(preemptions) + count(*) filter (where preemption_lines > 0), false,
    from kv_rows group by engine
    union all select engine, 'gen_tps', count(gen_tps), false, from engine_stats group by engine
),

-- which source each request latency rests on (the client's exact figures, a wrapper's fine
-- timestamps, the server log)
latency_sources as (
    select engine, metric, string_agg(latency_source || ' ' || n, ', ' order by n desc, latency_source) as sources,
    from (
        select engine, 'e2e_s' as metric, latency_source, count(*) as n, from request_rows where e2e_s is not null group by all
        union all select engine, 'ttft_s', latency_source, count(*), from request_rows where ttft_s is not null group by all
        union all select engine, 'tpot_s', latency_source, count(*), from request_rows where tpot_s is not null group by all
    )
    where latency_source is not null
    group by engine, metric
),

-- values the server's /metrics gave where the log gives none (the views' source 'scraped',
-- latency_percentiles' per-metric 'scrape'), with the metric they were read from
scraped_values as (
    select v.engine, v.metric, v.n, v.latency, f.family,
    from (
        select engine, 'waiting' as metric, 'waiting' as meaning, count(*) as n, false as latency, from queue_rows where source = 'scraped' group by engine
        union all select engine, 'running', 'running', count(*), false, from batch_rows where source = 'scraped' group by engine
        union all select engine, 'fill', 'running', count(fill), false, from batch_rows where source = 'scraped' group by engine
        union all select engine, 'kv_usage', 'kv_usage', count(kv_usage), false, from kv_rows where source = 'scraped' group by engine
        union all select engine, 'preemptions', 'preemptions', count(preemptions), false, from kv_rows where source = 'scraped' group by engine
        union all select engine, 'e2e_s', 'e2e', sum(n_e2e), true, from latency_rows where e2e_source = 'scrape' group by engine
        union all select engine, 'ttft_s', 'ttft', sum(n_ttft), true, from latency_rows where ttft_source = 'scrape' group by engine
        union all select engine, 'tpot_s', 'tpot', sum(n_tpot), true, from latency_rows where tpot_source = 'scrape' group by engine
        union all select engine, 'queue_s', 'queue', sum(n_queue), true, from latency_rows where queue_source = 'scrape' group by engine
    ) as v
    left join (select engine, meaning, min(family) as family, from samples where meaning is not null group by all) as f
        using (engine, meaning)
    where v.n > 0
),

final as (
    select
        e.engine,
        c.metric,
        c.view,
        coalesce(o.n_values, 0) + coalesce(sv.n * sv.latency::int, 0) > 0 as available,
        coalesce(o.n_values, 0) + coalesce(sv.n * sv.latency::int, 0) as n_values,
        case when sv.latency then true else coalesce(o.est, c.estimated) end as estimated,
        case
            when sv.n is null then case when coalesce(o.n_values, 0) > 0 then c.provides else c.missing end
            -- the gauges' counts already hold the scraped rows; the latencies' do not
            when coalesce(o.n_values, 0) - case when sv.latency then 0 else sv.n end > 0 then
                c.provides || '; where the log gives none, the server''s /metrics (' || sv.family || ')'
            else 'from the server''s /metrics (' || sv.family
                || case when sv.latency then ', bucket estimates per window' else ', at each scrape' end
                || '); the log: ' || c.missing
        end as reason,
        case
            when sv.n is null then ls.sources
            else concat_ws(', ',
                coalesce(ls.sources, case when coalesce(o.n_values, 0) - sv.n * (not sv.latency)::int > 0
                    then 'log ' || (coalesce(o.n_values, 0) - sv.n * (not sv.latency)::int) end),
                'scrape ' || sv.n)
        end as sources,
    from engines as e
    join catalogue as c using (engine)
    left join observed as o on o.engine = e.engine and o.metric = c.metric
    left join latency_sources as ls on ls.engine = e.engine and ls.metric = c.metric
    left join scraped_values as sv on sv.engine = e.engine and sv.metric = c.metric
)

select * from final
