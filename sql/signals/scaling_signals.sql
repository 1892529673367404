-- scaling_signals: the signals that fire, each with a plain-language recommendation.
-- Grain: one row per firing episode: consecutive windows of one instance in which the same
--   signal's condition holds, kept when the episode lasts at least the signal's sustain time.
-- Signals (thresholds: sql/thresholds.toml, variables in brackets; see docs/metrics.md):
--   queue_backlog     window-average waiting > [queue_waiting] for >= [queue_sustain_s]
--                     -> scale out. vLLM, TensorRT-LLM (logged), TGI (reconstructed).
--   kv_pressure       peak KV usage >= [kv_usage] with >= [kv_preemptions] preemptions
--                     (critical); or KV that high while requests wait and the log carries no
--                     preemption data (warning) -> more replicas / memory, fewer sequences.
--                     vLLM, TensorRT-LLM.
--   scheduler_limit   batch fill < [scheduler_fill] while >= [scheduler_waiting] requests wait
--                     and the KV cache is not full, for >= [scheduler_sustain_s] -> raise the
--                     sequence / token limits. Needs max_num_seqs in the log.
--   batch_limit       batch fill >= [batch_limit_fill] (running at its sequence limit) while
--                     >= [batch_limit_waiting] requests wait and the KV cache peaks below
--                     [batch_limit_kv], for >= [batch_limit_sustain_s] -> raise the limit
--                     (--max-num-seqs, --max-running-requests, slots): memory has room for
--                     more sequences. Needs the limit and the KV usage in the log.
--   latency_slo_e2e   p99 e2e latency > [slo_p99_e2e_s] with >= [slo_min_requests] finished
--                     requests in the window -> scale out. TGI (exact), vLLM (estimated),
--                     a benchmark client's exact figures wherever its results file names
--                     the request (requests.latency_source).
--   latency_slo_ttft  p99 TTFT > [slo_p99_ttft_s]: engines that log TTFT, or client figures.
--                     Both latency signals fall back on the server's /metrics histograms
--                     where no request of the window carries the latency: the unit then
--                     says `/metrics buckets` and the row is estimated.
--   throughput_swing  coefficient of variation of the window throughput over the last
--                     [swing_lookback_windows] busy windows > [swing_cv] while the arrivals
--                     (when logged) varied at most half as much and no backlog above
--                     [queue_waiting] was draining -> investigate.
--   errors            >= 1 crash/OOM (critical) or >= [errors_count] errors (warning) in a
--                     window -> investigate the first error.
--   frontend_delay    p90 of client send -> server arrival of the window's client-matched
--                     requests > [frontend_p90_s], with >= [slo_min_requests] of them ->
--                     the API server / proxy, not the engine. Needs a client results file.
--   idle              nothing arrives, runs or waits for >= [idle_sustain_s] -> scale in.
--   fleet_imbalance   this replica queues (or carries [fleet_load_ratio] times the load)
--                     while a sibling serving the same model has room (fleet_imbalance), for
--                     >= [fleet_sustain_s] -> route better, not scale out.
-- Columns: engine, instance, signal, severity ('critical' | 'warning' | 'info'),
--   window_start, window_end (UTC, the episode), duration_s (s), n_windows, value (the worst
--   value in the episode, unit in `unit`), threshold (same unit), unit, estimated (true when
--   the value rests on reconstructed or 1 s-resolution data), recommendation.
create or replace view scaling_signals as
with

params as (
    select
        coalesce(try_cast(getvariable('queue_waiting') as double), 10.0) as queue_waiting,
        coalesce(try_cast(getvariable('queue_sustain_s') as double), 180.0) as queue_sustain_s,
        coalesce(try_cast(getvariable('kv_usage') as double), 0.90) as kv_usage,
        coalesce(try_cast(getvariable('kv_preemptions') as double), 1.0) as kv_preemptions,
        coalesce(try_cast(getvariable('scheduler_fill') as double), 0.5) as scheduler_fill,
        coalesce(try_cast(getvariable('scheduler_waiting') as double), 1.0) as scheduler_waiting,
        coalesce(try_cast(getvariable('scheduler_sustain_s') as double), 120.0) as scheduler_sustain_s,
        coalesce(try_cast(getvariable('batch_limit_fill') as double), 0.9) as batch_limit_fill,
        coalesce(try_cast(getvariable('batch_limit_waiting') as double), 1.0) as batch_limit_waiting,
        coalesce(try_cast(getvariable('batch_limit_kv') as double), 0.5) as batch_limit_kv,
        coalesce(try_cast(getvariable('batch_limit_sustain_s') as double), 120.0) as batch_limit_sustain_s,
        coalesce(try_cast(getvariable('slo_p99_e2e_s') as double), 30.0) as slo_p99_e2e_s,
        coalesce(try_cast(getvariable('slo_p99_ttft_s') as double), 5.0) as slo_p99_ttft_s,
        coalesce(try_cast(getvariable('slo_min_requests') as double), 5.0) as slo_min_requests,
        coalesce(try_cast(getvariable('swing_cv') as double), 0.5) as swing_cv,
        cast(coalesce(try_cast(getvariable('swing_lookback_windows') as double), 5.0) as bigint) as swing_lookback_windows,
        coalesce(try_cast(getvariable('errors_count') as double), 5.0) as errors_count,
        coalesce(try_cast(getvariable('idle_sustain_s') as double), 600.0) as idle_sustain_s,
        coalesce(try_cast(getvariable('fleet_waiting') as double), 10.0) as fleet_waiting,
        coalesce(try_cast(getvariable('fleet_load') as double), 8.0) as fleet_load,
        coalesce(try_cast(getvariable('fleet_sustain_s') as double), 120.0) as fleet_sustain_s,
        coalesce(try_cast(getvariable('frontend_p90_s') as double), 3.0) as frontend_p90_s,
),

metrics as materialized (
    select * from window_metrics
),

-- read twice below (the candidate windows, the recommendation's siblings): computed once
fleet as materialized (
    select * from fleet_imbalance
),

swings as (
    -- rolling statistics over the busy windows only: an idle stretch is the `idle` signal's
    -- business, and a ramp from zero is not a swing
    select
        engine, instance, window_start, window_index, throughput, arrived, waiting_avg,
        count(*) over lookback as n_busy,
        stddev_pop(throughput) over lookback / nullif(avg(throughput) over lookback, 0) as cv,
        -- the offered load over the same windows: a swing that follows the arrivals is traffic
        stddev_pop(arrived) over lookback / nullif(avg(arrived) over lookback, 0) as arrival_cv,
        -- ... and one that drains a backlog is the queue catching up
        max(waiting_avg) over lookback as max_waiting,
        min(window_index) over lookback as first_index,
    from metrics
    where not idle and throughput > 0
    window lookback as (
        partition by engine, instance order by window_index
        rows between cast(coalesce(try_cast(getvariable('swing_lookback_windows') as double), 5.0) as bigint) - 1 preceding
            and current row
    )
),

candidates as (
    -- one row per window and signal whose condition holds
    select engine, instance, window_start, window_end, window_index, window_s,
        'queue_backlog' as signal,
        case when waiting_avg >= 2 * p.queue_waiting then 'critical' else 'warning' end as severity,
        waiting_avg as value, p.queue_waiting as threshold, 'requests waiting' as unit,
        waiting_estimated as estimated, p.queue_sustain_s as sustain_s,
    from metrics, params as p
    where waiting_avg > p.queue_waiting

    union all
    select engine, instance, window_start, window_end, window_index, window_s,
        'kv_pressure',
        case when preemptions >= p.kv_preemptions then 'critical' else 'warning' end,
        kv_max, p.kv_usage, 'fraction of KV cache', false, 0.0,
    from metrics, params as p
    where kv_max >= p.kv_usage
      and (preemptions >= p.kv_preemptions or (preemptions is null and waiting_avg > 0))

    union all
    select engine, instance, window_start, window_end, window_index, window_s,
        'scheduler_limit', 'warning',
        fill_avg, p.scheduler_fill, 'batch fill (fraction of max_num_seqs)',
        coalesce(waiting_estimated, false), p.scheduler_sustain_s,
    from metrics, params as p
    where fill_avg < p.scheduler_fill
      and waiting_avg >= p.scheduler_waiting
      and (kv_max is null or kv_max < p.kv_usage)

    union all
    -- the batch full to its sequence limit while requests wait and the KV cache has room for
    -- more: the limit, not memory, holds the load back (value and threshold read upwards)
    select engine, instance, window_start, window_end, window_index, window_s,
        'batch_limit', 'warning',
        fill_avg, p.batch_limit_fill, 'batch fill (fraction of the sequence limit)',
        coalesce(waiting_estimated, false), p.batch_limit_sustain_s,
    from metrics, params as p
    where fill_avg >= p.batch_limit_fill
      and waiting_avg >= p.batch_limit_waiting
      and kv_max is not null and kv_max < p.batch_limit_kv

    union all
    select engine, instance, window_start, window_end, window_index, window_s,
        'latency_slo_e2e',
        case when p99_e2e_s >= 2 * p.slo_p99_e2e_s then 'critical' else 'warning' end,
        p99_e2e_s, p.slo_p99_e2e_s,
        case when e2e_source = 'scrape' then 's (p99 end-to-end, /metrics buckets)' else 's (p99 end-to-end)' end,
        e2e_estimated or e2e_source = 'scrape', 0.0,
    from metrics, params as p
    where p99_e2e_s > p.slo_p99_e2e_s and n_latency >= p.slo_min_requests

    union all
    select engine, instance, window_start, window_end, window_index, window_s,
        'latency_slo_ttft',
        case when p99_ttft_s >= 2 * p.slo_p99_ttft_s then 'critical' else 'warning' end,
        p99_ttft_s, p.slo_p99_ttft_s,
        case when ttft_source = 'scrape' then 's (p99 time to first token, /metrics buckets)' else 's (p99 time to first token)' end,
        ttft_estimated or ttft_source = 'scrape', 0.0,
    from metrics, params as p
    where p99_ttft_s > p.slo_p99_ttft_s and n_latency >= p.slo_min_requests

    union all
    select m.engine, m.instance, m.window_start, m.window_end, m.window_index, m.window_s,
        'throughput_swing', 'warning',
        s.cv, p.swing_cv, 'coefficient of variation of ' || m.throughput_unit, false, 0.0,
    from swings as s
    join metrics as m using (engine, instance, window_start)
    cross join params as p
    where s.cv > p.swing_cv
      and (s.arrival_cv is null or s.arrival_cv <= p.swing_cv / 2)
      and (s.max_waiting is null or s.max_waiting <= p.queue_waiting)
      and s.n_busy >= p.swing_lookback_windows
      -- the lookback must be consecutive windows, not busy windows far apart
      and s.window_index - s.first_index = p.swing_lookback_windows - 1

    union all
    select engine, instance, window_start, window_end, window_index, window_s,
        'errors',
        case when n_severe_errors > 0 then 'critical' else 'warning' end,
        n_errors, case when n_severe_errors > 0 then 1 else p.errors_count end, 'errors in the window',
        false, 0.0,
    from metrics, params as p
    where n_severe_errors > 0 or n_errors >= p.errors_count

    union all
    -- requests held between the client and the engine: the server logged them long after the
    -- client sent them (a benchmark client's results file beside the log)
    select engine, instance, window_start, window_end, window_index, window_s,
        'frontend_delay',
        case when frontend_delay_p90_s >= 2 * p.frontend_p90_s then 'critical' else 'warning' end,
        frontend_delay_p90_s, p.frontend_p90_s, 's (p90 client send -> server arrival)', true, 0.0,
    from metrics, params as p
    where frontend_delay_p90_s > p.frontend_p90_s and n_frontend >= p.slo_min_requests

    union all
    select engine, instance, window_start, window_end, window_index, window_s,
        'idle', 'info',
        0.0, p.idle_sustain_s, 'requests/s', false, p.idle_sustain_s,
    from metrics, params as p
    where idle

    union all
    select engine, instance, window_start, window_end, window_index, window_s,
        'fleet_imbalance',
        case when coalesce(waiting_avg, 0) >= 2 * p.fleet_waiting then 'critical' else 'warning' end,
        case when condition = 'queue' then waiting_avg else load_avg end,
        case when condition = 'queue' then p.fleet_waiting else p.fleet_load end,
        case when condition = 'queue' then 'requests waiting while a sibling had room'
            else 'requests in flight while a sibling had room' end,
        false, p.fleet_sustain_s,
    from fleet, params as p
),

islands as (
    select
        *,
        window_index - row_number() over (partition by engine, instance, signal order by window_index) as island,
    from candidates
),

episodes as (
    select
        engine,
        instance,
        signal,
        case max(case severity when 'critical' then 3 when 'warning' then 2 else 1 end)
            when 3 then 'critical' when 2 then 'warning' else 'info'
        end as severity,
        min(window_start) as window_start,
        max(window_end) as window_end,
        count(*) as n_windows,
        count(*) * any_value(window_s) as duration_s,
        case when signal = 'scheduler_limit' then min(value) else max(value) end as value,
        any_value(threshold) as threshold,
        -- a window whose latency is a bucket estimate marks its episode's unit so
        max(unit) as unit,
        coalesce(bool_or(estimated), false) as estimated,
        any_value(sustain_s) as sustain_s,
    from islands
    group by engine, instance, signal, island
),

final as (
    select
        engine,
        instance,
        signal,
        severity,
        window_start,
        window_end,
        duration_s,
        n_windows,
        case when signal = 'idle' then duration_s else value end as value,
        threshold,
        case when signal = 'idle' then 's idle' else unit end as unit,
        estimated,
        case signal
            when 'queue_backlog' then format(
                'On average {:.1f} requests waited (threshold {:g}) for {:g} min: the instance cannot keep up with the load. Scale out (add replicas) or route traffic away from it.',
                value, threshold, duration_s / 60)
            when 'kv_pressure' then format(
                'The KV cache reached {:.0f}% (threshold {:.0f}%){}: sequences compete for cache memory. Add replicas or GPU memory (raise gpu_memory_utilization, shard with tensor parallelism), or admit fewer concurrent sequences ({}).',
                100 * value, 100 * threshold,
                case when severity = 'critical' then ' with preemptions' else ' while requests waited (this log carries no preemption counts)' end,
                case engine
                    when 'vllm' then 'lower --max-num-seqs'
                    when 'trtllm' then 'lower max_batch_size / max_num_tokens'
                    else 'lower the concurrent-sequence limit'
                end)
            when 'scheduler_limit' then format(
                'Requests waited while the batch was only {:.0f}% full and the KV cache had room: the scheduler''s limit, not the GPU, is the bottleneck. Raise {}.',
                100 * value,
                case engine
                    when 'vllm' then '--max-num-seqs and --max-num-batched-tokens'
                    when 'tgi' then '--max-batch-total-tokens / --max-batch-prefill-tokens / --max-concurrent-requests'
                    when 'trtllm' then 'max_batch_size / max_num_tokens (with GUARANTEED_NO_EVICT the reserved KV can be the real limit even when used KV looks low: consider MAX_UTILIZATION)'
                    else 'the maximum batch size / token budget'
                end)
            when 'batch_limit' then format(
                'The batch ran at {:.0f}% of its sequence limit (threshold {:.0f}%) for {:g} min while requests waited and the KV cache stayed below {:.0f}%: the limit, not memory, holds the load back. Raise {} (then watch kv_pressure); add replicas once the KV cache is what runs out.',
                100 * value, 100 * threshold, duration_s / 60, 100 * (select batch_limit_kv from params),
                case engine
                    when 'vllm' then '--max-num-seqs'
                    when 'sglang' then '--max-running-requests'
                    when 'llamacpp' then 'the slot count (--parallel)'
                    when 'tgi' then '--max-concurrent-requests / --max-batch-size'
                    when 'trtllm' then 'max_batch_size'
                    else 'the concurrent-sequence limit'
                end)
            when 'latency_slo_e2e' then format(
                'p99 end-to-end latency was {:.1f} s, above the {:g} s SLO{}. Scale out (add replicas) to shorten queues and batches.',
                value, threshold, case
                    when unit like '%/metrics buckets%' then ' (a bucket estimate of the server''s /metrics histogram)'
                    when estimated then ' (estimated from 1 s log timestamps)' else '' end)
            when 'latency_slo_ttft' then format(
                'p99 time to first token was {:.2f} s, above the {:g} s SLO{}. Scale out, or lower the prefill token budget to interleave prefills.',
                value, threshold, case
                    when unit like '%/metrics buckets%' then ' (a bucket estimate of the server''s /metrics histogram)'
                    when estimated then ' (estimated from 1 s log timestamps)' else '' end)
            when 'throughput_swing' then format(
                'Throughput swung widely (stddev {:.0f}% of its mean over {} windows) while the offered load did not (or was not logged). Investigate memory fragmentation, KV swapping / CPU offload, or host-side stalls.',
                100 * value, n_windows + (select swing_lookback_windows from params) - 1)
            when 'errors' then format(
                '{:g} errors in one window{}. Read the first error (see the errors view) before scaling: restarts and OOMs need a fix, not more replicas.',
                value, case when severity = 'critical' then ', including an engine crash or out-of-memory' else '' end)
            when 'frontend_delay' then format(
                'Requests reached the server {:.1f} s (p90) after the client sent them (threshold {:g} s): time no engine metric shows, spent before the engine saw them. The API server or a proxy in front of it is the bottleneck: give the API server CPU of its own (vLLM: --api-server-count), check the proxy''s or load balancer''s queue; more engine replicas will not remove it.',
                value, threshold)
            when 'idle' then format(
                'No request arrived, ran or waited for {:g} min. Candidate for scale in.',
                duration_s / 60)
            when 'fleet_imbalance' then format(
                'Replicas of one deployment were out of balance for {:g} min: this one had up to {:.1f} {} ({}). The fleet has the room: route better (least-outstanding-requests or queue-aware load balancing; check session affinity, sticky routing and health checks) rather than scale out.',
                duration_s / 60, value, unit,
                coalesce((select 'least loaded: ' || string_agg(distinct f.sibling, ', ' order by f.sibling)
                          from fleet as f
                          where f.engine = e.engine and f.instance = e.instance
                            and f.window_start >= e.window_start and f.window_end <= e.window_end),
                         'a sibling'))
        end as recommendation,
    from episodes as e
    where duration_s >= sustain_s
)

select * from final
