-- metric_series: the series `servelens serve` and `servelens export` publish, in long form.
-- Grain: one row per (engine, instance, window, series): a metric name and its labels, over
--   the window_metrics / latency_percentiles grid (`window_s`, default 60 s). A value the
--   logs do not give is absent, never 0 (see metric_availability).
-- Series (docs/prometheus.md has the table with units and sources):
--   servelens_requests_waiting, servelens_requests_running (requests, window averages of
--   queue_depth / batch_fill), servelens_batch_fill_ratio, servelens_kv_cache_usage_ratio
--   (fraction 0..1, window averages of batch_fill / kv_cache), servelens_requests_per_second
--   (finished requests / window_s, throughput), servelens_tokens_per_second (logged generation
--   tokens/s, else output tokens of finished requests / window_s), servelens_errors_per_second
--   (errors / window_s, errors), servelens_preemptions (count in the window, kv_cache),
--   gen_ai_server_time_to_first_token_seconds, gen_ai_server_time_per_output_token_seconds,
--   gen_ai_server_request_duration_seconds (s; label quantile 0.5 / 0.95 / 0.99 of the
--   requests that finished in the window, latency_percentiles; per model),
--   servelens_signal_active (1 when an episode of scaling_signals covers the window, else 0;
--   labels signal and severity, 'none' when inactive; signal autoscaler_scale_out is the
--   replayed autoscaler rule of autoscaler_decisions, when a preset is configured).
-- Columns: engine, instance, model (the instance's model for instance-wide series: the most
--   frequent model of its events; '' when none is logged), window_start, window_end (UTC),
--   window_s (s), name, quantile ('0.5' | '0.95' | '0.99' or null), signal, severity (null
--   except for servelens_signal_active), value.
create or replace view metric_series as
with

models as (
    select engine, instance, mode(model) as model,
    from events
    where model is not null
    group by all
),

wm as materialized (
    select w.*, coalesce(m.model, '') as model,
    from window_metrics as w
    left join models as m using (engine, instance)
    where w.engine <> 'unknown'
),

gauge_rows as (
    select engine, instance, model, window_start, window_end, window_s, name, value,
    from (
        select
            engine, instance, model, window_start, window_end, window_s,
            cast(waiting_avg as double) as waiting_avg,
            cast(running_avg as double) as running_avg,
            cast(fill_avg as double) as fill_avg,
            cast(kv_avg as double) as kv_avg,
            cast(requests_per_s as double) as requests_per_s,
            cast(case when throughput_unit = 'tokens/s' then throughput end as double) as tokens_per_s,
            -- errors are counted wherever the log has lines: 0 is a real value
            cast(n_errors as double) / window_s as errors_per_s,
            cast(preemptions as double) as preemptions,
        from wm
    )
    unpivot (value for name in (
        waiting_avg, running_avg, fill_avg, kv_avg, requests_per_s, tokens_per_s, errors_per_s, preemptions
    ))
),

named_gauges as (
    select
        engine, instance, model, window_start, window_end, window_s,
        case name
            when 'waiting_avg' then 'servelens_requests_waiting'
            when 'running_avg' then 'servelens_requests_running'
            when 'fill_avg' then 'servelens_batch_fill_ratio'
            when 'kv_avg' then 'servelens_kv_cache_usage_ratio'
            when 'requests_per_s' then 'servelens_requests_per_second'
            when 'tokens_per_s' then 'servelens_tokens_per_second'
            when 'errors_per_s' then 'servelens_errors_per_second'
            when 'preemptions' then 'servelens_preemptions'
        end as name,
        value,
    from gauge_rows
),

latency as (
    -- a request that names no model (TGI's lines) belongs to the instance's model
    select l.engine, l.instance, coalesce(l.model, m.model, '') as model, l.window_start, l.window_end,
        epoch(l.window_end) - epoch(l.window_start) as window_s,
        p50_ttft_s, p95_ttft_s, p99_ttft_s, p50_tpot_s, p95_tpot_s, p99_tpot_s,
        p50_e2e_s, p95_e2e_s, p99_e2e_s,
    from latency_percentiles as l
    left join models as m using (engine, instance)
),

latency_rows as (
    select engine, instance, model, window_start, window_end, window_s,
        case
            when col like '%ttft%' then 'gen_ai_server_time_to_first_token_seconds'
            when col like '%tpot%' then 'gen_ai_server_time_per_output_token_seconds'
            else 'gen_ai_server_request_duration_seconds'
        end as name,
        case when col like 'p50%' then '0.5' when col like 'p95%' then '0.95' else '0.99' end as quantile,
        cast(value as double) as value,
    from latency
    unpivot (value for col in (
        p50_ttft_s, p95_ttft_s, p99_ttft_s, p50_tpot_s, p95_tpot_s, p99_tpot_s,
        p50_e2e_s, p95_e2e_s, p99_e2e_s
    ))
),

signal_names(signal) as (
    values ('queue_backlog'), ('kv_pressure'), ('scheduler_limit'), ('batch_limit'), ('latency_slo_e2e'),
        ('latency_slo_ttft'), ('throughput_swing'), ('errors'), ('idle'), ('fleet_imbalance'), ('frontend_delay')
),

episodes as (
    select engine, instance, signal, severity, window_start as ep_start, window_end as ep_end,
    from scaling_signals
),

signal_rows as (
    select
        w.engine, w.instance, w.model, w.window_start, w.window_end, w.window_s,
        n.signal,
        coalesce(max(e.severity), 'none') as severity,
        case when count(e.signal) > 0 then 1.0 else 0.0 end as value,
    from wm as w
    cross join signal_names as n
    left join episodes as e
        on e.engine = w.engine and e.instance = w.instance and e.signal = n.signal
        and e.ep_start <= w.window_start and e.ep_end >= w.window_end
    group by all
),

-- the replayed autoscaler rule: active in a window when it asked to scale out at any step in it
autoscaler_rows as (
    select
        w.engine, w.instance, w.model, w.window_start, w.window_end, w.window_s,
        'autoscaler_scale_out' as signal,
        case when bool_or(d.scale_out) then 'warning' else 'none' end as severity,
        case when bool_or(d.scale_out) then 1.0 else 0.0 end as value,
    from wm as w
    join autoscaler_decisions as d
        on d.engine = w.engine and d.instance = w.instance
        and d.ts >= w.window_start and d.ts < w.window_end
    group by all
),

final as (
    select engine, instance, model, window_start, window_end, window_s, name,
        null::varchar as quantile, null::varchar as signal, null::varchar as severity, value,
    from named_gauges
    where value is not null
    union all
    select engine, instance, model, window_start, window_end, window_s, name,
        quantile, null, null, value,
    from latency_rows
    where value is not null
    union all
    select engine, instance, model, window_start, window_end, window_s, 'servelens_signal_active',
        null, signal, severity, value,
    from signal_rows
    union all
    select engine, instance, model, window_start, window_end, window_s, 'servelens_signal_active',
        null, signal, severity, value,
    from autoscaler_rows
)

select * from final
