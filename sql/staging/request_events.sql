-- request_events: the event lines about requests, each keyed to its request.
-- Grain: one row per line the engine logged about a request (`request`, `request_arrived`,
--   `request_finished`, `request_aborted`; `request_output`, the folded `streaming delta`
--   lines, when they carry an id), plus TGI's `Request failed during generation` error line
--   (event `request_failed`, no id). Read by the server_requests_* views, vllm_request_ids and
--   instance_deaths, each of which inlines it (it is not worth storing: a scan of the events).
-- Columns: engine, instance, model, request_id (null when the line names none), request_key
--   (request_id, else source:line), event, ts (UTC), source, line, prompt_tokens,
--   output_tokens, max_tokens (tokens), e2e_s, queue_s, ttft_s, tpot_s, inference_s,
--   validation_s (s; as logged), deltas (streamed chunks a `request_output` line folds),
--   last_delta_ts (UTC; its last chunk), error_message (the line's text when it is an error:
--   level ERROR / CRITICAL, or TGI's failure line), wrapped (true when a container wrapper
--   timed the line, finer than the engine's own header).
create or replace view request_events as
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
       or starts_with(message, 'Request failed during generation'));
