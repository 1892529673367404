-- metric_snapshot: the current value of every metric_series series, as `servelens serve`
--   publishes it: each instance's most recent COMPLETE window (the last one that ended at or
--   before the instance's newest event; the newest window while it is the only one), plus the
--   time of the instance's newest event.
-- Grain: one row per (engine, instance, series) of that window, plus one
--   servelens_newest_event_timestamp_seconds row per instance (value: Unix seconds; the
--   exporter derives servelens_newest_event_age_seconds from it at scrape time).
-- Engines: all but `unknown` and `client` (a benchmark client's results file).
-- Columns: as metric_series, plus last_ts (UTC, the instance's newest event).
create or replace view metric_snapshot as
with

instances as (
    select engine, instance, max(ts) as last_ts,
    from events
    where ts is not null and engine not in ('unknown', 'client')  -- a results file is not a server
    group by all
),

series as materialized (
    select * from metric_series
),

chosen as (
    select s.engine, s.instance,
        coalesce(max(s.window_end) filter (where s.window_end <= i.last_ts), max(s.window_end)) as window_end,
    from series as s
    join instances as i using (engine, instance)
    group by all
),

models as (
    select engine, instance, any_value(model) as model,
    from series
    where name = 'servelens_requests_waiting' or name = 'servelens_signal_active'
    group by all
),

final as (
    select s.*, i.last_ts,
    from series as s
    join chosen as c using (engine, instance, window_end)
    join instances as i using (engine, instance)
    union all
    select i.engine, i.instance, coalesce(m.model, ''), null, i.last_ts, null,
        'servelens_newest_event_timestamp_seconds', null, null, null, epoch(i.last_ts), i.last_ts,
    from instances as i
    left join models as m using (engine, instance)
)

select * from final
