"""Rollups (pipeline/query/rollups.py) on the benchmark's query store: what they save and cost.

    python bench/rollupbench.py [--requests N] [--size-gb G] [--runs R] [--data-dir DIR]

1. builds (or reuses) run.py's query store: the TGI input ingested once, then copies of its
   events under new instance names until N requests (default 10M);
2. a whole rebuild of the rollup over the store (what `repair` or the first refresh does;
   the refresh at the end of an ingest recomputes the instances it touched: at most this);
3. a tail-like commit of 1,000 events of one instance, then the refresh the tailer runs
   (that one instance recomputed whole);
4. scaling_signals and window_metrics, rollup path then raw path, in the same fresh process
   (querytime.py --both), R runs each, wall and CPU seconds, and whether the rows agree.
Prints JSON; the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=float, default=10_000_000)
    p.add_argument("--size-gb", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--views", default="scaling_signals,window_metrics")
    p.add_argument("--store", type=Path, default=None, help="measure this store instead of building run.py's")
    b = p.parse_args(argv)
    import run as bench_run

    a = bench_run.parse_args(["--only", "query", "--requests", str(b.requests), "--size-gb", str(b.size_gb),
                              "--data-dir", str(b.data_dir)])
    import polars as pl

    from servelens.pipeline.query import rollups as rollup
    from servelens.pipeline.query.connect import run as query
    from servelens.pipeline.store.commit import Store

    res: dict = {"load_before": Path("/proc/loadavg").read_text().split()[:3]}
    store = b.store or a.data_dir / "stores" / "query"
    if b.store is None:
        t0 = time.perf_counter()
        res["store"] = bench_run.build_query_store(a, store)
        res["store"]["build_s"] = time.perf_counter() - t0
    res["requests"] = int(query(store, "select count(*) as n from events where event = 'request'", rollups=False)["n"][0])
    with Store.open(store, purpose="rollup bench") as st:
        whole = rollup.refresh(st, whole=True)
        res["whole_refresh"] = {"wall_s": whole.seconds, "cpu_s": whole.cpu_s, "rows": whole.rows, "instances": whole.instances, "views": whole.views}
        print(f"whole rebuild: {whole.seconds:.2f} s wall, {whole.cpu_s:.2f} CPU-s, {whole.rows:,} rows", file=sys.stderr)
        # a tail commit: the last 1,000 events of one instance again, a minute later
        ev = query(store, "select * from events where instance = (select min(instance) from events) "
                          "order by ts desc limit 1000", rollups=False)
        ev = ev.with_columns(pl.col("ts") + pl.duration(minutes=1), pl.col("line") + 10_000_000)
        st.commit_events([ev], {})
        inc = rollup.refresh(st)
        res["tail_refresh"] = {"wall_s": inc.seconds, "cpu_s": inc.cpu_s, "instances": inc.instances, "whole": inc.whole}
        print(f"one-instance refresh: {inc.seconds:.2f} s wall, {inc.cpu_s:.2f} CPU-s", file=sys.stderr)
    res["views"] = {}
    for view in b.views.split(","):
        r = subprocess.run([sys.executable, str(HERE / "querytime.py"), str(store), view, str(b.runs), "--both"],
                           capture_output=True, text=True, check=True)
        out = json.loads(r.stdout)
        res["views"][view] = {k: ({"median_s": median(v["times"]), "median_cpu_s": median(v["cpu"]),
                                   "times": v["times"], "cpu": v["cpu"], "rows": v["rows"]} if isinstance(v, dict) else v)
                              for k, v in out.items()}
        print(f"{view}: rollup {median(out['rollup']['times']):.2f} s, raw {median(out['raw']['times']):.2f} s, "
              f"same rows: {out['same_rows']}", file=sys.stderr)
    # end to end, as a user runs it (binds only the views the query reads)
    exe = str(Path(sys.executable).parent / "servelens")
    for view in b.views.split(","):
        for label, extra in (("rollup", []), ("raw", ["--no-rollups"])):
            t0 = time.perf_counter()
            r = subprocess.run([exe, "sql", f"select * from {view}", "--store", str(store), "-f", "csv", "-o", "/dev/null",
                                "--timeout", "0", *extra], capture_output=True, text=True)
            res["views"][view][f"cli_{label}_s"] = time.perf_counter() - t0
            print(f"CLI {view} {label}: {time.perf_counter() - t0:.2f} s (exit {r.returncode})", file=sys.stderr)
    res["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
