-- autoscaler_episodes: each stretch in which the replayed autoscaler rule asks to scale out.
-- Grain: one row per (engine, instance, episode): a run of consecutive autoscaler_decisions
--   steps with scale_out true; none while `autoscaler_preset` is 'none'.
-- A flap is an episode that starts less than `autoscaler_cooldown_s` seconds after the
--   previous one of the same instance ended: the autoscaler would have scaled in (or held a
--   replica it then thought idle) and out again.
-- Engines: as autoscaler_decisions.
-- Columns: engine, instance, preset, start_ts, end_ts (UTC; end_ts is the first step at which
--   the rule no longer fired, or the last step of the log), duration_s (s), n_steps, panic
--   (true when the panic window fired in the episode), peak_waiting, peak_running (requests),
--   peak_kv (fraction: the highest stable-window averages in the episode), gap_s (s since the
--   previous episode ended; null for the first), flap (boolean).
create or replace view autoscaler_episodes as
with

decisions as (
    select
        *,
        lag(scale_out) over w as prev_fire,
        lead(ts) over w as next_ts,
    from autoscaler_decisions
    window w as (partition by engine, instance order by ts)
),

runs as (
    select
        *,
        sum(case when scale_out and coalesce(prev_fire, false) = false then 1 else 0 end)
            over (partition by engine, instance order by ts rows unbounded preceding) as run,
    from decisions
),

episodes as (
    select
        engine, instance, any_value(preset) as preset,
        min(ts) as start_ts,
        -- the step after the last firing one: when the rule stopped asking
        coalesce(arg_max(next_ts, ts), max(ts)) as end_ts,
        count(*) as n_steps,
        bool_or(panic_fire) as panic,
        max(waiting_stable) as peak_waiting,
        max(running_stable) as peak_running,
        max(kv_stable) as peak_kv,
    from runs
    where scale_out
    group by engine, instance, run
),

final as (
    select
        engine, instance, preset, start_ts, end_ts,
        epoch(end_ts) - epoch(start_ts) as duration_s,
        n_steps, panic, peak_waiting, peak_running, peak_kv,
        epoch(start_ts) - epoch(lag(end_ts) over (partition by engine, instance order by start_ts)) as gap_s,
    from episodes
)

select
    *,
    coalesce(gap_s < coalesce(try_cast(getvariable('autoscaler_cooldown_s') as double), 300.0), false) as flap,
from final
