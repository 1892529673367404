"""The scaling verdict: one word per instance from the signal episodes of `scaling_signals`.

Pure functions (no querying, no Streamlit), so the rule is testable on its own:
- a critical `errors` episode (crash, OOM) -> investigate: more replicas of a crashing server
  do not help, the first error needs reading first;
- else `fleet_imbalance` (this replica queues while a sibling serving the same model has
  room) -> route better: the fleet has the capacity, the load balancer does not use it, and
  more replicas behind the same routing would idle too;
- else any load signal (queue backlog, KV pressure, latency above the SLO) -> scale out;
- else a configuration or stability signal (scheduler limit, throughput swing, errors) ->
  investigate;
- else `idle` -> scale in;
- no signal in the range -> hold;
- no event at all in the range -> no data (not hold: silence is not health).
"""

from __future__ import annotations

import polars as pl

SCALE_OUT = "scale out"
ROUTE_BETTER = "route better"
SCALE_IN = "scale in"
HOLD = "hold"
INVESTIGATE = "investigate"
NO_DATA = "no data"

# worst first: the order of the fleet summary and of the cards
VERDICT_ORDER = {INVESTIGATE: 0, ROUTE_BETTER: 1, SCALE_OUT: 2, NO_DATA: 3, SCALE_IN: 4, HOLD: 5}

# signals that fire when their value is BELOW the threshold (a batch too empty while requests
# wait); the others fire above it
FIRES_BELOW = frozenset({"scheduler_limit"})

# signal -> the action it argues for
SIGNAL_ACTION: dict[str, str] = {
    "queue_backlog": SCALE_OUT,
    "kv_pressure": SCALE_OUT,
    "latency_slo_e2e": SCALE_OUT,
    "latency_slo_ttft": SCALE_OUT,
    "scheduler_limit": INVESTIGATE,
    "batch_limit": INVESTIGATE,
    "throughput_swing": INVESTIGATE,
    "errors": INVESTIGATE,
    "frontend_delay": INVESTIGATE,
    "idle": SCALE_IN,
    "fleet_imbalance": ROUTE_BETTER,
}

SIGNAL_TITLE: dict[str, str] = {
    "queue_backlog": "Queue backlog",
    "kv_pressure": "KV-cache pressure",
    "latency_slo_e2e": "p99 end-to-end latency above SLO",
    "latency_slo_ttft": "p99 time to first token above SLO",
    "scheduler_limit": "Scheduler limit is the bottleneck",
    "batch_limit": "Batch at its sequence limit with memory to spare (raise the limit)",
    "throughput_swing": "Throughput swinging",
    "errors": "Errors",
    "frontend_delay": "Requests held before the server saw them (API server / proxy)",
    "idle": "Idle",
    "fleet_imbalance": "Replicas out of balance (route better)",
}

# Streamlit markdown: Material icons and coloured badges (no emoji: they need a font that
# headless servers often lack)
VERDICT_BADGE = {
    SCALE_OUT: ":red-badge[:material/trending_up: SCALE OUT]",
    ROUTE_BETTER: ":violet-badge[:material/alt_route: ROUTE BETTER]",
    SCALE_IN: ":blue-badge[:material/trending_down: SCALE IN]",
    HOLD: ":green-badge[:material/check_circle: HOLD]",
    INVESTIGATE: ":orange-badge[:material/search: INVESTIGATE]",
    NO_DATA: ":gray-badge[:material/cloud_off: NO DATA]",
}
SEVERITY_BADGE = {"critical": ":red-badge[critical]", "warning": ":orange-badge[warning]", "info": ":blue-badge[info]"}


def action_of(signal: str) -> str:
    return SIGNAL_ACTION.get(signal, INVESTIGATE)


def verdict(episodes: pl.DataFrame) -> str:
    """The verdict for one instance's signal episodes (columns signal, severity)."""
    if episodes.is_empty():
        return HOLD
    rows = episodes.select("signal", "severity").rows()
    if any(sig == "errors" and sev == "critical" for sig, sev in rows):
        return INVESTIGATE
    actions = {action_of(sig) for sig, _ in rows}
    for a in (ROUTE_BETTER, SCALE_OUT, INVESTIGATE, SCALE_IN):
        if a in actions:
            return a
    return HOLD


def verdicts(episodes: pl.DataFrame, instances: list[tuple[str, str]],
             with_data: set[tuple[str, str]] | None = None) -> list[tuple[str, str, str, pl.DataFrame]]:
    """(engine, instance, verdict, that instance's episodes) for every selected instance, the
    instances needing action first. An instance outside `with_data` (when given: the
    instances with events in the range) is `no data`."""
    out = []
    for engine, instance in instances:
        mine = episodes.filter((pl.col("engine") == engine) & (pl.col("instance") == instance))
        v = verdict(mine)
        if v == HOLD and with_data is not None and (engine, instance) not in with_data:
            v = NO_DATA
        out.append((engine, instance, v, mine))
    out.sort(key=lambda r: (VERDICT_ORDER[r[2]], r[1]))
    return out


def fleet_lines(results: list[tuple[str, str, str, pl.DataFrame]]) -> list[tuple[str, list[str]]]:
    """One (verdict, instances) line per verdict present, the worst first."""
    by: dict[str, list[str]] = {}
    for _, instance, v, _ in results:
        by.setdefault(v, []).append(instance)
    return sorted(by.items(), key=lambda kv: VERDICT_ORDER[kv[0]])


def threshold_text(signal: str, threshold: float | None, unit: str | None, errors_count: float | None = None) -> str:
    """How a signal's threshold reads beside its value: the direction it fires in, and for
    `errors` both of its triggers, as the errors chart draws them (the view stores 1 as the
    threshold of a crash / OOM window)."""
    if signal == "errors":
        count = f"{errors_count:g}" if errors_count is not None else format_value(threshold, unit)
        return f"threshold {count} errors/window, or 1 crash/OOM (critical)"
    if signal in FIRES_BELOW:
        return f"BELOW threshold {format_value(threshold, unit)} (fires under it)"
    return f"above threshold {format_value(threshold, unit)}"


def shows_unit(unit: str | None) -> bool:
    """Whether `format_value` already says the unit (%, s), so the text need not repeat it."""
    u = unit or ""
    return u.startswith(("fraction", "batch fill", "coefficient", "s"))


def format_value(value: float | None, unit: str | None) -> str:
    """A signal's value in its own unit: fractions as percentages, seconds with a unit."""
    if value is None:
        return "n/a"
    unit = unit or ""
    if unit.startswith(("fraction", "batch fill", "coefficient")):
        return f"{value:.0%}"
    if unit.startswith("s"):
        return f"{value:.1f} s"
    return f"{value:.1f}" if value != int(value) else f"{int(value)}"
