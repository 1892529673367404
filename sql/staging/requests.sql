-- requests: everything the engine logged about each request, merged into one row.
-- Grain: one row per request (engine, instance, request id; a request without an id, such as
--   a TGI `Success` line, is keyed by its source file and line).
-- Engines: vLLM (request_arrived / request_finished / request_aborted lines: times only, at
--   1 s resolution, no per-request durations), TGI (`request` = the `Success` line with exact
--   total / queue / inference / per-token durations), any parser emitting those event kinds.
--   TensorRT-LLM logs only the requests that failed (`Encountered error for requestId N`).
--   A request FAILED (status 'failed', the why in failure_reason) when an error line is
--   about it (a `request_aborted` line at level ERROR / CRITICAL, such as TensorRT-LLM's;
--   TGI's `Request failed during generation`, one line per request, no id), or when it was
--   still in the server when its engine died: arrived, no end logged, and the instance's log
--   goes on to an ERROR / CRITICAL line after which no request finishes (a crash, e.g. CUDA
--   out of memory); the reason is then that first fatal line. A request still in flight at
--   the end of a log without such an error stays 'unfinished'.
-- Columns:
--   engine, instance, model, request_id (null when the log gave none), request_key (id or
--   source:line), arrival_ts (UTC; logged arrival, else TGI finish - e2e_s), finish_ts (UTC;
--   finish, completion, abort or failure), status ('finished' | 'aborted' (client gone,
--   cancelled) | 'failed' (see above) | 'unfinished' = arrival seen, no end in the log), prompt_tokens, output_tokens, max_tokens (tokens),
--   e2e_s, ttft_s, tpot_s (s): the request's BEST latency, from the best source it has: the
--   benchmark client's exact figure where a client results file names the request (client_*
--   below), else the server's (e2e_log_s / ttft_log_s / tpot_log_s); e2e_estimated /
--   ttft_estimated (true when that figure was derived from two log timestamps, i.e. 1 s
--   resolution for vLLM's own header; false for a client's figure),
--   queue_s, inference_s, validation_s (s; only as logged, else null),
--   queue_start_ts / inference_start_ts (UTC; when the request entered the batching queue and
--   when its inference started, derived from exact TGI durations), source, line (first line
--   logged about the request),
--   first_token_ts / last_token_ts (UTC; vLLM V1 with `--enable-log-outputs`: the first and
--   last `streaming delta` line), n_deltas (streamed chunks logged), time_resolution_s (s;
--   the coarsest resolution of the server-log timestamps a derived latency rests on: 1 for
--   vLLM's own header, finer under a container wrapper or NIM's millisecond header),
--   client_* (what a benchmark client measured for the request, exact to its clock; null when
--   no client results file names it): client_source, client_index (its position in the run),
--   client_match ('id': by request id, the server's `chatcmpl-<id>` / `cmpl-<id>-0`;
--   'index_time': by the index ending the server's id, `--request-id-prefix` unknown, under
--   the id prefix most of the run's indices share, logged between the client's send and its
--   answer), client_start_ts (UTC), client_ttft_s, client_itl_s (mean inter-token
--   latency), client_itl_max_s, client_e2e_s, client_tpot_s (s), client_error (the client's
--   error, one line: the last line of the traceback `vllm bench` saves), client_cancelled
--   (true when the client itself gave up on the request: GuideLLM `incomplete`, AIPerf
--   `was_cancelled`);
--   waiting_at_arrival / running_at_arrival (requests; a client-matched request: the last
--   engine_stats snapshot, data-parallel engines summed, before the client sent it); client_unmatched (a client request no server request
--   matched: why, in words); frontend_delay_s (s; a client-matched request: from the client
--   sending it to the server logging its arrival, never below 0; as coarse as the coarser of
--   the log's timestamps and the client's placement on the wall clock, 1 s each for vLLM's
--   header and `vllm bench`'s `date`);
--   e2e_log_s, ttft_log_s, tpot_log_s (s; the server log's own figures: logged, else derived
--   from its timestamps as e2e_estimated / ttft_estimated say; null for a request only a
--   client results file names);
--   latency_source ('client' | 'wrapper' | 'log'; null when the request has no latency):
--   where e2e_s / ttft_s / tpot_s come from: the client's results file; the server log timed
--   by a container wrapper (CRI, docker json-file, journald: finer than the engine's header);
--   the server log itself (logged durations, or its own timestamps); latency_resolution_s
--   (s; 0.000001 for a client's figures, time_resolution_s for figures derived from log
--   timestamps, null for durations the engine logged itself).
--   A client request no server log accounts for is a row of the server its results file
--   tested (where most of the file's requests matched, else the server it names: the
--   instance it was ingested as (`--instance`), else the one server of the model it asked
--   for; else the only server in the store; else engine 'client', instance the file's, and
--   client_unmatched names the ambiguity): status 'finished', or 'failed' when the
--   client saw it fail (it may never have reached the server), 'aborted' when the client
--   cancelled it; its latencies the client's.
--   A request the client saw fail (an error, no answer) is 'failed' whatever the server
--   logged of it (its finish_ts the client's when the server logged no end); one the client
--   cancelled is 'aborted'.
--   failure_reason (status 'failed' only: the error line's text, first line, at most 200
--   characters, then ` [source:line]` of that line; or `engine died: ...` with the line the engine died on;
--   or `client: <the client's error> [<results file>]`).
create or replace view requests as
with

request_events as not materialized (
    select
        engine,
        instance,
        model,
        request_id,
        coalesce(request_id, source || ':' || line) as request_key,
        event,
        ts,
        source,
        line,
        prompt_tokens,
        output_tokens,
        max_tokens,
        e2e_s,
        queue_s,
        ttft_s,
        tpot_s,
        inference_s,
        try_cast(try(json_extract_string(attrs, '$.validation_s')) as double) as validation_s,
        -- folded `streaming delta` lines (request_output): deltas and the last one's offset
        case when event = 'request_output' then try_cast(json_extract_string(attrs, '$.deltas') as bigint) end as deltas,
        case when event = 'request_output' then
            make_timestamptz(epoch_us(ts) + cast(round(coalesce(try_cast(json_extract_string(attrs, '$.last_delta_s') as double), 0) * 1e6) as bigint))
        end as last_delta_ts,
        -- an abort logged as an error is a failure, its text the reason
        case when level in ('ERROR', 'CRITICAL') then coalesce(message, level) end as error_message,
        -- timed by a container wrapper (CRI, docker json-file, journald), finer than the engine's own header
        wrapper_ts is not null as wrapped,
    from events
    where event in ('request', 'request_arrived', 'request_finished', 'request_aborted')
       or (event = 'request_output' and request_id is not null)
    union all
    -- TGI logs a request that failed as one error line in its `generate` span, without an id
    select
        engine, instance, model, request_id, coalesce(request_id, source || ':' || line) as request_key,
        'request_failed' as event, ts, source, line, prompt_tokens, output_tokens, max_tokens,
        e2e_s, queue_s, ttft_s, tpot_s, inference_s, null as validation_s, null as deltas, null as last_delta_ts, coalesce(message, 'error') as error_message,
        wrapper_ts is not null as wrapped,
    from events
    where event = 'error'
      and (try(json_extract_string(attrs, '$.error_kind')) = 'generation'
           or starts_with(message, 'Request failed during generation'))
),

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
),

deaths as (
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
    group by e.engine, e.instance
),

-- a line without a request id (TGI's `Success`) is the whole story of its request: every
-- column follows from that one line, with no group-by and no case analysis over merged
-- instants (over millions of TGI requests those cost more than reading the columns). Same
-- definitions as `merged_final` below, specialised to a single line: it logs both instants
-- only when it logs e2e_s itself, so e2e_s is the logged one and never estimated.
-- Instants are shifted in integer microseconds (make_timestamptz(epoch_us(ts) - microseconds)): the
-- same value as `ts - interval`, at a fraction of the cost.
single as (
    select
        engine,
        instance,
        model,
        request_id,
        request_key,
        case
            when event = 'request_arrived' then ts
            when event = 'request' then make_timestamptz(epoch_us(ts) - cast(round(e2e_s * 1e6) as bigint))
        end as arrival_ts,
        case when event <> 'request_arrived' then ts end as finish_ts,
        case event
            when 'request' then 'finished'
            when 'request_finished' then 'finished'
            when 'request_failed' then 'failed'
            when 'request_aborted' then case when error_message is not null then 'failed' else 'aborted' end
            else 'unfinished'
        end as status,
        prompt_tokens,
        output_tokens,
        max_tokens,
        e2e_s,
        false as e2e_estimated,
        queue_s,
        ttft_s,
        tpot_s,
        inference_s,
        validation_s,
        make_timestamptz(inference_start_us - cast(round(queue_s * 1e6) as bigint)) as queue_start_ts,
        make_timestamptz(inference_start_us) as inference_start_ts,
        source,
        line,
        cast(null as timestamptz) as first_token_ts,
        cast(null as timestamptz) as last_token_ts,
        cast(null as bigint) as n_deltas,
        false as ttft_estimated,
        cast(null as double) as time_resolution_s,
        case when error_message is not null
            then left(split_part(error_message, chr(10), 1), 200) || ' [' || source || ':' || line || ']'
        end as failure_reason,
        wrapped as wrapper_timed,
    from (
        select
            *,
            case when event = 'request' then epoch_us(ts) - cast(round(inference_s * 1e6) as bigint) end as inference_start_us,
        from request_events
        where request_id is null
    )
),

-- vLLM >= 0.14 logs `Added request` with its internal id: the id `Received request` showed
-- plus a random `-<8hex>` suffix (vllm-project/vllm#27987). An arrival id with such a suffix
-- whose stripped form is another arrival's id on the same instance is that same request (an
-- id that merely ends like that, logged the same way on both lines, is left alone).
internal_ids as (
    select distinct s.engine, s.instance, s.request_id, s.external_id
    from (
        select engine, instance, request_id, regexp_replace(request_id, '-[0-9a-f]{8}$', '') as external_id
        from request_events
        where engine = 'vllm' and event = 'request_arrived' and regexp_matches(request_id, '-[0-9a-f]{8}$')
    ) s
    semi join (
        select engine, instance, request_id from request_events where engine = 'vllm' and event = 'request_arrived'
    ) r on r.engine = s.engine and r.instance = s.instance and r.request_id = s.external_id
),

keyed_events as (
    select
        e.* replace (
            coalesce(i.external_id, e.request_id) as request_id,
            coalesce(i.external_id, e.request_key) as request_key
        ),
    from request_events e
    left join internal_ids i
        on i.engine = e.engine and i.instance = e.instance and i.request_id = e.request_id
    where e.request_id is not null
),

merged as (
    select
        engine,
        instance,
        request_key,
        any_value(request_id) as request_id,
        max(model) as model,
        min(ts) filter (where event = 'request_arrived') as arrived_ts,
        max(ts) filter (where event = 'request') as completed_ts,
        max(ts) filter (where event = 'request_finished') as finished_ts,
        max(ts) filter (where event = 'request_aborted') as aborted_ts,
        max(ts) filter (where event = 'request_failed' or (event = 'request_aborted' and error_message is not null)) as failed_ts,
        -- how each request ended, also in a log without a clock (no ts on any line)
        bool_or(event in ('request', 'request_finished')) as ended_finished,
        bool_or(event = 'request_failed' or (event = 'request_aborted' and error_message is not null)) as ended_failed,
        bool_or(event = 'request_aborted') as ended_aborted,
        arg_min(
            left(split_part(error_message, chr(10), 1), 200) || ' [' || source || ':' || line || ']',
            (ts, line)
        ) filter (where error_message is not null) as error_reason,
        max(prompt_tokens) as prompt_tokens,
        -- a finish line's count, else the tokens the streamed chunks listed
        coalesce(
            max(output_tokens) filter (where event <> 'request_output'),
            sum(output_tokens) filter (where event = 'request_output')
        ) as output_tokens,
        max(max_tokens) as max_tokens,
        max(e2e_s) as logged_e2e_s,
        max(queue_s) as queue_s,
        max(ttft_s) as ttft_s,
        max(tpot_s) as tpot_s,
        max(inference_s) as inference_s,
        max(validation_s) as validation_s,
        min(source) as source,
        min(line) as line,
        min(ts) filter (where event = 'request_output') as first_token_ts,
        max(last_delta_ts) as last_token_ts,
        sum(deltas) as n_deltas,
        coalesce(bool_or(wrapped), false) as wrapper_timed,
    from keyed_events
    group by engine, instance, request_key
),

merged_timed as (
    select
        m.*,
        coalesce(m.arrived_ts, make_timestamptz(epoch_us(m.completed_ts) - cast(round(m.logged_e2e_s * 1e6) as bigint))) as arrival_ts,
        coalesce(m.completed_ts, m.finished_ts, m.failed_ts, m.aborted_ts, died.died_ts) as finish_ts,
        case
            when m.ended_finished then 'finished'
            when m.ended_failed then 'failed'
            when m.ended_aborted then 'aborted'
            when died.died_ts is not null then 'failed'
            else 'unfinished'
        end as status,
        case
            when m.ended_finished then null
            when m.ended_failed then m.error_reason
            when m.ended_aborted then null
            when died.died_ts is not null then 'engine died: ' || died.died_reason
        end as failure_reason,
        make_timestamptz(epoch_us(m.completed_ts) - cast(round(m.inference_s * 1e6) as bigint)) as inference_start_ts,
    from merged as m
    -- still in the server when the engine died: arrived before its death, no end logged
    left join deaths as died
        on died.engine = m.engine and died.instance = m.instance
        and m.arrived_ts is not null and m.arrived_ts <= died.died_ts
        and m.completed_ts is null and m.finished_ts is null and m.aborted_ts is null and m.failed_ts is null
),

merged_final as (
    select
        engine,
        instance,
        model,
        request_id,
        request_key,
        arrival_ts,
        finish_ts,
        status,
        prompt_tokens,
        output_tokens,
        max_tokens,
        coalesce(
            logged_e2e_s,
            case when status = 'finished' then epoch(finish_ts) - epoch(arrival_ts) end
        ) as e2e_s,
        logged_e2e_s is null
            and status = 'finished'
            and arrival_ts is not null as e2e_estimated,
        queue_s,
        coalesce(ttft_s, derived_ttft_s) as ttft_s,
        coalesce(
            tpot_s,
            case when output_tokens > 1 and last_token_ts is not null
                then (epoch(last_token_ts) - epoch(first_token_ts)) / (output_tokens - 1) end
        ) as tpot_s,
        inference_s,
        validation_s,
        make_timestamptz(epoch_us(inference_start_ts) - cast(round(queue_s * 1e6) as bigint)) as queue_start_ts,
        inference_start_ts,
        source,
        line,
        first_token_ts,
        last_token_ts,
        n_deltas,
        ttft_s is null and derived_ttft_s is not null as ttft_estimated,
        case
            when logged_e2e_s is not null and ttft_s is not null then null
            when arrival_ts is null then null
            when (epoch_us(arrival_ts) % 1000000 = 0) and (coalesce(epoch_us(first_token_ts), epoch_us(finish_ts), 0) % 1000000 = 0) then 1.0
            when (epoch_us(arrival_ts) % 1000 = 0) and (coalesce(epoch_us(first_token_ts), epoch_us(finish_ts), 0) % 1000 = 0) then 0.001
            else 0.000001
        end as time_resolution_s,
        failure_reason,
        wrapper_timed,
    from (
        select *, epoch(first_token_ts) - epoch(arrival_ts) as derived_ttft_s,
        from merged_timed
    )
),

final as (
    select * from single
    union all
    select * from merged_final
),

-- what benchmark clients measured (engine `client`: `vllm bench serve --save-detailed`, AIPerf)
client_events as (
    select
        instance as client_instance,
        source as client_source,
        line as client_line,
        request_id as client_id,
        try_cast(json_extract_string(attrs, '$.index') as bigint) as client_index,
        ts as client_start_ts,
        ttft_s as client_ttft_s,
        try_cast(json_extract_string(attrs, '$.itl_s') as double) as client_itl_s,
        try_cast(json_extract_string(attrs, '$.itl_max_s') as double) as client_itl_max_s,
        e2e_s as client_e2e_s,
        tpot_s as client_tpot_s,
        -- the error as one line: the last line of what the client saved (`vllm bench` keeps the
        -- whole traceback, whose last line names the exception, e.g. `ClientOSError: ...`)
        case when json_extract_string(attrs, '$.success') = 'false'
            then coalesce(nullif(trim(regexp_extract(rtrim(message, chr(9) || chr(10) || chr(13) || ' '), '[^\n]*$')), ''), 'failed') end as client_error,
        -- the client gave up on the request itself (GuideLLM `incomplete`, AIPerf `was_cancelled`)
        coalesce(json_extract_string(attrs, '$.error_type') = 'incomplete'
                 or json_extract_string(attrs, '$.cancelled') = 'true', false) as client_cancelled,
        model, prompt_tokens, output_tokens,
    from events
    where event = 'client_request'
),

-- the ids a server logs for a client's id K: the chat endpoint's `chatcmpl-K`, the
-- completions endpoint's `cmpl-K-0` (one per prompt), or K itself
client_ids as (
    select *, unnest([client_id, 'chatcmpl-' || client_id, 'cmpl-' || client_id || '-0', 'cmpl-' || client_id]) as server_id,
    from client_events
    where client_id is not null
),

by_id as (
    select c.* exclude (server_id), s.engine, s.instance, s.request_key, s.arrival_ts, 'id' as client_match,
    from client_ids as c
    join merged_final as s on s.request_id = c.server_id
),

-- a client that does not know its ids (vllm bench leaves `--request-id-prefix` out of its
-- results) sent request i as `<prefix>i`: the server request of the same index, logged
-- between the client sending it and the client getting its answer. Under overload a busy API
-- server logs `Received request` tens of seconds after the client sent it, so the bound is
-- the client's own answer, not a fixed window around its send; 3 s either side allow for the
-- run's placement on the wall clock (`date`, to the second) and the log's own resolution.
client_runs as (
    select client_source,
        min(client_start_ts) - interval 3 second as lo,
        max(make_timestamptz(epoch_us(client_start_ts) + cast(round(coalesce(client_e2e_s, 0) * 1e6) as bigint)))
            + interval 3 second as hi,
    from client_events
    where client_id is null and client_start_ts is not null
    group by all
),

-- every server request of the client's index within the run, with its id's stem (the id
-- without the index); a request the client got an answer for reached the server before that
index_candidates as (
    select c.*, s.engine, s.instance, s.request_key, s.arrival_ts,
        case when starts_with(s.request_id, 'cmpl-') then regexp_replace(s.request_id, '-\d+-0$', '')
            else regexp_replace(s.request_id, '-\d+$', '') end as id_stem,
    from client_events as c
    join client_runs as r on r.client_source = c.client_source
    join merged_final as s
        on s.arrival_ts between r.lo and r.hi
        and try_cast(
            case when starts_with(s.request_id, 'cmpl-') then regexp_extract(s.request_id, '-(\d+)-0$', 1)
                else regexp_extract(s.request_id, '-(\d+)$', 1) end as bigint
        ) = c.client_index
    where c.client_id is null
      and s.arrival_ts >= c.client_start_ts - interval 3 second
      and (c.client_e2e_s is null
           or s.arrival_ts <= make_timestamptz(epoch_us(c.client_start_ts) + cast(round(c.client_e2e_s * 1e6) as bigint)) + interval 3 second)
),

-- a run sends every request under one prefix: the stem that accounts for most of the run's
-- indices, and for at least half of those the client got an answer for. Another client's `chatcmpl-other-1` may arrive closer to the run's request 1
-- than the run's own, logged late by a busy API server (seen on a real vLLM 0.32 recording).
run_stems as (
    select c.client_source, c.id_stem,
    from index_candidates as c
    join (
        select client_source, count(*) filter (where client_error is null) as n_answered,
        from client_events
        group by client_source
    ) as a on a.client_source = c.client_source
    group by c.client_source, c.id_stem
    -- a prefix that accounts for fewer than half of the requests the client got an answer for
    -- is another client's traffic that shares some indices (a run whose every request failed
    -- before reaching the server matches nothing)
    having count(distinct c.client_index) >= greatest(any_value(a.n_answered) / 2, 1)
       and any_value(a.n_answered) > 0
    qualify row_number() over (partition by c.client_source order by count(distinct c.client_index) desc, c.id_stem) = 1
),

-- the first server request of the index logged from the send on (two runs under one prefix
-- repeat their indices); a server request is one client request's only
by_index as (
    select * from (
        select c.* exclude (id_stem), 'index_time' as client_match,
        from index_candidates as c
        join run_stems as r on r.client_source = c.client_source and r.id_stem = c.id_stem
        qualify row_number() over (
            partition by c.client_source, c.client_line, c.client_index
            order by c.arrival_ts, c.request_key
        ) = 1
    )
    qualify row_number() over (
        partition by engine, instance, request_key
        order by abs(epoch(arrival_ts) - epoch(client_start_ts)), client_source, client_line
    ) = 1
),

matched as (
    select * from by_id
    union all
    select * from by_index
),

-- the queue the server reported last before the client sent each matched request (the
-- server may log it tens of seconds later under overload), its data-parallel engines summed
-- (engine_stats folds their lines of one period into one snapshot)
stats_series as (
    select engine, instance, ts, waiting, running from engine_stats where kind = 'engine_stats'
),

-- the time the queue is read at, a plain column: an ASOF condition on an expression has no
-- translation to the other dialects (servelens views --dialect)
matched_probe as (
    select *, coalesce(client_start_ts, arrival_ts) as queue_probe_ts from matched
),

matched_queue as (
    select m.*, q.waiting as waiting_at_arrival, q.running as running_at_arrival,
    from matched_probe as m
    asof left join stats_series as q on q.engine = m.engine and q.instance = m.instance
        and m.queue_probe_ts >= q.ts
),

client_cols as (
    select
        engine, instance, request_key,
        client_source, client_index, client_match, client_start_ts, client_ttft_s, client_itl_s,
        client_itl_max_s, client_e2e_s, client_tpot_s, client_error, client_cancelled, waiting_at_arrival, running_at_arrival,
        cast(null as varchar) as client_unmatched,
        -- from the client's send to the server's `Received request`: time no engine metric
        -- shows (a CPU-starved API server, a proxy's queue)
        greatest(epoch(arrival_ts) - epoch(client_start_ts), 0) as frontend_delay_s,
    from matched_queue
),

-- One latency per request, from the best source it has: the client's exact figures where a
-- results file names the request, else the server's (logged, or derived from a wrapper's fine
-- timestamps, or from the engine's own header). e2e_s / ttft_s / tpot_s are that best figure;
-- the server's own stay in e2e_log_s / ttft_log_s / tpot_log_s.
-- A request the client saw fail (an error, no answer) failed, whatever the server logged of it
-- (the server may have finished a generation nobody received, or still hold it); one the
-- client cancelled was aborted.
with_client as (
    select
        f.* exclude (wrapper_timed) replace (
            -- a failure the server logged no end of ended when the client saw it
            case when f.finish_ts is null and c.client_error is not null
                 then make_timestamptz(epoch_us(c.client_start_ts) + cast(round(coalesce(c.client_e2e_s, 0) * 1e6) as bigint))
                 else f.finish_ts end as finish_ts,
            case
                when c.client_error is not null and c.client_cancelled then 'aborted'
                when c.client_error is not null then 'failed'
                else f.status
            end as status,
            case when c.client_error is not null and not c.client_cancelled
                 then 'client: ' || left(c.client_error, 200) || ' [' || c.client_source || ']'
                 when c.client_error is not null then null
                 else f.failure_reason end as failure_reason,
            case when c.client_e2e_s is not null then c.client_e2e_s else f.e2e_s end as e2e_s,
            case when c.client_e2e_s is not null then false else f.e2e_estimated end as e2e_estimated,
            case when c.client_ttft_s is not null then c.client_ttft_s else f.ttft_s end as ttft_s,
            case when c.client_tpot_s is not null then c.client_tpot_s else f.tpot_s end as tpot_s,
            case when c.client_ttft_s is not null then false else f.ttft_estimated end as ttft_estimated
        ),
        c.* exclude (engine, instance, request_key),
        f.e2e_s as e2e_log_s,
        f.ttft_s as ttft_log_s,
        f.tpot_s as tpot_log_s,
        case
            when c.client_e2e_s is not null or c.client_ttft_s is not null then 'client'
            when f.e2e_s is null and f.ttft_s is null and f.tpot_s is null then null
            when (f.e2e_estimated or f.ttft_estimated) and f.wrapper_timed then 'wrapper'
            else 'log'
        end as latency_source,
        case
            when c.client_e2e_s is not null or c.client_ttft_s is not null then 0.000001
            when f.e2e_s is null and f.ttft_s is null and f.tpot_s is null then null
            when f.e2e_estimated or f.ttft_estimated then f.time_resolution_s
        end as latency_resolution_s,
    from final as f
    left join client_cols as c on c.engine = f.engine and c.instance = f.instance and c.request_key = f.request_key
),

-- the server a results file tested: where most of its matched requests are, else the server
-- it names (below), else the only server in the store (one server is unambiguous); else
-- none (engine `client` below)
client_servers as (
    select client_source, engine as server_engine, instance as server_instance,
    from (select client_source, engine, instance, count(*) as n, from matched group by all)
    qualify row_number() over (partition by client_source order by n desc, engine, instance) = 1
),

-- the servers in the store (read only when some client results file is there: a distinct
-- over the events' dictionary-encoded columns, not over the merged requests)
server_list as (
    select distinct engine, instance, model
    from events
    where engine not in ('client', 'unknown')
      and (select count(*) from client_events) > 0
),

lone_server as (
    select min(engine) as server_engine, min(instance) as server_instance,
    from (select distinct engine, instance from server_list)
    having count(*) = 1
),

-- where none of a file's requests matched: the server it names, by the instance it was
-- ingested as (`--instance`), else by the model it asked for, when one server alone fits
client_files as (
    select client_source, any_value(client_instance) as client_instance, any_value(model) as client_model,
    from client_events
    group by client_source
),

named_servers as (
    select client_source, min(server_engine) as server_engine, min(server_instance) as server_instance,
    from (
        select distinct f.client_source, s.engine as server_engine, s.instance as server_instance,
        from client_files as f
        join server_list as s on s.instance = f.client_instance
    )
    group by client_source
    having count(*) = 1
),

model_servers as (
    select client_source, min(server_engine) as server_engine, min(server_instance) as server_instance,
    from (
        select distinct f.client_source, s.engine as server_engine, s.instance as server_instance,
        from client_files as f
        join server_list as s on s.model = f.client_model
    )
    group by client_source
    having count(*) = 1
),

n_servers as (
    select count(*) as n from (select distinct engine, instance from server_list)
),

-- a client request no server log accounts for is a request of the server its results file
-- tested (a request that failed at the client may never have reached it), else of its own
-- (engine `client`)
client_only as (
    select
        coalesce(cs.server_engine, ns.server_engine, ms.server_engine, ls.server_engine, 'client') as engine,
        coalesce(cs.server_instance, ns.server_instance, ms.server_instance, ls.server_instance, c.client_instance) as instance,
        c.model, c.client_id as request_id,
        coalesce(c.client_id, c.client_source || ':' || c.client_line || ':' || c.client_index) as request_key,
        c.client_start_ts as arrival_ts,
        -- (a failure without a duration: when it was sent, the client's only time for it)
        make_timestamptz(epoch_us(c.client_start_ts) + cast(round(
            case when c.client_error is null then c.client_e2e_s else coalesce(c.client_e2e_s, 0) end * 1e6) as bigint)) as finish_ts,
        case when c.client_error is null then 'finished' when c.client_cancelled then 'aborted' else 'failed' end as status,
        c.prompt_tokens, c.output_tokens, cast(null as bigint) as max_tokens,
        c.client_e2e_s as e2e_s, false as e2e_estimated, cast(null as double) as queue_s,
        c.client_ttft_s as ttft_s, c.client_tpot_s as tpot_s, cast(null as double) as inference_s,
        cast(null as double) as validation_s, cast(null as timestamptz) as queue_start_ts,
        cast(null as timestamptz) as inference_start_ts, c.client_source as source, c.client_line as line,
        cast(null as timestamptz) as first_token_ts, cast(null as timestamptz) as last_token_ts,
        cast(null as bigint) as n_deltas, false as ttft_estimated, cast(null as double) as time_resolution_s,
        case when c.client_error is not null and not c.client_cancelled
             then 'client: ' || left(c.client_error, 200) || ' [' || c.client_source || ']' end as failure_reason,
        c.client_source, c.client_index, cast(null as varchar) as client_match, c.client_start_ts, c.client_ttft_s,
        c.client_itl_s, c.client_itl_max_s, c.client_e2e_s, c.client_tpot_s, c.client_error, c.client_cancelled,
        cast(null as bigint) as waiting_at_arrival, cast(null as bigint) as running_at_arrival,
        -- why no server request matched it
        case
            when coalesce(cs.server_engine, ns.server_engine, ms.server_engine, ls.server_engine) is null
                then case when nsv.n = 0 then 'no server log in the store'
                     else 'its results file names none of the ' || nsv.n || ' servers in the store (no request of it matched, '
                          || 'no server is named ' || c.client_instance || ', none or several serve '
                          || coalesce(c.model, 'its model') || '): ingest it with --instance SERVER' end
            when c.client_error is not null and not c.client_cancelled
                then 'failed at the client, and no server request matches it: it may never have reached the server'
            when c.client_id is not null then 'no server request logged under its id'
            when c.client_index is null or c.client_start_ts is null then 'no id, index or send time to match by'
            when rs.id_stem is null then 'no server request id ends in the run''s indices (send them with --request-id-prefix)'
            else 'no server request of index ' || c.client_index || ' under the run''s id prefix between its send and its answer'
        end as client_unmatched,
        cast(null as double) as frontend_delay_s,
        cast(null as double) as e2e_log_s, cast(null as double) as ttft_log_s, cast(null as double) as tpot_log_s,
        case when c.client_e2e_s is not null or c.client_ttft_s is not null then 'client' end as latency_source,
        case when c.client_e2e_s is not null or c.client_ttft_s is not null then 0.000001 end as latency_resolution_s,
    from client_events as c
    left join client_servers as cs on cs.client_source = c.client_source
    left join lone_server as ls on true
    left join named_servers as ns on ns.client_source = c.client_source
    left join model_servers as ms on ms.client_source = c.client_source
    left join n_servers as nsv on true
    left join run_stems as rs on rs.client_source = c.client_source
    anti join matched as m on m.client_source = c.client_source and m.client_line = c.client_line
        and m.client_index is not distinct from c.client_index
)

select * from with_client
union all
select * from client_only
