"""Time one metric view over a store, in a fresh process (run by run.py under a timeout so
that a slow view cannot stall the benchmark).

    python bench/querytime.py STORE VIEW RUNS [--asof-loop-off]

Prints JSON: seconds per run (connect + the whole view fetched as Arrow), the CPU seconds of
each run (all threads: on a shared machine the steadier figure) and rows.
`--asof-loop-off` sets DuckDB's asof_loop_join_threshold to 0 on the connection first: DuckDB
plans an ASOF join whose left side it guesses to be small as a nested loop (quadratic), and
the estimate for a generate_series grid is small whatever its real size.
"""

from __future__ import annotations

import json
import sys
import time

from servelens.pipeline.query import connect


def main(argv: list[str]) -> None:
    store, view, runs = argv[0], argv[1], int(argv[2])
    times, cpu, rows = [], [], 0
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        con = connect(store)
        # --asof-loop-off: load_views sets asof_loop_join_threshold = 0 already, and the
        # sandboxed connection's settings are locked: nothing more to set
        rows = con.sql(f"select * from {view}").to_arrow_table().num_rows
        con.close()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(json.dumps({"times": times, "cpu": cpu, "rows": rows}))


if __name__ == "__main__":
    main(sys.argv[1:])
