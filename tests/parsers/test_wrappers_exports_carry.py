"""A newest-first platform export spanning several read blocks: the model the server
names at start-up is carried to every later request although the reader meets that line
last (pipeline/sources/carry_scan.py), and a restart naming another model takes over from
its own line on, as in the server's own file."""

from __future__ import annotations

import os

import polars as pl

from servelens.pipeline.ingest import ingest
from servelens.parsers.wrappers import MAX_BLOCK_SCALE
from servelens.pipeline.store.manifest import committed_parts

from tests.helpers import wrapping as wr
from tests.parsers.test_wrappers_exports import ROOT
from tests.helpers.wrapping_exports import gcp_array

OTHER = "/models/other-13b"
# the reader's block (the ingest parameter): small, so that a small export spans several
BLOCK = 8 * 1024
COPIES = 3


def _lines() -> list[str]:
    sample = wr.split_lines((ROOT / "sample_logs/vllm/real/v1_0_11.log").read_text())
    names = [ln for ln in sample if "non-default args" in ln]
    assert len(names) == 1  # the one line naming the model
    rest = [ln for ln in sample if ln not in names]
    # start-up, then the server's lines again and again; a restart with another model
    return sample + rest * COPIES + [names[0].replace("/models/mistral-7b", OTHER)] + rest * COPIES


def test_model_reaches_every_block_of_a_newest_first_export(tmp_path):
    lines = _lines()
    times = [wr.wrapper_time_ns(i) for i in range(len(lines))]
    export = gcp_array(lines, times)
    # more than two blocks, even at the largest scale a download's block takes
    assert len(export.encode()) > 2 * MAX_BLOCK_SCALE * BLOCK
    plain, wrapped = tmp_path / "plain.log", tmp_path / "export.json"
    plain.write_text("\n".join(lines) + "\n")
    wrapped.write_text(export)
    for p in (plain, wrapped):
        os.utime(p, (times[-1] / 1e9, times[-1] / 1e9))
    ingest([plain], tmp_path / "a", engine="vllm", rollups=False, block_bytes=BLOCK)
    ingest([wrapped], tmp_path / "b", engine="vllm", rollups=False, block_bytes=BLOCK)
    base = pl.read_parquet(committed_parts(tmp_path / "a")).sort("line")
    ev = pl.read_parquet(committed_parts(tmp_path / "b")).sort("wrapper_ts", "line", descending=[False, True])
    assert ev.height == base.height
    assert ev["event"].to_list() == base["event"].to_list()
    # the model of each event is the one its server had named by then
    assert ev["model"].to_list() == base["model"].to_list()
    assert set(base["model"].drop_nulls().to_list()) == {"/models/mistral-7b", OTHER}
    # (only the two lines before the start-up line name none)
    assert base["model"].null_count() == 2
