"""Log-platform CSV downloads read in blocks smaller than the file: every message quoted over
several lines (Cloud Logging keeps a container line's own newline in `textPayload`, and a
log agent joins a traceback into one entry), newest first. A block, a read's look at its
last lines, or the carry scan's window may begin inside such a message; the events are still
the server's own, the model its start-up line names included, whatever the block size.
The truth is the unwrapped log: its events, and the model read from its start-up line by a
pattern of this test's own."""

from __future__ import annotations

import os
import re

import polars as pl
import pytest

from servelens.parsers import wrappers as W
from servelens.parsers.wrappers import MAX_BLOCK_SCALE
from servelens.pipeline.ingest import ingest
from servelens.pipeline.store.manifest import committed_parts

from tests.helpers import wrapping as wr
from tests.helpers.wrapping_exports import cw_console_csv, cw_insights_csv, datadog_csv, gcp_csv, kibana_csv
from tests.parsers.test_wrappers_exports import ROOT, SAME, truth
from tests.parsers.test_wrappers_exports_csv import joined_records

CSVS = {"gcp-logs-explorer": gcp_csv, "cw-console": cw_console_csv, "cw-insights": cw_insights_csv,
        "datadog": datadog_csv, "kibana": kibana_csv}
# (the downloads written newest first: entries of one millisecond go back down the file)
NEWEST_FIRST = {"gcp-logs-explorer", "cw-insights", "datadog", "kibana"}
# (a real vLLM log larger than the blocks below, and one with a traceback)
LOGS = ["sample_logs/incident/vllm/vllm-b.log", "sample_logs/incident/vllm/vllm-a.log"]
# the reader's block (the ingest parameter): small, so that the export spans many
BLOCKS = [8 * 1024, 64 * 1024]
# vLLM's start-up args name the model served
MODEL = re.compile(r"\bmodel='([^']+)'")


def _export(rel: str, write) -> tuple[str, pl.DataFrame, list[int], tuple[int, str]]:
    """The export of a log's entries, each message with the line's newline kept (a traceback
    one entry); the plain log's events, its lines' times, and (line, model) of the first of
    its lines naming the model."""
    lines, times, base = truth(rel, "vllm")
    groups = joined_records(base, lines)
    named = [(k, m) for k, ln in enumerate(lines, 1) for m in MODEL.findall(ln)]
    assert named and {m for _, m in named} == {named[0][1]}
    entries = [("\n".join(lines[i:i + n]) + "\n", times[i]) for i, n in groups]
    text = write([m for m, _ in entries], [t for _, t in entries])
    return text, base, times, named[0]


def _ingest(path, store, newest_first: bool = False, **kw) -> pl.DataFrame:
    """The events of `path` in time order."""
    ingest([path], store, engine="vllm", rollups=False, **kw)
    return pl.read_parquet(committed_parts(store)).sort("wrapper_ts", "line", descending=[False, newest_first])


@pytest.fixture(scope="module")
def plain_events(tmp_path_factory):
    """The plain log's events as the store keeps them (ingested once per log)."""
    got = {}

    def of(rel: str) -> pl.DataFrame:
        if rel not in got:
            got[rel] = _ingest(ROOT / rel, tmp_path_factory.mktemp("plain")).sort("line")
        return got[rel]

    return of


@pytest.mark.parametrize("rel", LOGS, ids=[os.path.basename(r) for r in LOGS])
@pytest.mark.parametrize("export", list(CSVS))
def test_an_export_read_in_small_blocks_gives_the_servers_events(tmp_path, plain_events, rel, export):
    text, base, times, (named, model) = _export(rel, CSVS[export])
    rows = wr.split_lines(text)
    assert len(rows) > 2 * len(base)  # every message runs over several lines
    assert len(text.encode()) > 2 * MAX_BLOCK_SCALE * max(BLOCKS)
    path = tmp_path / "export.csv"
    path.write_text(text)
    os.utime(path, (times[-1] / 1e9, times[-1] / 1e9))
    # (the store keeps what the reader keeps of each event: the plain log ingested the same way)
    plain = plain_events(rel)
    assert plain.height == base.height and plain["event"].equals(base["event"])
    whole = _ingest(path, tmp_path / "whole", export in NEWEST_FIRST)
    assert whole.select(SAME).equals(plain.select(SAME))
    # the model the log's start-up line names, on every event from that line on
    assert set(whole.filter(plain["line"] >= named)["model"].to_list()) == {model}
    for block in BLOCKS:
        ev = _ingest(path, tmp_path / f"b{block}", export in NEWEST_FIRST, block_bytes=block)
        assert ev.select(SAME).equals(whole.select(SAME)), block
        assert ev["wrapper_ts"].equals(whole["wrapper_ts"]), block


def _frame(rows: list[str], first: int) -> pl.DataFrame:
    return pl.DataFrame({"line": pl.int_range(first, first + len(rows), eager=True), "text": pl.Series(rows, dtype=pl.String)})


@pytest.mark.parametrize("export", list(CSVS))
def test_a_block_beginning_inside_a_quoted_message_reads_the_records_after_it(export):
    """The decoder given the file from each of its first lines on (as a block read from the
    middle is): the records that begin in the block are the ones the whole file gives, and
    only the message's tail before the first of them is left unread."""
    text, _, _, _ = _export("sample_logs/incident/vllm/vllm-a.log", CSVS[export])
    rows = wr.split_lines(text)
    layer = W.detect(rows[:300])
    head = rows[:400]
    whole = W.decode(_frame(head, 1), layer).select("line", "text", "_wts")
    began = set(whole["line"].to_list())
    mid = 0
    for k in range(1, 120):
        part = W.decode(_frame(head[k:], k + 1), layer).select("line", "text", "_wts")
        mine = part.filter(pl.col("line").is_in(list(began)))
        assert mine.sort("line", "text").equals(whole.filter(pl.col("line") > k).sort("line", "text")), k
        # (what is left: lines before the first record that begins in the block)
        rest = part.filter(~pl.col("line").is_in(list(began)))
        assert rest.height == 0 or rest["line"].max() < min(b for b in began if b > k), k
        mid += rest.height > 0
    assert mid > 0  # some of those blocks began inside a message
