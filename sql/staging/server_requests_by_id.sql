-- server_requests_by_id: the requests a server logged under an id, each request's lines merged.
-- Grain: one row per (engine, instance, request id); vLLM's internal ids are folded into the
--   id the request arrived under (vllm_request_ids).
-- Engines: vLLM (arrival / finish / abort lines, `streaming delta` lines), TensorRT-LLM
--   (failed requests), SGLang, llama.cpp, any parser emitting request events with an id.
-- A request still in the server when its engine died (instance_deaths: arrived before the
--   death, no end logged) failed, its reason `engine died: ...`.
-- Columns: engine, instance, model, request_id, request_key, arrival_ts, finish_ts (UTC),
--   status, prompt_tokens, output_tokens, max_tokens (tokens), e2e_s (s), e2e_estimated,
--   queue_s, ttft_s, tpot_s, inference_s, validation_s (s), queue_start_ts,
--   inference_start_ts (UTC), source, line, first_token_ts, last_token_ts (UTC), n_deltas,
--   ttft_estimated, time_resolution_s (s), failure_reason, wrapper_timed (true when a
--   container wrapper timed some line of the request); requests.sql describes each.
create or replace view server_requests_by_id as
with

keyed_events as (
    select
        e.* replace (
            coalesce(i.external_id, e.request_id) as request_id,
            coalesce(i.external_id, e.request_key) as request_key
        ),
    from request_events e
    left join vllm_request_ids i
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
    left join instance_deaths as died
        on died.engine = m.engine and died.instance = m.instance
        and m.arrived_ts is not null and m.arrived_ts <= died.died_ts
        and m.completed_ts is null and m.finished_ts is null and m.aborted_ts is null and m.failed_ts is null
)

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
);
