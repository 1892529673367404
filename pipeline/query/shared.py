"""Views one query reads through several others, computed once per connection.

DuckDB inlines a view at each place a query reads it: `window_metrics` reads `requests`
through throughput, request_state (itself read three times: by queue_depth, batch_fill and
window_metrics) and directly, so the raw plan derived `requests` from the events four to
six times, each derivation scanning the events several times (bench/RESULTS.md, "The raw
path"). A connection made for one query (`query.run`: it knows the views the query names)
instead computes each view of `SHARED` that the query reaches by two paths or more into a
temporary table once, and rebinds the view over that table; every view above it reads the
table. The answers are those of the views: the table holds the view's rows.

A temporary table lives in DuckDB's buffer pool: beyond the connection's memory limit it is
spilled to the connection's private spill directory (pipeline/query/sandbox.py), within its limit.
"""

from __future__ import annotations

from typing import Iterable

import duckdb

from .views import sql_files, view_dependencies, view_name
from .sandbox import Limits, execute

# Derived from the events, read by several views, costly to derive: in load order (a later
# one reads the earlier ones' tables)
SHARED = ("requests", "engine_stats", "window_metrics")


def reads(named: Iterable[str], bound: Iterable[str], leaves: Iterable[str] = ()) -> dict[str, int]:
    """How many times a query naming the views `named` reads each bound view: the number of
    paths from the named views down to it through the bound views (a view of `leaves`, bound
    over a stored rollup, reads no other view)."""
    deps = view_dependencies()
    bound, stop = set(bound), set(leaves)
    order = [v for v in (view_name(p) for p in sql_files()) if v in bound]
    count = {v: (1 if v in set(named) else 0) for v in order}
    for v in reversed(order):  # a view reads only views of files before it
        if v in stop or not count[v]:
            continue
        for d in deps[v] & bound:
            count[d] += count[v]
    return count


def to_share(named: Iterable[str], bound: Iterable[str], leaves: Iterable[str]) -> set[str]:
    """The views of SHARED that a query naming `named` reads more than once among the `bound`
    views (a view of `leaves` is bound over a stored rollup: already a table)."""
    leaves, bound = set(leaves), list(bound)
    if not set(SHARED) & set(bound):  # nothing to share (e.g. a query over `events` only)
        return set()
    count = reads(named, bound, leaves)
    return {name for name in SHARED if count.get(name, 0) >= 2 and name not in leaves}


def materialise(con: duckdb.DuckDBPyConnection, name: str, schema: str, limits: Limits,
                select: str | None = None) -> None:
    """Compute view `name` (bound in `schema`) into a temporary table once, and bind the view
    over it; `select`: the view's own query, when the view is not created yet (load_views
    hands it in the view's turn). Done before the views above it are created, so that each
    is bound over the table, not over the whole derivation from the events: binding a view
    costs as much as the plan beneath it. The table is computed under `limits`
    (sandbox.execute: the time limit, one-line QueryError on running out of memory or spill),
    as the query then is."""
    table = f"shared_{name}"
    execute(con, f"create temp table {table} as {select if select is not None else f'select * from {schema}.{name}'}", None, limits)
    con.execute(f"create or replace view {schema}.{name} as select * from temp.{table}")
