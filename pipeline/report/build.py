"""The post-mortem report: an executive summary first (what happened across instances, in
order; the impact; the likely cause; what to do: pipeline/report/summary.py), then per
instance what happened in order (signals, first error), the peaks and when they happened,
the slowest requests, what the logs could and could not tell, and the recommendations. The
HTML rendering adds a table of contents and static charts (pipeline/report/charts.py).

Sections beyond the per-instance ones are modules beside this one, each built and rendered
the same way: `build_report` stores what the module gathers under the report's key of the
section (which the JSON carries), and each renderer calls the module's Markdown and HTML
functions at the section's place. The tail latency (queueing.py: `tail_latency`, then
`tail_latency_markdown` / `tail_latency_html`) and the autoscaler calibration (calibration.py:
`build`, then `to_markdown` / `to_html`) come after the instances in Markdown; in HTML the
tail latency comes before them (it is in the contents) and the calibration last. A new section
is such a module and a line in `build_report` and in each renderer.

`build_report` reads only the metric views (sql/) on a connection, so every number in the
report is the number `servelens sql` and the dashboard show. The renderers turn the one
report dict into Markdown or HTML (an incident write-up) or JSON (for machines).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from typing import Any

import duckdb

from . import queueing as report_queueing
from .summary import slow_basis
from .mdsafe import md_code, md_text
from . import calibration

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    rel = con.execute(sql, params or [])
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def _range_sql(col: str, since: dt.datetime | None, until: dt.datetime | None) -> tuple[str, list[Any]]:
    """A `and ...` clause keeping `col` in [since, until)."""
    sql, params = "", []
    if since is not None:
        sql += f" and {col} >= ?"
        params.append(since)
    if until is not None:
        sql += f" and {col} < ?"
        params.append(until)
    return sql, params


def _by_instance(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r.pop("engine"), r.pop("instance")), []).append(r)
    return out


def _peaks(con, view: str, value: str, ts: str, where: str, params: list[Any], extra: tuple[str, ...] = ()):
    """Per instance, the row where `value` peaks (earliest on ties), one query for all."""
    cols = ", ".join([f"{value} as value", f"{ts} as ts", *extra])
    got = _rows(
        con,
        f"""select engine, instance, {cols} from (
                select *, row_number() over (partition by engine, instance order by {value} desc, {ts}) as _k
                from {view} where {value} is not null {where}
            ) where _k = 1""",
        params,
    )
    return {k: v[0] for k, v in _by_instance(got).items()}


def build_report(
    con: duckdb.DuckDBPyConnection,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    instance: str | None = None,
    top_n: int = 5,
    charts: bool = False,
    thresholds: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report as plain data (datetimes stay datetimes; `to_json` converts them).

    Each view is read once for all instances (the views are deep; per-instance queries
    would rebuild them once per instance)."""

    def clause(col: str) -> tuple[str, list[Any]]:
        sql, params = _range_sql(col, since, until)
        if instance is not None:
            sql += " and instance = ?"
            params.append(instance)
        return sql, params

    w, p = clause("ts")
    found = _rows(
        con,
        f"""select engine, instance, min(ts) as first_ts, max(ts) as last_ts, count(*) as n_events,
                   count(*) filter (where event = 'unparsed') as n_unparsed
            from events where ts is not null and engine <> 'client' {w}
            group by engine, instance order by instance, engine""",  # a client's results file is not an instance
        p,
    )
    # a signal episode belongs to the report when it overlaps the range
    sw, sp = "", []
    if since is not None:
        sw += " and window_end > ?"
        sp.append(since)
    if until is not None:
        sw += " and window_start < ?"
        sp.append(until)
    if instance is not None:
        sw += " and instance = ?"
        sp.append(instance)
    signals = _by_instance(_rows(
        con,
        f"""select engine, instance, signal, severity, window_start, window_end, duration_s, value,
                   threshold, unit, estimated, recommendation
            from scaling_signals where true {sw} order by window_start, signal""",
        sp,
    ))
    w, p = clause("first_ts")
    errors = _by_instance(_rows(
        con,
        f"""select engine, instance, kind, cast(sum(n_errors) as bigint) as n, min(first_ts) as first_ts,
                   arg_min(first_message, first_ts) as first_message,
                   arg_min(first_source, first_ts) as source, arg_min(first_line, first_ts) as line
            from errors where true {w} group by engine, instance, kind order by first_ts, kind""",
        p,
    ))
    w, p = clause("ts")
    peaks = {
        "waiting": _peaks(con, "queue_depth", "waiting", "ts", w, p, ("source",)),
        "kv_usage": _peaks(con, "kv_cache", "kv_usage", "ts", w, p, ("source",)),
        "running": _peaks(con, "batch_fill", "running", "ts", w, p, ("fill", "max_num_seqs", "source")),
    }
    lw, lp = clause("window_start")
    peaks["p99_e2e_s"] = _peaks(
        con, "latency_percentiles", "p99_e2e_s", "window_start", lw, lp, ("n", "e2e_estimated", "latency_source", "model")
    )
    preempt = {k: v[0] for k, v in _by_instance(_rows(
        con,
        f"""select engine, instance, sum(preemptions) filter (where source = 'logged') as preemptions,
                   sum(preemption_lines) as preemption_lines,
                   sum(preemptions) filter (where source = 'scraped') as scraped_preemptions
            from kv_cache where true {w} group by engine, instance""",
        p,
    )).items()}
    rw, rp = clause("finish_ts")
    totals = {k: v[0] for k, v in _by_instance(_rows(
        con,
        # null, not 0, when the instance never logs an end (vLLM V1 logs arrivals only)
        f"""select engine, instance,
                   case when bool_or(status = 'finished') then count(*) filter (where status = 'finished') end as finished,
                   count(*) filter (where status = 'aborted') as aborted,
                   count(*) filter (where status = 'failed') as failed,
                   count(arrival_ts) as arrived
            from requests where true {rw} or (finish_ts is null {rw.replace('finish_ts', 'arrival_ts')})
            group by engine, instance""",
        rp + rp,
    )).items()}
    slowest = _by_instance(_rows(
        con,
        f"""select * exclude (_k) from (
                select engine, instance, request_key, request_id, model, arrival_ts, finish_ts, status,
                       e2e_s, e2e_estimated, latency_source, queue_s, ttft_s, tpot_s, prompt_tokens, output_tokens,
                       source, line,
                       row_number() over (partition by engine, instance order by e2e_s desc, finish_ts) as _k
                from requests where e2e_s is not null {rw}
            ) where _k <= {int(top_n)} order by engine, instance, _k""",
        rp,
    ))
    availability: dict[str, list[dict[str, Any]]] = {}
    for r in _rows(con, "select engine, metric, view, available, estimated, reason, sources from metric_availability order by metric"):
        availability.setdefault(r.pop("engine"), []).append(r)

    instances = []
    for info in found:
        key = (info["engine"], info["instance"])
        instances.append(_instance(
            info,
            signals=signals.get(key, []),
            error_kinds=errors.get(key, []),
            peaks={name: by.get(key) for name, by in peaks.items()},
            preempt=preempt.get(key, {"preemptions": None, "preemption_lines": None}),
            totals=totals.get(key, {"finished": None, "aborted": None, "failed": None, "arrived": None}),
            slowest=slowest.get(key, []),
            availability=availability.get(info["engine"], []),
        ))
    from servelens.pipeline.report.verdict import verdict

    from .summary import read_summary, summarize

    import polars as pl

    verdicts = {k: verdict(pl.DataFrame(v, infer_schema_length=None) if v else pl.DataFrame()) for k, v in signals.items()}
    for inst in instances:
        inst["verdict"] = verdicts.get((inst["engine"], inst["instance"]), "hold")
    summary = summarize(read_summary(con, since, until, instance), signals, verdicts)
    summary["unassigned_clients"] = unassigned_clients(con, since, until)
    report = {
        "title": "servelens post-mortem",
        "generated_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0),
        "since": since,
        "until": until,
        "instance_filter": instance,
        "window_s": _rows(con, "select coalesce(try_cast(getvariable('window_s') as double), 60.0) as w")[0]["w"],
        "first_ts": min((r["first_ts"] for r in found), default=None),
        "last_ts": max((r["last_ts"] for r in found), default=None),
        "summary": summary,
        "instances": instances,
        # a summary view: of the instances this report covers (their whole history unless the
        # connection was opened over a time range, docs/performance.md)
        "tail_latency": [r for r in report_queueing.tail_latency(con, instance)
                         if (r["engine"], r["instance"]) in {(i["engine"], i["instance"]) for i in instances}],
        "calibration": calibration.build(con, instance=instance),  # autoscaler presets replayed (calibration.py)
    }
    if charts:
        from .charts import render_charts

        try:
            report["charts"] = render_charts(con, report, thresholds or {})
        except ImportError:
            report["charts_missing"] = "charts need the vl-convert-python package (pip install vl-convert-python)"
    return report


def unassigned_clients(con: duckdb.DuckDBPyConnection, since: dt.datetime | None = None,
                       until: dt.datetime | None = None) -> list[dict[str, Any]]:
    """The client results files whose server the store cannot tell (several servers, none
    named by the file): how many of their requests in [since, until) no instance counts, and
    why."""
    where, params = _range_sql("coalesce(client_start_ts, arrival_ts)", since, until)
    return _rows(con, "select client_source as source, count(*) as requests, min(client_unmatched) as why "
                      f"from requests where engine = 'client' {where} group by client_source order by client_source",
                 params)


def unassigned_line(sm: dict[str, Any]) -> str:
    """One sentence naming the results files no server counts (empty when there are none)."""
    files = sm.get("unassigned_clients") or []
    return " ".join(f"{f['requests']:,} requests of {f['source']} are counted under no server: {f['why']}." for f in files)


def _instance(info, *, signals, error_kinds, peaks, preempt, totals, slowest, availability) -> dict[str, Any]:
    first_error = error_kinds[0] if error_kinds else None
    timeline = [{"ts": info["first_ts"], "what": "first log line in range", "detail": ""}]
    for s in signals:
        timeline.append({
            "ts": s["window_start"],
            "what": f"{s['severity']}: {s['signal']}",
            "detail": f"{_fmt_value(s['value'], s['unit'])} (threshold {_fmt_threshold(s['threshold'], s['unit'])}) "
                      f"until {_fmt_ts(s['window_end'])}",
        })
    for e in error_kinds:
        timeline.append({
            "ts": e["first_ts"],
            "what": f"first {e['kind']} error" + (" (FIRST ERROR)" if e is first_error else ""),
            "detail": f"{_one_line(e['first_message'])} [{e['source']}:{e['line']}]",
        })
    timeline.append({"ts": info["last_ts"], "what": "last log line in range", "detail": ""})
    timeline.sort(key=lambda t: (t["ts"], t["what"] != "first log line in range"))

    recs: dict[str, dict[str, Any]] = {}
    for s in sorted(signals, key=lambda s: (SEVERITY_ORDER.get(s["severity"], 9), s["window_start"])):
        recs.setdefault(s["signal"], {"signal": s["signal"], "severity": s["severity"],
                                      "first_seen": s["window_start"], "recommendation": s["recommendation"]})
    return {
        "engine": info["engine"],
        "instance": info["instance"],
        "first_ts": info["first_ts"],
        "last_ts": info["last_ts"],
        "n_events": info["n_events"],
        "n_unparsed": info["n_unparsed"],
        "requests": totals,
        "timeline": timeline,
        "signals": signals,
        "first_error": first_error,
        "errors_by_kind": error_kinds,
        "peaks": peaks,
        "preemptions": preempt,
        "slowest_requests": slowest,
        "availability": availability,
        "recommendations": list(recs.values()),
    }


# ---------------------------------------------------------------------------------------
# rendering


def _fmt_ts(t: Any) -> str:
    if t is None:
        return "-"
    if isinstance(t, dt.datetime):
        t = t.astimezone(dt.timezone.utc)
        frac = f".{t.microsecond // 1000:03d}" if t.microsecond else ""
        return t.strftime("%Y-%m-%d %H:%M:%S") + frac + "Z"
    return str(t)


def _fmt_num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _fmt_value(v: Any, unit: str | None) -> str:
    if v is None:
        return "-"
    if unit and unit.startswith("fraction"):
        return f"{100 * v:.0f}%"
    if unit and unit.startswith("batch fill"):
        return f"{100 * v:.0f}% batch fill"
    if unit and unit.startswith("coefficient"):
        return f"CV {v:.2f}"
    if unit and unit.startswith("s "):
        return f"{v:.2f} s" if unit != "s idle" else f"{v / 60:g} min idle"
    return f"{_fmt_num(v)} {unit or ''}".strip()


def _fmt_threshold(v: Any, unit: str | None) -> str:
    """The threshold beside its value: the same unit, said once."""
    if unit and (unit.startswith(("fraction", "batch fill", "coefficient", "s "))):
        return _fmt_value(v, unit).replace(" batch fill", "").replace(" min idle", " min")
    return _fmt_num(v)


def _one_line(text: Any, limit: int = 160) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _requests_line(t: dict[str, Any]) -> str:
    ends = "".join(f", {k}: {t[k]:,}" for k in ("failed", "aborted") if t.get(k))
    if not t.get("arrived") and t.get("finished") is None:
        return f"no per-request lines{ends}." if ends else "no per-request lines."
    if t.get("finished") is None:
        return f"requests arrived: {t['arrived']:,} (this log records no request ends){ends}."
    return f"requests finished: {t['finished']:,}, failed: {t.get('failed') or 0:,}, aborted: {t['aborted']:,}."


def _reason(inst: dict[str, Any], metric: str) -> str:
    for a in inst["availability"]:
        if a["metric"] == metric and not a["available"]:
            return a["reason"]
    return "no values in this range"


def _peak_lines(inst: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(metric, value, when) rows of the peaks table; a missing peak says why."""
    p = inst["peaks"]
    out = []
    q = p["waiting"]
    out.append(("queue (waiting requests)",
                 f"{q['value']}" + _source_mark(q) if q else
                 f"not available: {_reason(inst, 'waiting')}",
                 _fmt_ts(q["ts"]) if q else "-"))
    k = p["kv_usage"]
    pre = inst["preemptions"]
    pre_txt = ""
    if k and (pre["preemptions"] or pre["preemption_lines"]):
        pre_txt = f"; preemptions logged: {pre['preemptions'] or 0}, preemption warnings: {pre['preemption_lines'] or 0}"
    if k and pre.get("scraped_preemptions") is not None:
        pre_txt += f"; preemptions (the server's /metrics): {pre['scraped_preemptions']:,}"
    out.append(("KV-cache usage",
                 f"{100 * k['value']:.1f}%{_source_mark(k)}{pre_txt}" if k else f"not available: {_reason(inst, 'kv_usage')}",
                 _fmt_ts(k["ts"]) if k else "-"))
    r = p["running"]
    if r:
        fill = f" ({100 * r['fill']:.0f}% of max_num_seqs {r['max_num_seqs']})" if r["fill"] is not None else " (max_num_seqs unknown)"
        est = _source_mark(r)
        out.append(("running requests", f"{r['value']}{fill}{est}", _fmt_ts(r["ts"])))
    else:
        out.append(("running requests", f"not available: {_reason(inst, 'running')}", "-"))
    lat = p["p99_e2e_s"]
    out.append(("p99 end-to-end latency (per window)",
                 f"{lat['value']:.3f} s over {lat['n']} requests" + _latency_basis(lat)
                 if lat else f"not available: {_reason(inst, 'e2e_s')}",
                 f"window from {_fmt_ts(lat['ts'])}" if lat else "-"))
    return out


def _source_mark(peak: dict[str, Any]) -> str:
    """Where a peak's value comes from, when not the log itself."""
    return {"reconstructed": " (reconstructed)", "scraped": " (the server's /metrics)"}.get(peak.get("source") or "", "")


def _latency_basis(lat: dict[str, Any]) -> str:
    """What a per-window latency rests on (latency_percentiles.latency_source)."""
    src = lat.get("latency_source")
    if src == "scrape":
        return " (bucket estimate from the server's /metrics histogram)"
    if src == "client":
        return " (measured by the benchmark client)"
    if src == "mixed":
        return " (the benchmark client's figures where its results file names the request, else the log's" + (
            ", estimated to 1 s)" if lat["e2e_estimated"] else ")")
    return " (estimated, 1 s resolution)" if lat["e2e_estimated"] else ""


def _e2e_cell(r: dict[str, Any]) -> str:
    """A request's e2e in the slowest-requests table, marked with where it comes from."""
    mark = " (est.)" if r["e2e_estimated"] else " (client)" if r.get("latency_source") == "client" else ""
    return _fmt_num(r["e2e_s"], 4) + mark


def _availability_reason(a: dict[str, Any]) -> str:
    return a["reason"] + (f"; values by source: {a['sources']}" if a.get("sources") else "")


def _impact_rows(summary: dict[str, Any]) -> list[list[str]]:
    out = []
    for r in summary["impact"]["by_instance"]:
        out.append([r["instance"], r["engine"], "died" if r["died"] else "up",
                    _fmt_num(r["finished"]), _fmt_num(r["failed"]), _fmt_num(r["aborted"]), _fmt_num(r["unfinished"]),
                    _fmt_num(r["slow"]), f"{r['slo_breach_minutes']:g}",
                    "-" if r["peak_waiting"] is None else f"{r['peak_waiting']:,} at {_fmt_ts(r['peak_waiting_ts'])}"])
    return out


IMPACT_HEAD = ["instance", "engine", "state", "finished", "failed", "aborted", "in flight at end", "slow (> SLO)",
               "SLO-breach min", "peak queue"]


def _summary_markdown(report: dict[str, Any]) -> list[str]:
    sm = report["summary"]
    out = ["## Summary", "", md_text(sm["headline"]), ""]
    if not report["instances"]:
        return out
    out += ["### What happened, in order", "", "| time (UTC) | what |", "|---|---|"]
    out += [f"| {_fmt_ts(t['ts'])} | {md_text(t['what'])} |" for t in sm["timeline"]] or ["| - | nothing notable |"]
    slo = sm["impact"]["slo_p99_e2e_s"]
    out += ["", "### Impact", "",
            f"{sm['impact']['failed']:,} requests failed, {sm['impact']['aborted']:,} were aborted, "
            f"{sm['impact']['slow']:,} took longer than the {slo:g} s SLO{slow_basis(sm['impact'])}; SLO breached for "
            f"{sm['impact']['slo_breach_minutes']:g} min (sum over instances). A `-` means the log cannot tell.", "",
            *([md_text(unassigned_line(sm)), ""] if unassigned_line(sm) else []),
            "| " + " | ".join(IMPACT_HEAD) + " |", "|" + "---|" * len(IMPACT_HEAD)]
    out += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in _impact_rows(sm)]
    c = sm["likely_cause"]
    out += ["", "### Likely cause", "",
            (f"The first error: {_fmt_ts(c['ts'])} on {md_text(c['instance'])} ({c['kind']}): {md_code(c['message'], 200)} "
             f"at {md_text(c['source'])}:{c['line']}." if c else "No error was logged in this range (errors logged once an orderly shutdown began are no cause)."), ""]
    out += ["### What to do", ""]
    out += [f"- **{md_text(a['instance'])}**: {md_text(a['verdict'])}: {md_text(a['why'])}" for a in sm["actions"]]
    out.append("")
    out += ["## Instances", ""]
    return out


def _span_note(report: dict[str, Any]) -> str:
    """The store's own range beside an empty one (set by the CLI: `range_note`)."""
    return f" ({report['range_note']})" if report.get("range_note") else ""


def to_markdown(report: dict[str, Any]) -> str:
    rng = f"{_fmt_ts(report['since'] or report['first_ts'])} to {_fmt_ts(report['until'] or report['last_ts'])}"
    out = [f"# {report['title']}", "",
           f"- Range: {rng}",
           f"- Instances: {len(report['instances'])}" + (f" (filter: {md_text(report['instance_filter'])})" if report["instance_filter"] else ""),
           f"- Window for per-window metrics: {report['window_s']:g} s",
           f"- Generated: {_fmt_ts(report['generated_at'])}", ""]
    out += _summary_markdown(report)
    if not report["instances"]:
        out += [f"No events in this range.{_span_note(report)}", ""]
    for inst in report["instances"]:
        out += [f"### {md_text(inst['instance'])} ({md_text(inst['engine'])}): {inst['verdict']}", "",
                f"{inst['n_events']:,} events from {_fmt_ts(inst['first_ts'])} to {_fmt_ts(inst['last_ts'])}"
                f" ({inst['n_unparsed']:,} unparsed); {_requests_line(inst['requests'])}", ""]
        fe = inst["first_error"]
        out += ["**First error:** " + (f"{_fmt_ts(fe['first_ts'])} {fe['kind']}: {md_code(fe['first_message'], 200)} ({md_text(fe['source'])}:{fe['line']})"
                                       if fe else "none in this range."), ""]
        out += ["#### Timeline", "", "| time (UTC) | what | detail |", "|---|---|---|"]
        out += [f"| {_fmt_ts(t['ts'])} | {md_text(t['what'])} | {md_text(t['detail'])} |" for t in inst["timeline"]]
        out += ["", "#### Peaks", "", "| metric | peak | when (UTC) |", "|---|---|---|"]
        out += [f"| {m} | {md_text(v)} | {w} |" for m, v, w in _peak_lines(inst)]
        out += ["", "#### Slowest requests", ""]
        if inst["slowest_requests"]:
            out += ["| request id | arrival | finish | e2e (s) | queue (s) | ttft (s) | tpot (s) | tokens in/out | logged at |", "|---|---|---|---|---|---|---|---|---|"]
            for r in inst["slowest_requests"]:
                e2e = _e2e_cell(r)
                rid = md_code(r["request_id"]) if r["request_id"] else "(none logged)"
                out.append(f"| {rid} | {_fmt_ts(r['arrival_ts'])} | {_fmt_ts(r['finish_ts'])} | {e2e} | "
                           f"{_fmt_num(r['queue_s'], 4)} | {_fmt_num(r['ttft_s'], 4)} | {_fmt_num(r['tpot_s'], 4)} | "
                           f"{_fmt_num(r['prompt_tokens'])}/{_fmt_num(r['output_tokens'])} | {md_text(r['source'])}:{r['line']} |")
        else:
            out.append(f"No per-request latency in this range: {_reason(inst, 'e2e_s')}")
        out += ["", "#### What the logs could and could not tell", ""]
        for a in inst["availability"]:
            mark = "yes" if a["available"] else "no"
            est = " (estimated)" if a["available"] and a["estimated"] else ""
            out.append(f"- `{a['metric']}` ({a['view']}): {mark}{est}: {_availability_reason(a)}")
        out += ["", "#### Recommendations", ""]
        if inst["recommendations"]:
            out += [f"- **{r['severity']}** `{r['signal']}` (from {_fmt_ts(r['first_seen'])}): {r['recommendation']}" for r in inst["recommendations"]]
        else:
            out.append("- No signal fired: nothing to change on the evidence of these logs.")
        out.append("")
    out += report_queueing.tail_latency_markdown(report.get("tail_latency"))
    out += calibration.to_markdown(report.get("calibration"))
    return "\n".join(out)


def _anchor(text: str) -> str:
    return "i-" + re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")


def to_html(report: dict[str, Any]) -> str:
    """One self-contained file: inline CSS and SVG charts, no script, nothing fetched."""
    e = html.escape

    def table(head: list[str], body: list[list[str]]) -> str:
        th = "".join(f"<th>{e(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in body)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"

    sm = report["summary"]
    rng = f"{_fmt_ts(report['since'] or report['first_ts'])} to {_fmt_ts(report['until'] or report['last_ts'])}"
    toc = [("summary", "Summary"), ("timeline", "What happened, in order"), ("impact", "Impact"),
           ("cause", "Likely cause"), ("todo", "What to do")]
    if report.get("charts") or report.get("charts_missing"):
        toc.append(("charts", "Charts"))
    toc += [(report_queueing.TAIL_LATENCY_ANCHOR, report_queueing.TAIL_LATENCY_TITLE)] if report.get("tail_latency") else []
    toc += [(_anchor(i["instance"] + "-" + i["engine"]), f"{i['instance']} ({i['engine']}): {i['verdict']}")
            for i in report["instances"]]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{e(report['title'])}</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}"
        "table{border-collapse:collapse;margin:.5rem 0 1rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}"
        "th{background:#f3f3f3}.critical{color:#b00020;font-weight:bold}.warning{color:#a15c00;font-weight:bold}.info{color:#245}"
        "code{background:#f6f6f6;padding:0 .2rem}.headline{font-size:1.1rem;line-height:1.5;background:#fff8e6;"
        "border-left:4px solid #d08c00;padding:.75rem 1rem}nav ol{columns:2}figure{margin:1rem 0}"
        "figure svg{max-width:100%;height:auto}</style></head><body>",
        f"<h1>{e(report['title'])}</h1>",
        f"<p>Range: {e(rng)} &middot; instances: {len(report['instances'])} &middot; window: {report['window_s']:g} s"
        f" &middot; generated {e(_fmt_ts(report['generated_at']))}</p>",
        "<nav><h2>Contents</h2><ol>" + "".join(f"<li><a href='#{e(a)}'>{e(t)}</a></li>" for a, t in toc) + "</ol></nav>",
        f"<h2 id='summary'>Summary</h2><p class='headline'>{e(sm['headline'])}</p>",
        "<h3 id='timeline'>What happened, in order</h3>"
        + table(["time (UTC)", "what"], [[_fmt_ts(t["ts"]), t["what"]] for t in sm["timeline"]]),
    ]
    imp = sm["impact"]
    slo = imp["slo_p99_e2e_s"]
    parts.append(f"<h3 id='impact'>Impact</h3><p>{imp['failed']:,} requests failed, {imp['aborted']:,} were aborted, "
                 f"{imp['slow']:,} took longer than the {slo if slo is not None else 0:g} s SLO{e(slow_basis(imp))}; SLO breached for "
                 f"{imp['slo_breach_minutes']:g} min (sum over instances). A <code>-</code> means the log cannot tell.</p>"
                 + (f"<p>{e(unassigned_line(sm))}</p>" if unassigned_line(sm) else "")
                 + table(IMPACT_HEAD, _impact_rows(sm)))
    c = sm["likely_cause"]
    parts.append("<h3 id='cause'>Likely cause</h3><p>" + (
        f"The first error: {e(_fmt_ts(c['ts']))} on <b>{e(c['instance'])}</b> ({e(str(c['kind']))}): "
        f"<code>{e(_one_line(c['message'], 200))}</code> at <code>{e(str(c['source']))}:{c['line']}</code>."
        if c else "No error was logged in this range (errors logged once an orderly shutdown began are no cause).") + "</p>")
    parts.append("<h3 id='todo'>What to do</h3><ul>" + "".join(
        f"<li><b>{e(a['instance'])}</b>: {e(a['verdict'])}: {e(a['why'])}</li>" for a in sm["actions"]) + "</ul>")
    if report.get("charts") or report.get("charts_missing"):
        parts.append("<h2 id='charts'>Charts</h2>")
        if report.get("charts_missing"):
            parts.append(f"<p>{e(report['charts_missing'])}</p>")
        for ch in report.get("charts", []):
            parts.append(f"<figure id='{e(ch['id'])}'><figcaption><b>{e(ch['title'])}</b></figcaption>{ch['svg']}</figure>")
    parts += report_queueing.tail_latency_html(report.get("tail_latency"))
    parts.append("<h2>Instances</h2>")
    if not report["instances"]:
        parts.append(f"<p>No events in this range.{e(_span_note(report))}</p>")
    for inst in report["instances"]:
        parts.append(f"<h2 id='{e(_anchor(inst['instance'] + '-' + inst['engine']))}'>{e(inst['instance'])} "
                     f"({e(inst['engine'])}): {e(inst['verdict'])}</h2>")
        parts.append(f"<p>{inst['n_events']:,} events from {e(_fmt_ts(inst['first_ts']))} to {e(_fmt_ts(inst['last_ts']))}; "
                     f"{e(_requests_line(inst['requests']))}</p>")
        fe = inst["first_error"]
        parts.append("<p><b>First error:</b> " + (
            f"{e(_fmt_ts(fe['first_ts']))} {e(fe['kind'])}: <code>{e(_one_line(fe['first_message'], 200))}</code> ({e(str(fe['source']))}:{fe['line']})"
            if fe else "none in this range.") + "</p>")
        parts.append("<h3>Timeline</h3>" + table(["time (UTC)", "what", "detail"],
                                                  [[_fmt_ts(t["ts"]), t["what"], t["detail"]] for t in inst["timeline"]]))
        parts.append("<h3>Peaks</h3>" + table(["metric", "peak", "when (UTC)"], [list(x) for x in _peak_lines(inst)]))
        parts.append("<h3>Slowest requests</h3>")
        if inst["slowest_requests"]:
            parts.append(table(
                ["request id", "arrival", "finish", "e2e (s)", "queue (s)", "ttft (s)", "tpot (s)", "logged at"],
                [[r["request_id"] or "(none logged)", _fmt_ts(r["arrival_ts"]), _fmt_ts(r["finish_ts"]),
                  _e2e_cell(r),
                  _fmt_num(r["queue_s"], 4), _fmt_num(r["ttft_s"], 4), _fmt_num(r["tpot_s"], 4),
                  f"{r['source']}:{r['line']}"] for r in inst["slowest_requests"]]))
        else:
            parts.append(f"<p>No per-request latency in this range: {e(_reason(inst, 'e2e_s'))}</p>")
        parts.append("<h3>What the logs could and could not tell</h3>" + table(
            ["metric", "view", "available", "why"],
            [[a["metric"], a["view"], ("yes" + (" (estimated)" if a["estimated"] else "")) if a["available"] else "no", _availability_reason(a)]
             for a in inst["availability"]]))
        parts.append("<h3>Recommendations</h3><ul>")
        if inst["recommendations"]:
            parts += [f"<li><span class='{e(r['severity'])}'>{e(r['severity'])}</span> <code>{e(r['signal'])}</code> "
                      f"(from {e(_fmt_ts(r['first_seen']))}): {e(r['recommendation'])}</li>" for r in inst["recommendations"]]
        else:
            parts.append("<li>No signal fired: nothing to change on the evidence of these logs.</li>")
        parts.append("</ul>")
    parts.append(calibration.to_html(report.get("calibration")) + "</body></html>\n")
    return "\n".join(parts)


def _json_default(o: Any) -> Any:
    if isinstance(o, dt.datetime):
        return o.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(o, (dt.date, dt.timedelta)):
        return str(o)
    if hasattr(o, "item"):  # numpy / decimal scalars
        return o.item()
    return str(o)


def to_json(report: dict[str, Any]) -> str:
    data = {k: v for k, v in report.items() if k not in ("charts", "charts_missing")}
    return json.dumps(data, default=_json_default, indent=2) + "\n"


def render(report: dict[str, Any], fmt: str) -> str:
    if fmt == "md":
        return to_markdown(report)
    if fmt == "html":
        return to_html(report)
    if fmt == "json":
        return to_json(report)
    raise ValueError(f"unknown report format {fmt!r}; use md, html or json")
