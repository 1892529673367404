-- queue_depth: requests waiting in the engine's queue, over time.
-- Grain: one row per (engine, instance) per sample: each logged stats line where the engine
--   logs its queue, otherwise (TGI) one reconstructed sample every `queue_sample_s` seconds.
-- Engines: vLLM (`Pending:` / `Waiting:` of the stats line, logged), TensorRT-LLM (queued
--   requests + active requests not yet scheduled: executor stats log both (numQueuedRequests,
--   numActiveRequests - numScheduledRequests); Triton stats only the second (Active Request
--   Count - Scheduled Requests), so there it is DERIVED and a lower bound once the active set
--   is full (Max Request Count): requests beyond it queue unseen), TGI (reconstructed from the
--   exact per-request queue intervals of the `Success` lines: an estimate that misses
--   requests not finished in the log). An instance with any logged or derived value is
--   never reconstructed. Where the log gives no queue (llama-server logs none: its
--   requests_deferred gauge counts requests waiting for a free slot; vLLM without stats
--   lines), the server's own /metrics gauge at each scrape (scraped_gauges), ahead of a
--   reconstruction.
-- Columns: ts (UTC), engine, instance, waiting (requests), source ('logged' | 'derived' |
--   'scraped' | 'reconstructed'), estimated (true unless logged or scraped).
create or replace view queue_depth as
with

logged as (
    select ts, engine, instance, waiting, 'logged' as source,
    from engine_stats
    where waiting is not null
      and not (engine = 'trtllm' and running is not null and batch_size is not null)
    union all
    -- TensorRT-LLM: requests wait in two places: in the executor's queue (numQueuedRequests,
    -- executor stats only) and inside its active set until the capacity scheduler fits them
    -- (active - scheduled)
    select
        ts,
        engine,
        instance,
        coalesce(waiting, 0) + greatest(running - batch_size, 0) as waiting,
        case when waiting is not null then 'logged' else 'derived' end as source,
    from engine_stats
    where engine = 'trtllm'
      and running is not null
      and batch_size is not null
),

logged_instances as (
    select distinct engine, instance from logged
),

scraped as (
    select g.ts, g.engine, g.instance, cast(round(g.value) as bigint) as waiting, 'scraped' as source,
    from scraped_gauges as g
    anti join logged_instances as l using (engine, instance)
    where g.meaning = 'waiting'
),

reconstructed as (
    select s.ts, s.engine, s.instance, s.waiting, 'reconstructed' as source,
    from request_state as s
    anti join logged_instances as l using (engine, instance)
    anti join (select distinct engine, instance from scraped) as g using (engine, instance)
),

final as (
    select ts, engine, instance, waiting, source, source not in ('logged', 'scraped') as estimated,
    from (select * from logged union all select * from scraped union all select * from reconstructed)
)

select * from final
