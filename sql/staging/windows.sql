-- windows: the time grid every per-window view uses.
-- Grain: one row per (engine, instance) per window of `window_s` seconds (default 60),
--   aligned to multiples of window_s since the Unix epoch, from the window holding the
--   instance's first event to the one holding its last. Empty windows are included so that
--   "nothing happened" is visible, up to `window_max_gap_s` (default 1 day) after the last
--   event before a silence: logs stitched from days or years apart stay a small grid.
-- Engines: every server engine (a benchmark client's results are not an instance).
-- Columns: engine, instance, window_index (floor(epoch seconds / window_s): the key other
--   views join on), window_start, window_end (UTC; [start, end)), window_s (s).
create or replace view windows as
with

params as (
    select
        coalesce(try_cast(getvariable('window_s') as double), 60.0) as window_s,
        coalesce(try_cast(getvariable('window_max_gap_s') as double), 86400.0) as max_gap_s,
),

-- windows that hold at least one event of the instance
active as (
    select distinct
        engine,
        instance,
        cast(floor(epoch(ts) / p.window_s) as bigint) as window_index,
        p.window_s,
        cast(ceil(p.max_gap_s / p.window_s) as bigint) as max_gap_windows,
    from events
    cross join params as p
    -- a benchmark client's results file is a view of servers, not a server: no grid of its own
    -- (no verdict, signal, calibration row or exported series is made for it)
    where ts is not null and engine <> 'client'
),

gaps as (
    select
        *,
        lead(window_index) over (partition by engine, instance order by window_index) as next_index,
    from active
),

-- each active window, then the empty windows up to the next active one: at most
-- max_gap_windows of them, so logs stitched from days apart do not make a grid of years
grid as (
    select
        engine,
        instance,
        window_s,
        unnest(range(
            window_index,
            least(coalesce(next_index, window_index + 1), window_index + 1 + max_gap_windows)
        )) as window_index,
    from gaps
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
