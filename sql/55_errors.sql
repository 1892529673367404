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
--   "Server error"), http_5xx (HTTP status >= 500), other.
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

classified as (
    select
        *,
        case
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
