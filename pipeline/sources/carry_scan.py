"""Values a parser carries from line to line (CARRY_FORWARD: the model a server names at
start-up), for a platform export written newest first and read in several blocks.

The reader hands blocks over in disk order; in a newest-first export that is newest block
first, so the start-up line naming the model comes in the last block and a carry forward
from chunk to chunk would never reach the requests above it on disk. Before parsing, the
file's decoded lines that may name such a value (the parser's CARRY_HINT) are parsed alone,
and each value is kept with the platform time of its line (and its pod): `finalize` then
gives an event without the value the one named last before the event's time
(ctx.file["carry_seed"]). Files in time order, and files read in one block, need none of it."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from servelens.parsers import get_parser, wrappers
from servelens.parsers.base import ParseContext, lines_frame

from . import fingerprint as fp
from .lines import complete_lines_end, decode_lines


def scan_carry(path: Path, engine: str, layers: tuple[str, ...], ctx: ParseContext, offset: int, next_line: int,
               block_bytes: int) -> None:
    parser = get_parser(engine)
    hint = getattr(parser, "CARRY_HINT", None)
    carry = [c for c in getattr(parser, "CARRY_FORWARD", ()) if c != "instance"]
    if not layers or hint is None or not carry:
        return
    if fp.is_gzip(path) or path.stat().st_size - offset <= block_bytes:
        return
    found: list[pl.DataFrame] = []
    hint_b = re.compile(hint.encode())
    with fp.open_stream(path) as f:
        if offset:
            f.seek(offset)
        held, first = b"", True
        while True:
            block = f.read(block_bytes)
            eof = len(block) < block_bytes
            buf = held + block
            cut = len(buf) if eof else complete_lines_end(buf)
            complete, held = buf[:cut], buf[cut:]
            if first:
                # in time order on disk (the usual case): a carry forward is right, nothing to do
                if not _newest_first(complete, layers):
                    return
                first = False
            # only a block holding such a line is decoded
            if complete and hint_b.search(complete):
                dec = wrappers.decode(decode_lines(complete, next_line)[0], layers)
                pod = pl.col("_lab_pod") if "_lab_pod" in dec.columns else pl.lit(None, pl.String)
                found.append(dec.filter(pl.col("text").str.contains(hint)).select("text", "_wts", pod.alias("_pod")))
            if eof:
                break
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


# lines of the file's head decoded to tell its order
HEAD_LINES = 4096


def _newest_first(head: bytes, layers: tuple[str, ...]) -> bool:
    """The export's entries go back in time down the file: put in time order, the decoded
    head's lines run backwards on disk."""
    lines, _ = decode_lines(head, 1)
    dec = wrappers.decode(lines.head(HEAD_LINES), layers).filter(pl.col("_wts").is_not_null())
    if dec.height < 2:
        return False
    steps = dec["line"].diff().drop_nulls()
    return int((steps < 0).sum()) > int((steps > 0).sum())
