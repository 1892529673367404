"""Rollups: views' rows stored beside the events, so that the views over them need not
rebuild them from every event on each query. Stored, in dependency order (VIEWS):

- `requests` (sql/staging/requests.sql): one row per request, independent of the window width.
  Every view over requests (latency_percentiles, ttft_queueing, throughput, ad-hoc SQL, the
  dashboard) then reads one small file instead of the ~70 Parquet scans of its derivation;
- `request_state` (sql/staging/request_state.sql): the per-second reconstructed queue and running counts (at
  `queue_sample_s`), also independent of the window width (queue_depth, batch_fill read it);
- `engine_stats`, `queue_depth`, `batch_fill`, `kv_cache` (sql/staging, sql/metrics): the
  per-sample series, independent of the window width too. The dashboard binds them over
  their files rather than evaluating them (batch_fill's ASOF joins over every per-second
  sample are the dearest), and window_metrics' refresh reads them from there;
- `windows`, `errors`, `throughput`, `latency_percentiles` at the base window (the variables they
  read at their default values): the dashboard's first page reads them at its default width,
  `servelens sql` at the base width;
- `window_metrics` (sql/metrics/window_metrics.sql) at the base window (the variables it reads at their default
  values): scaling_signals, autoscaler_*, incident_summary, metric_series read it.
- `event_catalog` (sql/staging/event_catalog.sql): the first and last event and the event count
  per instance and model, what the dashboard's filters are made from (a scan of every event), last;
- then the store-wide summaries the dashboard's first page reads (stored.SUMMARIES:
  `scaling_signals`, `metric_availability`, `incident_summary` over the whole store), at the
  base window: computed over every instance at each refresh (their rows depend on the whole
  fleet or a whole engine), and never bound by a query's connection, only read by the
  dashboard where its page asks for exactly those rows.

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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import duckdb
import pyarrow.parquet as pq

from .views import closure
from .sandbox import Limits, parse_size
from .shared import materialise, to_share
from ..store.commit import Store, new_txid
from .stored import DEFERRED, ROLLUP_DIR, STORED, SUMMARIES, VIEW, VIEWS, current, deferred, intact, key_variables, literal, reads_a_rollup, sql_key, view_sql
from ..store.layout import instances_predicate
from ..store.manifest import fsync_dir, read_manifest

# how each is sorted in its file: by instance, then time, so that the row groups' statistics
# on the time columns let a ranged read skip most of them
SORT = {
    "requests": ("engine", "instance", "finish_ts", "arrival_ts", "request_key"),
    "request_state": ("engine", "instance", "ts"),
    "engine_stats": ("engine", "instance", "ts"),
    "queue_depth": ("engine", "instance", "ts"),
    "batch_fill": ("engine", "instance", "ts"),
    "kv_cache": ("engine", "instance", "ts"),
    "event_catalog": ("engine", "instance", "model"),
    "windows": ("engine", "instance", "window_start"),
    "errors": ("engine", "instance", "window_start", "kind"),
    "throughput": ("engine", "instance", "window_start"),
    "latency_percentiles": ("engine", "instance", "window_start", "model"),
    "window_metrics": ("engine", "instance", "window_index"),
    "scaling_signals": ("engine", "instance", "window_start", "signal"),
    "metric_availability": ("engine", "metric"),
    "incident_summary": ("instance", "engine"),
}
ROW_GROUP_ROWS = 65_536
# the computing query's DuckDB memory (refresh_limits): with the query default a refresh of a
# large log takes far more memory than the ingest before it; this bound halves the peak for
# some extra time (bench/RESULTS.md)
REFRESH_MEMORY = "768MB"
# engines whose rows depend on other instances' events (a client's requests are matched to
# the servers' logs): a store holding one is refreshed whole
CROSS_INSTANCE_ENGINES = ("client",)


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
    return any(not _entry_usable(store.root, rollups.get(v), v) for v in ((view,) if view else STORED))


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
    session: Any = None  # the open connections of a compute in progress (_Session)


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
    wanted = STORED if view is None else tuple(v for v in STORED if v in closure({view}))
    views, wholes, olds, inputs = [], {}, {}, {}
    for v in wanted:
        entry = rollups.get(v)
        ok = _entry_usable(store.root, entry, v)
        if ok and not dirty and not m.get("dirty_all") and not whole:
            inputs[v] = entry["path"]  # fresh: read as it is
            continue
        views.append(v)
        # a view beneath recomputed whole changes every instance's rows of those above it; a
        # summary's rows depend on every instance
        wholes[v] = whole_all or not ok or any(wholes.values()) or v in SUMMARIES
        olds[v] = entry["path"] if entry else None
    return Plan(store.root, views, wholes, dirty, olds, inputs, store.generation, started)


def compute(p: Plan) -> Computed:
    """Run each planned view's raw SQL over the planned instances (the views beneath it bound
    over the rollups just computed) and write the new rollup files (not yet committed).
    Touches no manifest: it may run on another thread than the writer's.

    One connection binds `events` and computes and writes every view in turn (each view,
    once written, is bound over its new file for the views above it): the store and the
    views beneath are bound once rather than per view, and no row goes through Python."""
    rels: dict[str, str] = {}
    rows: dict[str, int] = {}
    p.session = session = _Session(p)
    try:
        _settle_whole(p)
        for view in p.views:
            rels[view], rows[view] = _compute_view(p, view, {**p.inputs, **rels})
        # servers, not the results files of a benchmark client (their rows are a server's)
        n = len([d for d in p.dirty if d[0] not in CROSS_INSTANCE_ENGINES])
        # (a summary is always whole: the instances are those of a view computed whole, or
        # of incident_summary when only the summaries were)
        per_instance = [v for v in p.views if v not in SUMMARIES] or [v for v in p.views if v == "incident_summary"]
        if any(p.whole[v] for v in per_instance):
            # of the view with the most rows (an engine that logs no stats has none of kv_cache's)
            n = max(n, session.instances(p.root / rels[max(per_instance, key=lambda v: rows[v])]))
    except BaseException:
        for rel in rels.values():
            discard_file(p.root, rel)
        raise
    finally:
        p.session = None
        session.close()
    return Computed(p, rels, rows, n)


class _Session:
    """The computing connections of one compute, by wholeness and limits (a view retried
    under other limits gets one of its own). Each also writes its views' files: the rows go
    from the query to the Parquet file inside DuckDB, never through Python or Arrow."""

    def __init__(self, p: Plan) -> None:
        self.plan = p
        # every new file's name, chosen now so that each computing connection may write and
        # read them all (its sandbox allows only the paths it was given)
        self.rels = {v: f"{ROLLUP_DIR}/{v}-{new_txid()}.parquet" for v in p.views}
        # per computing connection: it, the views bound on it, and those computed into tables
        self.cons: dict[tuple, tuple[duckdb.DuckDBPyConnection, set[str], set[str]]] = {}
        self.last: duckdb.DuckDBPyConnection | None = None  # the one that wrote the last file

    def computing(self, view: str, whole: bool, limits: Limits,
                  stored_rels: dict[str, str]) -> duckdb.DuckDBPyConnection:
        """A connection with `view` and every view beneath it bound: the ones already computed
        over their files (the dirty instances' rows when not `whole`), the rest over their SQL."""
        from . import connect as query
        from .views import sql_files, view_name, view_sql as file_sql

        key = (whole, repr(limits))
        if key not in self.cons:
            p = self.plan
            olds = [p.root / rel for rel in p.old_paths.values() if rel]
            inputs = [p.root / rel for rel in p.inputs.values()]
            con = query.connect(p.root, None, limits, views={view}, rollups=False,
                                instances=None if whole else p.dirty, shared=False,
                                stored={v: p.root / rel for v, rel in stored_rels.items()},
                                readable=(*(p.root / rel for rel in self.rels.values()), *olds, *inputs))
            self.cons[key] = (con, closure({view}, leaves=set(stored_rels)), set())
            self.last = con
            return con
        con, bound, bound_shared = self.cons[key]
        self.last = con
        beneath = closure({view}, leaves=set(stored_rels))
        need = beneath - bound
        # a fresh rollup beneath that the views computed so far did not read (engine_stats
        # reads no other): bound over its file now, as connect binds those it is given
        for name in sorted(need & set(stored_rels)):
            self._bind_file(con, bound, whole, name, self.plan.root / stored_rels[name])
        need -= set(stored_rels)
        # a view beneath read by several paths (window_metrics reads engine_stats by four)
        # is computed once into a table: each path would bind and derive it anew
        share = to_share({view}, beneath, stored_rels) - bound_shared
        for path in sql_files():  # in load order: each after the views it reads
            name = view_name(path)
            if name in need:
                con.execute(file_sql(path))
                bound.add(name)
            if name in share:
                materialise(con, name, "main", limits)
                bound_shared.add(name)
        return con

    def written(self, view: str, rel: str) -> None:
        """Bind `view` over its new file on every computing connection, as a connection given
        it in `stored` would (query.connect): the views above it read its rows from there."""
        path = self.plan.root / rel
        for (whole, _limits), (con, bound, _shared) in self.cons.items():
            # a view computed whole is read only by views computed whole (plan): a summary
            # may have no instance column to keep the dirty instances' rows by
            if whole or not self.plan.whole.get(view):
                self._bind_file(con, bound, whole, view, path)

    def _bind_file(self, con: duckdb.DuckDBPyConnection, bound: set[str], whole: bool, view: str, path: Path) -> None:
        """`view` bound over a rollup file on a computing connection (its dirty instances'
        rows when not `whole`), as query.connect binds a view it is given in `stored`."""
        con.execute(view_sql(path, None if whole else instances_predicate(self.plan.dirty), view))
        bound.add(view)

    def instances(self, path: Path) -> int:
        return int(self.last.execute(
            f"select count(*) from (select distinct engine, instance from read_parquet({literal(path)})"
            f" where engine not in ({', '.join(literal(e) for e in CROSS_INSTANCE_ENGINES)}))").fetchone()[0])

    def close(self) -> None:
        for con, _bound, _shared in self.cons.values():
            con.close()
        self.cons.clear()


def _settle_whole(p: Plan) -> None:
    """Which views are recomputed whole, before any connection is made: a view without an old
    rollup, or whose old rollup holds rows of an engine matched across instances (or cannot be
    read), is rebuilt whole, and so is every view above it."""
    for i, view in enumerate(p.views):
        old = p.root / p.old_paths[view] if p.old_paths.get(view) else None
        whole = p.whole[view] or old is None
        if not whole:
            try:
                whole = _has_engine(old, CROSS_INSTANCE_ENGINES)
            except Exception:  # noqa: BLE001 - unreadable now: rebuilt whole
                whole = True
        if whole:
            for v in p.views[i:]:
                p.whole[v] = True
            return


def _has_engine(path: Path, engines: tuple[str, ...]) -> bool:
    import pyarrow as pa
    import pyarrow.compute as pc  # here: only an incremental refresh asks

    f = pq.ParquetFile(path)
    if "engine" not in f.schema_arrow.names:
        return False
    col = f.read(columns=["engine"])["engine"]
    return bool(pc.any(pc.is_in(col, value_set=pa.array(engines, col.type))).as_py())


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
    session = p.session if p.session is not None else _Session(p)
    whole = p.whole[view]
    old = p.root / p.old_paths[view] if p.old_paths.get(view) else None
    try:
        con = session.computing(view, whole, limits, stored_rels)
        rel = session.rels.get(view) or f"{ROLLUP_DIR}/{view}-{new_txid()}.parquet"
        path = p.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            n = _write(path, con, view, None if whole else old, None if whole else p.dirty)
        except BaseException:
            discard_file(p.root, rel)
            raise
        session.written(view, rel)
    finally:
        if p.session is None:
            session.close()
    return rel, n


def _write(path: Path, con: duckdb.DuckDBPyConnection, view: str, old: Path | None,
           dirty: list[tuple[str, str]] | None) -> int:
    """The old file's rows of the other instances as they are, then the view's rows on `con`
    sorted by SORT[view], to `path` (fsynced); returns the row count. One COPY on the
    computing connection: DuckDB streams, sorts and spills, so a rollup of millions of
    requests is never a Python object."""
    cols = con.execute("select column_name, data_type from duckdb_columns() where table_name = ? "
                       "and schema_name = current_schema() order by column_index", [view]).fetchall()
    order = ", ".join(f'"{c}" nulls last' for c in SORT.get(view, ()) if c in {c for c, _t in cols})
    # stored as the rows' Arrow form always stored them: a HUGEINT (a sum of integers) is a
    # DECIMAL(38, 0) there, where DuckDB's Parquet writer would make it a DOUBLE
    select = ", ".join(f'cast("{c}" as decimal(38, 0)) as "{c}"' if t == "HUGEINT" else f'"{c}"' for c, t in cols)
    body = f"select {select or '*'} from {view}{' order by ' + order if order else ''}"
    if old is not None:
        # the other instances' rows as they are (already sorted in the old file): only the
        # new rows are sorted, so a refresh of one instance does not re-sort the store's
        src = f"read_parquet({literal(old)})"
        kept = f"select * from {src}"
        if dirty:  # (an instance may be null: `not in` would drop every row)
            kept = (f"select o.* from {src} as o anti join (values {_instances_values(dirty)}) as d(e, i)"
                    " on o.engine is not distinct from d.e and o.instance is not distinct from d.i")
        body = f"{kept} union all by name ({body})"
    # COPY answers the number of rows it wrote. Parquet's second format: its delta encodings
    # store the sorted times and counters in a fraction of the plain encoding's bytes, and
    # every reader of a rollup decodes them faster (the first format's times decode to most of
    # a scan of the per-second series)
    n = int(con.execute(f"copy ({body}) to {literal(path)} (format parquet, compression zstd, "
                        f"row_group_size {ROW_GROUP_ROWS}, parquet_version v2)").fetchone()[0])
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
    was_deferred = store.manifest.pop(DEFERRED, None)  # done: written with this commit
    try:
        store.commit([], dirty=("clean", p.generation), rollups={v: {
            "path": c.rels[v], "key": sql_key(v), "variables": key_variables(None, v), "rows": c.rows[v],
        } for v in p.views})
    except BaseException:
        if was_deferred is not None:
            store.manifest[DEFERRED] = was_deferred
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


def refresh_deferred(root: Path | str, views: set[str] | None = None) -> Refreshed | None:
    """The refresh an ingest left to the first query (`servelens ingest --defer-rollups`), or
    that rollups computed by another servelens's views call for (stored.older_sql), run by a
    command about to read a stored view (`views`: the views its query names; None:
    any): under the writer's lock, once, committed like any refresh. None when there is
    nothing deferred, the query reads no stored view, or a writer holds the store (a tailer
    refreshes them itself; the query then reads the raw views, as on any stale store)."""
    from ..store import remote
    from ..store.manifest import StoreError

    if remote.store_url(root) is not None or remote.is_fleet(root):
        return None
    root = remote.local_store(root)
    try:
        if not deferred(root, read_manifest(root), views):
            return None
    except (StoreError, OSError, ValueError):
        return None
    if not reads_a_rollup(views):
        return None
    try:
        store = Store.open(root, purpose="rollup refresh")
    except (StoreError, OSError):  # in use by a writer, or not ours to write
        return None
    try:
        return refresh(store) if deferred(store.root, store.manifest, views) else None
    finally:
        store.close()


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


__all__ = ["VIEW", "VIEWS", "STORED", "SUMMARIES", "usable", "ROLLUP_DIR", "current", "refresh", "stale", "status", "view_sql", "key_variables", "sql_key", "disabled", "Refreshed"]


def rebuild(store: Store, whole: bool) -> Refreshed | None:
    """After a repair: refresh (`whole` when rows were dropped) and remove orphaned files."""
    refreshed = refresh(store, whole=whole)
    remove_orphans(store)
    return refreshed
