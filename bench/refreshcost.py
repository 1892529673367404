"""What the rollup refresh adds to `servelens ingest`: CPU seconds (user + sys of the whole
process) of `servelens ingest LOG -q --json` with and without `--no-rollups`, runs
interleaved, medians; the refresh's own CPU as the process measured it (`rollup.cpu_s` in the
JSON summary); and, with --other PATH, the same for another checkout (a same-run baseline).

    python bench/refreshcost.py LOGDIR... [--reps 3] [--other /path/to/pkgroot] [--defer]

--defer: also `ingest --defer-rollups` (this checkout), then the first `servelens sql` reading
a stored view (it runs the deferred refresh) and a second one (it reads the rollups), CPU each.

--other is a directory holding `servelens/` (its parsers, pipeline and sql folders): the
package is taken from there instead of this checkout (PYTHONPATH), with this venv.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MAIN = "from servelens.pipeline.cli.app import main; main()"


def cpu_of(cmd: list[str], env: dict[str, str]) -> tuple[float, dict]:
    """CPU seconds of the child (user + sys), and its JSON summary."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(r.stdout)


def measure(log: Path, pythonpath: str | None, reps: int, tmp: Path) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    plain, full, refresh = [], [], []
    for k in range(reps):
        for rollups in (False, True):
            store = tmp / f"store-{k}-{rollups}"
            shutil.rmtree(store, ignore_errors=True)
            cmd = [sys.executable, "-c", MAIN, "ingest", str(log), "--store", str(store), "-q", "--json"]
            # (the refresh asked for: `servelens ingest` leaves it to the first query by default)
            cpu, summary = cpu_of(cmd + (["--refresh-rollups"] if rollups else ["--no-rollups"]), env)
            (full if rollups else plain).append(cpu)
            if rollups:
                r = summary.get("rollup") or {}
                refresh.append(r.get("cpu_s"))
            shutil.rmtree(store, ignore_errors=True)
    a, b = statistics.median(plain), statistics.median(full)
    own = [x for x in refresh if x is not None]
    return {"no_rollups_cpu": a, "ingest_cpu": b, "difference": b - a,
            "refresh_cpu": statistics.median(own) if own else None, "runs": {"plain": plain, "full": full}}


QUERY = "select count(*) as windows, sum(arrived) as arrived from window_metrics"


def measure_deferred(log: Path, reps: int, tmp: Path) -> dict:
    env = dict(os.environ)
    ingests, firsts, seconds = [], [], []
    for k in range(reps):
        store = tmp / f"deferred-{k}"
        shutil.rmtree(store, ignore_errors=True)
        cpu, _ = cpu_of([sys.executable, "-c", MAIN, "ingest", str(log), "--store", str(store), "-q", "--json",
                         "--defer-rollups"], env)
        ingests.append(cpu)
        for out in (firsts, seconds):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = subprocess.run([sys.executable, "-c", MAIN, "sql", QUERY, "--store", str(store), "-f", "csv"],
                               env=env, capture_output=True, text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if r.returncode != 0:
                raise SystemExit(f"sql failed: {r.stderr.strip()[-500:]}")
            out.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        shutil.rmtree(store, ignore_errors=True)
    return {"ingest_cpu": statistics.median(ingests), "first_query_cpu": statistics.median(firsts),
            "next_query_cpu": statistics.median(seconds)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", type=Path)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--other", help="a package root to measure too (same run)")
    p.add_argument("--defer", action="store_true", help="also ingest --defer-rollups and the first queries after it")
    a = p.parse_args(argv)
    rows, deferred = [], []
    with tempfile.TemporaryDirectory(prefix="servelens-refreshcost-") as t:
        for log in a.logs:
            mb = sum(f.stat().st_size for f in log.rglob("*.log")) / 1e6 if log.is_dir() else log.stat().st_size / 1e6
            for name, pp in ([("other", a.other)] if a.other else []) + [("this", None)]:
                m = measure(log, pp, a.reps, Path(t))
                own = m["refresh_cpu"]
                # the refresh (all it adds to the process: its imports too) against the ingest
                # it follows, whose own CPU is the run without it
                share = m["difference"] / m["no_rollups_cpu"]
                rows.append((log.name, mb, name, m, share))
                print(f"{log.name} ({mb:,.1f} MB) {name}: ingest --no-rollups {m['no_rollups_cpu']:.2f} CPU-s, "
                      f"ingest {m['ingest_cpu']:.2f} CPU-s (difference {m['difference']:.2f}); refresh as measured "
                      f"in the process {own if own is None else round(own, 2)} CPU-s = {100 * share:.0f}% of the ingest",
                      flush=True)
            if a.defer and pp is None:
                d = measure_deferred(log, a.reps, Path(t))
                share = (d["ingest_cpu"] - m["no_rollups_cpu"]) / m["no_rollups_cpu"]
                deferred.append((log.name, mb, d, share))
                print(f"{log.name} ({mb:,.1f} MB) this, --defer-rollups: ingest {d['ingest_cpu']:.2f} CPU-s "
                      f"({100 * share:+.0f}% against --no-rollups); first query {d['first_query_cpu']:.2f} CPU-s "
                      f"(refreshes), the next {d['next_query_cpu']:.2f}", flush=True)
    print("\n| log | code | ingest --no-rollups | ingest | difference | refresh (in-process) | refresh / ingest |")
    print("|---|---|---|---|---|---|---|")
    for name, mb, code, m, share in rows:
        own = "-" if m["refresh_cpu"] is None else f"{m['refresh_cpu']:.2f}"
        print(f"| {name} ({mb:,.1f} MB) | {code} | {m['no_rollups_cpu']:.2f} | {m['ingest_cpu']:.2f} | "
              f"{m['difference']:.2f} | {own} | {100 * share:.0f}% |")

    if deferred:
        print("\n| log | ingest --defer-rollups | against --no-rollups | first query (runs the refresh) | next query |")
        print("|---|---|---|---|---|")
        for name, mb, d, share in deferred:
            print(f"| {name} ({mb:,.1f} MB) | {d['ingest_cpu']:.2f} | {100 * share:+.0f}% | {d['first_query_cpu']:.2f} | "
                  f"{d['next_query_cpu']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
