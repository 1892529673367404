"""Values a parser carries from line to line (CARRY_FORWARD: the model a server names at
start-up), for a platform export written newest first and read in several blocks.

The reader hands blocks over in disk order; in a newest-first export that is newest block
first, so the start-up line naming the model comes in the last block and a carry forward
from chunk to chunk would never reach the requests above it on disk. Before parsing, the
file's decoded lines that may name such a value (the parser's CARRY_HINT, literal texts such a
line holds) are parsed alone,
and each value is kept with the platform time of its line (and its server): `finalize` then
gives an event without the value the one named last before the event's time
(ctx.file["carry_seed"]). Files in time order, and files read in one block, need none of it."""

from __future__ import annotations

import mmap
from pathlib import Path

import polars as pl

from servelens.parsers import get_parser, wrappers
from servelens.parsers.base import ParseContext, lines_frame

from . import fingerprint as fp
from .lines import decode_lines


def scan_carry(path: Path, engine: str, layers: tuple[str, ...], ctx: ParseContext, offset: int, next_line: int,
               block_bytes: int) -> None:
    parser = get_parser(engine)
    hints = getattr(parser, "CARRY_HINT", ())
    carry = [c for c in getattr(parser, "CARRY_FORWARD", ()) if c != "instance"]
    if not layers or not hints or not carry:
        return
    if fp.is_transcoded(path) or path.stat().st_size - offset <= block_bytes:
        return
    found: list[pl.DataFrame] = []
    # searched for by the longest piece without a space: a YAML export folds a long line
    # at its spaces, so the hint whole may not be in the file's bytes (the decoded lines
    # around each piece are then tested for the hint itself)
    hints_b = list(dict.fromkeys(max(h.split(), key=len).encode() for h in hints))
    has_hint = pl.any_horizontal([pl.col("text").str.contains(h, literal=True) for h in hints])
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        # (searched where it lies: no block of the file is copied)
        head = data[offset:offset + min(block_bytes, HEAD_BYTES)]
        # in time order on disk (the usual case): a carry forward is right, nothing to do
        if not _newest_first(head, layers):
            return
        # only the entries around such a line are decoded
        for lo, hi in _windows(data, hints_b, offset):
            lines, _ = decode_lines(data[lo:hi], next_line)
            dec = wrappers.decode(lines, layers)
            found.append(dec.filter(has_hint).select("text", "_wts", wrappers.server_of(dec).alias("_pod")))
    cands = pl.concat(found) if found else pl.DataFrame()
    if cands.height == 0:
        return
    scan_ctx = ParseContext(engine=engine, source=ctx.source, instance=ctx.instance, year=ctx.year)
    events = parser.parse(lines_frame(cands["text"].to_list()), scan_ctx)
    seeds = {}
    for col in carry:
        if col not in events.columns:
            continue
        named = events.filter(pl.col(col).is_not_null()).select("line", col)
        if named.height == 0:
            continue
        at = cands.with_row_index("line", offset=1).with_columns(pl.col("line").cast(named["line"].dtype))
        seeds[col] = named.join(at.select("line", "_wts", "_pod"), on="line", how="left").select(
            pl.col("_wts").alias("_seed_ts"), pl.col("_pod").fill_null("").alias("_seed_pod"), pl.col(col).alias("_seed")
        ).drop_nulls("_seed_ts").sort("_seed_ts")
    if seeds:
        ctx.file["carry_seed"] = seeds


# bytes either side of a line naming a value decoded with it: its whole entry (a
# pretty-printed JSON entry is ~30 lines, a YAML one folds a long line over more)
AROUND = 256 * 1024
# bytes of the file's head decoded to tell its order
HEAD_BYTES = 256 * 1024


def _windows(data, hints: list[bytes], offset: int = 0) -> list[tuple[int, int]]:
    """Whole-line byte ranges of `data` (from `offset`) around each occurrence of a hint,
    merged."""
    spans = []
    for h in hints:
        at = data.find(h, offset)
        while at >= 0:
            lo = max(offset, data.rfind(b"\n", offset, max(offset, at - AROUND)) + 1)
            hi = data.find(b"\n", at + AROUND)
            spans.append((lo, len(data) if hi < 0 else hi + 1))
            at = data.find(h, at + AROUND)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _newest_first(head: bytes, layers: tuple[str, ...]) -> bool:
    """The export's entries go back in time down the file: put in time order, the decoded
    head's lines run backwards on disk."""
    head = head[:HEAD_BYTES]
    lines, _ = decode_lines(head[: head.rfind(b"\n") + 1] or head, 1)
    dec = wrappers.decode(lines, layers).filter(pl.col("_wts").is_not_null())
    if dec.height < 2:
        return False
    steps = dec["line"].diff().drop_nulls()
    return int((steps < 0).sum()) > int((steps > 0).sum())
