-- scraped_counters: the engine's /metrics counters, as increases between scrapes.
-- Grain: one row per (engine, instance, meaning, scrape time), every scrape but each
--   series' first.
-- A counter that goes down was reset (the server restarted): as Prometheus' rate() and
--   increase() take it, the increase since the previous scrape is then the new value
--   itself. Increases are per series (name and labels), then summed over the series of a
--   meaning; summed over a window they give the exact increase over it (no extrapolation to
--   the window's edges, which Prometheus' increase() adds).
-- Engines: vLLM num_preemptions / prompt_tokens / generation_tokens / request_success,
--   SGLang num_retracted_requests and token counters, llama.cpp prompt_tokens /
--   tokens_predicted, TGI request_success / request_input_count, TensorRT-LLM request_success.
-- Columns: ts (UTC), prev_ts (UTC, the series' previous scrape), engine, instance, meaning
--   ('preemptions' | 'prompt_tokens' | 'generation_tokens' | 'requests_finished' |
--   'requests_arrived'), value (the counter's value, summed over its series), increase
--   (since the previous scrape, resets handled), resets (series found reset), metric.
create or replace view scraped_counters as
with

series as (
    select
        ts, engine, instance, meaning, name, labels, value,
        lag(value) over (partition by engine, instance, name, labels order by ts) as prev,
        lag(ts) over (partition by engine, instance, name, labels order by ts) as prev_ts,
    from samples
    where type = 'counter'
      and meaning is not null
      and not ends_with(name, '_created')
      and value is not null
      and not isnan(value)
),

final as (
    select
        ts,
        min(prev_ts) as prev_ts,
        engine,
        instance,
        meaning,
        sum(value) as value,
        sum(case when value >= prev then value - prev else value end) as increase,
        count(*) filter (where value < prev) as resets,
        min(name) as metric,
    from series
    where prev is not null
    group by ts, engine, instance, meaning
)

select * from final
