"""Rollups: the `window_metrics` view's rows stored beside the events, so that the views over
it (scaling_signals, autoscaler_*, incident_summary, metric_series, the dashboard) need not
rebuild it from every event on each query.

What is stored is exactly what the raw view gives, because it IS the raw view: a refresh runs
`sql/80_window_metrics.sql` (through query.connect, with the raw path forced) and writes its
rows to `<store>/rollups/window_metrics-<txid>.parquet` at the base window (the variables
window_metrics reads at their default values). No SQL is copied, so every engine is covered.

Commit protocol (pipeline/store.py): the rollup file is written and fsynced under a new name,
then named in the manifest (`rollups`) by one atomic manifest write, which also clears the
dirty marks; the file it replaces goes to the garbage like a compacted part. A reader takes
the rollup from the manifest, so a half-written rollup is never read.

Freshness: every data commit (ingest and tail: Store.commit_events) records in the same
manifest write which (engine, instance) it touched and over which times (`dirty`); a commit
that removes rows (prune, repair) marks everything dirty (`dirty_all`); compaction keeps
every row and marks nothing. A refresh recomputes the dirty instances WHOLE (an instance's
windows depend on all of its events: whether it ever logged preemptions, HTTP lines, a fatal
error after which no request finished...) and replaces their rows. Instances are
independent, except benchmark-client results (engine `client`), which are matched to every
server's requests: a store holding those is rebuilt whole.

Reads (query.connect): `window_metrics` is bound over the rollup file when the rollup is
fresh (no dirty marks), was computed from today's SQL (`key`: a hash of the view files it
reads) and with the connection's values of the variables it reads; else the raw SQL is bound
(always right). `servelens sql --no-rollups` (or SERVELENS_NO_ROLLUPS=1) forces the raw path.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import polars as pl
import pyarrow.parquet as pq

from .metrics import closure, resolve_variables, sql_files, view_name
from .store import PARQUET_MAGIC, Store, _fsync_dir, new_txid, read_manifest

VIEW = "window_metrics"
ROLLUP_DIR = "rollups"
FORMAT = 1  # bump when what is stored changes meaning
NO_ROLLUPS_ENV = "SERVELENS_NO_ROLLUPS"
# engines whose rows depend on other instances' events (a client's requests are matched to
# the servers' logs): a store holding one is refreshed whole
CROSS_INSTANCE_ENGINES = ("client",)
_GETVAR = re.compile(r"getvariable\(\s*'(\w+)'\s*\)", re.I)


@functools.lru_cache(maxsize=4)
def _texts(view: str = VIEW) -> tuple[tuple[str, str], ...]:
    """(view, text) of `view` and every view it reads, in load order."""
    need = closure({view})
    return tuple((view_name(p), p.read_text(encoding="utf-8")) for p in sql_files() if view_name(p) in need)


@functools.lru_cache(maxsize=4)
def sql_key(view: str = VIEW) -> str:
    """What the rollup was computed from: the text of the view and of the views it reads."""
    h = hashlib.sha256(f"servelens-rollup-{FORMAT}".encode())
    for name, text in _texts(view):
        h.update(f"\0{name}\0{text}".encode())
    return h.hexdigest()[:20]


@functools.lru_cache(maxsize=4)
def variable_names(view: str = VIEW) -> tuple[str, ...]:
    """The variables `view` reads, directly or through the views beneath it."""
    return tuple(sorted({v.lower() for _, text in _texts(view) for v in _GETVAR.findall(text)}))


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


def _intact(path: Path) -> bool:
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
    return path if _intact(path) else None


def view_sql(path: Path, where: str | None = None, view: str = VIEW) -> str:
    """The statement binding `view` over a rollup file (a path of the store: no quote in it)."""
    src = str(path).replace("'", "''")
    return f"create or replace view {view} as select * from read_parquet('{src}')" + (f" where {where}" if where else "")


@dataclass
class Refreshed:
    whole: bool  # recomputed over every instance (else only the dirty ones)
    instances: int  # instances recomputed
    rows: int  # rows of the rollup now
    seconds: float  # wall time of the refresh
    cpu_s: float  # CPU time of this process during it


def stale(store: Store, view: str = VIEW) -> bool:
    """Whether a refresh has anything to do."""
    m = store.manifest
    entry = (m.get("rollups") or {}).get(view)
    return (entry is None or bool(m.get("dirty")) or bool(m.get("dirty_all"))
            or entry.get("key") != sql_key(view) or entry.get("variables") != key_variables(None, view)
            or not _intact(store.root / entry["path"]))


@dataclass
class Plan:
    """What a refresh will do, taken on the writer's thread (the manifest as it is now)."""

    root: Path
    view: str
    whole: bool
    dirty: list[tuple[str, str]]  # the instances recomputed (when not whole)
    old_path: str | None  # the rollup whose other instances' rows are carried over
    generation: int  # Store.generation at the plan: marks of later commits are kept
    started: tuple[float, float]  # perf_counter, process_time


@dataclass
class Computed:
    plan: Plan
    rel: str  # the new rollup file, written and fsynced, not yet committed
    rows: int
    instances: int


def plan(store: Store, *, whole: bool = False, view: str = VIEW) -> Plan | None:
    """None when the rollup is fresh (or the store is published to object storage, whose
    readers use the raw path)."""
    if store.remote is not None or not stale(store, view):
        return None
    started = (time.perf_counter(), time.process_time())
    m = store.manifest
    entry = (m.get("rollups") or {}).get(view)
    dirty = [(e, i) for e, i, _lo, _hi in m.get("dirty", [])]
    usable = (entry is not None and entry.get("key") == sql_key(view)
              and entry.get("variables") == key_variables(None, view) and _intact(store.root / entry["path"]))
    whole = (whole or not usable or bool(m.get("dirty_all"))
             or any(e in CROSS_INSTANCE_ENGINES for e, _ in dirty))
    return Plan(store.root, view, whole, dirty, None if whole else entry["path"], store.generation, started)


def compute(p: Plan) -> Computed:
    """Run the raw SQL over the planned instances and write the new rollup file (not yet
    committed). Touches no manifest: it may run on another thread than the writer's."""
    from . import query

    whole = p.whole
    old = pl.DataFrame()
    if not whole:
        try:
            old = pl.read_parquet(p.root / p.old_path)
        except Exception:  # noqa: BLE001 - unreadable now: rebuilt whole
            whole = True
        if old.height and old["engine"].is_in(list(CROSS_INSTANCE_ENGINES)).any():
            whole = True
    con = query.connect(p.root, views={p.view}, rollups=False, instances=None if whole else p.dirty)
    try:
        new = con.sql(f"select * from {p.view}").to_arrow_table()
    finally:
        con.close()
    frame = pl.from_arrow(new)
    assert isinstance(frame, pl.DataFrame)
    if not whole:
        keys = pl.DataFrame({"engine": [e for e, _ in p.dirty], "instance": [i for _, i in p.dirty]},
                            schema={"engine": pl.String, "instance": pl.String})
        kept = old.join(keys, on=["engine", "instance"], how="anti", nulls_equal=True)
        frame = pl.concat([kept, frame], how="vertical_relaxed") if kept.height else frame
    table = frame.sort("engine", "instance", "window_index", nulls_last=True).to_arrow().cast(new.schema)
    rel = f"{ROLLUP_DIR}/{p.view}-{new_txid()}.parquet"
    path = p.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "wb") as f:
            pq.write_table(table, f, compression="zstd")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(path.parent)
    except BaseException:
        discard_file(p.root, rel)
        raise
    n = frame.select("engine", "instance").n_unique() if whole else len(p.dirty)
    p.whole = whole
    return Computed(p, rel, table.num_rows, n)


def commit(store: Store, c: Computed) -> Refreshed | None:
    """Make a computed rollup current (on the writer's thread), clearing the dirty marks of
    what no commit changed since its plan; None (and the file deleted) when another refresh
    replaced the rollup meanwhile."""
    p = c.plan
    entry = (store.manifest.get("rollups") or {}).get(p.view)
    if (entry or {}).get("path") != p.old_path and not p.whole:
        discard_file(store.root, c.rel)
        return None
    try:
        store.commit([], dirty=("clean", p.generation), rollups={p.view: {
            "path": c.rel, "key": sql_key(p.view), "variables": key_variables(None, p.view), "rows": c.rows,
        }})
    except BaseException:
        discard_file(store.root, c.rel)
        raise
    remove_orphans(store)
    return Refreshed(p.whole, c.instances, c.rows, time.perf_counter() - p.started[0], time.process_time() - p.started[1])


def discard_file(root: Path, rel: str) -> None:
    try:
        (root / rel).unlink()
    except OSError:
        pass


def refresh(store: Store, *, whole: bool = False, view: str = VIEW) -> Refreshed | None:
    """Bring the rollup up to date under the writer's lock (ingest's end, compact, repair,
    prune, a stopping tailer): recompute the dirty instances (all of them when `whole`, when
    there is no usable rollup, when rows were removed, or when benchmark-client results are
    involved) with the raw SQL, write the new rollup file, and commit it with the dirty
    marks cleared in one manifest write. None when it was fresh already, or for a store
    published to object storage (its readers use the raw path). The tailer runs the same
    three steps with `compute` on a thread of its own."""
    p = plan(store, whole=whole, view=view)
    if p is None:
        return None
    return commit(store, compute(p))


def remove_orphans(store: Store) -> None:
    """Rollup files the manifest neither names nor holds for the grace time (a refresh that
    crashed before its commit)."""
    d = store.root / ROLLUP_DIR
    if not d.is_dir():
        return
    known = {e.get("path") for e in (store.manifest.get("rollups") or {}).values()}
    known |= {rel for rel, _t in store.manifest.get("garbage", [])}
    for p in d.glob("*.parquet"):
        if f"{ROLLUP_DIR}/{p.name}" not in known:
            try:
                p.unlink()
            except OSError:
                pass


def status(root: Path | str, variables: Mapping[str, Any] | None = None) -> str:
    """One line on the rollup's state, for `servelens info` and the tests."""
    root = Path(root)
    m = read_manifest(root)
    entry = (m.get("rollups") or {}).get(VIEW)
    if entry is None:
        return "none"
    if current(root, m, variables) is not None:
        return "fresh"
    if m.get("dirty") or m.get("dirty_all"):
        return "dirty"
    return "unusable"


__all__ = ["VIEW", "ROLLUP_DIR", "current", "refresh", "stale", "status", "view_sql", "key_variables", "sql_key", "disabled", "Refreshed"]
