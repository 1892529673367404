"""Detection once per shape (pipeline/sources/detect_memo.py): a directory of many small files of
different engines, each a log's first lines (real logs; the simulator's for TensorRT-LLM) with
its numbers changed, is detected file by file as the engine whose log it came from."""

from __future__ import annotations

import os
import re
from pathlib import Path

from servelens.pipeline.sources.detect_memo import shape
from servelens.pipeline.ingest import ingest

REAL = Path(__file__).parents[2] / "sample_logs"
SOURCES = {
    "vllm": REAL / "vllm" / "real" / "v1_0_11.log",
    "tgi": REAL / "tgi" / "real" / "router_text.log",
    "trtllm": REAL / "incident" / "trtllm" / "trtllm-a.log",
    "sglang": REAL / "sglang" / "real" / "v0_5_2026.log",
    "llamacpp": REAL / "llamacpp" / "real" / "era_c_2026_router_hip_26222.log",
}


def test_numbers_do_not_change_the_shape_and_words_do():
    assert shape(b"INFO 06-10 14:23:45 pid=12 id=8f2c\n") == shape(b"INFO 07-11 09:01:02 pid=99 id=c3d9\n")
    assert shape(b"INFO 06-10 a\n") != shape(b"WARN 06-10 a\n")
    assert shape(b"x" * 20_000) is None


def test_many_small_files_of_five_engines_each_detected_as_its_own(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    expected = {}
    for engine, src in SOURCES.items():
        head = b"".join(src.read_bytes().splitlines(keepends=True)[:6])
        for i in range(8):
            # the same lines with other numbers: one shape per engine
            text = re.sub(rb"\d", lambda m: str((int(m.group()) + i) % 10).encode(), head)
            p = logs / f"{engine}-{i}.log"
            p.write_bytes(text)
            os.utime(p, (1_781_100_000, 1_781_100_000))
            expected[p.name] = engine
    s = ingest([logs], tmp_path / "store", rollups=False)
    got = {Path(f.source).name: f.engine for f in s.files if f.status == "ingested"}
    assert got == expected
