"""`scaling_signals` where signals fire: a store of many overloaded servers, timed as a user
runs it.

    .venv/bin/python bench/signalsbench.py                       # >= 10M requests (~30 min to build once)
    .venv/bin/python bench/signalsbench.py --requests 1e6 --runs 3

The query store of bench/run.py is a steady fleet: its `scaling_signals` returns no row, so
the episode logic (consecutive windows of one instance, sustain times, recommendations)
never runs. Here the input is the simulator's `incident` scenario (TGI by default: servers
that crash, overload and miss their latency objective), ingested once, then copied under new
instance names (bench/run.py `replicate`) until the store holds `--requests` requests; each
copy brings the scenario's episodes with it. The store and its input are kept under
bench/data/ while their parameters are unchanged.

Prints, and with `--json` writes: the requests, instances and parts of the store, the
signal episodes `scaling_signals` returns, and `servelens sql "select * from scaling_signals"`
end to end (median wall and CPU seconds of `--runs` fresh processes) over the stored rollups
as shipped, beside the same-run baseline: the raw path (`--no-rollups`), derived from the
events (one run, `--raw-timeout`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from measure import load_average, run_cmd  # noqa: E402
from run import cli_query, replicate, said, servelens_bin, store_schema_key  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="tgi")
    p.add_argument("--scenario", default="incident")
    p.add_argument("--duration", default="1h", help="simulated time of the base input")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--requests", type=float, default=10e6, help="requests in the store (default 10M)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--raw-timeout", type=float, default=600.0, help="seconds the raw path may take (then reported as not finished)")
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args(argv)

    name = f"signals-{a.engine}-{a.scenario}-{a.duration}-s{a.seed}"
    logs, store = a.data_dir / name, a.data_dir / "stores" / f"{name}-{a.requests:g}"
    built = build(a, logs, store)
    from servelens.pipeline.query.connect import run as query

    facts = query(store, "select (select count(*) from requests) as requests, "
                         "(select count(distinct instance) from events) as instances, "
                         "(select count(*) from scaling_signals) as episodes, "
                         "(select count(distinct instance) from scaling_signals) as instances_firing").row(0, named=True)
    by_signal = query(store, "select signal, count(*) as n from scaling_signals group by all order by n desc").rows()
    parts = len(list((store / "events").rglob("*.parquet")))
    print(f"load average before: {load_average()}")
    print(f"store: {facts['requests']:,} requests, {facts['instances']:,} instances, {parts:,} parts; "
          f"{facts['episodes']:,} signal episodes on {facts['instances_firing']:,} instances "
          f"({', '.join(f'{s} {n:,}' for s, n in by_signal)})")
    sql = "select * from scaling_signals"
    shipped = cli_query(store, sql, [], a.raw_timeout, runs=a.runs)
    print(f"servelens sql '{sql}' (stored rollups): {said(shipped)}")
    raw = cli_query(store, sql, ["--no-rollups"], a.raw_timeout, runs=1)
    print(f"the same, --no-rollups (from the events): {said(raw)}")
    if a.json:
        a.json.write_text(json.dumps({"store": {**facts, "parts": parts, **built}, "by_signal": by_signal,
                                      "shipped": shipped, "raw": raw}, indent=2, default=str))


def build(a, logs: Path, store: Path) -> dict:
    """The base input simulated and ingested, then replicated (reused when already built)."""
    stamp = store / "bench-stamp.json"
    want = {"engine": a.engine, "scenario": a.scenario, "duration": a.duration, "seed": a.seed,
            "requests_target": a.requests, "schema": store_schema_key()}
    if stamp.exists():
        built = json.loads(stamp.read_text())
        if {k: built.get(k) for k in want} == want:
            refresh_if_stale(store)
            return built
    shutil.rmtree(logs, ignore_errors=True)
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.perf_counter()
    run_cmd([servelens_bin(), "simulate", "--engine", a.engine, "--scenario", a.scenario, "--duration", a.duration,
             "--seed", str(a.seed), "--out", str(logs)])
    sim_s = time.perf_counter() - t0
    r = run_cmd([servelens_bin(), "ingest", str(logs), "--store", str(store), "-q"])
    base, copies, copy_s = replicate(store, a.requests)
    # the copies were committed without saying what they touched: the rollups are rebuilt, as
    # `servelens compact` would
    refreshed = rebuild_rollups(store)
    built = {**want, "simulate_s": round(sim_s, 1), "ingest_s": round(r.wall_s, 1), "base_requests": base,
             "copies": copies, "copy_s": round(copy_s, 1),
             "refresh_s": round(refreshed.seconds, 1) if refreshed else None,
             "refresh_cpu_s": round(refreshed.cpu_s, 1) if refreshed else None}
    stamp.write_text(json.dumps(built))
    print(f"built {store.name}: {base:,} requests ingested, {copies} copies in {copy_s:.0f} s, rollups in "
          f"{built['refresh_s']} s")
    return built


def rebuild_rollups(store: Path):
    """The store's rollups computed again, whole (rollups.Refreshed, or None)."""
    from servelens.pipeline.query import rollups
    from servelens.pipeline.store.commit import Store

    with Store.open(store, purpose="bench rollups") as st:
        return rollups.refresh(st, whole=True)


def refresh_if_stale(store: Path) -> None:
    """A kept store's rollups rebuilt when the views they store changed since (the shipped
    path would otherwise be timed on the raw path, or on a refresh)."""
    from servelens.pipeline.query import stored
    from servelens.pipeline.store.manifest import read_manifest

    if set(stored.usable(store, read_manifest(store))) == set(stored.VIEWS):
        return
    refreshed = rebuild_rollups(store)
    print(f"rollups of {store.name} rebuilt (their SQL changed) in {refreshed.seconds:.1f} s" if refreshed else
          f"rollups of {store.name}: nothing to rebuild")


if __name__ == "__main__":
    main()
