"""A 1-hour question over a big store: `latency_percentiles` for one hour, the old way (every
view bound at connect, the whole store scanned, the hour filtered afterwards) and through
`--since/--until` (only the views it reads, the hour pushed into the Parquet scans), each in
a fresh process, same run.

    python bench/rangequery.py STORE [--hours 3] [--runs 1]

STORE is the benchmark's query store (bench/run.py --only query builds one; copy it, the
benchmark reuses it). The hours are spread over the store's time span. Prints JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys

CHILD = r"""
import datetime as dt, json, sys, time
from servelens.pipeline.query import connect as query
from servelens.pipeline.query.timerange import TimeRange
store, mode, since = sys.argv[1], sys.argv[2], dt.datetime.fromisoformat(sys.argv[3])
until = since + dt.timedelta(hours=1)
t0, c0 = time.perf_counter(), time.process_time()
if mode == "filter_after":
    con = query.connect(store)
    rows = con.execute("select * from latency_percentiles where window_end > ? and window_start < ?", [since, until]).fetchall().__len__()
elif mode == "views_read_only":
    rows = query.run(store, "select * from latency_percentiles where window_end > $s and window_start < $u", {"s": since, "u": until}).height
else:
    rows = query.run(store, "select * from latency_percentiles", time_range=TimeRange(since, until)).height
print(json.dumps({"s": time.perf_counter() - t0, "cpu": time.process_time() - c0, "rows": rows}))
"""

MODES = ("filter_after", "views_read_only", "since_until")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("store")
    p.add_argument("--hours", type=int, default=3)
    p.add_argument("--runs", type=int, default=1)
    a = p.parse_args(argv)
    from servelens.pipeline.query.connect import run

    span = run(a.store, "select min(ts) as t0, max(ts) as t1 from events").row(0)
    t0 = span[0].replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    last = span[1] - dt.timedelta(hours=1)
    step = max((last - t0) / max(a.hours - 1, 1), dt.timedelta(hours=1))
    starts = [t0 + i * step for i in range(a.hours)]
    out: dict = {"store_span": [str(span[0]), str(span[1])], "target_s": 0.5, "hours": {}}
    for since in starts:
        since = since.replace(minute=0, second=0, microsecond=0)
        row = {}
        for mode in MODES:
            runs = []
            for _ in range(a.runs):
                r = subprocess.run([sys.executable, "-c", CHILD, a.store, mode, since.isoformat()],
                                   capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"{mode} {since}: {r.stderr.strip().splitlines()[-1]}")
                runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
            row[mode] = {"s": statistics.median(x["s"] for x in runs), "cpu": statistics.median(x["cpu"] for x in runs),
                         "rows": runs[0]["rows"]}
        assert len({row[m]["rows"] for m in MODES}) == 1, row  # the same answer every way
        out["hours"][since.isoformat()] = row
        print(json.dumps({since.isoformat(): row}), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
