"""The read block of a platform download (parsers/wrappers `block_scale`): as many times a
plain log's block as its bytes are to the engine lines inside them, times
EXPORT_CHUNK_LINES (a download's chunk costs more per chunk than a plain log's), at most
MAX_BLOCK_SCALE; a plain log and a live runtime's file keep the plain block."""

from __future__ import annotations

import pytest

from servelens.parsers import wrappers
from servelens.parsers.wrappers import EXPORT_CHUNK_LINES, MAX_BLOCK_SCALE, block_scale
from tests.helpers import wrapping as wr
from tests.helpers import wrapping_exports as wx

# (engine lines about as long as a busy server's, so that no form's envelope reaches the cap)
LINES = [f"INFO 05-12 08:19:{i % 60:02d} logger.py:37] Received request chatcmpl-{i:032x}: prompt: '{'word ' * 150}'."
         for i in range(400)]
TIMES = [wr.wrapper_time_ns(i) for i in range(len(LINES))]


def _ratio(text: str) -> tuple[tuple[str, ...], float]:
    """The layers of `text` and its head's bytes over the engine lines' bytes inside."""
    head = text.encode()[: wrappers.SAMPLE_BYTES]
    sample = wrappers.head_sample(head)
    layers, inner = wrappers.detect_lines(sample)
    raw = sum(len(s.encode()) + 1 for s in sample)
    return layers, raw / sum(len(s.encode()) + 1 for s in inner)


@pytest.mark.parametrize("form", [wx.gcp_ndjson, wx.kibana_csv, wx.cw_filter_log_events])
def test_a_download_block_holds_more_engine_lines_than_a_plain_one(form):
    text = form(LINES, TIMES)
    layers, ratio = _ratio(text)
    assert layers and wrappers.written_whole(layers)
    scale = block_scale(layers, text.encode()[: wrappers.SAMPLE_BYTES])
    assert EXPORT_CHUNK_LINES == 2.0
    assert scale == pytest.approx(min(MAX_BLOCK_SCALE, EXPORT_CHUNK_LINES * ratio))
    assert scale > ratio > 1.0


def test_a_plain_log_and_a_runtime_file_keep_the_plain_block():
    plain = "\n".join(LINES) + "\n"
    assert block_scale((), plain.encode()) == 1.0
    text = wr.to_cri(LINES, times=TIMES)
    layers, _ = _ratio(text)
    assert layers == ("cri",) and not wrappers.written_whole(layers)
    assert block_scale(layers, text.encode()[: wrappers.SAMPLE_BYTES]) == 1.0
