-- queue_depth: requests waiting in the engine's queue, over time.
-- Grain: one row per (engine, instance) per sample: each logged stats line where the engine
--   logs its queue, otherwise (TGI) one reconstructed sample every `queue_sample_s` seconds.
-- Engines: vLLM (`Pending:` / `Waiting:` of the stats line, logged), TensorRT-LLM (executor
--   stats: numQueuedRequests, logged; Triton stats carry no queue, so it is DERIVED as
--   Active Request Count - Scheduled Requests: requests the batch manager holds but did not
--   schedule), TGI (reconstructed from the exact per-request queue intervals of the
--   `Success` lines: an estimate that misses requests not finished in the log). An instance
--   with any logged or derived value is never reconstructed.
-- Columns: ts (UTC), engine, instance, waiting (requests), source ('logged' | 'derived' |
--   'reconstructed'), estimated (true unless logged).
create or replace view queue_depth as
with

logged as (
    select ts, engine, instance, waiting, 'logged' as source,
    from engine_stats
    where waiting is not null
    union all
    select ts, engine, instance, greatest(running - batch_size, 0) as waiting, 'derived' as source,
    from engine_stats
    where waiting is null
      and engine = 'trtllm'
      and running is not null
      and batch_size is not null
),

logged_instances as (
    select distinct engine, instance from logged
),

reconstructed as (
    select s.ts, s.engine, s.instance, s.waiting, 'reconstructed' as source,
    from request_state as s
    anti join logged_instances as l using (engine, instance)
),

final as (
    select ts, engine, instance, waiting, source, source <> 'logged' as estimated,
    from (select * from logged union all select * from reconstructed)
)

select * from final
