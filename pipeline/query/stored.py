"""Which stored rollups a reader may bind instead of a view's SQL, and how: the read side of
the rollups (pipeline/query/rollups.py computes and commits them)."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

from .views import GETVARIABLE, closure, resolve_variables, sql_files, view_name
from .views import view_sql as file_sql
from ..store.integrity import PARQUET_MAGIC
from ..store.manifest import ROLLUPS_DEFERRED


VIEW = "window_metrics"


# the stored views, in dependency order: a later one is computed reading the earlier ones'
# new rollups
VIEWS = ("requests", "request_state", "engine_stats", "queue_depth", "batch_fill", "kv_cache",
         "windows", "errors", "throughput", "latency_percentiles", "window_metrics",
         # last: it reads only the events, and a view that has no rollup yet (a store rolled
         # up before it was stored) makes every later one computed whole
         "event_catalog")


# store-wide summaries the dashboard's first page reads, stored after VIEWS at the base width
# with every variable at its value of the refresh (incident_summary's range unset: the whole
# store). Never bound by a query's connection: their rows depend on every instance (the
# fleet's signals, an engine's availability), so a rollup holding some instances' rows would
# not be the view's, and incident_summary reads its range from variables a reader sets after
# connecting. Each is computed whole at every refresh, from the rollups of VIEWS just
# computed (a small cost beside theirs), and read only by a reader that asks for its file.
SUMMARIES = ("scaling_signals", "metric_availability", "incident_summary")


# what a refresh computes and commits, in dependency order
STORED = VIEWS + SUMMARIES


# the stored views whose raw derivation reads every request (the request intervals, the
# per-second state, the windows over them): seconds on a big store. A query whose views read
# one of them pays a deferred refresh first; one that reads only the sample series or the
# error windows (a scan of the few events they take) reads them raw while the mark is set,
# as before they were stored: a first question about a log does not pay for every rollup
DEAR = ("requests", "request_state", "window_metrics")


ROLLUP_DIR = "rollups"


FORMAT = 2  # bump when what is stored changes meaning


NO_ROLLUPS_ENV = "SERVELENS_NO_ROLLUPS"


DEFERRED = ROLLUPS_DEFERRED  # (pipeline/store/manifest.py)


@functools.lru_cache(maxsize=16)
def _texts(view: str = VIEW) -> tuple[tuple[str, str], ...]:
    """(view, text) of `view` and every view it reads, in load order."""
    need = closure({view})
    return tuple((view_name(p), file_sql(p)) for p in sql_files() if view_name(p) in need)


@functools.lru_cache(maxsize=16)
def sql_key(view: str = VIEW) -> str:
    """What the rollup was computed from: the text of the view and of the views it reads."""
    h = hashlib.sha256(f"servelens-rollup-{FORMAT}".encode())
    for name, text in _texts(view):
        h.update(f"\0{name}\0{text}".encode())
    return h.hexdigest()[:20]


@functools.lru_cache(maxsize=16)
def variable_names(view: str = VIEW) -> tuple[str, ...]:
    """The variables `view` reads, directly or through the views beneath it."""
    return tuple(sorted({v.lower() for _, text in _texts(view) for v in GETVARIABLE.findall(text)}))


def _norm(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    try:  # the views read them with try_cast(... as double)
        return float(str(value))
    except ValueError:
        return str(value)


def key_variables(variables: Mapping[str, Any] | None = None, view: str = VIEW) -> dict[str, Any]:
    """The values the view would read on a connection given `variables` (packaged defaults
    under them), for the variables it reads; None for one nobody sets (the SQL's default)."""
    resolved = {k.lower(): v for k, v in resolve_variables(variables).items()}
    return {name: _norm(resolved.get(name)) for name in variable_names(view)}


def disabled() -> bool:
    return os.environ.get(NO_ROLLUPS_ENV, "") not in ("", "0")


def intact(path: Path) -> bool:
    """Starts and ends with the Parquet magic (what a cut-short or overwritten file does not)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - 4))
            return size >= 12 and head == PARQUET_MAGIC and f.read(4) == PARQUET_MAGIC
    except OSError:
        return False


def current(root: Path, manifest: dict, variables: Mapping[str, Any] | None = None, view: str = VIEW) -> Path | None:
    """The rollup file a reader may use for `view` instead of its SQL, or None (raw path):
    there must be one, fresh (no dirty marks), of today's SQL, of these variables, intact."""
    entry = (manifest.get("rollups") or {}).get(view)
    if not entry or manifest.get("dirty") or manifest.get("dirty_all"):
        return None
    if entry.get("key") != sql_key(view) or entry.get("variables") != key_variables(variables, view):
        return None
    path = root / entry["path"]
    return path if intact(path) else None


def usable(root: Path, manifest: dict, variables: Mapping[str, Any] | None = None,
           views: tuple[str, ...] | None = None) -> dict[str, Path]:
    """view -> rollup file, for each stored view (of `views`) a reader may use instead of its SQL."""
    out = {}
    for view in views if views is not None else VIEWS:
        path = current(root, manifest, variables, view) if view in VIEWS else None
        if path is not None:
            out[view] = path
    return out


def literal(value: Any) -> str:
    """A SQL string literal (or null)."""
    return "null" if value is None else "'" + str(value).replace("'", "''") + "'"


def view_sql(path: Path, where: str | None = None, view: str = VIEW) -> str:
    """The statement binding `view` over a rollup file."""
    return f"create or replace view {view} as select * from read_parquet({literal(path)})" + (f" where {where}" if where else "")



def deferred(root: Path, manifest: Mapping[str, Any], views: set[str] | None = None) -> bool:
    """Whether the first query that reads a stored view (of those `views` read; None: any)
    should refresh the rollups: an ingest left them to it and they are still to be refreshed
    (stale, or some never computed), or they were computed by another servelens's SQL
    (older_sql)."""
    if not manifest.get(DEFERRED):
        return older_sql(manifest, views)
    if manifest.get("dirty") or manifest.get("dirty_all"):
        return True
    rollups = manifest.get("rollups") or {}
    return any(v not in rollups for v in STORED)


def older_sql(manifest: Mapping[str, Any], views: set[str] | None = None) -> bool:
    """Whether the store's rollups were computed by the SQL of another servelens (one whose
    views differ: an upgrade), or a view now stored has none yet. Every reader would compute
    those views from the events until the next write refreshed them; the first query that
    reads one rebuilds them once instead, as after a deferring ingest. A store never rolled up
    (ingested with the rollups off) is not one. `views`: only the stored views they read (the
    keys a query's connection computes anyway)."""
    rollups = manifest.get("rollups") or {}
    asked = STORED if views is None else [v for v in STORED if v in closure(views)]
    return bool(rollups) and any((rollups.get(v) or {}).get("key") != sql_key(v) for v in asked)


def reads_a_rollup(views: set[str] | None) -> bool:
    """Whether a query naming `views` (None: unknown, any) reads a stored view of DEAR,
    directly or through the views over it: whether it should pay a deferred refresh first.
    Light enough to ask before any refresh is imported."""
    return views is None or bool(closure(views) & set(DEAR))
