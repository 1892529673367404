"""Detection once per shape (pipeline/sources/detect_memo.py): a directory of many small files of
different engines, each a log's first lines (real logs; the simulator's for TensorRT-LLM) with
its numbers changed, is detected file by file as the engine whose log it came from."""

from __future__ import annotations

from pathlib import Path

from servelens.pipeline.sources.detect_memo import shape
from servelens.pipeline.ingest import ingest
from tests.helpers.common import same_shape_files


def test_numbers_do_not_change_the_shape_and_words_do():
    assert shape(b"INFO 06-10 14:23:45 pid=12 id=8f2c\n") == shape(b"INFO 07-11 09:01:02 pid=99 id=c3d9\n")
    assert shape(b"INFO 06-10 a\n") != shape(b"WARN 06-10 a\n")
    assert shape(b"x" * 20_000) is None


def test_many_small_files_of_five_engines_each_detected_as_its_own(tmp_path):
    logs = tmp_path / "logs"
    expected = same_shape_files(logs, 8)
    s = ingest([logs], tmp_path / "store", rollups=False)
    got = {Path(f.source).name: f.engine for f in s.files if f.status == "ingested"}
    assert got == expected
