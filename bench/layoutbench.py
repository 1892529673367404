"""The measurements behind docs/fleet.md's layout decision: servelens' own manifest commit
against a Delta Lake table (deltalake) holding the same rows, a tail-like series of small
commits (commit cost) and the reads that follow (read cost: a count and a per-engine count
through DuckDB). Optional: needs `pip install deltalake`, which servelens itself does not use.

    python bench/layoutbench.py [--commits 100] [--rows 2000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl

from servelens.parsers.text import parse_text
from servelens.pipeline.store.layout import read_parquet_sql
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts


def frames(commits: int, rows: int) -> list[pl.DataFrame]:
    out = []
    for c in range(commits):
        text = "".join(f"commit {c} row {i} some log text of a typical length for a line\n" for i in range(rows))
        ev = parse_text("unknown", text, source=f"node.log")
        start = dt.datetime(2026, 5, 12, tzinfo=dt.timezone.utc)
        ts = pl.datetime_range(start, start + dt.timedelta(seconds=rows - 1), "1s", eager=True,
                               time_unit="us", time_zone="UTC")
        out.append(ev.with_columns(ts.alias("ts"), (pl.col("line") + rows * c).alias("line")))
    return out


def bench_servelens(root: Path, data: list[pl.DataFrame]) -> tuple[list[float], float, float]:
    times = []
    with Store.open(root) as st:
        for i, df in enumerate(data):
            t = time.perf_counter()
            st.commit_events([df], {f"k{i}": {"head_sha": "x", "head_len": 1, "offset": 1, "lines": df.height}})
            times.append(time.perf_counter() - t)
    # the events view alone (what servelens binds; `servelens sql` also binds every metric
    # view, a cost of the query layer, not of the layout)
    t = time.perf_counter()
    con = duckdb.connect()
    parts = [str(p) for p in committed_parts(root)]
    con.execute(f"create view events as {read_parquet_sql(parts, union_by_name=False)}")
    con.execute("select count(*) from events").fetchone()
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    con.execute("select engine, count(*) from events group by all").fetchall()
    return times, read_s, time.perf_counter() - t


def bench_delta(root: Path, data: list[pl.DataFrame]) -> tuple[list[float], float, float]:
    from deltalake import DeltaTable, write_deltalake

    times = []
    for df in data:
        table = df.with_columns(pl.col("ts").dt.strftime("%Y-%m-%d").alias("day")).to_arrow()
        t = time.perf_counter()
        write_deltalake(str(root), table, mode="append", partition_by=["engine", "day"])
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    con = duckdb.connect()
    con.register("d", DeltaTable(str(root)).to_pyarrow_dataset())
    con.execute("select count(*) from d").fetchone()
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    con.execute("select engine, count(*) from d group by all").fetchall()
    return times, read_s, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--rows", type=int, default=2000)
    args = ap.parse_args()
    data = frames(args.commits, args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("servelens manifest", bench_servelens), ("delta lake", bench_delta)):
            times, read_s, group_s = fn(Path(tmp) / name.replace(" ", "_"), data)
            print(f"{name:20s} commit median {statistics.median(times) * 1e3:6.1f} ms  p90 "
                  f"{sorted(times)[int(0.9 * len(times))] * 1e3:6.1f} ms  | open+count {read_s * 1e3:6.0f} ms"
                  f"  group by {group_s * 1e3:6.0f} ms  ({args.commits} commits of {args.rows} rows)")


if __name__ == "__main__":
    main()
