-- vllm_request_ids: vLLM's internal request ids, each with the id its request arrived under.
-- Grain: one row per (engine, instance, internal id) of a vLLM instance.
-- Engines: vLLM (>= 0.14). The other engines log one id per request.
-- vLLM >= 0.14 logs `Added request` with its internal id: the id `Received request` showed
-- plus a random `-<8hex>` suffix (vllm-project/vllm#27987). An arrival id with such a suffix
-- whose stripped form is another arrival's id on the same instance is that same request (an
-- id that merely ends like that, logged the same way on both lines, is left alone).
-- Columns: engine, instance, request_id (the internal id, as `Added request` logged it),
--   external_id (the id `Received request` logged, which requests keeps).
create or replace view vllm_request_ids as
select distinct s.engine, s.instance, s.request_id, s.external_id
from (
    select engine, instance, request_id, regexp_replace(request_id, '-[0-9a-f]{8}$', '') as external_id
    from request_events
    where engine = 'vllm' and event = 'request_arrived' and regexp_matches(request_id, '-[0-9a-f]{8}$')
) s
semi join (
    select engine, instance, request_id from request_events where engine = 'vllm' and event = 'request_arrived'
) r on r.engine = s.engine and r.instance = s.instance and r.request_id = s.external_id;
