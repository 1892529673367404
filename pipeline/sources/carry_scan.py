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

from pathlib import Path

import polars as pl

from servelens.parsers import get_parser, wrappers
from servelens.parsers.base import ParseContext, lines_frame

from . import fingerprint as fp
from .lines import line_frames


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
    first = last = None
    with fp.open_stream(path) as f:
        if offset:
            f.seek(offset)
        for frame in line_frames(f, next_line, block_bytes):
            # only the blocks holding such a line are decoded (and the first and the last,
            # whose times tell the file's order)
            named = bool(frame.select(pl.col("text").str.contains(hint).any()).item())
            if first is None or named:
                dec = wrappers.decode(frame, layers)
                if first is None:
                    first = _middle(dec)
                if named:
                    pod = pl.col("_lab_pod") if "_lab_pod" in dec.columns else pl.lit(None, pl.String)
                    found.append(dec.filter(pl.col("text").str.contains(hint)).select("text", "_wts", pod.alias("_pod")))
            last = frame
    end = _middle(wrappers.decode(last, layers)) if last is not None else None
    # newest first on disk: the last block's times are older than the first's
    if first is None or end is None or not end < first:
        return
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


def _middle(dec: pl.DataFrame):
    return dec["_wts"].drop_nulls().median() if dec.height else None
