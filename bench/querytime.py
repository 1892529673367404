"""Time one metric view over a store, in a fresh process (run by run.py under a timeout so
that a slow view cannot stall the benchmark).

    python bench/querytime.py STORE VIEW RUNS [--no-rollups | --both]

Prints JSON: seconds per run (connect + the whole view fetched as Arrow), the CPU seconds of
each run (all threads: on a shared machine the steadier figure) and rows.
`--no-rollups`: window_metrics computed from the events even when the store's rollup is
fresh (pipeline/query/rollups.py). `--both`: each run times the rollup path, then the raw path, in
the same process; prints {"rollup": {...}, "raw": {...}, "same_rows": bool}.
"""

from __future__ import annotations

import json
import sys
import time

from servelens.pipeline.query.connect import connect


def once(store: str, view: str, rollups: bool) -> tuple[float, float, int, int]:
    t0, c0 = time.perf_counter(), time.process_time()
    con = connect(store, rollups=rollups)
    table = con.sql(f"select * from {view}").to_arrow_table()
    con.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # a fingerprint of the rows, order-free: the two paths must agree
    import polars as pl

    df = pl.from_arrow(table)
    # floats to 9 significant digits: DuckDB may sum a window's values in another order
    df = df.with_columns(pl.col(pl.Float64).map_batches(lambda s: s.round_sig_figs(9)))
    digest = int(df.hash_rows().sum()) if df.height else 0
    return wall, cpu, table.num_rows, digest


def main(argv: list[str]) -> None:
    store, view, runs = argv[0], argv[1], int(argv[2])
    flags = set(argv[3:])
    paths = {"rollup": True, "raw": False} if "--both" in flags else {"one": "--no-rollups" not in flags}
    out: dict = {k: {"times": [], "cpu": [], "rows": 0} for k in paths}
    digests: dict = {}
    for _ in range(runs):
        for label, rollups in paths.items():
            wall, cpu, rows, digest = once(store, view, rollups)
            out[label]["times"].append(wall)
            out[label]["cpu"].append(cpu)
            out[label]["rows"] = rows
            digests[label] = digest
    if "--both" in flags:
        out["same_rows"] = digests["rollup"] == digests["raw"]
        print(json.dumps(out))
    else:
        print(json.dumps(out["one"]))


if __name__ == "__main__":
    main(sys.argv[1:])
