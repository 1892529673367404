"""Rollups: views' rows stored beside the events, so that the views over them need not
rebuild them from every event on each query. Stored, in dependency order (VIEWS):

- `requests` (sql/staging/requests.sql): one row per request, independent of the window width.
  Every view over requests (latency_percentiles, ttft_queueing, throughput, ad-hoc SQL, the
  dashboard) then reads one small file instead of the ~70 Parquet scans of its derivation;
- `request_state` (sql/staging/request_state.sql): the per-second reconstructed queue and running counts (at
  `queue_sample_s`), also independent of the window width (queue_depth, batch_fill and the
  dashboard's charts read it);
- `window_metrics` (sql/metrics/window_metrics.sql) at the base window (the variables it reads at their default
  values): scaling_signals, autoscaler_*, incident_summary, metric_series read it.

What is stored is exactly what the raw view gives, because it IS the raw view: a refresh runs
each view's SQL file (through query.connect, with the views beneath it bound over the rollups
this same refresh has just computed) and writes its rows to
`<store>/rollups/<view>-<txid>.parquet`. No SQL is copied, so every engine is covered.

Commit protocol (pipeline/store/commit.py): the rollup files are written and fsynced under new
names, then named in the manifest (`rollups`) by one atomic manifest write, which also clears
the dirty marks; the files they replace go to the garbage like a compacted part. A reader
takes the rollups from the manifest, so a half-written rollup is never read.

Freshness: every data commit (ingest and tail: Store.commit_events) records in the same
manifest write which (engine, instance) it touched and over which times (`dirty`); a commit
that removes rows (prune, repair) marks everything dirty (`dirty_all`); compaction keeps
every row and marks nothing. A refresh recomputes the dirty instances WHOLE (an instance's
rows depend on all of its events: whether it ever logged preemptions, HTTP lines, a fatal
error after which no request finished...) and replaces their rows in every stored view.
Instances are independent, except benchmark-client results (engine `client`), which are
matched to every server's requests: a store holding those is rebuilt whole.

Reads (query.connect): each stored view is bound over its rollup file when the rollup is
fresh (no dirty marks), was computed from today's SQL (`key`: a hash of the view files it
reads) and with the connection's values of the variables it reads; else its raw SQL is bound
(always right). Under a time range the rollup scan keeps the rows of the widened range by the
view's own time columns (timerange.row_filter), as the raw view computed over the widened
events would. `servelens sql --no-rollups` (or SERVELENS_NO_ROLLUPS=1) forces the raw path.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import duckdb
import pyarrow.parquet as pq

from .views import closure
from .sandbox import Limits, parse_size
from ..store.commit import Store, new_txid
from .stored import ROLLUP_DIR, VIEW, VIEWS, current, intact, key_variables, literal, sql_key
from ..store.manifest import fsync_dir, read_manifest

# how each is sorted in its file: by instance, then time, so that the row groups' statistics
# on the time columns let a ranged read skip most of them
SORT = {
    "requests": ("engine", "instance", "finish_ts", "arrival_ts", "request_key"),
    "request_state": ("engine", "instance", "ts"),
    "window_metrics": ("engine", "instance", "window_index"),
}
ROW_GROUP_ROWS = 65_536
WRITE_MEMORY = "1GB"  # the sort before writing spills past this (millions of requests)
# the computing query's DuckDB memory (refresh_limits): with the query default (4 GB) a refresh
# of 0.5 GB of SGLang logs peaked at 1.9 GB of RSS, at 768 MB 0.9 GB (6.4 -> 8.5 s)
REFRESH_MEMORY = "768MB"
# engines whose rows depend on other instances' events (a client's requests are matched to
# the servers' logs): a store holding one is refreshed whole
CROSS_INSTANCE_ENGINES = ("client",)


def _scalar(sql: str) -> Any:
    """The one value of `sql` on a plain connection of our own (trusted paths only)."""
    con = duckdb.connect(":memory:")
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


@dataclass
class Refreshed:
    whole: bool  # every view recomputed over every instance (else only the dirty ones)
    instances: int  # instances recomputed
    rows: int  # rows of the window_metrics rollup now (of the last view computed when not that)
    seconds: float  # wall time of the refresh
    cpu_s: float  # CPU time of this process during it
    views: dict[str, int] | None = None  # rows of each rollup refreshed


def _entry_usable(root: Path, entry: dict | None, view: str) -> bool:
    return (entry is not None and entry.get("key") == sql_key(view)
            and entry.get("variables") == key_variables(None, view) and intact(root / entry["path"]))


def stale(store: Store, view: str | None = None) -> bool:
    """Whether a refresh has anything to do (for `view`, or for any stored view)."""
    m = store.manifest
    if m.get("dirty") or m.get("dirty_all"):
        return True
    rollups = m.get("rollups") or {}
    return any(not _entry_usable(store.root, rollups.get(v), v) for v in ((view,) if view else VIEWS))


@dataclass
class Plan:
    """What a refresh will do, taken on the writer's thread (the manifest as it is now)."""

    root: Path
    views: list[str]  # the stored views recomputed, in dependency order
    whole: dict[str, bool]  # per view: over every instance (else the dirty ones)
    dirty: list[tuple[str, str]]  # the instances recomputed (when not whole)
    old_paths: dict[str, str | None]  # per view: the rollup whose other instances' rows are carried over
    inputs: dict[str, str]  # fresh rollups not recomputed, read by the views computed
    generation: int  # Store.generation at the plan: marks of later commits are kept
    started: tuple[float, float]  # perf_counter, process_time


@dataclass
class Computed:
    plan: Plan
    rels: dict[str, str]  # view -> the new rollup file, written and fsynced, not yet committed
    rows: dict[str, int]
    instances: int


def plan(store: Store, *, whole: bool = False, view: str | None = None) -> Plan | None:
    """None when the rollups are fresh and not `whole` (a rebuild of every view whatever
    their state), or the store is published to object storage, whose readers use the raw
    path. `view`: only it and the stored views beneath it."""
    if store.remote is not None or not (whole or stale(store)):
        return None
    started = (time.perf_counter(), time.process_time())
    m = store.manifest
    rollups = m.get("rollups") or {}
    dirty = [(e, i) for e, i, _lo, _hi in m.get("dirty", [])]
    whole_all = whole or bool(m.get("dirty_all")) or any(e in CROSS_INSTANCE_ENGINES for e, _ in dirty)
    wanted = VIEWS if view is None else tuple(v for v in VIEWS if v in closure({view}))
    views, wholes, olds, inputs = [], {}, {}, {}
    for v in wanted:
        entry = rollups.get(v)
        ok = _entry_usable(store.root, entry, v)
        if ok and not dirty and not m.get("dirty_all") and not whole:
            inputs[v] = entry["path"]  # fresh: read as it is
            continue
        views.append(v)
        # a view beneath recomputed whole changes every instance's rows of those above it
        wholes[v] = whole_all or not ok or any(wholes.values())
        olds[v] = entry["path"] if entry else None
    return Plan(store.root, views, wholes, dirty, olds, inputs, store.generation, started)


def compute(p: Plan) -> Computed:
    """Run each planned view's raw SQL over the planned instances (the views beneath it bound
    over the rollups just computed) and write the new rollup files (not yet committed).
    Touches no manifest: it may run on another thread than the writer's."""
    rels: dict[str, str] = {}
    rows: dict[str, int] = {}
    try:
        for view in p.views:
            rels[view], rows[view] = _compute_view(p, view, {**p.inputs, **rels})
    except BaseException:
        for rel in rels.values():
            discard_file(p.root, rel)
        raise
    n = len(p.dirty)
    if any(p.whole.values()):
        n = max(n, _instances(p.root / rels[p.views[-1]])) if p.views else n
    return Computed(p, rels, rows, n)


def _instances(path: Path) -> int:
    return int(_scalar(f"select count(*) from (select distinct engine, instance from read_parquet({literal(path)}))"))


def refresh_limits() -> Limits:
    """What bounds a refresh's query: it runs inside `servelens ingest` and the tailer, whose
    memory should stay under 1 GB, so DuckDB gets REFRESH_MEMORY (it spills the rest), no time
    limit; $SERVELENS_ROLLUP_MEMORY / _THREADS change it."""
    base = Limits(timeout_s=None, memory_bytes=parse_size(REFRESH_MEMORY), raise_memory="$SERVELENS_ROLLUP_MEMORY")
    try:
        return Limits.from_env(prefix="SERVELENS_ROLLUP_", base=base)
    except ValueError as e:  # a bad $SERVELENS_ROLLUP_MEMORY: say which setting
        raise ValueError(f"$SERVELENS_ROLLUP_MEMORY / _THREADS / $SERVELENS_SPILL_SIZE: {e}") from None


def _out_of_memory(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, duckdb.OutOfMemoryException) or "Out of Memory" in text or "memory limit" in text


def _compute_view(p: Plan, view: str, stored_rels: dict[str, str]) -> tuple[str, int]:
    """One view's rollup file, under refresh_limits(); a view whose plan cannot stay within
    them (a window over a huge partition does not spill) is computed again under the query
    defaults, so that a bound never costs a rollup."""
    try:
        return _compute_view_within(p, view, stored_rels, refresh_limits())
    except Exception as e:  # noqa: BLE001 - only running out of memory is retried
        if not _out_of_memory(e):
            raise
        return _compute_view_within(p, view, stored_rels, Limits.from_env(timeout_s=None))


def _compute_view_within(p: Plan, view: str, stored_rels: dict[str, str], limits: Limits) -> tuple[str, int]:
    from . import connect as query

    whole = p.whole[view]
    old = p.root / p.old_paths[view] if p.old_paths.get(view) else None
    if not whole and old is not None:
        try:
            names = pq.read_schema(old).names
            has_client = "engine" in names and _has_engine(old, CROSS_INSTANCE_ENGINES)
        except Exception:  # noqa: BLE001 - unreadable now: rebuilt whole
            has_client = True
        if has_client:
            whole = True
    if not whole and old is None:
        whole = True
    if whole:  # and so every view above it
        for v in p.views[p.views.index(view):]:
            p.whole[v] = True
    stored = {v: p.root / rel for v, rel in stored_rels.items()}
    con = query.connect(p.root, None, limits, views={view}, rollups=False, instances=None if whole else p.dirty,
                        stored=stored)
    rel = f"{ROLLUP_DIR}/{view}-{new_txid()}.parquet"
    path = p.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        reader = con.sql(f"select * from {view}").to_arrow_reader(ROW_GROUP_ROWS)
        n = _write(path, reader, view, None if whole else old, None if whole else p.dirty)
    except BaseException:
        discard_file(p.root, rel)
        raise
    finally:
        con.close()
    return rel, n


def _has_engine(path: Path, engines: tuple[str, ...]) -> bool:
    kinds = ", ".join(literal(e) for e in engines)
    return bool(_scalar(f"select count(*) from read_parquet({literal(path)}) where engine in ({kinds})"))


def _write(path: Path, reader: Any, view: str, old: Path | None, dirty: list[tuple[str, str]] | None) -> int:
    """The old file's rows of the other instances as they are, then the new rows sorted by
    SORT[view], to `path` (fsynced); returns the row count. A plain DuckDB connection of our own (trusted
    paths only) streams, sorts and spills, so a rollup of millions of requests is never a
    Python object."""
    con = duckdb.connect(":memory:", config={"temp_directory": tempfile.gettempdir() + f"/servelens-rollup-{os.getpid()}",
                                             "memory_limit": WRITE_MEMORY})
    try:
        con.register("new_rows", reader)
        cols = {c for c, in con.execute("select column_name from (describe select * from new_rows)").fetchall()}
        order = ", ".join(f'"{c}" nulls last' for c in SORT.get(view, ()) if c in cols)
        body = f"select * from new_rows{' order by ' + order if order else ''}"
        if old is not None:
            # the other instances' rows as they are (already sorted in the old file): only the
            # new rows are sorted, so a refresh of one instance does not re-sort the store's
            src = f"read_parquet({literal(old)})"
            kept = f"select * from {src}"
            if dirty:  # (an instance may be null: `not in` would drop every row)
                kept = (f"select o.* from {src} as o anti join (values {_instances_values(dirty)}) as d(e, i)"
                        " on o.engine is not distinct from d.e and o.instance is not distinct from d.i")
            body = f"{kept} union all by name ({body})"
        dst = literal(path)
        con.execute(f"copy ({body}) to {dst} (format parquet, compression zstd, row_group_size {ROW_GROUP_ROWS})")
        n = int(con.execute(f"select count(*) from read_parquet({dst})").fetchone()[0])
    finally:
        con.close()
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    fsync_dir(path.parent)
    return n


def _instances_values(pairs: list[tuple[str, str]]) -> str:
    return ", ".join(f"({literal(e)}, {literal(i)})" for e, i in pairs)


def commit(store: Store, c: Computed) -> Refreshed | None:
    """Make computed rollups current (on the writer's thread) in one manifest write, clearing
    the dirty marks of what no commit changed since their plan; None (and the files deleted)
    when another refresh replaced a rollup meanwhile."""
    p = c.plan
    rollups = store.manifest.get("rollups") or {}
    moved = any((rollups.get(v) or {}).get("path") != p.old_paths[v] for v in p.views if not p.whole[v])
    moved |= any((rollups.get(v) or {}).get("path") != rel for v, rel in p.inputs.items())
    if moved:
        for rel in c.rels.values():
            discard_file(store.root, rel)
        return None
    try:
        store.commit([], dirty=("clean", p.generation), rollups={v: {
            "path": c.rels[v], "key": sql_key(v), "variables": key_variables(None, v), "rows": c.rows[v],
        } for v in p.views})
    except BaseException:
        for rel in c.rels.values():
            discard_file(store.root, rel)
        raise
    remove_orphans(store)
    last = VIEW if VIEW in c.rows else (p.views[-1] if p.views else VIEW)
    return Refreshed(all(p.whole.values()), c.instances, c.rows.get(last, 0),
                     time.perf_counter() - p.started[0], time.process_time() - p.started[1], dict(c.rows))


def discard_file(root: Path, rel: str) -> None:
    try:
        (root / rel).unlink()
    except OSError:
        pass


def refresh(store: Store, *, whole: bool = False, view: str | None = None) -> Refreshed | None:
    """Bring the rollups up to date under the writer's lock (ingest's end, compact, repair,
    prune, a stopping tailer): recompute the dirty instances (all of them when `whole`, when
    there is no usable rollup, when rows were removed, or when benchmark-client results are
    involved) with the raw SQL, view after view, write the new rollup files, and commit them
    with the dirty marks cleared in one manifest write. None when they were fresh already, or
    for a store published to object storage (its readers use the raw path). The tailer runs
    the same three steps with `compute` on a thread of its own."""
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


def status(root: Path | str, variables: Mapping[str, Any] | None = None, view: str = VIEW) -> str:
    """One word on a stored view's rollup, for `servelens info` and the tests."""
    root = Path(root)
    m = read_manifest(root)
    entry = (m.get("rollups") or {}).get(view)
    if entry is None:
        return "none"
    if current(root, m, variables, view) is not None:
        return "fresh"
    if m.get("dirty") or m.get("dirty_all"):
        return "dirty"
    return "unusable"


__all__ = ["VIEW", "VIEWS", "usable", "ROLLUP_DIR", "current", "refresh", "stale", "status", "view_sql", "key_variables", "sql_key", "disabled", "Refreshed"]


def rebuild(store: Store, whole: bool) -> Refreshed | None:
    """After a repair: refresh (`whole` when rows were dropped) and remove orphaned files."""
    refreshed = refresh(store, whole=whole)
    remove_orphans(store)
    return refreshed
