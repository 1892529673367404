"""The tailer under load: `servelens tail` follows a file while a writer appends to it.

Phases over one `servelens tail` process:
0. (optional) the same at a low rate the tailer keeps up with: freshness when not behind.
1. steady: the writer appends real log lines at a fixed rate (the target rate by default)
   in small batches, every TICK_S; each batch's append time and cumulative line count are
   recorded. A poller reads the store's manifest (the commit point: a reader that starts
   after the manifest names the lines sees them) every POLL_S. Freshness of a batch = the
   first poll that shows it committed minus its append time.
2. burst: a large block is appended at once; the tailer's sustained rate is lines / time
   until all of it is committed (the writer is never the bottleneck).
Finally a DuckDB count over the store checks that every line became exactly one event.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TICK_S = 0.05
POLL_S = 0.02


@dataclass
class TailResult:
    rate_target: float
    steady_lines: int = 0
    steady_rate: float = 0.0  # lines/s committed during the steady phase
    fresh_p50: float = float("nan")
    fresh_p99: float = float("nan")
    fresh_max: float = float("nan")
    burst_lines: int = 0
    burst_rate: float = 0.0
    low_rate: float = 0.0  # the first phase's offered rate (0: not run)
    low_lines: int = 0
    low_committed_rate: float = 0.0
    low_p50: float = float("nan")
    low_p99: float = float("nan")
    events: int = 0
    peak_rss_bytes: int = 0  # of the tail process (VmHWM: the fork from this big process is not counted)
    cpu_s: float = 0.0  # user + system seconds of the tail process, all phases
    cpu_per_100k: float = 0.0  # cpu_s per 100,000 lines written
    notes: list[str] = field(default_factory=list)


def _committed_lines(manifest: Path, name: str) -> int:
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return -1
    best = 0
    for entry in data.get("files", {}).values():
        if str(entry.get("source", "")).endswith(name):
            best = max(best, int(entry.get("lines", 0)))
    return best


class Poller(threading.Thread):
    def __init__(self, manifest: Path, name: str):
        super().__init__(daemon=True)
        self.manifest, self.name = manifest, name
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), _committed_lines(self.manifest, self.name)))
            time.sleep(POLL_S)

    def wait_for(self, lines: int, timeout: float) -> float | None:
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            for t, n in reversed(self.samples[-5:]):
                if n >= lines:
                    return t
            time.sleep(POLL_S)
        return None


def _peak_rss(pid: int) -> int:
    """Peak resident memory of the process since it exec'd (0 when /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _source_lines(paths: list[Path], need: int) -> list[bytes]:
    out: list[bytes] = []
    for p in paths:
        with open(p, "rb") as f:
            for line in f:
                out.append(line)
                if len(out) >= need:
                    return out
    return out


def run_tail_bench(servelens: str, source_files: list[Path], work: Path, *, rate: float = 50_000,
                   seconds: float = 20.0, burst_lines: int = 1_000_000, flush_interval: float | None = None,
                   low_rate: float = 0.0) -> TailResult:
    work.mkdir(parents=True, exist_ok=True)
    logdir, store = work / "logs", work / "store"
    for d in (logdir, store):
        if d.exists():
            import shutil

            shutil.rmtree(d)
    logdir.mkdir(parents=True)
    res = TailResult(rate_target=rate)
    per_tick = max(1, int(rate * TICK_S))
    n_ticks = int(seconds / TICK_S)
    need = int((rate + low_rate) * seconds) + burst_lines + per_tick
    pool = _source_lines(source_files, need)
    if len(pool) < need:
        res.notes.append(f"only {len(pool)} source lines available")
    target = logdir / "tgi-live.log"
    # the file exists (with its first lines) before the tailer starts, so detection is immediate
    head = pool[:per_tick]
    target.write_bytes(b"".join(head))
    written = len(head)
    cmd = [servelens, "tail", str(logdir), "--store", str(store), "--engine", "tgi", "-q"]
    if flush_interval is not None:
        cmd += ["--flush-interval", str(flush_interval)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    poller = Poller(store / "manifest.json", target.name)
    poller.start()
    try:
        if poller.wait_for(written, 60.0) is None:
            res.notes.append("tailer never committed the first lines")
            return res
        def steady(rate_: float) -> tuple[int, float, float, float, float]:
            """Append at `rate_` for `seconds`; (lines, committed rate, p50, p99, max)."""
            nonlocal written
            per = max(1, int(rate_ * TICK_S))
            marks: list[tuple[float, int]] = []
            first = written
            t_start = time.perf_counter()
            with open(target, "ab", buffering=0) as f:
                for k in range(n_ticks):
                    due = t_start + k * TICK_S
                    pause = due - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                    chunk = pool[written:written + per]
                    if not chunk:
                        break
                    f.write(b"".join(chunk))
                    written += len(chunk)
                    marks.append((time.perf_counter(), written))
            t_write_end = time.perf_counter()
            done = poller.wait_for(written, 120.0)
            if done is None:
                res.notes.append(f"the {rate_:,.0f} lines/s phase was not fully committed within 120 s")
                done = time.perf_counter()
            samples = list(poller.samples)
            ts = np.array([t for t, _ in samples])
            ns = np.array([n for _, n in samples])
            fresh = []
            for t_app, n_app in marks:
                idx = np.flatnonzero((ts >= t_app) & (ns >= n_app))
                fresh.append((ts[idx[0]] - t_app) if len(idx) else np.nan)
            fr = np.array(fresh, dtype=float)
            fr = fr[~np.isnan(fr)]
            q = (float(np.percentile(fr, 50)), float(np.percentile(fr, 99)), float(fr.max())) if len(fr) else (
                float("nan"),) * 3
            lines = written - first
            return (lines, lines / max(done - t_start, t_write_end - t_start), *q)

        # phase 0: a rate the tailer keeps up with (freshness when it is not behind)
        if low_rate:
            (res.low_lines, res.low_committed_rate, res.low_p50, res.low_p99, _) = steady(low_rate)
            res.low_rate = low_rate
        # phase 1: the target rate
        (res.steady_lines, res.steady_rate, res.fresh_p50, res.fresh_p99, res.fresh_max) = steady(rate)
        # phase 2: burst
        chunk = pool[written:written + burst_lines]
        if chunk:
            t0 = time.perf_counter()
            with open(target, "ab") as f:
                f.write(b"".join(chunk))
            written += len(chunk)
            t_done = poller.wait_for(written, 600.0)
            if t_done is None:
                res.notes.append("burst not committed within 600 s")
            else:
                res.burst_lines = len(chunk)
                res.burst_rate = len(chunk) / (t_done - t0)
    finally:
        poller.stop.set()
        hwm = _peak_rss(proc.pid)
        proc.send_signal(signal.SIGINT)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            # ru_maxrss counts the forked copy of this process (its line pool) before exec
            res.peak_rss_bytes = hwm or usage.ru_maxrss * 1024
            res.cpu_s = usage.ru_utime + usage.ru_stime
            res.cpu_per_100k = res.cpu_s / max(written, 1) * 100_000
            res.notes.append(f"tail process CPU {res.cpu_s:.1f} s user+sys, {res.cpu_per_100k:.2f} s per 100k lines")
        except ChildProcessError:
            pass
        if proc.stderr is not None:
            err = proc.stderr.read().decode(errors="replace").strip()
            proc.stderr.close()
            if err and proc.returncode not in (0, -signal.SIGINT, 130):
                res.notes.append(f"tail exited {proc.returncode}: " + err.splitlines()[-1][:200])
    try:
        from servelens.pipeline.query.connect import run as query

        res.events = int(query(store, "select count(*) as n from events")["n"][0])
        if res.events != written:
            res.notes.append(f"store holds {res.events} events for {written} lines written")
    except Exception as e:  # noqa: BLE001 - the figure is optional, the note says why
        res.notes.append(f"count query failed: {e}")
    return res
