"""What a query's connection pays per part of a big store: the manifest is read once (not
once per step: listing, checking, rollups), and the per-part checks keep their meaning when
done with string paths and bare system calls."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from tests.helpers.common import write

from servelens.pipeline.query import connect as query_mod
from servelens.pipeline.query import parts as parts_mod
from servelens.pipeline.store import integrity
from servelens.pipeline.store import manifest as store_mod
from servelens.pipeline.ingest import ingest


def fake_log(n: int, start: int = 0) -> str:
    return "".join(f"FAKE 06-10 14:00:{i:02d} INFO m{i}\n" for i in range(start, start + n))


@pytest.fixture
def store(tmp_path, fake_engine):
    """A store of three parts (three ingests of a growing file)."""
    s = tmp_path / "store"
    log = tmp_path / "a.log"
    for n in (3, 5, 8):
        write(log, fake_log(n))
        # the rollups refreshed by the last ingest alone: they end as fresh as after each
        ingest([log], s, engine="fake", year=2026, rollups=n == 8)
    assert len(store_mod.read_manifest(s)["parts"]) == 3
    return s


@pytest.fixture
def manifest_reads(monkeypatch):
    """How many times the manifest is read (through every module's name for it)."""
    calls = []
    real = store_mod.read_manifest

    def counting(root):
        calls.append(root)
        return real(root)

    monkeypatch.setattr(store_mod, "read_manifest", counting)
    monkeypatch.setattr(integrity, "read_manifest", counting)
    monkeypatch.setattr(query_mod, "read_manifest", counting)
    monkeypatch.setattr(parts_mod, "read_manifest", counting)
    return calls


@pytest.mark.parametrize("sql", ["select count(*) as n from events", "select * from latency_percentiles"])
def test_a_query_reads_the_manifest_once(store, manifest_reads, sql):
    out = query_mod.run(store, sql)
    if "count" in sql:
        assert out["n"].to_list() == [8]
    assert len(manifest_reads) == 1


def test_a_damaged_part_is_still_refused_with_one_read_manifest(store):
    victim = store / store_mod.read_manifest(store)["parts"][1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    with pytest.raises(store_mod.StoreError, match="is damaged"):
        query_mod.run(store, "select count(*) from events")


def _outside_by_path_rules(rel: str) -> bool:
    """The rule as PurePosixPath states it (what outside_store computed before)."""
    pure = PurePosixPath(rel.replace("\\", "/"))
    return not rel or pure.is_absolute() or ".." in pure.parts or ":" in rel


@pytest.mark.parametrize("rel", [
    "events/engine=vllm/day=2026-05-12/part-1.parquet", "", "/etc/passwd", "//x", "..", "../x",
    "events/../../x", "events/..", "a/..b/c", "a/b..", "..a", "a\\..\\b", "\\abs", "c:/x", "events/c:x",
    "./events/p.parquet", "events//p.parquet", "events/./p", ".", "a/./../b", "a/ ../b", "...",
])
def test_outside_store_keeps_the_path_rules(rel):
    assert store_mod.outside_store(rel) == _outside_by_path_rules(rel)


def _first_part_in_staging(store):
    """The manifest of a commit half-way through its moves: its first part still in staging;
    (manifest, the part, where it is)."""
    manifest = store_mod.read_manifest(store)
    rel = manifest["parts"][0]
    staged = "_staging/moved-" + rel.rsplit("/", 1)[1]
    (store / staged).parent.mkdir(parents=True, exist_ok=True)
    (store / rel).rename(store / staged)
    manifest["pending"] = [[staged, rel]]
    return manifest, rel, staged


def test_a_part_still_in_staging_is_found_and_checked(store):
    """A commit half-way through its moves: the part is read from staging, and checked there."""
    manifest, rel, staged = _first_part_in_staging(store)
    assert integrity.verify_parts(store, manifest) == []
    assert store / staged in store_mod.committed_parts(store, manifest)
    (store / staged).write_bytes(b"PAR1 not a whole file")
    assert integrity.verify_parts(store, manifest) == [f"part {rel} is damaged (not a complete Parquet file: 21 bytes)"]
    (store / staged).unlink()
    assert integrity.verify_parts(store, manifest) == [f"part {rel} is missing"]


def test_the_one_pass_names_the_intact_parts_as_committed_parts_does(store, monkeypatch):
    """check_parts both finds and checks: its files are committed_parts' (staged or moved,
    spelled the same), and a damaged part is left out of them only under --allow-partial."""
    manifest, rel, staged = _first_part_in_staging(store)
    files, problems = integrity.check_parts(store, manifest)
    assert problems == [] and files == [str(p) for p in store_mod.committed_parts(store, manifest)]
    assert files[0] == str(store / staged)
    odd = {**manifest, "parts": ["./" + manifest["parts"][1], manifest["parts"][2].replace("/", "//", 1)]}
    assert integrity.check_parts(store, odd)[0] == [str(p) for p in store_mod.committed_parts(store, odd)]
    (store / staged).rename(store / rel)
    victim = store / manifest["parts"][1]
    victim.write_bytes(victim.read_bytes()[:20])
    with pytest.raises(store_mod.StoreError, match="is damaged"):
        integrity.readable_files(store)
    monkeypatch.setenv(integrity.ALLOW_PARTIAL_ENV, "1")
    assert integrity.readable_files(store) == [str(store / manifest["parts"][0]), str(store / manifest["parts"][2])]
