"""Ingest on one core and on two: the worker processes against the threads alone.

    python bench/workersbench.py DIR --runs 5        # DIR: a few large logs of different instances

Per run, alternating and each into a new store: `servelens ingest DIR --workers 1` pinned
to one core (taskset), the same on every core (the parse threads alone), and `--workers N`
(one per core) on every core. Wall and CPU seconds of the whole process tree (wait4), the
summed RSS of the tree (sampled every 50 ms: a worker's memory is its own), and the
load average. The events of the three stores are counted to show they agree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from measure import load_average, median  # noqa: E402


def servelens_bin() -> str:
    return str(Path(sys.executable).with_name("servelens"))


def tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants now."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(d))
            rss[int(d)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, ()))
    return total


def run(cmd: list[str]) -> dict:
    peak = [0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(proc.pid))
            done.wait(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    t.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss": peak[0], "load": load_average()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", type=Path)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    a = p.parse_args()
    exe = servelens_bin()
    base = [exe, "ingest", str(a.dir), "-q", "--no-rollups"]
    modes = {
        "one core, --workers 1": ["taskset", "-c", str(min(os.sched_getaffinity(0))), *base, "--workers", "1"],
        "all cores, --workers 1 (threads)": [*base, "--workers", "1"],
        f"all cores, --workers {a.workers}": [*base, "--workers", str(a.workers)],
    }
    res: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="workersbench-") as tmp:
        for i in range(a.runs):
            order = list(modes) if i % 2 == 0 else list(reversed(modes))
            for m in order:
                store = Path(tmp) / "store"
                shutil.rmtree(store, ignore_errors=True)
                r = run([*modes[m], "--store", str(store)])
                res[m].append(r)
                print(f"run {i + 1} {m}: {r['wall_s']:.2f} s, {r['cpu_s']:.2f} CPU-s, "
                      f"tree RSS {r['rss'] / 2**20:.0f} MiB, load {r['load']}", file=sys.stderr, flush=True)
    one = median([r["wall_s"] for r in res[next(iter(modes))]])
    print("| mode | wall s | CPU-s | speed-up over one core | peak RSS of the tree, MiB | runs (wall s) |")
    print("|---|---|---|---|---|---|")
    for m, rs in res.items():
        w = median([r["wall_s"] for r in rs])
        print(f"| {m} | {w:.2f} | {median([r['cpu_s'] for r in rs]):.2f} | {one / w:.2f}x | "
              f"{max(r['rss'] for r in rs) / 2**20:.0f} | {', '.join('%.2f' % r['wall_s'] for r in rs)} |")


if __name__ == "__main__":
    main()
