"""The store's commit protocol: a crash at any step loses nothing and doubles nothing."""

from __future__ import annotations

import pytest
from tests.helpers.common import events, write

from servelens.pipeline.store import commit as store_mod
from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import run
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts, read_manifest


def fake_log(n: int, start: int = 0) -> str:
    return "".join(f"FAKE 06-10 14:00:{i % 60:02d} INFO m{i}\n" for i in range(start, start + n))


def test_crash_before_the_commit_point_is_undone(tmp_path, fake_engine, monkeypatch):
    log = write(tmp_path / "a.log", fake_log(10))
    store = tmp_path / "store"

    def crash(*a, **k):
        raise KeyboardInterrupt("killed before the manifest was written")

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(store_mod, "write_json_atomic", crash)
        ingest([log], store)
    assert list((store / "_staging").rglob("*.parquet"))  # the orphan is there...
    assert run(store, "select count(*) as n from events")["n"][0] == 0  # ...but invisible
    res = ingest([log], store)  # reopening cleans up; the lines are read again, once
    assert res.lines == 10
    assert not (store / "_staging").exists()
    assert events(store).height == 10


def test_crash_after_the_commit_point_rolls_forward(tmp_path, fake_engine, monkeypatch):
    log = write(tmp_path / "a.log", fake_log(10))
    store = tmp_path / "store"

    def crash(self, moves):
        raise KeyboardInterrupt("killed after the manifest was written")

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(Store, "_apply_moves", crash)
        ingest([log], store)
    manifest = read_manifest(store)
    assert manifest["pending"] and len(manifest["parts"]) == 1
    # a reader already sees the committed part where it lies (still in staging)
    assert [p.relative_to(store).parts[0] for p in committed_parts(store)] == ["_staging"]
    assert events(store).height == 10
    # the next writer finishes the moves; nothing is read twice
    assert ingest([log], store).lines == 0
    assert read_manifest(store)["pending"] == []
    assert events(store).height == 10
    assert [p.relative_to(store).parts[0] for p in committed_parts(store)] == ["events"]


def test_parts_not_in_the_manifest_are_not_read(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", fake_log(5))
    store = tmp_path / "store"
    ingest([log], store)
    stray = next(store.rglob("*.parquet"))
    (stray.parent / "part-stray.parquet").write_bytes(stray.read_bytes())
    assert events(store).height == 5


def test_manifest_of_another_version_is_refused(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text('{"version": 99, "files": {}, "parts": []}')
    with pytest.raises(store_mod.StoreError, match="manifest version 99"):
        Store.open(store)
