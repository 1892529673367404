-- metric_availability: which metrics the logs of each engine can give, and why not.
-- Grain: one row per (engine, metric) for every engine present in `events` (except
--   `unknown`).
-- Columns: engine, metric, view (where the metric lives), available (true when this store
--   has at least one non-null value), n_values (values present), estimated (true when any
--   value present is reconstructed or derived rather than logged; for a metric with no
--   values, whether it would be), reason (readable: where the
--   value comes from, or why it is null), sources (the request latencies e2e_s / ttft_s /
--   tpot_s: how many values rest on each source, requests.latency_source, most first,
--   e.g. 'client 220, log 3'; any metric some of whose values the server's /metrics gave
--   where the log has none: those too, as 'scrape N' (latencies: the observations the
--   histograms counted in windows where no request carries the value); else null).
create or replace view metric_availability as
with

catalogue(engine, metric, view, estimated, provides, missing) as (
    values
    ('vllm', 'e2e_s', 'requests', true,
        'finish minus arrival log line, 1 s resolution (estimated): V0 `Finished request`, or V1 with --enable-log-outputs (`Generated response ...` when the answer or stream completes)',
        'vLLM logs no per-request latency; e2e is derived from `Received/Added request` + an end line: `Finished request` (V0, request logging on) or, on V1, the `Generated response` lines of --enable-log-outputs (chat / responses endpoints); or ingest a client results file (vllm bench serve --save-detailed, AIPerf profile_export.jsonl)'),
    ('vllm', 'ttft_s', 'requests', true,
        'first `Generated response ... (streaming delta)` line minus arrival, 1 s resolution (estimated; V1 --enable-log-outputs, streamed requests)',
        'vLLM logs no per-request time to first token by default: V1 gives it only with --enable-log-outputs (streamed chat requests), else ingest a client results file beside the log (exact client TTFT in requests.client_ttft_s)'),
    ('vllm', 'tpot_s', 'requests', true,
        '(last - first streaming delta) / (output tokens - 1), 1 s resolution (estimated; needs the token ids the deltas list)',
        'vLLM logs no per-request time per output token by default: V1 --enable-log-outputs gives it only where the delta lines list their output_token_ids (those of vLLM 0.32 list none), else a client results file (client ITL)'),
    ('vllm', 'queue_s', 'requests', false, 'logged',
        'vLLM logs no per-request queue time (only Prometheus has it)'),
    ('vllm', 'waiting', 'queue_depth', false, 'logged by the periodic stats line (Pending/Waiting)',
        'no periodic stats lines in this log (they are DEBUG when the server is idle, or --disable-log-stats)'),
    ('vllm', 'running', 'batch_fill', false, 'logged by the periodic stats line (Running)',
        'no periodic stats lines in this log'),
    ('vllm', 'fill', 'batch_fill', false, 'Running / max_num_seqs',
        'max_num_seqs is printed only in the startup args (`args: Namespace(...)` / `non-default args`), and not found in this log'),
    ('vllm', 'kv_usage', 'kv_cache', false, 'logged by the periodic stats line (`<device> KV cache usage`: GPU, or the backend''s own CPU / XPU / TPU label)',
        'no periodic stats lines in this log'),
    ('vllm', 'preemptions', 'kv_cache', false,
        'V1 stats-line `Preemptions:` (v0.12+, only when > 0) and V0 warnings (every 50th preemption)',
        'no preemption counts in this log: V1 before v0.12 logs none, v0.12+ prints them only when > 0'),
    ('vllm', 'gen_tps', 'throughput', false, 'logged by the periodic stats line (engine average)',
        'no periodic stats lines in this log'),
    ('tgi', 'e2e_s', 'requests', false, 'logged exactly by the `Success` line (total_time)',
        'no `Success` lines in this log (request lines are INFO; check the log level)'),
    ('tgi', 'queue_s', 'requests', false, 'logged exactly by the `Success` line (queue_time)',
        'no `Success` lines in this log'),
    ('tgi', 'tpot_s', 'requests', false, 'logged exactly by the `Success` line (time_per_token)',
        'no `Success` lines in this log'),
    ('tgi', 'ttft_s', 'requests', false, 'logged',
        'TGI logs no time to first token: the `Success` line splits latency into validation, queue and inference only'),
    ('tgi', 'waiting', 'queue_depth', true,
        'reconstructed from the queue interval of each `Success` line (misses requests unfinished in the log)',
        'no `Success` lines to reconstruct the queue from; TGI logs no queue size (Prometheus tgi_queue_size only)'),
    ('tgi', 'running', 'batch_fill', true,
        'reconstructed from the inference interval of each `Success` line',
        'no `Success` lines to reconstruct the batch from; TGI logs no batch size at INFO'),
    ('tgi', 'fill', 'batch_fill', false, 'running / announced max_num_seqs',
        'TGI announces no sequence limit unless started with --max-batch-size (shown in its `Args { ... }` line); it logs only the token budget, `Setting max batch total tokens`'),
    ('tgi', 'kv_usage', 'kv_cache', false, 'logged',
        'TGI logs no KV-cache usage (only the block count at start-up)'),
    ('tgi', 'preemptions', 'kv_cache', false, 'logged',
        'TGI logs no preemptions'),
    ('tgi', 'gen_tps', 'throughput', false, 'logged',
        'TGI logs no aggregate token throughput; see requests_per_s / output_tokens_per_s'),
    ('trtllm', 'e2e_s', 'requests', false, 'logged',
        'TensorRT-LLM logs no per-request lines by default (latency only in Triton / trtllm-serve metrics)'),
    ('trtllm', 'ttft_s', 'requests', false, 'logged',
        'TensorRT-LLM logs no per-request lines by default'),
    ('trtllm', 'tpot_s', 'requests', false, 'logged',
        'TensorRT-LLM logs no per-request lines by default'),
    ('trtllm', 'queue_s', 'requests', false, 'logged',
        'TensorRT-LLM logs no per-request lines by default'),
    ('trtllm', 'waiting', 'queue_depth', false,
        'logged by the executor iteration stats (queued + active not scheduled); with Triton stats derived as Active Request Count - Scheduled Requests (estimated; a lower bound once Max Request Count is reached)',
        'no iteration stats in this log (Triton needs --log-verbose=1, trtllm-serve print_iter_log)'),
    ('trtllm', 'running', 'batch_fill', false, 'logged by the iteration stats (scheduled requests)',
        'no iteration stats in this log'),
    ('trtllm', 'fill', 'batch_fill', false, 'active / Max Request Count (or maxNumSequences)',
        'no sequence limit in this log'),
    ('trtllm', 'kv_usage', 'kv_cache', false, 'logged by the iteration stats (used / max KV cache blocks)',
        'no KV block counts in this log'),
    ('trtllm', 'preemptions', 'kv_cache', false, 'logged',
        'TensorRT-LLM logs no preemption counts'),
    ('trtllm', 'gen_tps', 'throughput', false, 'logged',
        'no generation throughput in this log'),
    ('client', 'e2e_s', 'requests', false, 'measured by the benchmark client (exact; also requests.client_e2e_s of the matched server request)',
        'the client results hold no successful request'),
    ('client', 'ttft_s', 'requests', false, 'measured by the benchmark client (exact; streamed requests)',
        'the client results hold no TTFT (non-streaming requests, or no successful request)'),
    ('client', 'tpot_s', 'requests', false, 'measured by the benchmark client: (e2e - ttft) / (output tokens - 1)',
        'the client results hold no request with more than one output token'),
    ('sglang', 'e2e_s', 'requests', false, 'logged exactly by the per-request metrics file (--export-metrics-to-file: e2e_latency)',
        'SGLang logs no per-request latency by default: start it with --export-metrics-to-file and ingest the sglang-request-metrics-*.log files (in a directory named after the server)'),
    ('sglang', 'ttft_s', 'requests', false, 'per-request metrics file: prefill_finished_ts - request_received_ts',
        'needs the per-request metrics file with request time stats (request_received_ts, prefill_finished_ts); the server log has no TTFT'),
    ('sglang', 'tpot_s', 'requests', false, 'per-request metrics file: 1 / decode_throughput',
        'needs the per-request metrics file with decode_throughput; the server log has no TPOT'),
    ('sglang', 'queue_s', 'requests', false, 'per-request metrics file (queue_time) or ReqTimeStats lines (queue_duration)',
        'needs the per-request metrics file (queue_time) or ReqTimeStats lines; the batch lines give only the queue length'),
    ('sglang', 'waiting', 'queue_depth', false, 'logged by the Prefill / Decode batch lines (#queue-req); PD workers are separate instances',
        'no Prefill / Decode batch lines in this log (they come from the scheduler, TP0 or each DP rank)'),
    ('sglang', 'running', 'batch_fill', false, 'logged by the Prefill / Decode batch lines (#running-req)',
        'no Prefill / Decode batch lines in this log'),
    ('sglang', 'fill', 'batch_fill', false, '#running-req / max_running_requests',
        'max_running_requests not found: it is printed at start-up (server_args, `max_total_num_tokens=... max_running_requests=...`)'),
    ('sglang', 'kv_usage', 'kv_cache', false, 'logged by the Prefill / Decode batch lines (token usage, 2 decimals)',
        'no Prefill / Decode batch lines in this log'),
    ('sglang', 'preemptions', 'kv_cache', false,
        'retraction lines (`KV cache pool is full. Retract requests.` / `Decode out of memory happened.`), each counted once across TP ranks',
        'no retractions in this log: SGLang logs every one, so the KV pool never ran out (or the lines were filtered)'),
    ('sglang', 'gen_tps', 'throughput', false, 'logged by the Decode batch lines (gen throughput, over decode_log_interval steps)',
        'no Decode batch lines in this log'),
    ('llamacpp', 'e2e_s', 'requests', false,
        'logged by the timing block (`total time`: prompt processing + decode, to 0.01 ms); the wait for a free slot is in no line, so under overload the client waits longer: a client results file beside the log gives it (requests.client_e2e_s)',
        'no timing blocks in this log (`print_timing` lines; under journald they may be hidden as `[N blob data]`)'),
    ('llamacpp', 'ttft_s', 'requests', false, 'logged',
        'llama.cpp logs no time to first token; the prompt eval time (attrs prefill_s) is TTFT minus the wait for a slot and tokenisation'),
    ('llamacpp', 'tpot_s', 'requests', false, 'logged by the timing block (`eval time` / (tokens - 1))',
        'no timing blocks in this log'),
    ('llamacpp', 'queue_s', 'requests', false, 'logged',
        'llama.cpp logs no queue time: a task waiting for a free slot is in no line at INFO (deferred tasks only at debug level or in /metrics requests_deferred), and arrival is when a slot takes the task; ingest a client results file beside the log for the wait (requests.client_e2e_s minus e2e_s)'),
    ('llamacpp', 'waiting', 'queue_depth', false, 'logged',
        'llama.cpp logs no queue depth at INFO (only /metrics llamacpp:requests_deferred)'),
    ('llamacpp', 'running', 'batch_fill', false, 'logged',
        'llama.cpp logs no running count; busy slots follow from slot launch / release lines (request_arrived / request_finished in requests)'),
    ('llamacpp', 'fill', 'batch_fill', false, 'running / n_slots',
        'no running count to divide by the announced n_slots'),
    ('llamacpp', 'kv_usage', 'kv_cache', false, 'logged',
        'llama.cpp logs no KV-cache usage (per slot only n_tokens at release against n_ctx_slot, in attrs)'),
    ('llamacpp', 'preemptions', 'kv_cache', false, 'logged',
        'llama.cpp does not preempt: a slot keeps its context until the task ends'),
    ('llamacpp', 'gen_tps', 'throughput', false, 'logged per slot by the progress line (`tg = X t/s`, decode speed since its generation began)',
        'no progress lines in this log (printed only for decodes past 100 tokens, every 3 s, 2026-05+)')
),

engines as (
    select distinct engine from events where engine is not null and engine <> 'unknown'
),

observed as (
    select engine, 'e2e_s' as metric, count(e2e_s) as n_values, bool_or(e2e_estimated) as est, from requests group by engine
    union all select engine, 'ttft_s', count(ttft_s), coalesce(bool_or(ttft_estimated and ttft_s is not null), false), from requests group by engine
    union all select engine, 'tpot_s', count(tpot_s), coalesce(bool_or(ttft_estimated and tpot_s is not null), false), from requests group by engine
    union all select engine, 'queue_s', count(queue_s), false, from requests group by engine
    union all select engine, 'waiting', count(waiting), bool_or(estimated), from queue_depth group by engine
    union all select engine, 'running', count(running), bool_or(estimated), from batch_fill group by engine
    union all select engine, 'fill', count(fill), bool_or(estimated and fill is not null), from batch_fill group by engine
    union all select engine, 'kv_usage', count(kv_usage), false, from kv_cache group by engine
    union all
    select engine, 'preemptions', count(preemptions) + count(*) filter (where preemption_lines > 0), false,
    from kv_cache group by engine
    union all select engine, 'gen_tps', count(gen_tps), false, from engine_stats group by engine
),

-- which source each request latency rests on (the client's exact figures, a wrapper's fine
-- timestamps, the server log)
latency_sources as (
    select engine, metric, string_agg(latency_source || ' ' || n, ', ' order by n desc, latency_source) as sources,
    from (
        select engine, 'e2e_s' as metric, latency_source, count(*) as n, from requests where e2e_s is not null group by all
        union all select engine, 'ttft_s', latency_source, count(*), from requests where ttft_s is not null group by all
        union all select engine, 'tpot_s', latency_source, count(*), from requests where tpot_s is not null group by all
    )
    where latency_source is not null
    group by engine, metric
),

-- values the server's /metrics gave where the log gives none (the views' source 'scraped',
-- latency_percentiles' per-metric 'scrape'), with the metric they were read from
scraped_values as (
    select v.engine, v.metric, v.n, v.latency, f.family,
    from (
        select engine, 'waiting' as metric, 'waiting' as meaning, count(*) as n, false as latency, from queue_depth where source = 'scraped' group by engine
        union all select engine, 'running', 'running', count(*), false, from batch_fill where source = 'scraped' group by engine
        union all select engine, 'fill', 'running', count(fill), false, from batch_fill where source = 'scraped' group by engine
        union all select engine, 'kv_usage', 'kv_usage', count(kv_usage), false, from kv_cache where source = 'scraped' group by engine
        union all select engine, 'preemptions', 'preemptions', count(preemptions), false, from kv_cache where source = 'scraped' group by engine
        union all select engine, 'e2e_s', 'e2e', sum(n_e2e), true, from latency_percentiles where e2e_source = 'scrape' group by engine
        union all select engine, 'ttft_s', 'ttft', sum(n_ttft), true, from latency_percentiles where ttft_source = 'scrape' group by engine
        union all select engine, 'tpot_s', 'tpot', sum(n_tpot), true, from latency_percentiles where tpot_source = 'scrape' group by engine
        union all select engine, 'queue_s', 'queue', sum(n_queue), true, from latency_percentiles where queue_source = 'scrape' group by engine
    ) as v
    left join (select engine, meaning, min(family) as family, from samples where meaning is not null group by all) as f
        using (engine, meaning)
    where v.n > 0
),

final as (
    select
        e.engine,
        c.metric,
        c.view,
        coalesce(o.n_values, 0) + coalesce(sv.n * sv.latency::int, 0) > 0 as available,
        coalesce(o.n_values, 0) + coalesce(sv.n * sv.latency::int, 0) as n_values,
        case when sv.latency then true else coalesce(o.est, c.estimated) end as estimated,
        case
            when sv.n is null then case when coalesce(o.n_values, 0) > 0 then c.provides else c.missing end
            -- the gauges' counts already hold the scraped rows; the latencies' do not
            when coalesce(o.n_values, 0) - case when sv.latency then 0 else sv.n end > 0 then
                c.provides || '; where the log gives none, the server''s /metrics (' || sv.family || ')'
            else 'from the server''s /metrics (' || sv.family
                || case when sv.latency then ', bucket estimates per window' else ', at each scrape' end
                || '); the log: ' || c.missing
        end as reason,
        case
            when sv.n is null then ls.sources
            else concat_ws(', ',
                coalesce(ls.sources, case when coalesce(o.n_values, 0) - sv.n * (not sv.latency)::int > 0
                    then 'log ' || (coalesce(o.n_values, 0) - sv.n * (not sv.latency)::int) end),
                'scrape ' || sv.n)
        end as sources,
    from engines as e
    join catalogue as c using (engine)
    left join observed as o on o.engine = e.engine and o.metric = c.metric
    left join latency_sources as ls on ls.engine = e.engine and ls.metric = c.metric
    left join scraped_values as sv on sv.engine = e.engine and sv.metric = c.metric
)

select * from final
