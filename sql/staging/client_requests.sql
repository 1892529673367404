-- client_requests: what benchmark clients measured, one row per request of their results files.
-- Grain: one row per request a client results file lists (events of engine `client`:
--   `vllm bench serve --save-detailed`, AIPerf, GuideLLM).
-- Columns: client_instance (the instance the file was ingested as), client_source (the file),
--   client_line (its line), client_id (the request id the client sent, when it knows it),
--   client_index (the request's position in the run), client_start_ts (UTC; when it was
--   sent), client_ttft_s, client_itl_s (mean inter-token latency), client_itl_max_s,
--   client_e2e_s, client_tpot_s (s), client_error (the client's error, one line; null when it
--   got an answer), client_cancelled (the client gave up on the request itself), model,
--   prompt_tokens, output_tokens (tokens).
-- what benchmark clients measured (engine `client`: `vllm bench serve --save-detailed`, AIPerf)
create or replace view client_requests as
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
where event = 'client_request';
