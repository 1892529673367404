-- scraped_latency: request latency percentiles per window from the engine's /metrics
--   histograms: BUCKET ESTIMATES, computed the way PromQL's
--   histogram_quantile(q, sum by (le) (increase(<metric>_bucket[window]))) computes them.
-- Grain: one row per (engine, instance, meaning, window) in which the histogram counted at
--   least one request; windows are `window_s` seconds (default 60) aligned to the Unix epoch,
--   and an increase belongs to the window of the scrape that saw it.
-- How: each bucket's increase over the window (resets handled as in scraped_counters),
--   summed over the label sets; the buckets made monotonic (a bucket never counts fewer
--   than the one below it); rank = q x observations (the +Inf bucket); the first bucket whose
--   cumulative count reaches the rank holds the percentile, interpolated linearly between
--   its lower bound (the bucket below's upper bound, 0 for the first) and its upper bound;
--   a rank in the +Inf bucket gives the highest finite bound. No +Inf bucket, or fewer than
--   two buckets: null (PromQL: NaN). A percentile is exact only to its bucket's width.
-- Engines: vLLM time_to_first_token, request_time_per_output_token (tpot; inter_token_latency
--   is `itl`), e2e_request_latency, request_queue_time, request_prefill_time /
--   request_decode_time / request_inference_time (seconds); SGLang, TGI and TensorRT-LLM
--   likewise (pipeline/samples.py METRIC_NAMES).
-- Columns: window_start, window_end (UTC), engine, instance, meaning ('ttft' | 'tpot' | 'itl'
--   | 'e2e' | 'queue' | 'prefill' | 'decode' | 'inference'), n (observations in the window),
--   p50_s, p90_s, p95_s, p99_s (s, bucket estimates), mean_s (s: increase of _sum / of
--   _count, exact), metric (the histogram's name), model (the series' model_name label, when
--   it has one), bucket_estimate (always true).
create or replace view scraped_latency as
with

params as (
    select coalesce(try_cast(getvariable('window_s') as double), 60.0) as window_s
),

buckets as (
    select
        ts, engine, instance, meaning, family, labels, le, value,
        lag(value) over (partition by engine, instance, name, labels, le order by ts) as prev,
    from samples
    where type = 'histogram'
      and meaning is not null
      and ends_with(name, '_bucket')
      and le is not null
      and value is not null
      and not isnan(value)
),

increases as (
    select
        engine, instance, meaning, le,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        p.window_s,
        min(family) as metric,
        min(json_extract_string(labels, '$.model_name')) as model,
        sum(case when value >= prev then value - prev else value end) as inc,
    from buckets, params as p
    where prev is not null
    group by all
),

cumulative as (
    select
        *,
        -- as PromQL's ensureMonotonic: a bucket counts at least what the ones below it count
        max(inc) over (partition by engine, instance, meaning, window_index order by le
                       rows between unbounded preceding and current row) as cnt,
        lag(le) over (partition by engine, instance, meaning, window_index order by le) as lower_le,
    from increases
),

shaped as (
    select
        *,
        lag(cnt) over (partition by engine, instance, meaning, window_index order by le) as prev_cnt,
    from cumulative
),

totals as (
    select
        engine, instance, meaning, window_index, window_s,
        min(metric) as metric,
        min(model) as model,
        max(cnt) filter (where le = cast('Infinity' as double)) as n_obs,
        max(le) filter (where le <> cast('Infinity' as double)) as top_le,
        count(*) as n_buckets,
    from shaped
    group by all
    having bool_or(le = cast('Infinity' as double)) and count(*) >= 2
),

levels(q) as (
    values (0.50), (0.90), (0.95), (0.99)
),

-- per level, the bucket whose cumulative count first reaches the rank (the +Inf bucket left
-- out, as histogram_quantile searches the finite ones)
picked as (
    select
        t.engine, t.instance, t.meaning, t.window_index, l.q,
        t.top_le,
        l.q * t.n_obs as rank,
        min(s.le) filter (where s.cnt >= l.q * t.n_obs and s.le <> cast('Infinity' as double)) as b_le,
    from totals as t
    cross join levels as l
    join shaped as s using (engine, instance, meaning, window_index)
    where t.n_obs > 0
    group by all
),

quantiles as (
    select
        p.engine, p.instance, p.meaning, p.window_index, p.q,
        case
            when p.b_le is null then p.top_le
            when s.lower_le is null and s.le <= 0 then s.le
            else coalesce(s.lower_le, 0)
                + (s.le - coalesce(s.lower_le, 0))
                * (p.rank - coalesce(s.prev_cnt, 0)) / (s.cnt - coalesce(s.prev_cnt, 0))
        end as value_s,
    from picked as p
    left join shaped as s
        on s.engine = p.engine and s.instance = p.instance and s.meaning = p.meaning
        and s.window_index = p.window_index and s.le = p.b_le
),

sums as (
    -- the exact mean: increase of _sum over increase of _count
    select
        engine, instance, meaning,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        sum(inc) filter (where suffix = '_sum') / nullif(sum(inc) filter (where suffix = '_count'), 0) as mean_s,
    from (
        select
            ts, engine, instance, meaning,
            case when ends_with(name, '_sum') then '_sum' else '_count' end as suffix,
            case when value >= lag(value) over w then value - lag(value) over w else value end as inc,
            lag(value) over w as prev,
        from samples
        where type = 'histogram' and meaning is not null and le is null
          and (ends_with(name, '_sum') or ends_with(name, '_count'))
        window w as (partition by engine, instance, name, labels order by ts)
    ), params as p
    where prev is not null
    group by all
),

final as (
    select
        to_timestamp(t.window_index * t.window_s) as window_start,
        to_timestamp((t.window_index + 1) * t.window_s) as window_end,
        t.engine,
        t.instance,
        t.meaning,
        cast(t.n_obs as bigint) as n,
        max(q.value_s) filter (where q.q = 0.50) as p50_s,
        max(q.value_s) filter (where q.q = 0.90) as p90_s,
        max(q.value_s) filter (where q.q = 0.95) as p95_s,
        max(q.value_s) filter (where q.q = 0.99) as p99_s,
        any_value(m.mean_s) as mean_s,
        t.metric,
        t.model,
        true as bucket_estimate,
    from totals as t
    join quantiles as q using (engine, instance, meaning, window_index)
    left join sums as m using (engine, instance, meaning, window_index)
    where t.n_obs > 0
    group by t.window_index, t.window_s, t.engine, t.instance, t.meaning, t.n_obs, t.metric, t.model
)

select * from final
