"""The executive summary of the post-mortem: what happened, in order, across instances; the
impact (failed, aborted and slow requests, SLO-breach minutes); the likely cause with the
first error and where it is logged; and what to do.

Every fact comes from the `incident_summary` view (sql/signals/incident_summary.sql) and the
signal episodes the report already read; this module only orders the facts and puts them
into words. `summarize` returns plain data (the JSON report carries it as is) including the
`headline`, the one paragraph an on-call engineer reads first.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb

# errors.kind of a crash, in words
CRASH_WORDS = {"cuda_oom": "CUDA out-of-memory", "engine_dead": "an engine crash"}
SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    rel = con.execute(sql)
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def read_summary(con: duckdb.DuckDBPyConnection, since: dt.datetime | None, until: dt.datetime | None,
                 instance: str | None) -> list[dict[str, Any]]:
    """The incident_summary rows for the range (the view reads the range as variables)."""
    for name, value in (("summary_since", since), ("summary_until", until)):
        if value is None:
            con.execute(f"reset variable {name}")
        else:
            con.execute(f"set variable {name} = ?", [value])
    rows = _rows(con, "select * from incident_summary")
    return [r for r in rows if instance is None or r["instance"] == instance]


def _hm(t: dt.datetime | None) -> str:
    return "?" if t is None else t.astimezone(dt.timezone.utc).strftime("%H:%M:%S")


def _span(times: list[dt.datetime]) -> str:
    a, b = min(times), max(times)
    fa, fb = a.astimezone(dt.timezone.utc).strftime("%H:%M"), b.astimezone(dt.timezone.utc).strftime("%H:%M")
    return f"at {fa} UTC" if fa == fb else f"at {fa}-{fb} UTC"


def _names(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _n(v: Any) -> int:
    return int(v or 0)


def _one_source(sources: Any) -> str | None:
    got = {s for s in sources if s is not None}
    return None if not got else got.pop() if len(got) == 1 else "mixed"


SOURCE_WORDS = {"client": "end-to-end as the benchmark client measured it",
                "wrapper": "end-to-end from the container wrapper's timestamps",
                "log": "end-to-end from the server log",
                "mixed": "end-to-end as the benchmark client measured it where its results file names the request, "
                         "else from the server log"}


def slow_basis(impact: dict[str, Any]) -> str:
    """` (end-to-end as ...)` after the slow count: the source its latencies rest on."""
    src = impact.get("slow_source")
    return f" ({SOURCE_WORDS[src]})" if src in SOURCE_WORDS else ""


def summarize(rows: list[dict[str, Any]], signals: dict[tuple[str, str], list[dict[str, Any]]],
              verdicts: dict[tuple[str, str], str]) -> dict[str, Any]:
    """The summary from the incident_summary rows, the signal episodes per (engine, instance)
    and the verdict per (engine, instance)."""
    crashed = [r for r in rows if r["died"]]
    survivors = [r for r in rows if not r["died"]]
    slo = rows[0]["slo_p99_e2e_s"] if rows else None
    surges = [r for r in rows if r["surge_ts"] is not None]
    surge_ts = min((r["surge_ts"] for r in surges), default=None)

    impact = {
        "failed": sum(_n(r["failed"]) for r in rows),
        "aborted": sum(_n(r["aborted"]) for r in rows),
        "slow": sum(_n(r["slow"]) for r in rows),
        "slo_p99_e2e_s": slo,
        # what the slow count rests on: the client's exact e2e, a wrapper's or the log's
        "slow_source": _one_source(r["slow_source"] for r in rows),
        "slo_breach_minutes": sum(float(r["slo_breach_minutes"] or 0) for r in rows),
        "by_instance": [
            {k: r[k] for k in ("engine", "instance", "finished", "failed", "aborted", "unfinished", "slow",
                               "slo_breach_minutes", "peak_waiting", "peak_waiting_ts", "died")}
            for r in rows
        ],
    }
    # an error logged once an orderly shutdown began (SIGTERM: vLLM force-kills its engine
    # core, whose output handler then raises) follows the stop; it caused nothing
    with_error = [r for r in rows if r["first_error_ts"] is not None and r["first_error_kind"] != "shutdown"]
    first = min(with_error, key=lambda r: (r["first_error_ts"], r["instance"]), default=None)
    cause = None
    if first is not None:
        cause = {
            "instance": first["instance"], "engine": first["engine"], "ts": first["first_error_ts"],
            "kind": first["first_error_kind"], "message": first["first_error_message"],
            "source": first["first_error_source"], "line": first["first_error_line"],
        }

    timeline: list[dict[str, Any]] = []
    if surge_ts is not None:
        first_surgers = [r["instance"] for r in surges if r["surge_ts"] == surge_ts]
        timeline.append({"ts": surge_ts, "instance": _names(first_surgers),
                         "what": f"traffic surge starts on {_names(first_surgers)} (arrivals per window up by half or more)"})
    for r in crashed:
        timeline.append({"ts": r["crash_ts"], "instance": r["instance"],
                         "what": f"{r['instance']} dies of {CRASH_WORDS.get(r['crash_kind'], r['crash_kind'])}"
                                 + (f"; {_n(r['failed'])} requests fail" if r["failed"] is not None else "")
                                 + f" [{r['crash_source']}:{r['crash_line']}]"})
    for (engine, instance), eps in signals.items():
        if any(r["instance"] == instance and r["died"] for r in rows):
            continue  # a crashed instance's story is its crash
        seen: set[str] = set()
        for s in sorted(eps, key=lambda s: s["window_start"]):
            if s["signal"] in seen or s["severity"] == "info":
                continue
            seen.add(s["signal"])
            timeline.append({"ts": s["window_start"], "instance": instance,
                             "what": f"{instance}: {s['signal']} ({s['severity']}) for {s['duration_s'] / 60:g} min"})
    for r in survivors:
        if r["peak_waiting"]:
            timeline.append({"ts": r["peak_waiting_ts"], "instance": r["instance"],
                             "what": f"{r['instance']} queue peaks at {r['peak_waiting']:,} waiting"
                                     + (" (estimated)" if r["peak_waiting_source"] != "logged" else "")})
    timeline.sort(key=lambda t: (t["ts"], t["instance"]))

    actions = []
    for r in sorted(rows, key=lambda r: (not r["died"], r["instance"])):
        v = verdicts.get((r["engine"], r["instance"]), "hold")
        if r["died"]:
            why = (f"died of {CRASH_WORDS.get(r['crash_kind'], r['crash_kind'])}: read {r['crash_source']}:{r['crash_line']} "
                   "and fix the cause (memory headroom, batch limits) before restarting it")
        elif crashed:
            why = "carried the crashed instances' traffic: scale out to replace the lost capacity"
            if v != "scale out":
                why += f" (its own signals say: {v})"
        else:
            why = {"scale out": "load signals fired: add replicas", "investigate": "read its signals before scaling",
                   "route better": "it queued while a replica of the same model had room: fix the load balancing, not the capacity",
                   "scale in": "idle: fewer replicas would do", "hold": "no signal fired"}.get(v, v)
        actions.append({"engine": r["engine"], "instance": r["instance"], "verdict": v, "why": why})

    return {
        "headline": _headline(rows, crashed, survivors, surge_ts, impact, cause, verdicts),
        "crashed": [{"engine": r["engine"], "instance": r["instance"], "ts": r["crash_ts"], "kind": r["crash_kind"],
                     "message": r["crash_message"], "source": r["crash_source"], "line": r["crash_line"],
                     "failed": r["failed"]} for r in crashed],
        "survivors": [r["instance"] for r in survivors],
        "surge_ts": surge_ts,
        "impact": impact,
        "likely_cause": cause,
        "timeline": timeline,
        "actions": actions,
    }


def _headline(rows, crashed, survivors, surge_ts, impact, cause, verdicts) -> str:
    if not rows:
        return "No events in this range."
    out = []
    if surge_ts is not None:
        out.append(f"Traffic surged from {_hm(surge_ts)} UTC.")
    if crashed:
        kinds = sorted({CRASH_WORDS.get(r["crash_kind"], r["crash_kind"]) for r in crashed})
        failed = sum(_n(r["failed"]) for r in crashed)
        s = (f"{_names([r['instance'] for r in crashed])} died of {_names(kinds)} "
             f"{_span([r['crash_ts'] for r in crashed])}, failing {failed:,} requests"
             + (" (" + ", ".join(f"{r['instance']} {_n(r['failed']):,}" for r in crashed) + ")" if len(crashed) > 1 else ""))
        if survivors:
            s += f"; their traffic fell on {_names([r['instance'] for r in survivors])}"
            peak = max((r for r in survivors if r["peak_waiting"] is not None), key=lambda r: r["peak_waiting"], default=None)
            if peak is not None and peak["peak_waiting"]:
                s += f", whose queues reached {peak['peak_waiting']:,} waiting ({peak['instance']} at {_hm(peak['peak_waiting_ts'])})"
        out.append(s + ".")
    if impact["slo_breach_minutes"] > 0 or impact["slow"]:
        breach = [r for r in rows if (r["slo_breach_minutes"] or 0) > 0]
        out.append(f"Impact: {impact['failed']:,} requests failed, {impact['aborted']:,} aborted, "
                   f"{impact['slow']:,} slower than the {impact['slo_p99_e2e_s']:g} s SLO{slow_basis(impact)}; the p99 latency SLO was breached for "
                   f"{impact['slo_breach_minutes']:g} min" + (f" ({_names([r['instance'] for r in breach])})" if breach else "") + ".")
    else:
        out.append(f"Impact: {impact['failed']:,} requests failed, {impact['aborted']:,} aborted; no SLO breach.")
    if cause is not None:
        msg = " ".join(str(cause["message"] or "").split())
        msg = msg if len(msg) <= 100 else msg[:99] + "…"
        out.append(f"Likely cause: {CRASH_WORDS.get(cause['kind'], cause['kind'])}, first logged on {cause['instance']} "
                   f"at {_hm(cause['ts'])} UTC: \"{msg}\" ({cause['source']}:{cause['line']}).")
    if crashed and survivors:
        out.append(f"What to do: scale out the survivors ({_names([r['instance'] for r in survivors])}) to replace the lost "
                   f"capacity, and fix the {_names(sorted({CRASH_WORDS.get(r['crash_kind'], r['crash_kind']) for r in crashed}))} "
                   f"before restarting {_names([r['instance'] for r in crashed])}.")
    elif crashed:
        out.append(f"What to do: fix the crash before restarting {_names([r['instance'] for r in crashed])}.")
    else:
        by = {}
        for r in rows:
            by.setdefault(verdicts.get((r["engine"], r["instance"]), "hold"), []).append(r["instance"])
        todo = [f"{v} {_names(by[v])}" for v in ("route better", "scale out", "investigate", "scale in") if v in by]
        out.append("What to do: " + ("; ".join(todo) if todo else "nothing; no signal fired") + ".")
    return " ".join(out)
