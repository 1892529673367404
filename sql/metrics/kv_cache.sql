-- kv_cache: GPU KV-cache usage and preemptions over time.
-- Grain: one row per logged snapshot that carries KV usage (or KV blocks), and per scrape
--   where the log gives no KV usage or no preemptions (below).
-- Engines: vLLM (`GPU KV cache usage: x%` of the stats line -> fraction; preemptions: V1
--   `Preemptions: N` field (v0.12+, printed only when > 0) and V0 preemption warnings, which
--   vLLM logs only for every 50th preemption), TensorRT-LLM (used / max KV cache blocks).
--   TGI logs no KV usage: no rows (see metric_availability).
-- Scraped (the server's /metrics, scraped_gauges / scraped_counters), per instance and
--   metric where the log gives none: KV usage at each scrape (llama-server, TGI log none), and
--   preemptions as the counter's increase since the previous scrape (vLLM V1 before v0.12
--   logs none, and vLLM 0.32 never prints its `Preemptions:` field; SGLang's retractions),
--   on rows of their own (kv_usage null where only the preemptions are scraped).
-- Columns: ts (UTC), engine, instance, kv_usage (fraction 0..1), kv_blocks_used,
--   kv_blocks_total (blocks), preemptions (count the stats line reports for its interval, or
--   the scraped counter's increase since the previous scrape; null when neither gives one),
--   preemption_lines (preemption warnings logged in (previous snapshot, ts]; each stands for
--   up to 50 preemptions in vLLM V0), source ('logged' | 'scraped').
create or replace view kv_cache as
with

snapshots as (
    select
        ts,
        engine,
        instance,
        kv_usage,
        kv_blocks_used,
        kv_blocks_total,
        preemptions,
        lag(ts) over (partition by engine, instance order by ts, line) as prev_ts,
        row_number() over (order by engine, instance, ts, line) as snap_id,
    from engine_stats
    where kv_usage is not null
),

preemption_events as (
    select engine, instance, ts,
    from events
    where event = 'preemption' and ts is not null
),

counted as (
    select
        s.snap_id,
        count(p.ts) as preemption_lines,
    from snapshots as s
    left join preemption_events as p
        on p.engine = s.engine
        and p.instance = s.instance
        and p.ts <= s.ts
        and (s.prev_ts is null or p.ts > s.prev_ts)
    group by s.snap_id
),

logged as (
    select
        s.ts,
        s.engine,
        s.instance,
        s.kv_usage,
        s.kv_blocks_used,
        s.kv_blocks_total,
        s.preemptions,
        c.preemption_lines,
        'logged' as source,
    from snapshots as s
    join counted as c using (snap_id)
),

-- what the log gives, per instance: its KV usage, its preemption counts or warnings
log_kv as (
    select distinct engine, instance from logged
),

log_preemptions as (
    select distinct engine, instance from logged where preemptions is not null or preemption_lines > 0
    union
    select distinct engine, instance from preemption_events
),

scraped_kv as (
    select ts, engine, instance, value as kv_usage,
    from scraped_gauges
    anti join log_kv using (engine, instance)
    where meaning = 'kv_usage'
),

scraped_preemptions as (
    select ts, engine, instance, cast(round(increase) as bigint) as preemptions,
    from scraped_counters
    anti join log_preemptions using (engine, instance)
    where meaning = 'preemptions'
),

scraped as (
    select
        ts,
        engine,
        instance,
        k.kv_usage,
        cast(null as bigint) as kv_blocks_used,
        cast(null as bigint) as kv_blocks_total,
        p.preemptions,
        0 as preemption_lines,
        'scraped' as source,
    from scraped_kv as k
    full join scraped_preemptions as p using (ts, engine, instance)
),

final as (
    select * from logged
    union all
    select * from scraped
)

select * from final
