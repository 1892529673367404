"""Literal blocks in `gcloud logging read`'s YAML (parsers/wrappers/gcp_yaml.py): a block of
one line (a server line that kept its newline, the usual case) is read the way a block of
several lines is, on a real server log's lines (the truth: the lines themselves)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import wrappers as W

ROOT = Path(__file__).resolve().parents[2]
# a real log's lines, and the shapes a line may take: empty, indented, ending in a carriage
# return, shorter than the block's indentation once printed
LINES = (ROOT / "sample_logs/vllm/real/v1_0_11.log").read_text().split("\n")[:300] + [
    "", "   indented by three", "ends in a carriage return\r", "x", "a: b", "'quoted'", "---",
]


def _export(payloads: list[str]) -> list[str]:
    """One entry a payload (the `textPayload:` / `jsonPayload:` lines), oldest first."""
    text = ""
    for i, p in enumerate(payloads):
        text += (f"---\ninsertId: {i:06d}\nlogName: projects/p/logs/stdout\n"
                 f"resource:\n  labels:\n    pod_name: p-0\n  type: k8s_container\n{p}"
                 f"timestamp: '2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000000001Z'\n")
    return text.split("\n")[:-1]


def _decoded(lines: list[str]) -> list[str]:
    frame = pl.DataFrame({"line": pl.int_range(1, len(lines) + 1, eager=True), "text": pl.Series(lines, dtype=pl.String)})
    return W.decode(frame, ("gcp-logging-yaml",))["text"].to_list()


@pytest.mark.parametrize("head, pad", [("textPayload: |", "  "), ("textPayload: |-", "  "), ("textPayload: |2-", "  "),
                                       ("jsonPayload:\n  message: |", "    ")])
def test_a_block_of_one_line_reads_as_a_block_of_several(head, pad):
    one = _decoded(_export([f"{head}\n{pad}{ln}\n" for ln in LINES]))
    two = _decoded(_export([f"{head}\n{pad}{ln}\n{pad}{ln}\n" for ln in LINES]))
    # a message ends at its line's end: the carriage return before the newline is not kept
    assert one == [ln.removesuffix("\r") for ln in LINES]
    assert two == [ln + "\n" + o for ln, o in zip(LINES, one)]
    # one block of one line amid blocks of two: each read as it is alone
    mixed = _decoded(_export([f"{head}\n{pad}{ln}\n" + (f"{pad}{ln}\n" if i % 3 == 0 else "") for i, ln in enumerate(LINES)]))
    assert mixed == [t if i % 3 == 0 else o for i, (o, t) in enumerate(zip(one, two))]
