"""The tailer detects a new file's wrappers and engine once per shape of its first lines
(pipeline/sources/detect_memo.py), as ingest does: a directory of many small files of five
engines (each a real log's first lines with its numbers changed) is still detected file by
file as the engine whose log it came from, and files of one shape are detected once."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from servelens.parsers import wrappers
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.tail import identity as identity_mod
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets
from tests.helpers.common import SHAPE_SOURCES, same_shape_files
from tests.helpers.tailing import events_only


def test_many_small_files_of_five_engines_each_detected_as_its_own(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    expected = same_shape_files(logs, 4)
    calls = []
    real = wrappers.detect_lines  # what detection by shape runs for each shape it has not seen
    monkeypatch.setattr(identity_mod.wrappers, "detect_lines", lambda sample: calls.append(1) or real(sample))
    store_dir = tmp_path / "store"
    store = Store.open(store_dir, purpose="tail")
    # (only the committed events are read: no rollups)
    tailer = events_only(Tailer(store, Targets([logs], None, skip_under=store_dir), engine="auto", quiet_s=0.0,
                                compact_min_parts=0))
    tailer.say = lambda s: None
    for _ in range(3):
        tailer.poll_once(rescan=True)
    tailer.close()
    store.close()
    got = pl.read_parquet(committed_parts(store_dir), hive_partitioning=True)
    by_file = {Path(s).name: set(e) for s, e in got.group_by("source").agg(pl.col("engine").unique()).iter_rows()}
    assert by_file == {name: {engine} for name, engine in expected.items()}
    assert len(calls) == len(SHAPE_SOURCES)  # once per shape, not per file
