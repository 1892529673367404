-- instance_deaths: where each instance's engine died.
-- Grain: one row per (engine, instance) whose log reaches an ERROR / CRITICAL line (or an
--   `error` event) after which the instance finishes no request, that line not logged during
--   an orderly shutdown (a `shutdown` event before it, no restart announcing its capacity in
--   between).
-- Engines: all. A request still in the server then failed with it (server_requests_by_id).
-- Columns: engine, instance, died_ts (UTC; that first line's time), died_reason (its text,
--   first line, at most 200 characters, then ` [source:line]`).
create or replace view instance_deaths as
with

-- where an engine died: its first ERROR / CRITICAL line after which the instance finishes no
-- request (and finished some before, or logged arrivals). Requests still in the server then
-- failed with it.
last_finish as (
    select engine, instance, max(ts) as last_finish_ts,
    from request_events
    where event in ('request', 'request_finished')
    group by engine, instance
),

-- each orderly shutdown and the first restart (a `capacity` announcement) after it
shutdowns as (
    select s.engine, s.instance, s.ts as shutdown_ts, min(c.ts) as restart_ts,
    from events as s
    left join events as c
        on c.event = 'capacity' and c.engine = s.engine and c.instance = s.instance and c.ts > s.ts
    where s.event = 'shutdown' and s.ts is not null
    group by s.engine, s.instance, s.ts
)

select
    e.engine,
    e.instance,
    min(e.ts) as died_ts,
    arg_min(
        left(split_part(e.message, chr(10), 1), 200) || ' [' || e.source || ':' || e.line || ']',
        (e.ts, e.line)
    ) as died_reason,
from events as e
left join last_finish as f using (engine, instance)
where (e.event = 'error' or e.level in ('ERROR', 'CRITICAL'))
  and e.ts is not null
  and (f.last_finish_ts is null or e.ts >= f.last_finish_ts)
  -- an error logged during an orderly shutdown (a `shutdown` event before it, no restart
  -- announcing its capacity in between) is the server stopping, not dying (metrics/errors.sql).
  -- (one level of correlation: Spark and Trino resolve no reference two queries up)
  and not exists (
      select 1 from shutdowns as d
      where d.engine = e.engine and d.instance = e.instance
        and d.shutdown_ts <= e.ts
        and (d.restart_ts is null or d.restart_ts > e.ts)
  )
group by e.engine, e.instance;
