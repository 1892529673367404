-- windows: the time grid every per-window view uses.
-- Grain: one row per (engine, instance) per window of `window_s` seconds (default 60),
--   aligned to multiples of window_s since the Unix epoch, from the window holding the
--   instance's first event to the one holding its last (empty windows included, so that
--   "nothing happened" is visible).
-- Engines: all.
-- Columns: engine, instance, window_index (floor(epoch seconds / window_s): the key other
--   views join on), window_start, window_end (UTC; [start, end)), window_s (s).
create or replace view windows as
with

params as (
    select coalesce(try_cast(getvariable('window_s') as double), 60.0) as window_s
),

bounds as (
    select
        engine,
        instance,
        cast(floor(epoch(min(ts)) / p.window_s) as bigint) as first_index,
        cast(floor(epoch(max(ts)) / p.window_s) as bigint) as last_index,
        p.window_s,
    from events
    cross join params as p
    where ts is not null
    group by engine, instance, p.window_s
),

grid as (
    select
        engine,
        instance,
        window_s,
        unnest(range(first_index, last_index + 1)) as window_index,
    from bounds
),

final as (
    select
        engine,
        instance,
        window_index,
        to_timestamp(window_index * window_s) as window_start,
        to_timestamp((window_index + 1) * window_s) as window_end,
        window_s,
    from grid
)

select * from final
