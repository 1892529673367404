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
-- Data parallel (vLLM `Engine 000:`, `Engine 001:` ... lines of one instance, printed together
--   each interval): the engines' lines of one second of the engine's own header (also under a
--   container wrapper, whose finer times differ from line to line) are one snapshot of the
--   instance, at the first line's time, running
--   / waiting / swapped / throughput summed and KV usage averaged; where the instance also
--   prints `N Engines Aggregated:`, that line is the snapshot and the per-engine ones are left
--   out.
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
        -- the data-parallel engine a vLLM stats line is about (null: the only one, or an
        -- aggregate of all); -1 marks an `N Engines Aggregated:` line
        case when engine = 'vllm' and event = 'engine_stats' and attrs like '%"engine%' then coalesce(
            try_cast(json_extract_string(attrs, '$.engine_index') as bigint),
            case when json_extract_string(attrs, '$.engines_aggregated') is not null then -1 end
        ) end as engine_index,
        -- the stats period a data-parallel line belongs to: the engine's own header time. Under
        -- a container wrapper `ts` is the wrapper's, microseconds apart from engine to engine,
        -- and the header's (in attrs `engine_ts`) is what the engines' lines share
        case when engine = 'vllm' and event = 'engine_stats' and attrs like '%"engine%'
            then coalesce(json_extract_string(attrs, '$.engine_ts'), cast(ts as varchar)) end as dp_key,
    from state_events
    where ts is not null
),

-- seconds of an instance in which a second data-parallel engine (index > 0) or an aggregate
-- reported: only those rows are regrouped
dp_seconds as (
    select engine, instance, dp_key, bool_or(engine_index = -1) as has_aggregate,
    from snapshots
    where engine_index is not null
    group by engine, instance, dp_key
    having max(engine_index) > 0 or bool_or(engine_index = -1)
),

-- (integer sums cast back to bigint: DuckDB sums bigints to hugeint, which would widen the
-- columns of every row in the union below)
dp_folded as (
    select
        min(s.ts) as ts, s.engine, s.instance, any_value(s.model) as model, 'engine_stats' as kind,
        cast(sum(s.running) as bigint) as running, cast(sum(s.waiting) as bigint) as waiting, cast(sum(s.swapped) as bigint) as swapped,
        cast(sum(s.batch_size) as bigint) as batch_size, cast(sum(s.batch_tokens) as bigint) as batch_tokens,
        avg(s.kv_usage) as kv_usage, cast(sum(s.kv_blocks_used) as bigint) as kv_blocks_used, cast(sum(s.kv_blocks_total) as bigint) as kv_blocks_total,
        sum(s.prompt_tps) as prompt_tps, sum(s.gen_tps) as gen_tps, cast(sum(s.max_num_seqs) as bigint) as max_num_seqs,
        cast(sum(s.preemptions) as bigint) as preemptions, min(s.source) as source, min(s.line) as line, cast(null as bigint) as engine_index,
        s.dp_key,
    from snapshots as s
    join dp_seconds as d using (engine, instance, dp_key)
    where s.kind = 'engine_stats' and s.engine_index >= 0 and not d.has_aggregate
    group by s.engine, s.instance, s.dp_key
),

snapshots_dp as (
    select s.* from snapshots as s
    anti join dp_seconds as d on d.engine = s.engine and d.instance = s.instance and d.dp_key = s.dp_key
        and s.kind = 'engine_stats' and s.engine_index >= 0
    union all
    select * from dp_folded
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
    from snapshots_dp
)

select * from final
