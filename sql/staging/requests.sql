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
-- Reads the staging views beneath it: server_requests_by_line and server_requests_by_id (the
--   server's own rows), client_requests (the benchmark clients' rows), engine_stats (the queue
--   at a client's send). What is left here is matching the two sides, in one view: the server
--   rows with their client's columns and the client requests no server row accounts for both
--   read the matches, and the matches read the server rows; a view is derived again at every
--   place a query names it, a CTE once.
create or replace view requests as
with

-- each staging view read more than once below is named once, here (see above)
merged_final as (select * from server_requests_by_id),

final as (
    select * from server_requests_by_line
    union all
    select * from merged_final
),

client_events as (select * from client_requests),

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
