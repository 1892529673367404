"""The store's layout is one other engines read right by themselves: DuckDB, polars and
pyarrow, pointed at events/ with Hive partitioning and nothing else, count what `servelens
sql` counts, per engine too, also right after a compaction; parts do not repeat the partition
column; events without a time sit under Hive's default partition; a store written in the
older layout reads the same and `servelens compact` rewrites it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from servelens.parsers.schema import EVENT_SCHEMA
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.store.layout import DEFAULT_PARTITION
from servelens.pipeline.store.manifest import committed_parts, read_manifest

if not any((c.callback and c.callback.__name__ == "compact") for c in app.registered_commands):
    build_app()

INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident"
PER_ENGINE = "select engine, count(*) as n from events group by engine order by engine"


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def servelens_counts(store: Path) -> dict[str | None, int]:
    r = cli("sql", PER_ENGINE, "--store", str(store), "-f", "json")
    assert r.exit_code == 0, r.output
    return {row["engine"]: row["n"] for row in json.loads(r.output)}


def other_engines(store: Path) -> dict[str, dict[str | None, int]]:
    glob = f"{store}/events/**/*.parquet"
    con = duckdb.connect()
    rows = con.execute(
        f"select engine, count(*) from read_parquet('{glob}', hive_partitioning = true) group by all").fetchall()
    duck = dict(rows)
    pol = (pl.scan_parquet(glob, hive_partitioning=True).group_by("engine").len().collect())
    arrow = ds.dataset(store / "events", format="parquet", partitioning="hive").to_table(columns=["engine"])
    return {
        "duckdb": duck,
        "polars": dict(zip(pol["engine"].to_list(), pol["len"].to_list())),
        "pyarrow": dict(pl.from_arrow(arrow).group_by("engine").len().iter_rows()),  # type: ignore[union-attr]
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The store, ingested once per module; each test gets a copy (`store`)."""
    base = tmp_path_factory.mktemp("layout")
    root = base / "store"
    for log in sorted(INCIDENT.rglob("*.log")):  # a commit per file: several parts per partition
        assert cli("ingest", str(log), "--store", str(root), "-q").exit_code == 0
    # events without a time (the default partition): lines of an unrecognised, untimed log
    untimed = base / "notes.log"
    untimed.write_text("no time here\nnor here\n")
    assert cli("ingest", str(untimed), "--store", str(root), "-q").exit_code == 0
    return root


@pytest.fixture
def store(tmp_path, built) -> Path:
    root = tmp_path / "store"
    shutil.copytree(built, root)
    return root


def test_duckdb_polars_and_pyarrow_read_the_layout_directly(store):
    truth = servelens_counts(store)
    assert truth["unknown"] == 2 and truth["vllm"] > 1000 and sum(truth.values()) > 9000
    for name, got in other_engines(store).items():
        assert got == truth, name
    parts = committed_parts(store)
    # the partition column lives in the path only, never in the file (Dask, Spark, Trino)
    assert all(pq.read_schema(p).get_field_index("engine") < 0 for p in parts)
    assert {p.parent.name for p in parts if p.parent.parent.name == "engine=unknown"} == {f"day={DEFAULT_PARTITION}"}
    assert not list(store.rglob("day=unknown"))


def test_other_engines_count_right_after_a_compaction(store):
    truth = servelens_counts(store)
    before = len(committed_parts(store))
    r = cli("compact", "--store", str(store))
    assert r.exit_code == 0, r.output
    assert len(committed_parts(store)) < before
    # the replaced parts left events/ in the same commit: no double count in a glob
    assert list((store / "_garbage").rglob("*.parquet"))
    for name, got in other_engines(store).items():
        assert got == truth, name
    assert servelens_counts(store) == truth


def _make_legacy(store: Path) -> None:
    """Rewrite the store in the layout before this one: parts repeat `engine`, and events
    without a time sit under day=unknown (what a store written by an older servelens holds)."""
    m = read_manifest(store)
    parts, info = [], {}
    for rel in m["parts"]:
        path = store / rel
        engine = path.parent.parent.name.split("=", 1)[1]
        table = pq.read_table(path)
        table = table.add_column(EVENT_SCHEMA.get_field_index("engine"), "engine", pa.array([engine] * table.num_rows, pa.string()))
        new_rel = rel.replace(f"day={DEFAULT_PARTITION}", "day=unknown")
        (store / new_rel).parent.mkdir(parents=True, exist_ok=True)
        path.unlink()
        pq.write_table(table, store / new_rel)
        parts.append(new_rel)
        # an older store's record: no size, time or checksum
        info[new_rel] = {k: v for k, v in m["part_info"][rel].items() if k not in ("size", "mtime_ns", "crc32")}
    m["parts"], m["part_info"] = parts, info
    (store / "manifest.json").write_text(json.dumps(m))


def test_a_store_in_the_older_layout_reads_the_same_and_compact_migrates_it(store):
    truth = servelens_counts(store)
    _make_legacy(store)
    assert list(store.rglob("day=unknown"))
    assert all(pq.read_schema(p).get_field_index("engine") >= 0 for p in committed_parts(store))
    assert servelens_counts(store) == truth
    r = cli("compact", "--store", str(store))
    assert r.exit_code == 0, r.output
    parts = committed_parts(store)
    assert all(pq.read_schema(p).get_field_index("engine") < 0 for p in parts)
    assert not any("day=unknown" in str(p) for p in parts) and not list((store / "events").rglob("day=unknown/*.parquet"))
    assert servelens_counts(store) == truth
    for name, got in other_engines(store).items():
        assert got == truth, name
    # still exactly once: re-ingesting adds nothing
    assert "0 ingested" in cli("ingest", str(INCIDENT), "--store", str(store), "-q").output
    assert servelens_counts(store) == truth
