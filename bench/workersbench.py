"""Ingest on one core and on two: the worker processes against the threads alone.

    python bench/workersbench.py DIR --runs 5        # DIR: a few large logs of different instances
    python bench/workersbench.py DIR --baseline main # also --workers N as of another commit

Per run, alternating and each into a new store: `servelens ingest DIR --workers 1` pinned
to one core (taskset), the same on every core (the parse threads alone), and `--workers N`
(one per core) on every core. Wall and CPU seconds of the whole process tree (wait4), the
summed RSS of the tree (measure.run_cmd: a worker's memory is its own), and the
load average. With --baseline, `--workers N` of that commit's servelens (its tree from `git
archive`, run by this interpreter) is run in the same rounds.

With --timeline, each process of the tree also says (a sitecustomize on PYTHONPATH, nothing
in servelens itself) its CPU seconds and when it read each file, and the table gets the
parts of Amdahl's law: the ingesting process's CPU and the workers', the serial part (this
process's CPU before the first file is read and after the last read ends, the worker's
files committed included; its interpreter's teardown, which no hook sees, counted from the
tree's total), the CPU per file read, and the speed-up that serial part allows on 2, 4, 8
and 16 cores with one file a core (wall = serial + parallel x contention / readers, the
contention measured as the CPU per file against one core's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from lnav import baseline_tree  # noqa: E402
from measure import load_average, median, run_cmd  # noqa: E402


def servelens_bin() -> str:
    return str(Path(sys.executable).with_name("servelens"))


# The timeline's hook, imported by every interpreter of the tree: wraps the ingest's file
# reads once its module is imported, and writes each process's record when it exits (a worker
# leaves by os._exit, which skips atexit).
SITECUSTOMIZE = r'''
import atexit, importlib.abc, importlib.util, json, os, resource, sys, time
_OUT = os.environ.get("WORKERSBENCH_TIMELINE")
_READS = []
_ARGV = " ".join(getattr(sys, "orig_argv", ()))


def _started():
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    return time.time() - up + ticks / os.sysconf("SC_CLK_TCK")


def _dump():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    role = "worker" if "spawn_main" in _ARGV else "helper" if "resource_tracker" in _ARGV else "parent"
    rec = {"pid": os.getpid(), "role": role, "start": _START, "end": time.time(),
           "cpu": ru.ru_utime + ru.ru_stime, "reads": _READS}
    with open(_OUT, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _timed(fn, kind):
    import functools

    @functools.wraps(fn)
    def timed(*a, **k):
        t0, c0 = time.time(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            _READS.append((kind, t0, time.time(), c0, time.process_time()))
    return timed


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "servelens.pipeline.ingest":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                module._read_file = _timed(module._read_file, "read")
                module._commit_read = _timed(module._commit_read, "commit")
            spec.loader.exec_module = exec_module
        return spec


if _OUT:
    _START = _started()
    _exit = os._exit

    def _exit_now(code):
        _dump()
        _exit(code)
    os._exit = _exit_now
    atexit.register(_dump)
    sys.meta_path.insert(0, _Hook())
'''


def run(cmd: list[str], env: dict | None = None, timeline: Path | None = None) -> dict:
    if timeline is not None:
        env = dict(env or os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(timeline.parent), env.get("PYTHONPATH")) if p)
        env["WORKERSBENCH_TIMELINE"] = str(timeline)
        timeline.unlink(missing_ok=True)
    r = run_cmd(cmd, env=env)
    out = {"wall_s": r.wall_s, "cpu_s": r.cpu_s, "rss": r.peak_rss_bytes, "load": load_average()}
    if timeline is not None:
        out.update(parts(r.cpu_s, [json.loads(line) for line in timeline.read_text().splitlines()]))
        out["serial_end_s"] = r.wall_s - out.pop("last_read_end_s")
    return out


def parts(tree_cpu: float, procs: list[dict]) -> dict:
    """Amdahl's parts of one run from its processes' records: the ingesting process's CPU
    (the tree's, less every other process's), the workers', the serial CPU (the ingesting
    process's before the first file read starts and after the last read ends, anywhere),
    the CPU and count of the file reads."""
    parent = next(p for p in procs if p["role"] == "parent")
    others = sum(p["cpu"] for p in procs if p is not parent)
    parent_cpu = tree_cpu - others
    reads = [(p, r) for p in procs for r in p["reads"] if r[0] == "read"]
    mine = [r for p, r in reads if p is parent]
    first = min(r[1] for _, r in reads)
    last = max(r[2] for _, r in reads)
    # this process's CPU at those moments: at its own first read's start, and at its last
    # read's end plus what it did after while the others still read (their commits)
    before = min(mine, key=lambda r: r[1])[3] if mine else parent_cpu
    end_mine = max(mine, key=lambda r: r[2]) if mine else None
    after = parent_cpu - end_mine[4] if end_mine else 0.0
    if end_mine is not None and end_mine[2] < last:
        # what it committed of the others' files while they still read ran beside them
        beside = sum(r[4] - r[3] for r in parent["reads"] if r[0] == "commit" and r[1] < last)
        after -= beside
    return {"parent_cpu": parent_cpu, "workers_cpu": sum(p["cpu"] for p in procs if p["role"] == "worker"),
            "serial_cpu": before + after, "serial_start_s": first - parent["start"], "last_read_end_s": last - parent["start"],
            "read_cpu": sum(r[4] - r[3] for _, r in reads), "files": len(reads)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", type=Path)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--baseline", default=None, metavar="REV", help="also run --workers N as of this commit")
    p.add_argument("--timeline", action="store_true", help="each process's CPU and reads: the serial part, a model for more cores")
    a = p.parse_args()
    exe = servelens_bin()
    args = ["ingest", str(a.dir), "-q", "--no-rollups"]
    base = [exe, *args]
    modes = {
        "one core, --workers 1": ["taskset", "-c", str(min(os.sched_getaffinity(0))), *base, "--workers", "1"],
        "all cores, --workers 1 (threads)": [*base, "--workers", "1"],
        f"all cores, --workers {a.workers}": [*base, "--workers", str(a.workers)],
    }
    envs: dict[str, dict | None] = {m: None for m in modes}
    res: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="workersbench-") as tmp:
        timeline = None
        if a.timeline:
            (Path(tmp) / "hook").mkdir()
            (Path(tmp) / "hook" / "sitecustomize.py").write_text(SITECUSTOMIZE)
            timeline = Path(tmp) / "hook" / "timeline.jsonl"
        if a.baseline:
            m = f"all cores, --workers {a.workers}, at {a.baseline}"
            code = "from servelens.pipeline.cli.app import main; main()"
            modes[m] = [sys.executable, "-c", code, *args, "--workers", str(a.workers)]
            envs[m] = {**os.environ, "PYTHONPATH": str(baseline_tree(a.baseline, Path(tmp)))}
            res[m] = []
        for i in range(a.runs):
            order = list(modes) if i % 2 == 0 else list(reversed(modes))
            for m in order:
                store = Path(tmp) / "store"
                shutil.rmtree(store, ignore_errors=True)
                r = run([*modes[m], "--store", str(store)], envs[m], timeline)
                res[m].append(r)
                more = (f", this process {r['parent_cpu']:.2f} CPU-s (serial {r['serial_cpu']:.2f}, reading from "
                        f"{r['serial_start_s']:.2f} s to {r['serial_end_s']:.2f} s before the end), workers "
                        f"{r['workers_cpu']:.2f}, {r['files']} reads "
                        f"{r['read_cpu']:.2f}") if timeline else ""
                print(f"run {i + 1} {m}: {r['wall_s']:.2f} s, {r['cpu_s']:.2f} CPU-s{more}, "
                      f"tree RSS {r['rss'] / 2**20:.0f} MiB, load {r['load']}", file=sys.stderr, flush=True)
    one = median([r["wall_s"] for r in res[next(iter(modes))]])
    print("| mode | wall s | CPU-s | speed-up over one core | peak RSS of the tree, MiB | runs (wall s) |")
    print("|---|---|---|---|---|---|")
    for m, rs in res.items():
        w = median([r["wall_s"] for r in rs])
        print(f"| {m} | {w:.2f} | {median([r['cpu_s'] for r in rs]):.2f} | {one / w:.2f}x | "
              f"{max(r['rss'] for r in rs) / 2**20:.0f} | {', '.join('%.2f' % r['wall_s'] for r in rs)} |")
    if a.timeline:
        model(res, next(iter(modes)))


def model(res: dict[str, list[dict]], one_core: str) -> None:
    """Amdahl's parts per mode (medians), and the speed-up they allow on more cores: one core's
    CPU W = s + p (s serial, p the file reads and what runs beside them); on N cores with at
    least N files of about equal size, wall = s + p x k / N, k the CPU per file read against
    one core's (two busy readers' contention; assumed to stay at two readers' figure)."""
    print()
    print("| mode | this process CPU-s | workers CPU-s | serial CPU-s | serial share | serial wall s (start + end) "
          "| CPU-s per file read | contention k |")
    print("|---|---|---|---|---|---|---|---|")
    base = median([r["read_cpu"] / r["files"] for r in res[one_core]])
    for m, rs in res.items():
        w, s = median([r["cpu_s"] for r in rs]), median([r["serial_cpu"] for r in rs])
        per = median([r["read_cpu"] / r["files"] for r in rs])
        print(f"| {m} | {median([r['parent_cpu'] for r in rs]):.2f} | {median([r['workers_cpu'] for r in rs]):.2f} | "
              f"{s:.2f} | {s / w:.1%} | {median([r['serial_start_s'] for r in rs]):.2f} + "
              f"{median([r['serial_end_s'] for r in rs]):.2f} | {per:.2f} | {per / base:.2f} |")
    w1 = median([r["cpu_s"] for r in res[one_core]])
    s1 = median([r["serial_cpu"] for r in res[one_core]])
    ks = [median([r["read_cpu"] / r["files"] for r in rs]) / base for m, rs in res.items() if "--workers 1" not in m]
    k = ks[0] if ks else 1.0
    cores = (2, 4, 8, 16)
    print()
    print(f"Model (one core: {w1:.2f} CPU-s, serial {s1:.2f}; contention k = {k:.2f}): speed-up on N cores, "
          "N files or more of equal size")
    print("| | " + " | ".join(f"{n} cores" for n in cores) + " |")
    print("|---|" + "---|" * len(cores))
    for label, kk in (("k = 1 (no contention)", 1.0), (f"k = {k:.2f} (measured)", k)):
        print(f"| {label} | " + " | ".join(f"{w1 / (s1 + (w1 - s1) * kk / n):.2f}x" for n in cores) + " |")


if __name__ == "__main__":
    main()
