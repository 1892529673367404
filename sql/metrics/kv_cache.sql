-- kv_cache: GPU KV-cache usage and preemptions over time.
-- Grain: one row per logged snapshot that carries KV usage (or KV blocks).
-- Engines: vLLM (`GPU KV cache usage: x%` of the stats line -> fraction; preemptions: V1
--   `Preemptions: N` field (v0.12+, printed only when > 0) and V0 preemption warnings, which
--   vLLM logs only for every 50th preemption), TensorRT-LLM (used / max KV cache blocks).
--   TGI logs no KV usage: no rows (see metric_availability).
-- Columns: ts (UTC), engine, instance, kv_usage (fraction 0..1), kv_blocks_used,
--   kv_blocks_total (blocks), preemptions (count the stats line reports for its interval;
--   null when the line has no such field), preemption_lines (preemption warnings logged in
--   (previous snapshot, ts]; each stands for up to 50 preemptions in vLLM V0).
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

final as (
    select
        s.ts,
        s.engine,
        s.instance,
        s.kv_usage,
        s.kv_blocks_used,
        s.kv_blocks_total,
        s.preemptions,
        c.preemption_lines,
    from snapshots as s
    join counted as c using (snap_id)
)

select * from final
