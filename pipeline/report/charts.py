"""Static charts for the HTML report: the dashboard's own chart builders (pipeline/report/chart_specs.py)
drawn offline to SVG by vl-convert, so the report is one file that fetches nothing when it is
opened. Each chart reads one metric view over the report's range, bucketed to at most a few
hundred points per series.

Without vl-convert installed the report still renders, and says that the charts are missing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import polars as pl

MAX_POINTS = 300
WIDTH = 760


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> pl.DataFrame:
    from ..query.connect import run_on

    return run_on(con, sql, params)


def _series(con, since: dt.datetime, until: dt.datetime, instance: str | None) -> dict[str, pl.DataFrame]:
    bucket = float(max(1, -(-int((until - since).total_seconds()) // MAX_POINTS)))
    only = " and instance = ?" if instance else ""
    extra = [instance] if instance else []
    rng = [since, until]
    queue = _frame(con, f"""
        select to_timestamp(floor(epoch(ts) / ?) * ?) as ts, engine, instance, source,
               avg(waiting) as waiting, max(waiting) as waiting_max
        from queue_depth where ts >= ? and ts < ? and waiting is not null {only}
        group by all order by instance, ts""", [bucket, bucket, *rng, *extra])
    latency = _frame(con, f"""
        select window_start as ts, engine, instance, null::varchar as model,
               max(p50_e2e_s) as p50_e2e_s, max(p95_e2e_s) as p95_e2e_s, max(p99_e2e_s) as p99_e2e_s
        from latency_percentiles where window_end > ? and window_start < ? {only}
        group by all order by instance, ts""", [*rng, *extra])
    failures = _frame(con, f"""
        select window_start as ts, engine, instance, instance || ' failed' as kind, failed as n_errors
        from throughput where failed > 0 and window_end > ? and window_start < ? {only}
        union all
        select window_start, engine, instance, instance || ' aborted', aborted
        from throughput where aborted > 0 and window_end > ? and window_start < ? {only}
        order by ts""", [*rng, *extra, *rng, *extra])
    return {"queue": queue, "latency": latency, "failures": failures}


def render_charts(con: duckdb.DuckDBPyConnection, report: dict[str, Any], thresholds: dict[str, Any]) -> list[dict[str, str]]:
    """[{"id", "title", "svg"}] for the report's range; [] when there is nothing to draw.
    Raises ImportError without vl-convert."""
    import vl_convert as vlc

    from servelens.pipeline.report import chart_specs as charts

    since = report["since"] or report["first_ts"]
    until = report["until"] or report["last_ts"]
    if since is None or until is None:
        return []
    until = until + dt.timedelta(microseconds=1)
    data = _series(con, since, until, report["instance_filter"])
    dom = charts.time_domain(since, until)
    built = []
    if not data["queue"].is_empty():
        built.append(("chart-queue", "Queue depth (waiting requests)",
                      charts.queue_chart(data["queue"], thresholds.get("queue_waiting"), dom)))
    if not data["latency"].drop_nulls("p99_e2e_s").is_empty():
        built.append(("chart-latency", "End-to-end latency percentiles",
                      charts.latency_chart(data["latency"], "e2e", thresholds.get("slo_p99_e2e_s"), dom)))
    if not data["failures"].is_empty():
        built.append(("chart-failures", "Failed and aborted requests per window",
                      charts.bar_chart(data["failures"], "n_errors", "requests per window", color="kind", domain=dom,
                                       integer=True)))
    out = []
    for cid, title, chart in built:
        spec = chart.properties(width=WIDTH).to_dict()
        out.append({"id": cid, "title": title, "svg": vlc.vegalite_to_svg(spec)})
    return out
