-- scraped_gauges: what the engine's own /metrics said of its queue, batch and KV cache.
-- Grain: one row per (engine, instance, meaning, scrape time) over the scraped samples
--   (`samples`: files of /metrics scrapes given to `servelens ingest`, read by their content).
-- Engines: every engine whose metric names servelens maps (pipeline/samples.py METRIC_NAMES):
--   vLLM num_requests_running / _waiting / kv_cache_usage_perc, SGLang num_running_reqs /
--   num_queue_reqs / token_usage, llama.cpp requests_processing / requests_deferred (requests
--   waiting for a free slot) / kv_cache_usage_ratio, TGI batch_current_size / queue_size,
--   TensorRT-LLM (Triton request and KV block metrics, trtllm-serve KV utilisation).
-- Counts are summed over the label sets of one scrape (a data-parallel vLLM publishes one
--   series per engine), fractions averaged.
-- Columns: ts (UTC, the scrape), engine, instance, meaning ('running' | 'waiting' |
--   'swapped' | 'kv_usage'), value (requests, or fraction 0..1 for kv_usage), n_series,
--   metric (the engine's metric name).
create or replace view scraped_gauges as
with

gauges as (
    select ts, engine, instance, meaning, name, value,
    from samples
    where meaning in ('running', 'waiting', 'swapped', 'kv_usage')
      and type = 'gauge'
      and value is not null
      and not isnan(value)
),

final as (
    select
        ts,
        engine,
        instance,
        meaning,
        case when meaning = 'kv_usage' then avg(value) else sum(value) end as value,
        count(*) as n_series,
        min(name) as metric,
    from gauges
    group by ts, engine, instance, meaning
)

select * from final
