-- batch_fill: how full the running batch is, against the announced limits.
-- Grain: one row per (engine, instance) per sample: each logged stats / batch line, or (TGI,
--   reconstructed) one sample every `queue_sample_s` seconds.
-- Engines: vLLM (Running: of the stats line; max_num_seqs only when the log printed it in
--   its args), TensorRT-LLM (active / scheduled requests, Max Request Count or
--   maxNumSequences, context tokens vs maxNumTokens), TGI (running reconstructed from request
--   intervals; TGI announces no sequence limit, so fill is null unless a capacity line gave
--   max_num_seqs).
-- Columns: ts (UTC), engine, instance, running (requests in the batch: the scheduled count
--   when the engine logs one, else its running count), active (requests the engine reports
--   as running/active as logged; TensorRT-LLM's Active Request Count includes requests not
--   yet scheduled), batch_size (requests scheduled in the iteration, when logged),
--   max_num_seqs (requests: on the line, else the latest capacity announcement at or before
--   ts), fill (fraction 0..1: running / max_num_seqs), batch_tokens (tokens), max_batch_tokens (tokens),
--   token_fill (fraction: batch_tokens / max_batch_tokens), source ('logged' | 'scraped' |
--   'reconstructed'), estimated (true for reconstructed).
-- Where the log gives no running count (llama-server; vLLM without stats lines), the
--   server's own /metrics gauge at each scrape (scraped_gauges), ahead of a reconstruction.
create or replace view batch_fill as
with

logged as (
    select
        ts, engine, instance,
        coalesce(batch_size, running) as running,
        running as active,
        batch_size, batch_tokens, max_num_seqs,
        'logged' as source,
    from engine_stats
    where running is not null or batch_size is not null
),

logged_instances as (
    select distinct engine, instance from logged
),

scraped as (
    select
        g.ts, g.engine, g.instance, cast(round(g.value) as bigint) as running,
        cast(round(g.value) as bigint) as active,
        cast(null as bigint) as batch_size,
        cast(null as bigint) as batch_tokens,
        cast(null as bigint) as max_num_seqs,
        'scraped' as source,
    from scraped_gauges as g
    anti join logged_instances as l using (engine, instance)
    where g.meaning = 'running'
),

reconstructed as (
    select
        s.ts, s.engine, s.instance, s.running,
        s.running as active,
        cast(null as bigint) as batch_size,
        cast(null as bigint) as batch_tokens,
        cast(null as bigint) as max_num_seqs,
        'reconstructed' as source,
    from request_state as s
    anti join logged_instances as l using (engine, instance)
    anti join (select distinct engine, instance from scraped) as g using (engine, instance)
),

samples as (
    select * from logged
    union all
    select * from scraped
    union all
    select * from reconstructed
),

seq_limits as (
    select ts, engine, instance, max_num_seqs as announced_max_num_seqs,
    from events
    where event = 'capacity' and max_num_seqs is not null
),

token_limits as (
    select ts, engine, instance, max_batch_tokens,
    from events
    where event = 'capacity' and max_batch_tokens is not null
),

with_limits as (
    select
        s.*,
        coalesce(s.max_num_seqs, q.announced_max_num_seqs) as limit_seqs,
        t.max_batch_tokens,
    from samples as s
    asof left join seq_limits as q
        on s.engine = q.engine and s.instance = q.instance and s.ts >= q.ts
    asof left join token_limits as t
        on s.engine = t.engine and s.instance = t.instance and s.ts >= t.ts
),

final as (
    select
        ts,
        engine,
        instance,
        running,
        active,
        batch_size,
        limit_seqs as max_num_seqs,
        case when limit_seqs > 0 then running / limit_seqs end as fill,
        batch_tokens,
        max_batch_tokens,
        case when max_batch_tokens > 0 then batch_tokens / max_batch_tokens end as token_fill,
        source,
        source = 'reconstructed' as estimated,
    from with_limits
)

select * from final
