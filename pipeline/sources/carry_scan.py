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
import os
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from servelens.parsers import get_parser, wrappers
from servelens.parsers.base import ParseContext, lines_frame

from . import fingerprint as fp
from .lines import arrow_series, decode_lines


def scan_carry(path: Path, engine: str, layers: tuple[str, ...], ctx: ParseContext, offset: int, next_line: int,
               block_bytes: int) -> None:
    parser = get_parser(engine)
    hints = getattr(parser, "CARRY_HINT", ())
    carry = [c for c in getattr(parser, "CARRY_FORWARD", ()) if c != "instance"]
    if not layers or not hints or not carry:
        return
    if fp.is_transcoded(path) or path.stat().st_size - offset <= block_bytes:
        return
    # searched for by the longest piece without a space: a YAML export folds a long line
    # at its spaces, so the hint whole may not be in the file's bytes (the decoded lines
    # around each piece are then tested for the hint itself)
    hints_b = list(dict.fromkeys(max(h.split(), key=len).encode() for h in hints))
    has_hint = pl.any_horizontal([pl.col("text").str.contains(h, literal=True) for h in hints])
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        # (searched where it lies: no block of the file is copied)
        head = data[offset:offset + min(block_bytes, HEAD_BYTES)]
        # in time order on disk (the usual case): a carry forward is right, nothing to do
        # (told by the detection of the file's head when it read the order plainly)
        newest = ctx.file.get("newest_first") if offset == 0 else None
        if not (_newest_first(head, layers) if newest is None else newest):
            return
        # only the entries around such a line are decoded: a few entries' worth of bytes
        # first, the wide reach when an entry naming a value was not held whole that way
        finder = _Finder(data, path, hints_b, offset)
        found = _around(data, hints_b, offset, finder, NEAR, layers, next_line, has_hint)
        if found is None:
            found = _around(data, hints_b, offset, finder, AROUND, layers, next_line, has_hint)
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
# pretty-printed JSON entry is ~30 lines, a YAML one folds a long line over more); NEAR
# first, AROUND when some such entry was not held whole within NEAR
NEAR = 16 * 1024
AROUND = 256 * 1024


def _around(data, hints: list[bytes], offset: int, finder: _Finder, reach: int, layers: tuple[str, ...],
            next_line: int, has_hint: pl.Expr) -> list[pl.DataFrame] | None:
    """The decoded lines holding a hint (`text`, `_wts`, `_pod`), from the lines within
    `reach` bytes of each occurrence; None when, short of AROUND, an entry holding a hint
    may have been cut by its window's edge."""
    found = []
    for lo, hi in _windows(data, hints, offset, finder, reach):
        lines, _ = decode_lines(data[lo:hi], next_line)
        dec = wrappers.decode(lines, layers)
        hit = dec.filter(has_hint)
        if reach < AROUND and not _held_whole(dec, hit):
            return None
        found.append(hit.select("text", "_wts", wrappers.server_of(hit).alias("_pod")))
    return found


def _held_whole(dec: pl.DataFrame, hit: pl.DataFrame) -> bool:
    """Was each entry of `hit` (lines of the window `dec` holding a hint) decoded whole: an
    entry with its platform time, an entry with one before it and after it on disk (a window
    cut only its first and last entries short)."""
    if hit.height == 0:
        return True
    if hit["_wts"].null_count():
        return False
    timed = dec.filter(pl.col("_wts").is_not_null())["line"]
    return timed.min() < hit["line"].min() and hit["line"].max() < timed.max()
# bytes of the file's head decoded to tell its order
HEAD_BYTES = 256 * 1024


def _windows(data, hints: list[bytes], offset: int = 0, finder: _Finder | None = None,
             reach: int = AROUND) -> list[tuple[int, int]]:
    """Whole-line byte ranges of `data` (from `offset`) within `reach` bytes of each
    occurrence of a hint, merged. `finder`: where the hints may be (else `data` is searched
    whole)."""
    find = finder.find if finder is not None else (lambda h, at: data.find(h, at))
    spans = []
    for h in hints:
        at = find(h, offset)
        while at >= 0:
            lo = max(offset, data.rfind(b"\n", offset, max(offset, at - reach)) + 1)
            hi = data.find(b"\n", at + reach)
            spans.append((lo, len(data) if hi < 0 else hi + 1))
            at = find(h, at + reach)
    spans.sort()
    # (a narrow reach joins windows as near as the wide one would have: a server starting
    # again and again names its model many times, each window a decode of its own)
    gap = AROUND if reach < AROUND else 0
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


# the file's bytes are searched in pieces of this many (plus a hint's length, so that each
# occurrence lies whole in the piece where it starts), the pieces in arrays of at most
# SEGMENT bytes (a string view addresses its bytes with 32-bit offsets)
PIECE = 1024 * 1024
SEGMENT = 1024 * PIECE
_INLINE = 12  # the longest piece a view holds itself


class _Finder:
    """`data.find(hint, start)` for the file's bytes, searched only in the pieces that
    hold the hint: every piece is asked for every hint first, all at once by polars (a
    search many times faster than `mmap.find`, which would read the whole file once per
    hint), the file mapped by Arrow, not copied."""

    def __init__(self, data: mmap.mmap, path: Path, hints: list[bytes], offset: int):
        self.data = data
        size = len(data)
        reach = max(len(h) for h in hints) - 1
        found: dict[bytes, list[np.ndarray]] = {h: [] for h in hints}
        with pa.memory_map(os.fsencode(path)) as f:  # (a name not in UTF-8 kept as its bytes)
            whole = f.read_buffer()
            for seg in range(offset, size, SEGMENT):
                seg_end = min(size, seg + SEGMENT)
                firsts = np.arange(seg, seg_end, PIECE, dtype=np.int64)
                ends = np.minimum(firsts + PIECE + reach, size)
                buf = whole.slice(seg, int(ends[-1]) - seg)
                pieces = arrow_series(_piece_views(buf, firsts - seg, ends - seg))
                for h in hints:
                    found[h].append(firsts[pieces.bin.contains(h).to_numpy()])
                del pieces, buf
            del whole
        self.hits = {h: np.concatenate(v) for h, v in found.items()}

    def find(self, hint: bytes, start: int) -> int:
        """The first occurrence of `hint` at or after `start` (-1 if none): the pieces
        holding some occurrence at or after it, searched in order."""
        firsts = self.hits[hint]
        i = int(np.searchsorted(firsts, start - PIECE, side="right"))
        for first in firsts[i:].tolist():
            at = self.data.find(hint, max(start, first), first + PIECE + len(hint) - 1)
            if at >= 0:
                return at
        return -1


def _piece_views(buf: pa.Buffer, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """A binary-view array of `buf[start:end]` for each pair, pointing into `buf` (a piece
    of up to 12 bytes is held in its view itself)."""
    d = np.frombuffer(buf, dtype=np.uint8)
    views = np.zeros((len(starts), 4), dtype=np.int32)
    views[:, 0] = ends - starts
    raw = views.view(np.uint8)
    for i, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist())):
        if hi - lo <= _INLINE:
            raw[i, 4 : 4 + hi - lo] = d[lo:hi]
        else:
            raw[i, 4:8] = d[lo : lo + 4]
            views[i, 3] = lo
    return pa.Array.from_buffers(pa.binary_view(), len(starts), [None, pa.py_buffer(views), buf])


def _newest_first(head: bytes, layers: tuple[str, ...]) -> bool:
    """The export's entries go back in time down the file: put in time order, the decoded
    head's lines run backwards on disk."""
    head = head[:HEAD_BYTES]
    head = head[: head.rfind(b"\n") + 1] or head
    # one line (a download written on one line, its head cut short): every entry decoded
    # from it is on that line, no order to tell
    if head.find(b"\n", 0, len(head) - 1) < 0:
        return False
    lines, _ = decode_lines(head, 1)
    back, forward = wrappers.entry_steps(wrappers.decode(lines, layers))
    return back > forward
