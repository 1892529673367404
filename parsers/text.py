"""A whole text through the decode stage and one engine parser: for tests, benchmarks and a
quick look at what a parser makes of some lines."""

from __future__ import annotations

import polars as pl

from . import get_parser, wrappers
from .base import ParseContext, lines_frame, parse_lines


def parse_text(
    engine: str,
    text: str,
    *,
    source: str = "test.log",
    instance: str = "test",
    year: int | None = 2026,
    decode: tuple[str, ...] | None = None,
) -> pl.DataFrame:
    """Parse a whole text (one chunk) with the named engine: the quickest way to see what a
    parser makes of some lines. Trailing line endings (`\\r\\n`, `\\n`) are removed.

    The lines go through the decoding stage first, as in ingest and tail: the wrapper
    layers (parsers/wrappers) are detected on the text's head, or given as `decode`
    (`()`: none, the engine parser alone)."""
    texts = text.split("\n")
    if texts and texts[-1] == "":
        texts.pop()
    texts = [t.removesuffix("\r") for t in texts]
    if decode is None:
        decode = wrappers.detect(wrappers.head_sample(text.encode()[: wrappers.SAMPLE_BYTES]))
    ctx = ParseContext(engine=engine, source=source, instance=instance, year=year)
    return parse_lines(wrappers.wrap(get_parser(engine), decode), lines_frame(texts), ctx)

