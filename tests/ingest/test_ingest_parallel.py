"""Small files two at a time (pipeline/ingest.py `_files_in_order`): the next small file of
another instance is parsed on a second thread while the current one is added. The store,
the manifest and the per-file results must be those of reading the files one by one."""

from __future__ import annotations

import json
import threading
import time

import polars as pl
import pytest
from tests.helpers.common import events, write

from servelens.pipeline import ingest as ingest_mod
from servelens.pipeline.sources import lines as lines_mod
from servelens.pipeline.ingest import ingest as _ingest


def ingest(*args, **kw):
    """The library ingest without the rollup refresh after each commit: these tests compare
    the events, the manifest's file entries and the per-file results, never a rollup."""
    return _ingest(*args, rollups=False, **kw)


def fake_lines(n: int, start: int = 0, tag: str = "") -> str:
    return "".join(
        f"FAKE 06-10 14:{(i // 60) % 60:02d}:{i % 60:02d} INFO {tag}message {i}\n" for i in range(start, start + n)
    )


def _logs(tmp_path, n: int = 6):
    return [write(tmp_path / "logs" / f"pod{i}.log", fake_lines(30 + i, tag=f"pod{i} ")) for i in range(n)]


def _entries(store):
    files = json.loads((store / "manifest.json").read_text())["files"]
    return sorted((e["source"], e["instance"], e["offset"], e["lines"], e["ctx"]["last_ts"]) for e in files.values())


@pytest.fixture
def concurrency(monkeypatch):
    """How many files `_parse_whole` parsed at once, at most (each call held 0.2 s so two
    calls started together overlap)."""
    real = ingest_mod._parse_whole
    lock, state = threading.Lock(), {"active": 0, "max": 0, "calls": 0}

    def spy(*a, **kw):
        with lock:
            state["active"] += 1
            state["calls"] += 1
            state["max"] = max(state["max"], state["active"])
        try:
            time.sleep(0.2)
            return real(*a, **kw)
        finally:
            with lock:
                state["active"] -= 1

    monkeypatch.setattr(ingest_mod, "_parse_whole", spy)
    return state


def test_small_files_of_many_instances_parse_two_at_a_time_and_store_what_one_by_one_stores(
    tmp_path, fake_engine, concurrency
):
    logs = _logs(tmp_path)
    together = ingest([tmp_path / "logs"], tmp_path / "together")
    assert concurrency["calls"] == 6 and concurrency["max"] == 2
    one_by_one = tmp_path / "one_by_one"
    singles = [ingest([log], one_by_one) for log in logs]

    assert [f.source for f in together.files] == [s.files[0].source for s in singles]
    assert [(f.lines, f.events, f.instance, f.status) for f in together.files] == [
        (s.files[0].lines, s.files[0].events, s.files[0].instance, s.files[0].status) for s in singles
    ]
    assert [f.lines for f in together.files] == [30 + i for i in range(6)]
    a, b = events(tmp_path / "together"), events(one_by_one)
    assert a.height == sum(30 + i for i in range(6))
    assert a.equals(b)
    assert a.filter(pl.col("instance") == "pod3")["message"].to_list() == [f"pod3 message {i}" for i in range(33)]
    assert _entries(tmp_path / "together") == _entries(one_by_one)
    # and again adds nothing
    again = ingest([tmp_path / "logs"], tmp_path / "together")
    assert again.lines == 0 and {f.status for f in again.files} == {"unchanged"}
    assert events(tmp_path / "together").height == a.height


def test_files_of_one_instance_are_parsed_one_after_another(tmp_path, fake_engine, concurrency):
    _logs(tmp_path, 4)
    s = ingest([tmp_path / "logs"], tmp_path / "store", instance="one")
    assert concurrency["max"] == 1  # the next file continues the instance: never ahead
    assert s.lines == sum(30 + i for i in range(4))
    assert events(tmp_path / "store").height == s.lines


def test_a_big_file_is_not_parsed_ahead(tmp_path, fake_engine, concurrency):
    _logs(tmp_path, 3)
    s = ingest([tmp_path / "logs"], tmp_path / "store", block_bytes=256)  # every file > one block
    assert concurrency["calls"] == 0
    assert [f.lines for f in s.files] == [30, 31, 32]


def test_a_failure_in_a_file_parsed_ahead_is_reported_for_that_file_only(tmp_path, fake_engine, monkeypatch):
    _logs(tmp_path, 3)
    real = lines_mod.finalize

    def failing(events, ctx, **kw):
        if ctx.source.endswith("pod1.log"):
            raise RuntimeError("finalize exploded")
        return real(events, ctx, **kw)

    monkeypatch.setattr(lines_mod, "finalize", failing)
    s = ingest([tmp_path / "logs"], tmp_path / "store")
    assert [f.failed for f in s.files] == [False, True, False]
    assert "the fake parser failed (RuntimeError: finalize exploded)" in s.files[1].reason
    assert [f.lines for f in s.files] == [30, 0, 32]
    df = events(tmp_path / "store")
    assert sorted(df["instance"].unique().to_list()) == ["pod0", "pod2"]
    assert df.height == 62
