"""Helpers for the SQL view tests: hand-built event frames that conform to the schema, and
a DuckDB connection with `events` over such a frame and the views of `sql/` a query names."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any, Iterable

import duckdb
import polars as pl

from servelens.parsers.schema import POLARS_SCHEMA
from servelens.pipeline.query.sandbox import Limits
from servelens.pipeline.query.shared import SHARED, materialise
from servelens.pipeline.query.views import load_views, sql_files, view_dependencies, view_name, view_sql, views_for

T0 = dt.datetime(2026, 5, 12, 8, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    """T0 + seconds (T0 is on a minute boundary, so windows start at whole minutes)."""
    return T0 + dt.timedelta(seconds=seconds)


def ev(event: str, t: float | dt.datetime | None, **cols: Any) -> dict[str, Any]:
    """One event row; `t` in seconds after T0 (or a datetime). Defaults: engine vllm,
    instance i1, source i1.log, line auto-numbered by `events_frame`."""
    row: dict[str, Any] = {"event": event, "ts": at(t) if isinstance(t, (int, float)) else t}
    row.update(cols)
    return row


def events_frame(rows: Iterable[dict[str, Any]], **defaults: Any) -> pl.DataFrame:
    """Rows (dicts of schema columns) -> a frame with exactly the event schema."""
    base = {"engine": "vllm", "instance": "i1", "ts_inferred": False, "n_lines": 1}
    base.update(defaults)
    full = []
    for i, r in enumerate(rows, start=1):
        row = dict(base)
        row["line"] = i
        row.update(r)
        row.setdefault("source", f"{row['instance']}.log")
        unknown = set(row) - set(POLARS_SCHEMA)
        if unknown:
            raise KeyError(f"not schema columns: {unknown}")
        full.append(row)
    return pl.DataFrame(
        [{c: row.get(c) for c in POLARS_SCHEMA} for row in full], schema=POLARS_SCHEMA
    )


class ViewsOnDemand:
    """A DuckDB connection that creates a view of `sql/` (with the views it reads) the first
    time a statement names it, as the CLI's connection binds only what a query needs: a test
    pays for binding the views it queries, not all of them. The views of SHARED are computed
    into tables once. Anything else goes to the connection itself."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._made: set[str] = set()

    def _views_for(self, query: object) -> None:
        if not isinstance(query, str):
            return
        need = views_for(query)
        todo = (set(view_dependencies()) if need is None else need) - self._made
        # each view's own statement, in load order; the variables stay as the caller set them
        for path in sql_files():
            name = view_name(path)
            if name in todo:
                self._con.execute(view_sql(path))
                if name in SHARED:
                    # computed once, as a one-query connection does: the frame never changes,
                    # and the views above bind over the table
                    materialise(self._con, name, "main", Limits())
        self._made |= todo

    def sql(self, query: str, *args: Any, **kwargs: Any) -> duckdb.DuckDBPyRelation:
        self._views_for(query)
        return self._con.sql(query, *args, **kwargs)

    def execute(self, query: str, *args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        self._views_for(query)
        return self._con.execute(query, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def connect_events(
    frame: pl.DataFrame,
    variables: dict[str, Any] | None = None,
    thresholds: str | None = None,
) -> ViewsOnDemand:
    """An in-memory DuckDB with `events` over `frame`; the views load as queries name them."""
    con = duckdb.connect()
    con.register("events_frame", frame.to_arrow())
    con.execute("create view events as select * from events_frame")
    load_views(con, variables=variables, thresholds=thresholds, only=())
    return ViewsOnDemand(con)


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    """Query -> list of dicts (column name -> value)."""
    rel = con.sql(sql)
    cols = rel.columns
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def announced(run_dir: Path, pattern: str) -> set[int]:
    """The numbers `pattern` (one group) finds in the simulated server logs of a run directory,
    read with a plain regex, not servelens's parsers: what the servers announced at start-up."""
    return {int(n) for log in sorted(run_dir.glob("*.log")) for n in re.findall(pattern, log.read_text())}


# The truth states a logged snapshot `s` (columns ts, instance) may show: the last state at or
# before its timestamp and every state during the second it names (a log line's time is
# truncated). Written as two ASOF lookups and an equi-join on a state's rank, not as a range
# join: with one instance a range join is a cross product that spilled 7 GB in CI.
CANDIDATE_TRUTH_STATES = """
        truth_ranked as (
            select *, min(rn) over (partition by instance, ts) as first_rn,
                      max(rn) over (partition by instance, ts) as last_rn
            from (select *, row_number() over (partition by instance order by ts) as rn from truth_state)
        ),
        bounds as (
            select s.*, lo.first_rn as rn_lo, hi.last_rn as rn_hi
            from s
            asof join truth_ranked lo on lo.instance = s.instance and s.ts >= lo.ts
            asof join truth_ranked hi on hi.instance = s.instance and s.ts + interval 1 second > hi.ts
        ),
        cand as (
            select b.*, t.running as tr, t.waiting as tw, t.kv_usage as tk
            from (select *, unnest(range(rn_lo, rn_hi + 1)) as rn from bounds) b
            join truth_ranked t using (instance, rn)
        )"""
