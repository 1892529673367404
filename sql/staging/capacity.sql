-- capacity: the limits each server announced, latest announcement per limit.
-- Grain: one row per (engine, instance) that announced at least one limit.
-- Engines: vLLM (`# GPU blocks`, `GPU KV cache size: N tokens`, `max_num_batched_tokens`,
--   max_num_seqs only when printed in args), TGI (`Setting max batch total tokens`, KV-cache
--   blocks), TensorRT-LLM (maxNumSequences / maxBatchSize, maxNumTokens, KV blocks; also the
--   "Max KV cache blocks" of its iteration stats).
-- Columns: engine, instance, max_num_seqs (requests), max_batch_tokens (tokens),
--   kv_blocks_total (blocks), kv_capacity_tokens (tokens), announced_ts (UTC, the latest
--   capacity line of the instance). A limit never announced stays null.
create or replace view capacity as
with

limits as (
    select
        ts,
        engine,
        instance,
        max_num_seqs,
        max_batch_tokens,
        kv_blocks_total,
        kv_capacity_tokens,
        event = 'capacity' as announced,
        line,
    from events
    where event = 'capacity'
       or (event = 'engine_stats' and (kv_blocks_total is not null or max_num_seqs is not null))
),

-- (a log without a clock has no ts on any line: its last announcement by line)
final as (
    select
        engine,
        instance,
        coalesce(arg_max(max_num_seqs, ts) filter (where max_num_seqs is not null),
                 arg_max(max_num_seqs, line) filter (where max_num_seqs is not null)) as max_num_seqs,
        coalesce(arg_max(max_batch_tokens, ts) filter (where max_batch_tokens is not null),
                 arg_max(max_batch_tokens, line) filter (where max_batch_tokens is not null)) as max_batch_tokens,
        coalesce(arg_max(kv_blocks_total, ts) filter (where kv_blocks_total is not null),
                 arg_max(kv_blocks_total, line) filter (where kv_blocks_total is not null)) as kv_blocks_total,
        coalesce(arg_max(kv_capacity_tokens, ts) filter (where kv_capacity_tokens is not null),
                 arg_max(kv_capacity_tokens, line) filter (where kv_capacity_tokens is not null)) as kv_capacity_tokens,
        max(ts) filter (where announced) as announced_ts,
    from limits
    group by engine, instance
)

select * from final
