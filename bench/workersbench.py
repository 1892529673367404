"""Ingest on one core and on two: the worker processes against the threads alone.

    python bench/workersbench.py DIR --runs 5        # DIR: a few large logs of different instances
    python bench/workersbench.py DIR --baseline main # also --workers N as of another commit

Per run, alternating and each into a new store: `servelens ingest DIR --workers 1` pinned
to one core (taskset), the same on every core (the parse threads alone), and `--workers N`
(one per core) on every core. Wall and CPU seconds of the whole process tree (wait4), the
summed RSS of the tree (measure.run_cmd: a worker's memory is its own), and the
load average. With --baseline, `--workers N` of that commit's servelens (its tree from `git
archive`, run by this interpreter) is run in the same rounds.
"""

from __future__ import annotations

import argparse
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


def run(cmd: list[str], env: dict | None = None) -> dict:
    r = run_cmd(cmd, env=env)
    return {"wall_s": r.wall_s, "cpu_s": r.cpu_s, "rss": r.peak_rss_bytes, "load": load_average()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", type=Path)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--baseline", default=None, metavar="REV", help="also run --workers N as of this commit")
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
                r = run([*modes[m], "--store", str(store)], envs[m])
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
