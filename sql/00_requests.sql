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
--   e2e_s (s; logged, else finish_ts - arrival_ts for finished requests), e2e_estimated (true
--   when e2e_s was derived from two log timestamps, i.e. 1 s resolution for vLLM),
--   queue_s, ttft_s, tpot_s, inference_s, validation_s (s; only as logged, else null),
--   queue_start_ts / inference_start_ts (UTC; when the request entered the batching queue and
--   when its inference started, derived from exact TGI durations), source, line (first line
--   logged about the request), failure_reason (status 'failed' only: the error line's text,
--   first line, at most 200 characters, then ` [source:line]` of that line).
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
        -- an abort logged as an error is a failure, its text the reason
        case when level in ('ERROR', 'CRITICAL') then coalesce(message, level) end as error_message,
    from events
    where event in ('request', 'request_arrived', 'request_finished', 'request_aborted')
    union all
    -- TGI logs a request that failed as one error line in its `generate` span, without an id
    select
        engine, instance, model, request_id, coalesce(request_id, source || ':' || line) as request_key,
        'request_failed' as event, ts, source, line, prompt_tokens, output_tokens, max_tokens,
        e2e_s, queue_s, ttft_s, tpot_s, inference_s, null as validation_s, coalesce(message, 'error') as error_message,
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
        case when error_message is not null
            then left(split_part(error_message, chr(10), 1), 200) || ' [' || source || ':' || line || ']'
        end as failure_reason,
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
        arg_min(
            left(split_part(error_message, chr(10), 1), 200) || ' [' || source || ':' || line || ']',
            (ts, line)
        ) filter (where error_message is not null) as error_reason,
        max(prompt_tokens) as prompt_tokens,
        max(output_tokens) as output_tokens,
        max(max_tokens) as max_tokens,
        max(e2e_s) as logged_e2e_s,
        max(queue_s) as queue_s,
        max(ttft_s) as ttft_s,
        max(tpot_s) as tpot_s,
        max(inference_s) as inference_s,
        max(validation_s) as validation_s,
        min(source) as source,
        min(line) as line,
    from keyed_events
    group by engine, instance, request_key
),

merged_timed as (
    select
        m.*,
        coalesce(m.arrived_ts, make_timestamptz(epoch_us(m.completed_ts) - cast(round(m.logged_e2e_s * 1e6) as bigint))) as arrival_ts,
        coalesce(m.completed_ts, m.finished_ts, m.failed_ts, m.aborted_ts, died.died_ts) as finish_ts,
        case
            when m.completed_ts is not null or m.finished_ts is not null then 'finished'
            when m.failed_ts is not null then 'failed'
            when m.aborted_ts is not null then 'aborted'
            when died.died_ts is not null then 'failed'
            else 'unfinished'
        end as status,
        case
            when m.completed_ts is not null or m.finished_ts is not null then null
            when m.failed_ts is not null then m.error_reason
            when m.aborted_ts is not null then null
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
        ttft_s,
        tpot_s,
        inference_s,
        validation_s,
        make_timestamptz(epoch_us(inference_start_ts) - cast(round(queue_s * 1e6) as bigint)) as queue_start_ts,
        inference_start_ts,
        source,
        line,
        failure_reason,
    from merged_timed
),

final as (
    select * from single
    union all
    select * from merged_final
)

select * from final
