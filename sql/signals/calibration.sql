-- calibration: how the replayed autoscaler rule (autoscaler_episodes) would have done on each
--   instance: when it first asked to scale out, how long before the instance's first crash or
--   out-of-memory error, and how often it flapped.
-- Grain: one row per (engine, instance) with events; none while `autoscaler_preset` is 'none'.
-- Engines: all (the rule needs queue, batch or KV samples; an instance without them has
--   n_scale_outs 0).
-- Columns: engine, instance, preset, first_ts, last_ts (UTC, the instance's events),
--   n_scale_outs (episodes), n_flaps (episodes that are flaps), scale_out_s (s spent asking
--   to scale out), first_scale_out_ts (UTC, the first episode's start), first_severe_ts (UTC,
--   the first engine_dead or cuda_oom error; null when none), first_severe_kind,
--   warned_scale_out_ts (UTC, the first scale-out that started at or before the first
--   severe error), lead_s (s from warned_scale_out_ts to first_severe_ts; null when the rule
--   never fired before it).
create or replace view calibration as
with

params as (
    select coalesce(cast(getvariable('autoscaler_preset') as varchar), 'none') as preset
),

instances as (
    select engine, instance, min(ts) as first_ts, max(ts) as last_ts,
    from events
    where ts is not null and engine not in ('unknown', 'client')  -- a results file is not a server
    group by all
),

severe as (
    select engine, instance,
        min(first_ts) as first_severe_ts,
        arg_min(kind, first_ts) as first_severe_kind,
    from errors
    where kind in ('engine_dead', 'cuda_oom')
    group by all
),

episodes as (
    select
        e.engine, e.instance,
        count(*) as n_scale_outs,
        count(*) filter (where e.flap) as n_flaps,
        sum(e.duration_s) as scale_out_s,
        min(e.start_ts) as first_scale_out_ts,
        min(e.start_ts) filter (where s.first_severe_ts is not null and e.start_ts <= s.first_severe_ts) as warned_scale_out_ts,
    from autoscaler_episodes as e
    left join severe as s using (engine, instance)
    group by all
),

final as (
    select
        i.engine,
        i.instance,
        p.preset,
        i.first_ts,
        i.last_ts,
        coalesce(e.n_scale_outs, 0) as n_scale_outs,
        coalesce(e.n_flaps, 0) as n_flaps,
        coalesce(e.scale_out_s, 0.0) as scale_out_s,
        e.first_scale_out_ts,
        s.first_severe_ts,
        s.first_severe_kind,
        e.warned_scale_out_ts,
        epoch(s.first_severe_ts) - epoch(e.warned_scale_out_ts) as lead_s,
    from instances as i
    cross join params as p
    left join episodes as e using (engine, instance)
    left join severe as s using (engine, instance)
    where p.preset <> 'none'
)

select * from final
