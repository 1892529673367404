-- fleet_imbalance: replicas of one deployment (the same engine serving the same model) whose
--   queue or load differ widely in the same window: one queues while a sibling has room.
--   That is a routing problem (the load balancer, session affinity, a health check), not a
--   capacity one: the fleet already has the room. scaling_signals turns its windows into the
--   `fleet_imbalance` signal ("route better") once it lasts [fleet_sustain_s].
-- Grain: one row per (engine, instance, window) in which the instance is the busy side of an
--   imbalance with at least one sibling.
-- Conditions (thresholds: sql/thresholds.toml [fleet]; docs/metrics.md):
--   queue  the instance's window-average waiting >= [fleet_waiting] while a sibling's is
--          <= [fleet_sibling_waiting] (engines that log or reconstruct a queue);
--   load   its running + waiting >= [fleet_load] and >= [fleet_load_ratio] times a
--          sibling's, while that sibling waits <= [fleet_sibling_waiting] or logs no queue
--          (llama.cpp logs no queue: its slots' load is what differs).
--   A sibling counts only in windows where it has data and no crash (a replica that died or
--   was stopped has no windows after its last line, nor room in the one it died in).
-- Columns: engine, instance, model (null when the logs name none), window_index,
--   window_start, window_end (UTC), window_s (s), condition ('queue' | 'load'),
--   waiting_avg, load_avg (requests: running + waiting, window averages), sibling (the least
--   loaded sibling), sibling_waiting_avg, sibling_load_avg (requests), n_replicas (replicas of
--   the deployment with data in the window).
create or replace view fleet_imbalance as
with

params as (
    select
        coalesce(try_cast(getvariable('fleet_waiting') as double), 10.0) as waiting,
        coalesce(try_cast(getvariable('fleet_sibling_waiting') as double), 1.0) as sibling_waiting,
        coalesce(try_cast(getvariable('fleet_load') as double), 8.0) as min_load,
        coalesce(try_cast(getvariable('fleet_load_ratio') as double), 3.0) as load_ratio,
),

replicas as (
    select
        -- the model each instance serves (window_metrics.model: the one its lines name most)
        w.engine, w.instance, w.model, w.window_index, w.window_start, w.window_end, w.window_s,
        w.waiting_avg,
        coalesce(w.running_avg, 0) + coalesce(w.waiting_avg, 0) as load_avg,
        w.running_avg is not null or w.waiting_avg is not null as has_state,
        -- a replica that crashed in the window (CUDA OOM, engine dead) is no room to route to
        coalesce(w.n_severe_errors, 0) = 0 as healthy,
    from window_metrics as w
    where w.engine not in ('client', 'unknown')
),

-- per deployment (engine, model) and window: its replicas with data and no crash, the only
-- ones work can be routed to
live as (
    select engine, model, window_index, count(*) as n_live,
    from replicas
    where has_state and healthy
    group by all
),

-- of those, the two least loaded that wait at most [fleet_sibling_waiting] (`queue_room`:
-- for the queue condition) and the two least loaded that wait that little or log no queue
-- (for the load condition). A replica's own sibling is never itself: where it is the first,
-- the second stands in. The least loaded sibling a busy replica is out of balance with is
-- always among these (for the load condition the least loaded is the first to qualify), so
-- each replica is compared with at most four, not with every sibling of a large fleet.
room as (
    select
        engine, model, window_index, instance, waiting_avg, load_avg,
        row_number() over (partition by engine, model, window_index order by load_avg, instance) as load_rank,
        row_number() over (partition by engine, model, window_index, waiting_avg <= k.sibling_waiting
                           order by load_avg, instance) as queue_rank,
        coalesce(waiting_avg <= k.sibling_waiting, false) as queue_room,
    from replicas, params as k
    where has_state and healthy and coalesce(waiting_avg, 0) <= k.sibling_waiting
),

pairs as (
    -- each replica against those siblings of its deployment, in the same window
    select
        a.*,
        b.instance as sibling,
        b.waiting_avg as sibling_waiting_avg,
        b.load_avg as sibling_load_avg,
        l.n_live - case when a.healthy then 1 else 0 end + 1 as n_replicas,
    from replicas as a
    join live as l
        on l.engine = a.engine
        and l.model is not distinct from a.model
        and l.window_index = a.window_index
    join room as b
        on b.engine = a.engine
        and b.model is not distinct from a.model
        and b.window_index = a.window_index
        and b.instance <> a.instance
        and (b.load_rank <= 2 or (b.queue_room and b.queue_rank <= 2))
    where a.has_state
),

judged as (
    select
        p.*,
        case
            when p.waiting_avg >= k.waiting and p.sibling_waiting_avg <= k.sibling_waiting then 'queue'
            when p.load_avg >= k.min_load and p.load_avg >= k.load_ratio * p.sibling_load_avg
                and coalesce(p.sibling_waiting_avg, 0) <= k.sibling_waiting then 'load'
        end as condition,
    from pairs as p, params as k
),

final as (
    -- per busy replica and window, its least loaded sibling among those it is out of balance
    -- with (of equally loaded ones, the first by name)
    select
        engine, instance, model, window_index, window_start, window_end, window_s,
        max(condition) as condition,  -- queue before load
        any_value(waiting_avg) as waiting_avg,
        any_value(load_avg) as load_avg,
        arg_min(sibling, (sibling_load_avg, sibling)) as sibling,
        arg_min(sibling_waiting_avg, (sibling_load_avg, sibling)) as sibling_waiting_avg,
        min(sibling_load_avg) as sibling_load_avg,
        any_value(n_replicas) as n_replicas,
    from judged
    where condition is not null
    group by engine, instance, model, window_index, window_start, window_end, window_s
)

select * from final
