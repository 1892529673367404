"""The exporter: servelens's metrics and scaling signals for Prometheus, autoscalers and Grafana.
This module holds the snapshot and its rendering; serve_http.py the HTTP endpoints,
serve_export.py the backfill file.

`servelens serve` answers `GET /metrics` (Prometheus text or OpenMetrics, by the scrape's
Accept header), `GET /api/signals` (the same values as JSON, for KEDA's metrics-api scaler)
and `GET /healthz`. Values come from a snapshot: the `metric_snapshot` view (sql/), evaluated
by a background thread after each commit to the store (it watches manifest.json) and at least
every `refresh_s` seconds. A scrape only renders that snapshot, so it answers in milliseconds
whatever the store's size; the views are never evaluated per scrape.

A refresh reads only the store's recent events (per instance, the last `lookback_s` seconds
before its newest event, copied into memory): the current window needs minutes of history,
not days.
`serve_export.export_openmetrics` writes the same series over a whole range with their
timestamps, for `promtool tsdb create-blocks-from openmetrics` (backfill for a post-mortem).
"""

from __future__ import annotations

import datetime as dt
import math
import multiprocessing
import os
import pickle
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.exposition import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from ..query import connect as query
from ..query.sandbox import Limits

DEFAULT_REFRESH_S = 5.0
DEFAULT_LOOKBACK_S = 900.0  # history a refresh reads: the current window plus long requests' arrivals
WORKER_THREADS = 0  # DuckDB threads of a refresh in the worker process (0: DuckDB's default)
WATCH_S = 0.25  # how often the refresher looks at manifest.json for a new commit
RETRY_S, MAX_RETRY_S = 1.0, 60.0  # a failed refresh is retried after 1 s, doubling to 60 s
BASE_LABELS = ("server", "engine", "model")

# name -> (help, extra label names); every series also has server, engine, model
SERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "servelens_requests_waiting": ("Requests waiting in the engine's queue (window average; queue_depth).", ()),
    "servelens_requests_running": ("Requests running in the batch (window average; batch_fill).", ()),
    "servelens_batch_fill_ratio": ("Running requests / max_num_seqs, 0..1 (window average; batch_fill).", ()),
    "servelens_kv_cache_usage_ratio": ("GPU KV-cache usage, 0..1 (window average; kv_cache).", ()),
    "servelens_requests_per_second": ("Finished requests per second over the window (throughput).", ()),
    "servelens_tokens_per_second": ("Generated tokens per second over the window (throughput).", ()),
    "servelens_errors_per_second": ("Errors per second over the window (errors).", ()),
    "servelens_preemptions": ("Preemptions in the window (kv_cache).", ()),
    "gen_ai_server_time_to_first_token_seconds": (
        "Time to first token of the requests finished in the window, by quantile (latency_percentiles: a benchmark "
        "client's exact figures where its results file names the request, else the log's).", ("quantile",)),
    "gen_ai_server_time_per_output_token_seconds": (
        "Time per output token of the requests finished in the window, by quantile (latency_percentiles: a benchmark "
        "client's exact figures where its results file names the request, else the log's).", ("quantile",)),
    "gen_ai_server_request_duration_seconds": (
        "End-to-end duration of the requests finished in the window, by quantile (latency_percentiles: a benchmark "
        "client's exact figures where its results file names the request, else the log's).", ("quantile",)),
    "servelens_signal_active": (
        "1 while a scaling signal's episode covers the window, else 0 (scaling_signals; "
        "autoscaler_scale_out: the preset's rule, autoscaler_decisions).", ("signal", "severity")),
    "servelens_newest_event_timestamp_seconds": ("Unix time of the instance's newest event in the store.", ()),
}
SCALE_OUT_SIGNALS = ("autoscaler_scale_out", "queue_backlog", "latency_slo_e2e", "latency_slo_ttft", "kv_pressure")
# a replica that queues while a sibling has room: more replicas behind the same routing would
# idle too, so it does not ask to scale out (docs/metrics.md, fleet_imbalance)
ROUTE_SIGNALS = ("fleet_imbalance",)
AGE_HELP = "Seconds since the instance's newest event (staleness of everything it reports)."

# the JSON field of /api/signals each series becomes
JSON_FIELDS = {
    "servelens_requests_waiting": "waiting",
    "servelens_requests_running": "running",
    "servelens_batch_fill_ratio": "batch_fill",
    "servelens_kv_cache_usage_ratio": "kv_usage",
    "servelens_requests_per_second": "requests_per_second",
    "servelens_tokens_per_second": "tokens_per_second",
    "servelens_errors_per_second": "errors_per_second",
    "servelens_preemptions": "preemptions",
}
LATENCY_FIELDS = {
    "gen_ai_server_time_to_first_token_seconds": "ttft",
    "gen_ai_server_time_per_output_token_seconds": "tpot",
    "gen_ai_server_request_duration_seconds": "e2e",
}


class ServeError(Exception):
    """The exporter cannot start or export; the message says what to do."""


@dataclass
class Snapshot:
    """One evaluation of metric_snapshot: what every scrape renders until the next one."""

    rows_blob: bytes = pickle.dumps([])  # the metric_snapshot rows, pickled (see `rows`)
    servers: list[dict[str, Any]] = field(default_factory=list)  # for /api/signals
    # the rows' families rendered once per refresh, per format ("text", "openmetrics"): a
    # scrape adds only the few series that change with the clock
    rendered: dict[str, bytes] = field(default_factory=dict)
    newest: list[tuple[list[str], float]] = field(default_factory=list)  # (label values, Unix s)
    built_at: float = 0.0  # time.time() when it was evaluated
    duration_s: float = 0.0
    error: str | None = None  # the last refresh's error (the previous values stay served)

    @property
    def rows(self) -> list[dict[str, Any]]:
        # kept pickled: receiving thousands of dicts from the worker would hold the GIL
        return pickle.loads(self.rows_blob)


class _Families:
    """A collector over snapshot rows: one family per series name."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for row in self.rows:
            name = row["name"]
            if name not in SERIES:
                continue
            fam = families.get(name)
            if fam is None:
                fam = families[name] = metric_family(name)
            fam.add_sample(name, series_labels(row), float(row["value"]))
        return families.values()


def servers_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The snapshot rows as one JSON-ready dict per server (for /api/signals), sorted."""
    servers: dict[str, dict[str, Any]] = {}
    for row in rows:
        s = servers.setdefault(row["instance"], {
            "server": row["instance"], "engine": row["engine"], "model": row["model"] or "",
            "window_start": None, "window_end": None, "signals": [], "scale_out": False, "route_better": False,
            "latency": {}, "newest_ts": None,
        })
        name, value = row["name"], row["value"]
        if name == "servelens_newest_event_timestamp_seconds":
            s["newest_ts"] = value
            continue
        if row.get("window_start") is not None and s["window_start"] is None:
            s["window_start"], s["window_end"] = iso_utc(epoch_seconds(row["window_start"])), iso_utc(epoch_seconds(row["window_end"]))
        if name in JSON_FIELDS:
            s[JSON_FIELDS[name]] = value
        elif name in LATENCY_FIELDS:
            q = {"0.5": "p50", "0.95": "p95", "0.99": "p99"}[row["quantile"]]
            key = f"{q}_{LATENCY_FIELDS[name]}_s"
            # several models on one server: the worst
            s["latency"][key] = max(value, s["latency"].get(key, value))
        elif name == "servelens_signal_active" and value > 0:
            s["signals"].append({"signal": row["signal"], "severity": row["severity"]})
            if row["signal"] in SCALE_OUT_SIGNALS:
                s["scale_out"] = True
            if row["signal"] in ROUTE_SIGNALS:
                s["route_better"] = True
    for s in servers.values():
        s["active_signals"] = len(s["signals"])
        s["scale_out"] = s["scale_out"] and not s["route_better"]
        s["action"] = "route better" if s["route_better"] else "scale out" if s["scale_out"] else None
    return sorted(servers.values(), key=lambda s: s["server"])


def prepare(rows: list[dict[str, Any]]) -> tuple:
    """What a refresh hands the exporter: the rows (pickled: only tests and tools unpickle
    them), the servers for /api/signals, the rendered families, the newest-event times."""
    return pickle.dumps(rows), servers_of(rows), render(rows), newest_of(rows)


def newest_of(rows: list[dict[str, Any]]) -> list[tuple[list[str], float]]:
    return [(list(series_labels(r).values()), float(r["value"])) for r in rows
            if r["name"] == "servelens_newest_event_timestamp_seconds"]


def _worker_main(conn: Any) -> None:
    """The worker process: evaluate each request (store, variables, lookback) and send back
    `prepare`'s tuple, or ("error", message)."""
    # Ctrl-C reaches the whole process group: the exporter stops its worker itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # scrapes come first: a refresh may take longer, a scrape must not wait for a CPU
    try:
        os.nice(10)
    except OSError:
        pass
    global WORKER_THREADS
    WORKER_THREADS = max(1, (os.cpu_count() or 2) - 1)
    while True:
        try:
            store, variables, lookback_s = conn.recv()
        except EOFError:  # the exporter is gone
            return
        try:
            conn.send(prepare(read_snapshot(store, variables, lookback_s)))
        except Exception as e:
            conn.send(("error", query.one_line(e)))


class _Worker:
    """One worker process that evaluates refreshes; started on first use, started again if it
    dies, killed by `close`."""

    def __init__(self) -> None:
        self._proc: Any = None
        self._conn: Any = None

    def _ensure(self) -> None:
        if self._proc is None or not self._proc.is_alive():
            ctx = multiprocessing.get_context("spawn")  # not fork: this process runs threads
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_worker_main, args=(child,), name="servelens-refresh", daemon=True)
            self._proc.start()
            child.close()

    def call(self, store: str, variables: Mapping[str, Any], lookback_s: float | None,
             stop: threading.Event) -> tuple:
        self._ensure()
        self._conn.send((store, dict(variables), lookback_s))
        while not self._conn.poll(0.2):  # waiting releases the GIL
            if stop.is_set():
                raise RuntimeError("exporter stopped")
            if not self._proc.is_alive():
                raise RuntimeError(f"the refresh worker died (exit code {self._proc.exitcode})")
        result = self._conn.recv()
        if len(result) == 2 and result[0] == "error":
            raise RuntimeError(result[1])
        return result

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)


def render(rows: list[dict[str, Any]]) -> dict[str, bytes]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(rows))
    return {"text": text_latest(registry), "openmetrics": openmetrics_latest(registry)}


def epoch_seconds(t: Any) -> float | None:
    if t is None:
        return None
    if isinstance(t, dt.datetime):
        return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()
    return float(t)


def metric_family(name: str) -> Metric:
    # precomputed quantiles are a summary (its quantile samples only: the window's request
    # count and sum are not cumulative counters, so no _count / _sum)
    return Metric(name, SERIES[name][0], "summary" if "quantile" in SERIES[name][1] else "gauge")


def series_labels(row: Mapping[str, Any]) -> dict[str, str]:
    labels = {"server": row["instance"], "engine": row["engine"], "model": row["model"] or ""}
    for extra in SERIES.get(row["name"], ("", ()))[1]:
        labels[extra] = str(row[extra] or "")
    return labels


def read_snapshot(store: Path | str, variables: Mapping[str, Any] | None = None,
                  lookback_s: float | None = DEFAULT_LOOKBACK_S,
                  on_connect: Callable[[Any], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate metric_snapshot over the store (its recent events only when `lookback_s`).
    `on_connect` receives the connection (so that a stopping exporter can interrupt it)."""
    # in the worker process: leave a core to the process answering scrapes (a connection's
    # settings are locked once it is made, so the thread count goes in with its limits)
    limits = Limits.from_env(threads=WORKER_THREADS) if WORKER_THREADS else None
    con = query.connect(store, dict(variables or {}), limits)
    if on_connect is not None:
        on_connect(con)
    try:
        if lookback_s is not None:
            # the views bind `events` by name when queried: pointing it at an in-memory copy of
            # each instance's recent events makes every view read only those. Per instance, so
            # that one whose logs stopped still shows its last values (and their age)
            con.execute(
                "create or replace temp table newest as "
                "select engine, instance, max(ts) - to_seconds(?) as since from events group by all",
                [float(lookback_s)])
            # the earliest cutoff as a constant: the Parquet scan skips row groups older than it
            cutoff = con.execute("select min(since) from newest").fetchone()[0]
            if cutoff is not None:
                con.execute(
                    "create or replace temp table recent_events as "
                    "select e.* from events as e join newest as n using (engine, instance) "
                    "where e.ts >= ?::timestamptz and e.ts >= n.since", [cutoff])
                con.execute("create or replace view events as select * from recent_events")
        _share(con, limits or Limits.from_env())
        return query.run_on(con, "select * from metric_snapshot").to_dicts()
    finally:
        con.close()


def _share(con: Any, limits: Limits) -> None:
    """Compute the views metric_snapshot reads through several others once, into tables (as a
    one-query connection does, pipeline/query/shared.py), now that `events` says what it
    reads: in load order, so each is computed over the tables of those beneath it."""
    from ..query.shared import materialise, to_share
    from ..query.views import closure, sql_files, view_name

    named = {"metric_snapshot"}
    sharing = to_share(named, closure(named), ())
    for name in (view_name(p) for p in sql_files()):
        if name in sharing:
            materialise(con, name, "main", limits)


def store_key(store: Path) -> tuple | None:
    """What changes when a commit lands: the manifest's identity and modification time."""
    try:
        st = os.stat(store / "manifest.json")
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class Exporter:
    """Holds the snapshot and refreshes it in a background thread; renders scrapes."""

    def __init__(self, store: Path | str, variables: Mapping[str, Any] | None = None, *,
                 refresh_s: float = DEFAULT_REFRESH_S, lookback_s: float | None = DEFAULT_LOOKBACK_S,
                 reader: Callable[..., list[dict[str, Any]]] = read_snapshot, isolate: bool | None = None):
        self.store = Path(store)
        self.variables = dict(variables or {})
        self.refresh_s = refresh_s
        self.lookback_s = lookback_s
        self.reader = reader
        self.snapshot = Snapshot()
        self.refreshes = 0
        self.refresh_errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen_key: tuple | None = None
        self._con: Any = None  # the connection of the refresh under way
        # once started, refresh in a worker process (the default with the default reader)
        self.isolate = reader is read_snapshot if isolate is None else isolate
        self._pool: Any = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- the snapshot ---------------------------------------------------------------------

    def refresh(self) -> Snapshot:
        """Evaluate the views now; on failure keep serving the previous rows."""
        self._seen_key = store_key(self.store)
        t0 = time.perf_counter()
        try:
            if self._pool is not None:
                prepared = self._evaluate_in_worker()
            else:
                prepared = prepare(self.reader(self.store, self.variables, self.lookback_s, self._connected))
        except Exception as e:  # a store being repaired, a part gone mid-read: say it, retry later
            self.refresh_errors += 1
            old = self.snapshot
            self.snapshot = Snapshot(old.rows_blob, old.servers, old.rendered, old.newest,
                                     old.built_at, time.perf_counter() - t0, query.one_line(e))
            return self.snapshot
        self.refreshes += 1
        self.snapshot = Snapshot(*prepared, time.time(), time.perf_counter() - t0, None)
        return self.snapshot

    def _evaluate_in_worker(self) -> tuple:
        return self._pool.call(str(self.store), self.variables, self.lookback_s, self._stop)

    def start(self) -> None:
        if self.isolate:
            # the views are evaluated in a worker process: their Python work (connecting,
            # converting, rendering) would otherwise hold the GIL for tens of ms at a time and
            # delay the scrapes this process answers
            self._pool = _Worker()
        self._thread = threading.Thread(target=self._run, name="servelens-exporter", daemon=True)
        self._thread.start()

    def _connected(self, con: Any) -> None:
        self._con = con
        if self._stop.is_set():  # stopped while connecting
            con.interrupt()

    def stop(self) -> None:
        """Stop the refresher, interrupting a refresh under way: DuckDB must not be inside a
        query when the interpreter exits."""
        self._stop.set()
        if self._pool is not None:
            self._pool.close()
        while self._thread is not None and self._thread.is_alive():
            # again and again: an interrupt between two statements of a refresh is lost
            con = self._con
            if con is not None:
                try:
                    con.interrupt()
                except Exception:  # already closed
                    pass
            self._thread.join(0.1)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        backoff = 0.0  # after a failed refresh: retry soon, then less often, not at refresh_s
        last = None
        while last is None or not self._stop.wait(WATCH_S):
            due = min(self.refresh_s, backoff) if backoff else self.refresh_s
            if last is None or store_key(self.store) != self._seen_key or time.monotonic() - last >= due:
                errors = self.refresh_errors
                self.refresh()
                last = time.monotonic()
                backoff = min(max(2 * backoff, RETRY_S), MAX_RETRY_S) if self.refresh_errors > errors else 0.0

    # -- rendering ------------------------------------------------------------------------

    def collect(self) -> Iterable[Metric]:
        """prometheus_client's collector protocol, for what changes with the clock: the ages
        and the exporter's own health (the snapshot's families are rendered at refresh)."""
        snap = self.snapshot
        now = time.time()
        ages = GaugeMetricFamily("servelens_newest_event_age_seconds", AGE_HELP, labels=BASE_LABELS)
        for labels, ts in snap.newest:
            ages.add_metric(labels, max(0.0, now - ts))
        yield ages
        yield GaugeMetricFamily("servelens_exporter_snapshot_age_seconds",
                                "Seconds since the snapshot was evaluated.",
                                value=now - snap.built_at if snap.built_at else math.nan)
        yield GaugeMetricFamily("servelens_exporter_refresh_duration_seconds",
                                "How long the last evaluation of the views took.", value=snap.duration_s)
        yield GaugeMetricFamily("servelens_exporter_refresh_errors",
                                "Evaluations that failed since the exporter started.", value=self.refresh_errors)

    def metrics(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition for a scrape's Accept header: (body, content type)."""
        encoder, content_type = choose_encoder(accept or "")
        live = encoder(self.registry)
        if content_type.startswith("application/openmetrics-text"):
            # one exposition: the snapshot's families, then the live ones and their # EOF
            static = self.snapshot.rendered.get("openmetrics", b"")
            if static.endswith(b"# EOF\n"):
                static = static[: -len(b"# EOF\n")]
            return static + live, content_type
        return self.snapshot.rendered.get("text", b"") + live, content_type

    def signals(self, server: str | None = None, max_age_s: float | None = None) -> dict[str, Any]:
        """The snapshot as JSON-ready data: per server, and totals across servers. With
        `max_age_s`, a server whose newest event is older (a crashed or silent instance still
        showing its last window) is listed with `stale: true` and left out of the totals."""
        snap = self.snapshot
        now = time.time()
        listed = []
        for one in snap.servers:
            one = dict(one)
            ts = one.pop("newest_ts", None)
            one["newest_event"] = iso_utc(ts)
            one["newest_event_age_s"] = round(max(0.0, now - ts), 3) if ts is not None else None
            listed.append(one)
        if server is not None:
            listed = [s for s in listed if s["server"] == server]
        for one in listed:
            age = one["newest_event_age_s"]
            one["stale"] = max_age_s is not None and (age is None or age > max_age_s)
        fresh = [s for s in listed if not s["stale"]]
        totals: dict[str, Any] = {"servers": len(fresh), "stale_servers": len(listed) - len(fresh),
                                  "scale_out": sum(1 for s in fresh if s["scale_out"]),
                                  "route_better": sum(1 for s in fresh if s.get("route_better"))}
        for key in ("waiting", "running", "requests_per_second", "tokens_per_second", "errors_per_second"):
            vals = [s[key] for s in fresh if s.get(key) is not None]
            totals[key] = sum(vals) if vals else None
        for key in ("waiting", "running", "kv_usage", "batch_fill"):
            vals = [s[key] for s in fresh if s.get(key) is not None]
            totals[f"max_{key}"] = max(vals) if vals else None
        out = {
            "snapshot_at": iso_utc(snap.built_at) if snap.built_at else None,
            "snapshot_age_s": round(now - snap.built_at, 3) if snap.built_at else None,
            "window_s": self.variables.get("window_s", 60.0),
            "preset": self.variables.get("autoscaler_preset", "none"),
            "error": snap.error,
            "totals": totals,
            "servers": listed,
        }
        if server is not None and listed:
            out.update({k: v for k, v in listed[0].items() if k not in ("server",)})
            out["server"] = server
        return out


def iso_utc(epoch_s: float | None) -> str | None:
    if epoch_s is None:
        return None
    return dt.datetime.fromtimestamp(epoch_s, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
