"""The carry scan of a newest-first export (pipeline/sources/carry_scan.py) decodes a few
entries around each line naming a model, and the wide reach only when such an entry was not
held whole: the values found, their times and servers, are those the wide reach finds, for
an entry longer than the narrow reach too. And the order of an export's entries is taken
from its detection only when the detected sample says it plainly, as the head's own decode
says it."""

from __future__ import annotations

import polars as pl
import pytest

from servelens.parsers import wrappers
from servelens.parsers.base import ParseContext
from servelens.pipeline.sources import carry_scan as cs

from tests.helpers import wrapping as wr
from tests.helpers import wrapping_exports as X
from tests.parsers.test_wrappers_exports import ROOT

FIRST, OTHER = "/models/mistral-7b", "/models/other-13b"
BLOCK = 8 * 1024
FORMS = {"gcloud-json": X.gcp_array, "datadog-json": X.datadog_json, "kibana-csv": X.kibana_csv,
         "cw-insights": X.cw_insights, "elastic": X.elastic_ndjson, "grafana-txt": X.grafana_txt}


def _lines(pad: int = 0) -> list[str]:
    """A server's lines, a restart naming OTHER (its naming line `pad` bytes longer), the
    lines again."""
    sample = wr.split_lines((ROOT / "sample_logs/vllm/real/v1_0_11.log").read_text())
    naming = [ln for ln in sample if "non-default args: " in ln]
    assert len(naming) == 1
    restart = naming[0].replace(FIRST, OTHER).replace("non-default args: {", "non-default args: {" + f"'pad': '{'x' * pad}', ", 1)
    rest = [ln for ln in sample if ln not in naming]
    return sample + rest * 3 + [restart] + rest * 3


def _export(tmp_path, form: str, pad: int = 0):
    lines = _lines(pad)
    path = tmp_path / f"{form}.log"
    path.write_text(FORMS[form](lines, times=[wr.wrapper_time_ns(i) for i in range(len(lines))]))
    return path


def _seeds(path, monkeypatch=None, near: int | None = None) -> tuple[dict, int]:
    """The carry seeds of `path` (each as rows), and how many times the narrow reach gave up."""
    gave_up = []
    around = cs._around

    def counted(*a, **k):
        out = around(*a, **k)
        gave_up.extend([1] if out is None else [])
        return out

    if monkeypatch is not None:
        monkeypatch.setattr(cs, "_around", counted)
        if near is not None:
            monkeypatch.setattr(cs, "NEAR", near)
    layers = wrappers.detect(wrappers.head_sample(path.read_bytes()[: wrappers.SAMPLE_BYTES]))
    ctx = ParseContext(engine="vllm", source="x", instance="i", year=2026)
    cs.scan_carry(path, "vllm", layers, ctx, 0, 1, BLOCK)
    return {k: v.rows() for k, v in ctx.file.get("carry_seed", {}).items()}, len(gave_up)


@pytest.mark.parametrize("form", list(FORMS))
def test_the_narrow_reach_finds_what_the_wide_one_finds(tmp_path, monkeypatch, form):
    path = _export(tmp_path, form)
    with monkeypatch.context() as m:
        m.setattr(cs, "NEAR", cs.AROUND)  # the wide reach alone
        wide, _ = _seeds(path)
    narrow, gave_up = _seeds(path, monkeypatch)
    assert gave_up == 0
    assert narrow == wide
    models = [row[2] for row in wide["model"]]
    assert FIRST in models and OTHER in models


# (a CSV row is one line, which a window of whole lines holds whatever its length; a
# pretty-printed JSON entry is several)
@pytest.mark.parametrize(("form", "wide_again"), [("gcloud-json", 1), ("datadog-json", 1), ("kibana-csv", 0)])
def test_an_entry_longer_than_the_narrow_reach_is_read_with_the_wide_one(tmp_path, monkeypatch, form, wide_again):
    # the restart's naming line is longer than the narrow reach on either side of its hint
    # (a narrow reach of 1 KiB: windows nearer than the wide reach are joined, and this
    # export is smaller than that)
    path = _export(tmp_path, form, pad=3 * 1024)
    with monkeypatch.context() as m:
        m.setattr(cs, "NEAR", cs.AROUND)
        wide, _ = _seeds(path)
    got, gave_up = _seeds(path, monkeypatch, near=1024)
    assert gave_up == wide_again
    assert got == wide
    assert OTHER in [row[2] for row in got["model"]]


@pytest.mark.parametrize("form", list(FORMS))
def test_the_order_detection_tells_is_the_order_the_head_tells(tmp_path, form):
    path = _export(tmp_path, form)
    head = path.read_bytes()
    sample = wrappers.head_sample(head[: wrappers.SAMPLE_BYTES])
    layers = wrappers.detect(sample)
    told = wrappers.sample_newest_first(sample, layers)
    assert told is True  # every one of these exports is written newest first
    assert told == cs._newest_first(head[: cs.HEAD_BYTES], layers)
    # another sample than the one just detected tells nothing
    assert wrappers.sample_newest_first(sample[:-1], layers) is None


def test_a_sample_stepping_both_ways_tells_nothing(monkeypatch):
    sample, layers = ["a", "b"], ("gcp-logging",)
    for steps, told in [((9, 0), True), ((0, 9), False), ((9, 1), None), ((5, 0), None), ((0, 0), None)]:
        monkeypatch.setattr(wrappers, "_last_detected", (layers, sample, sample, steps))
        assert wrappers.sample_newest_first(sample, layers) is told
        assert wrappers.sample_newest_first(sample, ("datadog",)) is None


def test_held_whole_wants_a_timed_entry_either_side():
    dec = pl.DataFrame({"line": [1, 5, 9, 13], "_wts": [None, 1, 2, 3]}).with_columns(
        pl.from_epoch(pl.col("_wts"), time_unit="s").dt.replace_time_zone("UTC"))
    assert cs._held_whole(dec, dec.filter(pl.col("line") == 9))
    assert not cs._held_whole(dec, dec.filter(pl.col("line") == 5))  # the first timed entry
    assert not cs._held_whole(dec, dec.filter(pl.col("line") == 13))  # the last on disk
    assert not cs._held_whole(dec, dec.filter(pl.col("line") == 1))  # no time of its own
    assert cs._held_whole(dec, dec.head(0))
