-- engine_stats: the engine's own state snapshots as a time series.
-- Grain: one row per logged snapshot (`engine_stats` event: vLLM periodic stats line every
--   ~5-10 s, TensorRT-LLM iteration-stats JSON) or per logged batch (`batch` event).
-- Engines: vLLM, TensorRT-LLM. TGI logs no state lines (its queue and running counts are
--   reconstructed from requests, see queue_depth / batch_fill).
-- Columns: ts (UTC), engine, instance, model, kind ('engine_stats' | 'batch'),
--   running, waiting, swapped, batch_size (requests), batch_tokens (tokens),
--   kv_usage (fraction 0..1; logged, else kv_blocks_used / kv_blocks_total),
--   kv_blocks_used, kv_blocks_total (blocks), prompt_tps, gen_tps (tokens/s, averaged by the
--   engine over its logging interval), max_num_seqs (requests, when the snapshot states it,
--   e.g. TensorRT-LLM "Max Request Count" / maxNumActiveRequests in attrs
--   `max_request_count`), preemptions (count the line reports, attrs
--   `preemptions`; null when the line has no such field), source, line.
create or replace view engine_stats as
with

-- one equality filter per kind, not `event in (...)`: DuckDB pushes an equality into the
-- Parquet scan and decodes the other columns (attrs above all) only for matching rows; an
-- IN list is applied after decoding every row (2 s of CPU over 10M request lines)
state_events as (
    select * from events where event = 'engine_stats'
    union all
    select * from events where event = 'batch'
),

snapshots as (
    select
        ts,
        engine,
        instance,
        model,
        event as kind,
        running,
        waiting,
        swapped,
        batch_size,
        batch_tokens,
        kv_usage,
        kv_blocks_used,
        kv_blocks_total,
        prompt_tps,
        gen_tps,
        coalesce(
            max_num_seqs,
            try_cast(try(json_extract_string(attrs, '$.max_request_count')) as bigint)
        ) as max_num_seqs,
        try_cast(try(json_extract_string(attrs, '$.preemptions')) as bigint) as preemptions,
        source,
        line,
    from state_events
    where ts is not null
),

final as (
    select
        ts,
        engine,
        instance,
        model,
        kind,
        running,
        waiting,
        swapped,
        batch_size,
        batch_tokens,
        coalesce(
            kv_usage,
            case when kv_blocks_total > 0 then kv_blocks_used / kv_blocks_total end
        ) as kv_usage,
        kv_blocks_used,
        kv_blocks_total,
        prompt_tps,
        gen_tps,
        max_num_seqs,
        preemptions,
        source,
        line,
    from snapshots
)

select * from final
