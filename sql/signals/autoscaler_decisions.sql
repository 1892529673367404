-- autoscaler_decisions: what an autoscaler's scale-out rule would have decided, replayed over
--   the logs, every `autoscaler_step_s` seconds.
-- Grain: one row per (engine, instance, step) holding at least one queue, batch or KV sample;
--   no rows while `autoscaler_preset` is 'none' (the default: no rule configured).
-- The rule ([autoscaler] in sql/thresholds.toml; the presets sql/preset-*.toml set it): each
--   used condition compares a trailing average over `autoscaler_stable_s` seconds with its
--   threshold: waiting > [autoscaler_waiting], running > [autoscaler_running], KV usage >=
--   [autoscaler_kv_usage] (a negative threshold leaves the condition out). With
--   `autoscaler_combine` 'any' one condition is enough, with 'all' every used one must hold
--   (llm-d's saturation rule). With `autoscaler_panic_s` > 0 a short trailing window also
--   fires when its average reaches `autoscaler_panic_factor` times a threshold (the KPA
--   panic mode of Knative / AIBrix). A condition on a metric the instance's logs never give
--   (TGI has no KV usage) is false.
-- Averages are over the steps that hold samples (vLLM logs its stats every few seconds, TGI's
--   queue is reconstructed every `queue_sample_s`): the value an autoscaler polling the
--   engine's gauges would have seen, as far as the log shows it.
-- Engines: all that give queue, batch or KV samples (see queue_depth, batch_fill, kv_cache).
-- Columns: engine, instance, preset, ts (UTC, start of the step: the time of its samples), waiting_stable,
--   running_stable (requests), kv_stable (fraction), waiting_panic, running_panic,
--   kv_panic (same units, over the panic window; null without one), stable_fire,
--   panic_fire, scale_out (booleans: the rule's decision at ts).
create or replace view autoscaler_decisions as
with

params as (
    select
        coalesce(cast(getvariable('autoscaler_preset') as varchar), 'none') as preset,
        coalesce(try_cast(getvariable('autoscaler_waiting') as double), -1.0) as waiting,
        coalesce(try_cast(getvariable('autoscaler_running') as double), -1.0) as running,
        coalesce(try_cast(getvariable('autoscaler_kv_usage') as double), -1.0) as kv_usage,
        coalesce(cast(getvariable('autoscaler_combine') as varchar), 'any') as combine,
        coalesce(try_cast(getvariable('autoscaler_panic_s') as double), 0.0) as panic_s,
        coalesce(try_cast(getvariable('autoscaler_panic_factor') as double), 2.0) as panic_factor,
        greatest(coalesce(try_cast(getvariable('autoscaler_step_s') as double), 1.0), 0.001) as step_s,
),

samples as (
    select q.engine, q.instance, cast(floor(epoch(q.ts) / p.step_s) as bigint) as step,
        q.waiting, null::double as running, null::double as kv,
    from queue_depth as q, params as p
    where p.preset <> 'none' and p.waiting >= 0
    union all
    select b.engine, b.instance, cast(floor(epoch(b.ts) / p.step_s) as bigint),
        null, b.running, null,
    from batch_fill as b, params as p
    where p.preset <> 'none' and p.running >= 0
    union all
    select k.engine, k.instance, cast(floor(epoch(k.ts) / p.step_s) as bigint),
        null, null, k.kv_usage,
    from kv_cache as k, params as p
    where p.preset <> 'none' and p.kv_usage >= 0
),

steps as (
    select engine, instance, step,
        avg(waiting) as waiting, avg(running) as running, avg(kv) as kv,
    from samples
    group by all
),

-- trailing windows over the step index (a range frame: steps without samples are absent,
-- not zero)
rolling as (
    select
        engine, instance, step,
        avg(waiting) over stable as waiting_stable,
        avg(running) over stable as running_stable,
        avg(kv) over stable as kv_stable,
        avg(waiting) over panic as waiting_panic,
        avg(running) over panic as running_panic,
        avg(kv) over panic as kv_panic,
    from steps
    window
        stable as (
            partition by engine, instance order by step
            range between cast(greatest(ceil(
                coalesce(try_cast(getvariable('autoscaler_stable_s') as double), 15.0)
                / greatest(coalesce(try_cast(getvariable('autoscaler_step_s') as double), 1.0), 0.001)), 1) as bigint) - 1
                preceding and current row),
        panic as (
            partition by engine, instance order by step
            range between cast(greatest(ceil(
                coalesce(try_cast(getvariable('autoscaler_panic_s') as double), 0.0)
                / greatest(coalesce(try_cast(getvariable('autoscaler_step_s') as double), 1.0), 0.001)), 1) as bigint) - 1
                preceding and current row)
),

judged as (
    select
        r.*,
        p.preset, p.combine, p.panic_s,
        -- null: condition not used; false also where the metric is missing
        case when p.waiting >= 0 then coalesce(r.waiting_stable > p.waiting, false) end as w_stable,
        case when p.running >= 0 then coalesce(r.running_stable > p.running, false) end as r_stable,
        case when p.kv_usage >= 0 then coalesce(r.kv_stable >= p.kv_usage, false) end as k_stable,
        case when p.waiting >= 0 then coalesce(r.waiting_panic >= p.panic_factor * p.waiting, false) end as w_panic,
        case when p.running >= 0 then coalesce(r.running_panic >= p.panic_factor * p.running, false) end as r_panic,
        case when p.kv_usage >= 0 then coalesce(r.kv_panic >= p.panic_factor * p.kv_usage, false) end as k_panic,
        p.step_s,
    from rolling as r, params as p
),

final as (
    select
        engine,
        instance,
        preset,
        to_timestamp(step * step_s) as ts,
        waiting_stable,
        running_stable,
        kv_stable,
        case when panic_s > 0 then waiting_panic end as waiting_panic,
        case when panic_s > 0 then running_panic end as running_panic,
        case when panic_s > 0 then kv_panic end as kv_panic,
        case when combine = 'all'
            then coalesce(w_stable, true) and coalesce(r_stable, true) and coalesce(k_stable, true)
            else coalesce(w_stable, false) or coalesce(r_stable, false) or coalesce(k_stable, false)
        end as stable_fire,
        panic_s > 0 and case when combine = 'all'
            then coalesce(w_panic, true) and coalesce(r_panic, true) and coalesce(k_panic, true)
            else coalesce(w_panic, false) or coalesce(r_panic, false) or coalesce(k_panic, false)
        end as panic_fire,
    from judged
)

select *, stable_fire or panic_fire as scale_out from final
