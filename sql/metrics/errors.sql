-- errors: errors per time window, by kind.
-- Grain: one row per (engine, instance, window, kind) with at least one error (windows
--   without errors have no row; "no errors" is a count of 0 only where the instance logged).
-- Sources: `error` events and any ERROR/CRITICAL line, plus HTTP access lines with status
--   429 or >= 500. A multi-line traceback is one event, so one error.
-- Kinds (first match, on the message text): cuda_oom ("out of memory"), engine_dead (engine
--   core / background loop / shard crashed or dead, SGLang's `Scheduler hit an exception` and
--   `Received sigquit from a child process`), overloaded ("no permits available",
--   "overloaded", HTTP 429), timeout ("timed out", "timeout"), client_disconnect ("Receiver
--   dropped", "client disconnected"), generation_error ("Request failed during generation",
--   "Server error"), http_5xx (HTTP status >= 500), other; and shutdown: any error logged
--   after an orderly shutdown began on that instance (a `shutdown` event: SIGTERM, `shutdown
--   triggered`, uvicorn's `Shutting down`) and before it started again (a `capacity` event),
--   such as V1's EngineDeadError traceback while the engine is torn down (vllm#48745). An
--   error before any shutdown keeps its kind: an unexpected engine death stays engine_dead.
-- Engines: all.
-- Columns: window_start, window_end (UTC), engine, instance, kind, n_errors, first_ts (UTC),
--   first_message (the text of the first error of that kind in the window), first_source,
--   first_line.
create or replace view errors as
with

params as (
    select coalesce(try_cast(getvariable('window_s') as double), 60.0) as window_s
),

-- error events, ERROR / CRITICAL lines and failed HTTP requests, each line once. Written as
-- disjoint branches with one equality each, which DuckDB pushes into the Parquet scan (the
-- message column is then decoded only for matching lines); an OR across columns would decode
-- it for every line of the store.
error_lines as (
    select * from events where event = 'error'
    union all
    select * from events where level = 'ERROR' and event is distinct from 'error'
    union all
    select * from events where level = 'CRITICAL' and event is distinct from 'error'
    union all
    select * from events
    where event = 'http_access'
      and (http_status = 429 or http_status >= 500)
      and coalesce(level, '') not in ('ERROR', 'CRITICAL')
),

error_events as (
    select ts, engine, instance, message, http_status, event, source, line,
    from error_lines
    where ts is not null
),

-- when each instance began an orderly shutdown, and when it (re)started
lifecycle as (
    select engine, instance, ts, event, source, line from events where event = 'shutdown' and ts is not null
    union all
    select engine, instance, ts, event, source, line from events where event = 'capacity' and ts is not null
),

in_shutdown as (
    select e.ts, e.engine, e.instance, e.source, e.line,
    from error_events as e
    join lifecycle as s
        on s.engine = e.engine and s.instance = e.instance and s.event = 'shutdown'
        -- logged before the error: earlier, or in the same second on an earlier line of the file
        and (s.ts < e.ts or (s.ts = e.ts and (s.source <> e.source or s.line < e.line)))
    where not exists (
        select 1 from lifecycle as c
        where c.engine = e.engine and c.instance = e.instance and c.event = 'capacity'
          and c.ts > s.ts and c.ts <= e.ts
    )
),

classified as (
    select
        *,
        case
            when exists (
                select 1 from in_shutdown as d
                where d.engine = error_events.engine and d.instance = error_events.instance
                  and d.source = error_events.source and d.line = error_events.line
            ) then 'shutdown'
            when message ilike '%out of memory%' or message ilike '%OutOfMemory%' then 'cuda_oom'
            when regexp_matches(
                message,
                '(?i)EngineCore (hit an exception|failed|encountered a fatal)|EngineDeadError|Background loop has errored|Engine background task failed|fatal signal|Shard \d+ crashed|Webserver Crashed|shard.*failed to start|WorkerProc failed|[A-Za-z]+ hit an exception|Received sigquit from a child proces'
            ) then 'engine_dead'
            when http_status = 429
                or message ilike '%no permits available%'
                or message ilike '%overloaded%' then 'overloaded'
            when message ilike '%timed out%' or message ilike '%timeout%' then 'timeout'
            when message ilike '%Receiver dropped%' or message ilike '%client disconnected%' then 'client_disconnect'
            when message ilike '%Request failed during generation%' or message ilike '%Server error%' then 'generation_error'
            when http_status >= 500 then 'http_5xx'
            else 'other'
        end as kind,
        floor(epoch(ts) / p.window_s) * p.window_s as window_start_s,
        p.window_s,
    from error_events
    cross join params as p
),

final as (
    select
        to_timestamp(window_start_s) as window_start,
        to_timestamp(window_start_s + window_s) as window_end,
        engine,
        instance,
        kind,
        count(*) as n_errors,
        min(ts) as first_ts,
        arg_min(message, (ts, line)) as first_message,
        arg_min(source, (ts, line)) as first_source,
        arg_min(line, (ts, line)) as first_line,
    from classified
    group by window_start_s, window_s, engine, instance, kind
)

select * from final
