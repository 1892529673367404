"""Measuring: wall time and peak memory of a child process, the read-only floor, medians,
and what machine the figures come from."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Run:
    wall_s: float
    peak_rss_bytes: int
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float = 0.0  # the child's user + system CPU seconds (all its threads; wait4 rusage)


class TimedOut(Exception):
    pass


def run_cmd(cmd: list[str], *, cwd: Path | None = None, env: dict | None = None,
            check: bool = True, timeout: float | None = None) -> Run:
    """Run `cmd` to completion; wall time and the child's peak RSS: its own (wait4 rusage,
    so the figure is this child's and not a running maximum over earlier children), or the
    sum over it and its worker processes where that was larger (sampled). Past `timeout`
    seconds the child is killed and TimedOut raised."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd, env=env)
        tree = TreeRss(proc.pid)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG if timeout else 0)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                os.wait4(proc.pid, 0)
                tree.stop()
                proc.returncode = -9
                raise TimedOut(f"{' '.join(map(str, cmd[:4]))} ... still running after {timeout:.0f} s")
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        tree.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        # a child's worker processes hold their own memory: their sum, when larger
        run = Run(wall, max(usage.ru_maxrss * 1024, tree.peak), proc.returncode,
                  out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                  usage.ru_utime + usage.ru_stime)
    if check and run.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({run.returncode}): {run.stderr[-2000:]}")
    return run


def tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants now (/proc; 0 where there is none)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for d in entries:
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(d))
            rss[int(d)] = int(fields[21]) * page
        except (OSError, ValueError, IndexError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, ()))
    return total


class TreeRss:
    """The peak of a process tree's summed RSS, sampled every 50 ms on a thread."""

    def __init__(self, pid: int):
        self.pid, self.peak = pid, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self._done.wait(0.05)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def count_newlines(paths: list[Path], block: int = 8 * 1024 * 1024) -> int:
    """The Python floor: buffered reads of the same bytes, counting b"\\n", nothing parsed."""
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(block)
                if not b:
                    break
                n += b.count(b"\n")
    return n


def machine() -> dict:
    info = {
        "cores": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gb"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    for mod in ("polars", "duckdb", "pyarrow", "numpy"):
        try:
            info[mod] = __import__(mod).__version__
        except ImportError:
            info[mod] = "-"
    try:
        from importlib.metadata import version

        info["servelens"] = version("servelens")
    except Exception:  # noqa: BLE001 - a version string is optional
        info["servelens"] = "-"
    try:
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).resolve().parent, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["commit"] = "-"
    return info


def load_average() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "-"
