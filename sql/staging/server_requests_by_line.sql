-- server_requests_by_line: the requests a server logged on one line without an id.
-- Grain: one row per such line (TGI's `Success` line; TGI's `Request failed during
--   generation`), keyed by its source file and line (request_key; request_id is null).
-- Engines: TGI, any parser emitting id-less request events.
-- Columns: those of server_requests_by_id, in the same order (requests unions the two):
--   engine, instance, model, request_id, request_key, arrival_ts, finish_ts (UTC), status,
--   prompt_tokens, output_tokens, max_tokens (tokens), e2e_s (s), e2e_estimated, queue_s,
--   ttft_s, tpot_s, inference_s, validation_s (s), queue_start_ts, inference_start_ts (UTC),
--   source, line, first_token_ts, last_token_ts (UTC), n_deltas, ttft_estimated,
--   time_resolution_s (s), failure_reason, wrapper_timed (true when a container wrapper timed
--   the line).
-- a line without a request id (TGI's `Success`) is the whole story of its request: every
-- column follows from that one line, with no group-by and no case analysis over merged
-- instants (over millions of TGI requests those cost more than reading the columns). Same
-- definitions as server_requests_by_id, specialised to a single line: it logs both instants
-- only when it logs e2e_s itself, so e2e_s is the logged one and never estimated.
-- Instants are shifted in integer microseconds (make_timestamptz(epoch_us(ts) - microseconds)): the
-- same value as `ts - interval`, at a fraction of the cost.
create or replace view server_requests_by_line as
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
);
