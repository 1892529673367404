"""`servelens export`: the exporter's series over a store's whole range, with timestamps, as
OpenMetrics: what `promtool tsdb create-blocks-from openmetrics` turns into Prometheus blocks
(backfill for a post-mortem; docs/prometheus.md)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import IO, Any, Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from ..query import connect as query
from .snapshot import epoch_seconds, metric_family, series_labels
from ..query.timerange import TimeRange


class _Rows:
    """A collector over metric_series rows sorted by series then time, with timestamps."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def collect(self) -> Iterable[Metric]:
        fam: Metric | None = None
        for row in self.rows:
            name = row["name"]
            if fam is None or fam.name != name:
                if fam is not None:
                    yield fam
                fam = metric_family(name)
            fam.add_sample(name, series_labels(row), float(row["value"]), timestamp=epoch_seconds(row["window_end"]))
        if fam is not None:
            yield fam


def export_openmetrics(store: Path | str, out: IO[bytes], *, variables: Mapping[str, Any] | None = None,
                       since: dt.datetime | None = None, until: dt.datetime | None = None) -> int:
    """Write metric_series over [since, until) as OpenMetrics with timestamps (each window's
    value at its end); returns the number of samples. The range reaches the Parquet scans
    (pipeline/query/timerange.py), so a one-hour export of a month's store reads about an hour."""
    sql = "select * from metric_series where true"
    params: list[Any] = []
    if since is not None:
        sql += " and window_start >= ?"
        params.append(since)
    if until is not None:
        sql += " and window_end <= ?"
        params.append(until)
    # a family's samples together, each series' samples in time order (OpenMetrics requires both)
    sql += " order by name, engine, instance, model, quantile, signal, severity, window_end"
    scan = TimeRange(since, until) if since is not None or until is not None else None
    rows = query.run(store, sql, params, variables=dict(variables or {}), time_range=scan).to_dicts()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Rows(rows))
    text = openmetrics_latest(registry)  # built before `out` is touched: a failed query writes nothing
    out.write(text)
    return len(rows)
