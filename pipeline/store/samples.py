"""Samples in the store, beside the events, under the same commit protocol.

Layout:
    <store>/samples/day=<YYYY-MM-DD>/part-<txid>-<n>.parquet     SAMPLE_SCHEMA (pipeline/sources/samples.py)

The manifest gains one key, `samples`: {"parts": [relative paths], "info": {path: {"rows",
"lo", "hi", "instances"}}}. A commit of samples is the store's commit (pipeline/store/commit.py):
parts written and fsynced under `_staging/<txid>/`, then one atomic manifest write naming
them (with the moves in `pending`, which the next open rolls forward after a crash), then
the moves. Readers take the sample parts from the manifest, never from a glob.

Exactly once: a sample is known by (instance, name, labels, le, quantile, ts). Before a
commit, the batch is deduplicated and what the store already holds of the same instances
over the same times is read back (only the parts whose time span and instances overlap)
and left out, so a scrape read again, a file ingested twice, or the same samples from a
Prometheus server and from a live scrape are stored once.

Each commit also marks its (engine, instance, first, last) dirty, as an events commit does:
the views stored as rollups (pipeline/query/rollups.py) read scraped gauges where the log has none.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from ..sources.samples import POLARS_SCHEMA, SAMPLE_KEY, SAMPLE_SCHEMA, to_arrow
from .manifest import NO_SPACE, fsync_dir, no_space, write_json_atomic
from .commit import Store, merge_dirty, new_txid
# what a query needs of the samples (it imports neither polars nor pyarrow)
from .sample_parts import MANIFEST_KEY, sample_entries

SAMPLES_DIR = "samples"
SAMPLE_PARQUET_OPTIONS = dict(compression="zstd", row_group_size=256_000,
                use_dictionary=[f.name for f in SAMPLE_SCHEMA if f.name not in ("ts", "value", "le", "quantile")])


def _existing_keys(store: Store, new: pl.DataFrame) -> pl.DataFrame | None:
    """The keys the store already holds of the batch's instances over its time span."""
    entry = sample_entries(store.manifest)
    lo, hi = new["ts"].min(), new["ts"].max()
    insts = set(new["instance"].unique().to_list())
    cols = [c for c in SAMPLE_KEY]
    frames = []
    for rel in entry["parts"]:
        info = entry["info"].get(rel, {})
        try:
            plo, phi = dt.datetime.fromisoformat(info["lo"]), dt.datetime.fromisoformat(info["hi"])
        except (KeyError, TypeError, ValueError):
            plo = phi = None
        if plo is not None and (phi < lo or plo > hi):
            continue
        if info.get("instances") is not None and not insts & set(info["instances"]):
            continue
        path = store.root / rel
        if not path.exists():
            continue
        frames.append(
            pl.scan_parquet(path).select(cols)
            .filter(pl.col("ts").is_between(lo, hi) & pl.col("instance").is_in(list(insts)))
            .collect()
        )
    return pl.concat(frames) if frames else None


def new_samples(store: Store, samples: pl.DataFrame) -> pl.DataFrame:
    """The samples of the batch the store does not hold yet (each once)."""
    if samples.height == 0:
        return samples
    samples = samples.unique(SAMPLE_KEY, keep="first", maintain_order=True)
    have = _existing_keys(store, samples)
    if have is not None and have.height:
        samples = samples.join(have, on=SAMPLE_KEY, how="anti", nulls_equal=True)
    return samples


def commit_samples(store: Store, samples: pl.DataFrame) -> int:
    """Write the batch's new samples as parts (one per day) and commit them. Returns the
    samples written (0: nothing new, and nothing committed).

    A full disk raises StoreFull with nothing changed."""
    if samples.height == 0:
        return 0
    samples = samples.select([pl.col(c).cast(t) for c, t in POLARS_SCHEMA.items()])
    if samples["instance"].null_count():
        raise ValueError("samples without an instance")
    fresh = new_samples(store, samples)
    if fresh.height == 0:
        return 0
    txid = new_txid()
    stage = store.root / "_staging" / txid
    m = store.manifest
    before = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in m.items()}
    try:
        moves, info = [], {}
        keyed = fresh.with_columns(pl.col("ts").dt.strftime("%Y-%m-%d").alias("_day"))
        for n, ((day,), part) in enumerate(keyed.group_by(["_day"], maintain_order=True)):
            final = f"{SAMPLES_DIR}/day={day}/part-{txid}-{n:04d}.parquet"
            staged = stage / final
            staged.parent.mkdir(parents=True, exist_ok=True)
            part = part.drop("_day").sort("instance", "name", "labels", "le", "quantile", "ts", nulls_last=True)
            with open(staged, "wb") as f:
                pq.write_table(to_arrow(part), f, **SAMPLE_PARQUET_OPTIONS)
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(staged.parent)
            moves.append((str(staged.relative_to(store.root)), final))
            info[final] = {
                "rows": part.height,
                "lo": part["ts"].min().isoformat(),
                "hi": part["ts"].max().isoformat(),
                "instances": sorted(part["instance"].unique().to_list()),
            }
        entry = sample_entries(m)
        m[MANIFEST_KEY] = {"parts": [*entry["parts"], *(f for _, f in moves)],
                           "info": {**entry.get("info", {}), **info}}
        spans = fresh.group_by("engine", "instance").agg(
            pl.col("ts").min().dt.to_string("%Y-%m-%dT%H:%M:%S%.f%z").alias("lo"),
            pl.col("ts").max().dt.to_string("%Y-%m-%dT%H:%M:%S%.f%z").alias("hi"),
        )
        m["dirty"] = merge_dirty(m.get("dirty", []), [list(r) for r in spans.iter_rows()])
        m["pending"] = [list(mv) for mv in moves]
        m["committed_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
        write_json_atomic(store.root / "manifest.json", m)  # the commit
    except OSError as e:
        undo_staged(store, m, before, stage)
        if e.errno in NO_SPACE:
            raise no_space(store.root, e) from None
        raise
    store.generation += 1
    for engine, instance, _lo, _hi in spans.iter_rows():
        store.touched_at[(engine, instance)] = store.generation
    store.settle(moves)
    shutil.rmtree(stage, ignore_errors=True)
    return fresh.height


def stored_instances(manifest: dict) -> set[str]:
    out: set[str] = set()
    for info in sample_entries(manifest).get("info", {}).values():
        out |= set(info.get("instances") or [])
    return out


def count_samples(manifest: dict) -> int:
    return sum(int(i.get("rows") or 0) for i in sample_entries(manifest).get("info", {}).values())



def undo_staged(store: Store, manifest: dict, before: dict, stage: Path) -> None:
    """A sample commit that failed before its manifest write: the manifest in memory as it
    was, the staged files and a half-written manifest removed."""
    manifest.clear()
    manifest.update(before)
    shutil.rmtree(stage, ignore_errors=True)
    try:
        (store.root / "manifest.json.new").unlink()
    except OSError:
        pass
