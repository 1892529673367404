"""Newest-first exports of every platform spanning several read blocks: each event takes
the model its server had named by then, though the reader meets the start-up line last. The truth is counted from the lines written, not from any parse: the server's routes
before its restart belong to the first model, those after it to the second."""

from __future__ import annotations

import os

import polars as pl
import pytest

from servelens.pipeline.ingest import ingest
from servelens.parsers.wrappers import MAX_BLOCK_SCALE
from servelens.pipeline.store.manifest import committed_parts

from tests.helpers import wrapping as wr
from tests.helpers import wrapping_exports as X
from tests.parsers.test_wrappers_exports import ROOT

FIRST, OTHER = "/models/mistral-7b", "/models/other-13b"
# the lines that name a model (vLLM's CARRY_HINT texts)
NAMING = ("with config: ", "non-default args: ", "args: Namespace(")
ROUTE = "Route: "
COPIES = 3  # of the server's lines after each start-up: every export then spans several blocks
# the reader's block (the ingest parameter): small, so that a small export spans several
BLOCK = 8 * 1024


def _lines() -> tuple[list[str], int, int]:
    """Start-up naming FIRST, its lines again and again, a restart naming OTHER, the lines
    again; and the route lines (one event each) written before and after the restart."""
    sample = wr.split_lines((ROOT / "sample_logs/vllm/real/v1_0_11.log").read_text())
    restart = [ln.replace(FIRST, OTHER) for ln in sample if "non-default args: " in ln]
    assert len(restart) == 1 and OTHER in restart[0]
    rest = [ln for ln in sample if not any(h in ln for h in NAMING)]
    before = sample + rest * COPIES
    after = restart + rest * COPIES
    return before + after, sum(ROUTE in ln for ln in before), sum(ROUTE in ln for ln in after)


def _yaml(lines, times):
    pytest.importorskip("yaml")
    from tests.helpers.gen_gcloud_yaml import gcloud_yaml

    return gcloud_yaml(lines, times)


FORMS = {"datadog-json": X.datadog_json, "cw-insights": X.cw_insights, "cw-insights-csv": X.cw_insights_csv,
         "grafana-json": X.grafana_json, "gcloud-yaml": _yaml}


@pytest.mark.parametrize("form", list(FORMS))
def test_model_reaches_every_block_of_each_newest_first_export(tmp_path, form):
    lines, n_first, n_other = _lines()
    assert n_first > 0 and n_other > 0
    times = [wr.wrapper_time_ns(i) for i in range(len(lines))]
    export = FORMS[form](lines, times=times)
    # read in more than two blocks, even at the largest scale a download's block takes
    assert len(export.encode()) > 2 * MAX_BLOCK_SCALE * BLOCK
    path = tmp_path / f"export-{form}.log"
    path.write_text(export)
    os.utime(path, (times[-1] / 1e9, times[-1] / 1e9))
    ingest([path], tmp_path / "store", engine="vllm", rollups=False, block_bytes=BLOCK)
    ev = pl.read_parquet(committed_parts(tmp_path / "store"))
    routes = ev.filter(pl.col("message").str.contains(ROUTE, literal=True))
    assert routes.height == n_first + n_other
    by_model = dict(routes.group_by("model").len().iter_rows())
    assert by_model == {FIRST: n_first, OTHER: n_other}
