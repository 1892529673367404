"""Where a store's samples are, as a query needs them: the committed sample parts the manifest
names and the `samples` view over them. The writing side (commit, dedupe) is
pipeline/store/samples.py; this part imports neither polars nor pyarrow, so that a query
binds `samples` without them."""

from __future__ import annotations

from pathlib import Path

from .columns import SAMPLE_COLUMNS, typed_nulls
from .manifest import StoreError, outside_store

MANIFEST_KEY = "samples"


def sample_entries(manifest: dict) -> dict:
    """The manifest's `samples` entry, checked: every part a path inside the store (a
    hand-edited manifest must not point a reader at another file)."""
    entry = manifest.get(MANIFEST_KEY) or {"parts": [], "info": {}}
    parts = entry.get("parts")
    if not isinstance(parts, list) or not all(isinstance(p, str) and not outside_store(p) for p in parts):
        raise StoreError("manifest.json `samples.parts` is not a list of paths inside the store; "
                         "run servelens check, then servelens repair")
    return entry


def sample_parts(root: Path | str, manifest: dict) -> list[Path]:
    """The committed sample parts, each where it is now (in staging while the commit's moves
    are not done yet: `pending` says where)."""
    root = Path(root)
    staged = {final: staged for staged, final in manifest.get("pending", [])}
    out = []
    for rel in sample_entries(manifest)["parts"]:
        for cand in (rel, staged.get(rel)):
            if cand and (root / cand).exists():
                out.append(root / cand)
                break
    return out


def samples_select(files: list[str]) -> str:
    """DuckDB SQL reading these sample parts (no Hive partitioning: `day` is not a column)."""
    cols = ", ".join(f'"{n}"' for n, _ in SAMPLE_COLUMNS)
    quoted = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"select {cols} from read_parquet([{quoted}], hive_partitioning = false, union_by_name = true)"


def no_samples_sql() -> str:
    return typed_nulls(SAMPLE_COLUMNS)


def bind_samples(con, store: Path, manifest: dict, scan=None, instances=None) -> list[Path]:
    """`samples` on a query connection (in its current schema, as `events`): the committed
    sample parts, within the widened time range `scan` and of `instances` ((engine,
    instance) pairs) when given. Returns the parts, for the sandbox's allowed files."""
    parts = sample_parts(store, manifest)
    if not parts:
        con.execute(f"create or replace view samples as {no_samples_sql()}")
        return []
    conds = []
    if scan is not None and (scan.since or scan.until):
        conds.append(scan.predicate("ts"))
    if instances is not None:
        from .layout import instances_predicate

        conds.append(instances_predicate(instances))
    where = f" where {' and '.join(conds)}" if conds else ""
    con.execute(f"create or replace view samples as select * from ({samples_select([str(p) for p in parts])}){where}")
    return parts
