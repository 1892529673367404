-- incident_summary: the story of each instance over a range, the facts an incident summary is
-- written from: did it die (and of what, where in the log), how many requests failed, were
-- aborted or were slow, how long the latency SLO was breached, when its traffic surged and
-- how deep its queue got.
-- Grain: one row per (engine, instance) with events in the range.
-- Range: [summary_since, summary_until) from the DuckDB variables of those names (UTC
--   timestamps; unset means unbounded), so `servelens report --since/--until` and
--   `servelens sql` read the same numbers.
-- Engines: all (each column is null where that instance's logs cannot give it).
-- Columns:
--   engine, instance, first_ts, last_ts (UTC: first and last event in the range),
--   finished, failed, aborted, unfinished (requests, by requests.status, counted by their
--     finish time, arrival time for unfinished ones; null when the log has no per-request
--     lines at all; finished and slow are null when it logs no request end),
--   slow (finished requests whose e2e_s is above slo_p99_e2e_s; each request's best e2e_s:
--     the benchmark client's where a results file names it, else the log's),
--   slow_source (what `slow` rests on, requests.latency_source of the finished requests:
--     'client' | 'wrapper' | 'log' | 'mixed'; null without any),
--   slo_p99_e2e_s (s, the SLO used),
--   slo_breach_minutes (min: total length of the latency_slo_e2e / latency_slo_ttft signal
--     episodes overlapping the range),
--   peak_waiting (requests), peak_waiting_ts (UTC), peak_waiting_source (queue_depth.source),
--   surge_ts (UTC: start of the first window whose arrivals are at least `surge_factor`
--     (default 1.5) times the fewest of any earlier window with arrivals; null without a rise
--     or without arrival counts),
--   first_error_ts (UTC), first_error_kind (errors.kind), first_error_message (first line),
--     first_error_source, first_error_line (where to read it),
--   crash_ts (UTC), crash_kind ('cuda_oom' | 'engine_dead'), crash_message, crash_source,
--     crash_line: the first out-of-memory or engine-death error,
--   died (true when it crashed and finished no request afterwards: its engine was gone),
--   finished_after_crash (requests finished after crash_ts).
create or replace view incident_summary as
with

params as (
    select
        coalesce(try_cast(getvariable('summary_since') as timestamptz), '-infinity'::timestamptz) as since,
        coalesce(try_cast(getvariable('summary_until') as timestamptz), 'infinity'::timestamptz) as until,
        coalesce(try_cast(getvariable('slo_p99_e2e_s') as double), 30.0) as slo_p99_e2e_s,
        coalesce(try_cast(getvariable('surge_factor') as double), 1.5) as surge_factor,
),

spans as (
    select engine, instance, min(ts) as first_ts, max(ts) as last_ts,
    from events, params as p
    where ts is not null and ts >= p.since and ts < p.until and engine not in ('unknown', 'client')
    group by engine, instance
),

request_counts as (
    select
        engine,
        instance,
        count(*) filter (where status = 'finished') as finished,
        count(*) filter (where status = 'failed') as failed,
        count(*) filter (where status = 'aborted') as aborted,
        count(*) filter (where status = 'unfinished') as unfinished,
        count(*) filter (where status = 'finished' and e2e_s > p.slo_p99_e2e_s) as slow,
        -- two sources or more: their least and greatest differ (cheaper than counting distinct ones)
        case when min(case when status = 'finished' and e2e_s is not null then latency_source end)
                  <> max(case when status = 'finished' and e2e_s is not null then latency_source end) then 'mixed'
             else max(case when status = 'finished' and e2e_s is not null then latency_source end) end as slow_source,
    from requests, params as p
    where coalesce(finish_ts, arrival_ts) >= p.since and coalesce(finish_ts, arrival_ts) < p.until
    group by engine, instance
),

slo as (
    select engine, instance, sum(duration_s) / 60.0 as slo_breach_minutes,
    from scaling_signals, params as p
    where signal in ('latency_slo_e2e', 'latency_slo_ttft') and window_end > p.since and window_start < p.until
    group by engine, instance
),

queue_peak as (
    select
        engine,
        instance,
        max(waiting) as peak_waiting,
        arg_min(ts, (-waiting, ts)) as peak_waiting_ts,
        arg_min(source, (-waiting, ts)) as peak_waiting_source,
    from queue_depth, params as p
    where waiting is not null and ts >= p.since and ts < p.until
    group by engine, instance
),

surge as (
    select engine, instance, min(window_start) as surge_ts,
    from (
        select
            engine,
            instance,
            window_start,
            arrived,
            min(case when arrived > 0 then arrived end) over (
                partition by engine, instance order by window_start
                rows between unbounded preceding and 1 preceding
            ) as fewest_before,
        from throughput, params as p
        where window_end > p.since and window_start < p.until
    ), params as p
    where arrived >= p.surge_factor * fewest_before
    group by engine, instance
),

error_firsts as (
    select
        engine,
        instance,
        kind,
        first_ts,
        left(split_part(first_message, chr(10), 1), 200) as message,
        first_source,
        first_line,
    from errors, params as p
    where first_ts >= p.since and first_ts < p.until
),

first_error as (
    select
        engine,
        instance,
        arg_min(kind, (first_ts, first_line)) as first_error_kind,
        min(first_ts) as first_error_ts,
        arg_min(message, (first_ts, first_line)) as first_error_message,
        arg_min(first_source, (first_ts, first_line)) as first_error_source,
        arg_min(first_line, (first_ts, first_line)) as first_error_line,
    from error_firsts
    group by engine, instance
),

crash as (
    select
        engine,
        instance,
        min(first_ts) as crash_ts,
        arg_min(kind, (first_ts, first_line)) as crash_kind,
        arg_min(message, (first_ts, first_line)) as crash_message,
        arg_min(first_source, (first_ts, first_line)) as crash_source,
        arg_min(first_line, (first_ts, first_line)) as crash_line,
    from error_firsts
    where kind in ('cuda_oom', 'engine_dead')
    group by engine, instance
),

after_crash as (
    select c.engine, c.instance, count(r.finish_ts) as finished_after_crash,
    from crash as c
    left join requests as r
        on r.engine = c.engine and r.instance = c.instance and r.status = 'finished' and r.finish_ts > c.crash_ts
    group by c.engine, c.instance
),

-- which instances log per-request lines at all, and request ends (else those counts are
-- unknown, not 0: TensorRT-LLM logs only the requests that failed)
logs_requests as (
    select engine, instance, bool_or(status = 'finished') as logs_finishes,
    from requests
    group by engine, instance
),

final as (
    select
        s.engine,
        s.instance,
        s.first_ts,
        s.last_ts,
        case when lr.logs_finishes then coalesce(rc.finished, 0) end as finished,
        case when lr.instance is not null then coalesce(rc.failed, 0) end as failed,
        case when lr.instance is not null then coalesce(rc.aborted, 0) end as aborted,
        case when lr.instance is not null then coalesce(rc.unfinished, 0) end as unfinished,
        case when lr.logs_finishes then coalesce(rc.slow, 0) end as slow,
        rc.slow_source,
        p.slo_p99_e2e_s,
        coalesce(slo.slo_breach_minutes, 0.0) as slo_breach_minutes,
        q.peak_waiting,
        q.peak_waiting_ts,
        q.peak_waiting_source,
        su.surge_ts,
        fe.first_error_ts,
        fe.first_error_kind,
        fe.first_error_message,
        fe.first_error_source,
        fe.first_error_line,
        c.crash_ts,
        c.crash_kind,
        c.crash_message,
        c.crash_source,
        c.crash_line,
        c.crash_ts is not null and coalesce(ac.finished_after_crash, 0) = 0 as died,
        ac.finished_after_crash,
    from spans as s
    cross join params as p
    left join logs_requests as lr using (engine, instance)
    left join request_counts as rc using (engine, instance)
    left join slo using (engine, instance)
    left join queue_peak as q using (engine, instance)
    left join surge as su using (engine, instance)
    left join first_error as fe using (engine, instance)
    left join crash as c using (engine, instance)
    left join after_crash as ac using (engine, instance)
)

select * from final
order by instance, engine
