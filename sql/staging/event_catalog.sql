-- event_catalog: what the store holds, per instance and model: the first and last timed event
--   and how many there are. The dashboard's filters (engines, instances, models, the time
--   range) are made from it.
-- Grain: one row per (engine, instance, model) with at least one event that has a time (model
--   null for the lines that name none).
-- Engines: all, the benchmark client's results (engine `client`) and unrecognised files
--   (`unknown`) included.
-- Columns: engine, instance, model, first_ts, last_ts (UTC), n_events (events with a time).
create or replace view event_catalog as
select engine, instance, model, min(ts) as first_ts, max(ts) as last_ts, count(*) as n_events,
from events
where ts is not null
group by engine, instance, model
