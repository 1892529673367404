"""From bytes to parsed chunks: read a stream in bounded blocks, cut it into lines, hold back
an unfinished record, and hand each chunk of complete records to the engine parser.

Used by both `ingest` (to the end of the file) and `tail` (holding the partial last line and
the last record until more arrives), so a multi-line record is never split across chunks and
memory stays bounded by the block size whatever the file's size.
"""

from __future__ import annotations

import os
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, Iterator

import numpy as np
import polars as pl
import pyarrow as pa

from servelens.parsers.base import ParseContext, parse_isolated
from servelens.parsers.finalize import finalize

from .fingerprint import TAIL_BYTES

DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024
# The longest line: a longer one is cut into pieces of this many bytes, each an event (and a
# line number) of its own, in ingest and tail alike (the tailer reads at most this much of
# a file at a time). See docs/failure-modes.md.
MAX_LINE_BYTES = 32 * 1024 * 1024
# A record held back longer than this is parsed anyway (a runaway "record" must not grow
# memory without bound).
MAX_HELD_BYTES = 64 * 1024 * 1024


@dataclass
class ParsedChunk:
    events: pl.DataFrame
    offset: int  # byte offset (in the decompressed content) after the last line consumed
    next_line: int  # 1-based number of the next line to read
    n_lines: int  # physical lines consumed by this chunk
    invalid_utf8: bool
    # the last TAIL_BYTES of content before `offset` (fewer when the stream was opened at an
    # offset less than that far back): the checkpoint's tail hash without reading the file
    # again, which for a .gz would mean decompressing it from the start at every chunk
    tail: bytes = b""
    nul_bytes: int = 0  # NUL bytes dropped from the text (preallocated zeros after a crash)
    # CRC-32 of the whole content before `offset` (continued from parse_stream's `crc`; None
    # when none was given): a rewrite that keeps the file's size and ends is told by it
    crc: int | None = None


def decode_lines(data: bytes, first_line: int) -> tuple[pl.DataFrame, bool]:
    """Complete lines (each ending in \\n, except perhaps the last) -> frame(line, text).
    NUL bytes are dropped: a file system hands back zeros for what a crash left unwritten,
    and they are no part of any line."""
    df, bad, _ = _decode_lines(data, first_line)
    return df, bad


def _decode_lines(data: bytes, first_line: int, end: int | None = None) -> tuple[pl.DataFrame, bool, np.ndarray | None]:
    """`decode_lines` of `data[:end]` (the complete lines of a larger buffer, read in place),
    with the byte offset of each line's start in `data` (None when invalid UTF-8 was
    replaced: the offsets are then those of other bytes)."""
    end = len(data) if end is None else end
    if end < _VIEW_LIMIT and _valid_utf8(data, end):
        # Each line a string view into the buffer, its \n left out: no copy of the text
        # (stripping the \n off strings that hold it copies every line)
        starts = line_start_offsets(memoryview(data)[:end])
        if end and data[end - 1] == 10:
            starts = starts[:-1]
        if _INLINE <= end <= MAX_LINE_BYTES and data[end - 1] == 10:
            s = _ended_lines(data, starts, end)
        else:
            s = arrow_series(_line_views(data, starts, end)).alias("text")
        bad, own = False, starts
    else:
        data = data[:end]
        try:
            data.decode("utf-8")  # validation only: the column is built from the bytes
            bad = False
        except UnicodeDecodeError:
            data = data.decode("utf-8", errors="replace").encode("utf-8")
            bad = True
        end = len(data)
        # One string per line straight from the buffer and the newline offsets (no Python
        # string per line, no split/explode): each string still ends in its \n, cut below.
        starts = line_start_offsets(data)
        if data.endswith(b"\n"):
            starts = starts[:-1]
        own = None if bad else starts
        offsets = np.empty(len(starts) + 1, dtype=np.int64)
        offsets[:-1] = starts
        offsets[-1] = len(data)
        arr = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data))
        s = pl.Series("text", arr, dtype=pl.String).str.strip_suffix("\n")
    if data.find(b"\x00", 0, end) >= 0:  # dropped after the cut, so lines and offsets stay those of the bytes
        s = s.str.replace_all("\x00", "", literal=True)
    if data.find(b"\r", 0, end) >= 0:
        s = s.str.strip_suffix("\r")
    if first_line == 1 and data.startswith(_BOM, 0, end):
        # a file saved by a Windows tool opens with a byte order mark: no part of its line
        s = s.str.strip_prefix("\ufeff")
    n = len(s)
    df = pl.DataFrame(
        {
            "line": pl.int_range(first_line, first_line + n, eager=True, dtype=pl.Int64),
            "text": s,
        }
    )
    return df, bad, own


# string views address their bytes with 32-bit offsets
_VIEW_LIMIT = 2**31 - 1
_INLINE = 12  # a string view holds a string of up to this many bytes itself


def arrow_series(array: pa.Array) -> pl.Series:
    """A polars Series of an Arrow array, its buffers taken as they are (no copy)."""
    return pl.Series(_CArray(array))


class _CArray:
    """An Arrow array handed to polars through the Arrow C data interface, as it is (a
    pyarrow array itself takes a path through pyarrow.compute, which costs its import)."""

    def __init__(self, array: pa.Array):
        self.array = array

    def __arrow_c_array__(self, requested_schema: object | None = None) -> object:
        return self.array.__arrow_c_array__(requested_schema)


def _valid_utf8(data: bytes, end: int) -> bool:
    """Is `data[:end]` valid UTF-8? (Arrow's check, which allocates nothing; Python's
    decode would make a string of it all.) When Arrow says no, Python's decoder decides, as
    everywhere else."""
    one = pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, end], dtype=np.int64)), pa.py_buffer(data))
    try:
        one.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _ended_lines(data: bytes, starts: np.ndarray, end: int) -> pl.Series:
    """The lines of `data[:end]` that begin at `starts`, when every one ends in its \n (none
    cut in pieces, the last one finished): each line with its \n a string of an Arrow array
    over the buffer, which polars makes its string views of (in one pass, pointing into the
    buffer), then each cut by its last byte (new views of fewer bytes: no text copied)."""
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    offsets[:-1] = starts
    offsets[-1] = end
    arr = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(data))
    return arrow_series(arr).str.head(-1).alias("text")


def _line_views(data: bytes, starts: np.ndarray, end: int) -> pa.Array:
    """An Arrow string-view array of the lines of `data[:end]` that begin at `starts`, each
    without its final \n (Arrow's layout: per string 16 bytes, its length, then the string
    itself when it is short, zero-padded, else its first 4 bytes, buffer 0 and its offset
    there)."""
    d = np.frombuffer(data, dtype=np.uint8, count=end)
    n = len(starts)
    nexts = np.empty(n, dtype=np.int64)
    nexts[:-1] = starts[1:]
    nexts[-1] = end
    lens = nexts - starts
    if end:  # (every line holds a byte then: only an empty buffer has an empty line)
        lens -= d[nexts - 1] == 10
    if end < _INLINE:
        return _line_views_small(data, d, starts, lens, end)
    views = np.empty((n, 4), dtype=np.int32)
    views[:, 0] = lens
    # the 12 bytes from each line's start, gathered at once (a line starting in the last 12
    # bytes takes them from the end's 12, put right below)
    at = np.minimum(starts, end - _INLINE)
    got = np.ndarray((end - _INLINE + 1,), dtype=f"V{_INLINE}", buffer=data, strides=(1,))[at]
    for i in np.flatnonzero(at != starts):
        s = int(starts[i])
        row = got[i : i + 1].view(np.uint8)
        row[:] = 0
        row[: end - s] = d[s:end]
    # a short string keeps its own bytes, zeros after them; a long one's first 4 are its prefix
    got = got.view(np.uint32).reshape(n, 3)
    got &= _KEEP[np.minimum(lens, _INLINE)].view(np.uint32).reshape(n, 3)
    short = lens <= _INLINE
    views[:, 1] = got[:, 0]
    views[:, 2] = np.where(short, got[:, 1], 0)
    views[:, 3] = np.where(short, got[:, 2], starts)
    return pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(views), pa.py_buffer(data)])


# per length 0..12: the mask of a short string's own bytes among the 12 gathered from its start
_KEEP = np.array([[255] * k + [0] * (_INLINE - k) for k in range(_INLINE + 1)], dtype=np.uint8).view(f"V{_INLINE}").ravel()


def _line_views_small(data: bytes, d: np.ndarray, starts: np.ndarray, lens: np.ndarray, end: int) -> pa.Array:
    """`_line_views` of fewer than 12 bytes: every line short, inline."""
    views = np.zeros((len(starts), 4), dtype=np.int32)
    views[:, 0] = lens
    raw = views.view(np.uint8)
    for i, (s, k) in enumerate(zip(starts.tolist(), lens.tolist())):
        raw[i, 4 : 4 + k] = d[s : s + k]
    return pa.Array.from_buffers(pa.string_view(), len(starts), [None, pa.py_buffer(views), pa.py_buffer(data)])


_BOM = "\ufeff".encode()


def line_start_offsets(data: bytes) -> np.ndarray:
    """Byte offset of the start of each line in `data` (a line longer than MAX_LINE_BYTES
    starts a new piece every MAX_LINE_BYTES)."""
    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.empty(len(nl) + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl + 1
    if len(data) <= MAX_LINE_BYTES:  # (no line that long in it)
        return starts
    ends = np.append(nl, len(data))  # where each line's text ends (its \n not counted)
    long = np.flatnonzero(ends - starts > MAX_LINE_BYTES)
    if len(long):  # rare: cut each long line into pieces
        extra = [np.arange(starts[i] + MAX_LINE_BYTES, ends[i], MAX_LINE_BYTES) for i in long]
        starts = np.sort(np.concatenate([starts, *extra]))
    return starts


def parse_stream(
    stream: BinaryIO,
    parser,
    ctx: ParseContext,
    *,
    offset: int,
    next_line: int,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    hold_partial_line: bool = False,
    hold_last_record: bool = False,
    crc: int | None = None,
    threads: int | None = None,
) -> Iterator[ParsedChunk]:
    """Parse `stream` (positioned at `offset`) chunk by chunk. `crc`: the CRC-32 of the
    content before `offset`, continued over each chunk (ParsedChunk.crc). `threads`: parse
    threads other than PARSE_THREADS (an ingest that reads beside its worker processes takes
    its share of the cores, as they do; never more than the cores).

    Batch ingest consumes everything to the end, an unterminated last line included. A
    tailer holds back the partial last line (its writer has not finished it) and, until the
    file goes quiet, the last record (a traceback may still be growing): the last chunk's
    `offset` is where reading must resume.

    Chunks are parsed on PARSE_THREADS threads (polars releases the GIL, so two chunks parse
    on two cores), while reading, timestamp resolution (`finalize`, which carries state from
    one chunk to the next) and the consumer's writing stay in order on the calling thread.
    """
    pending: deque = deque()
    chunks = _split_chunks(
        stream, parser, offset=offset, next_line=next_line, block_bytes=block_bytes,
        hold_partial_line=hold_partial_line, hold_last_record=hold_last_record, crc=crc,
    )
    carry = getattr(parser, "CARRY_FORWARD", ())
    n_threads = PARSE_THREADS if threads is None else _within_cores(threads)
    executor = _executor(n_threads)
    for chunk, end_offset, end_line, n, bad, tail, nul, starts, crc_after in chunks:
        pending.append((executor.submit(parse_isolated, parser, chunk, ctx), end_offset, end_line, n, bad, tail, nul,
                        starts, crc_after))
        # one chunk more than threads: both stay busy while the consumer writes a batch
        if len(pending) > n_threads:
            yield _finish(pending.popleft(), ctx, carry)
    while pending:
        yield _finish(pending.popleft(), ctx, carry)


def complete_lines_end(buf: bytes) -> int:
    """Where the complete lines of `buf` end: after its last newline, or, for an unfinished
    line past MAX_LINE_BYTES, after its last whole piece."""
    cut = buf.rfind(b"\n") + 1
    return cut + max(0, len(buf) - cut - 1) // MAX_LINE_BYTES * MAX_LINE_BYTES


def line_frames(stream: BinaryIO, next_line: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[pl.DataFrame]:
    """The stream's lines (`line`, `text`) block by block, numbered and cut as `parse_stream`
    numbers and cuts them, without parsing: the cheap first pass a parser's `scan_file`
    reads (pipeline/ingest.py)."""
    held = b""
    while True:
        block = stream.read(block_bytes)
        eof = len(block) < block_bytes
        buf = held + block if held else block
        if not buf:
            return
        if eof:
            complete, held = buf, b""
        else:
            cut = complete_lines_end(buf)
            complete, held = buf[:cut], buf[cut:]
        if complete:
            lines, _ = decode_lines(complete, next_line)
            next_line += lines.height
            yield lines
        if eof:
            return


def _parse_threads() -> int:
    """Two, or an ingest worker process's share of the cores (its environment says it; never
    more than the cores: each thread holds a chunk in flight)."""
    n = os.environ.get("SERVELENS_PARSE_THREADS", "")
    return _within_cores(int(n)) if n.isdigit() else 2


def _within_cores(n: int) -> int:
    return max(1, min(n, os.cpu_count() or 1))


PARSE_THREADS = _parse_threads()
_EXECUTORS: dict[int, ThreadPoolExecutor] = {}  # parse threads -> their pool, made when first asked for


def _executor(n: int) -> ThreadPoolExecutor:
    if n not in _EXECUTORS:
        _EXECUTORS[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="servelens-parse")
    return _EXECUTORS[n]


# The bulk of a busy server's log: events whose typed columns say what the line said. Their
# raw text (a vLLM `Received request` line's prompt, a TensorRT-LLM iteration's JSON) would be
# most of the stored bytes, so it is not kept unless the store keeps every line
# (`servelens ingest --keep-lines`). Never dropped: unparsed lines, errors, logs, capacity,
# preemption and shutdown lines, any line at WARNING or above, and failed HTTP requests
# (the error views read their text).
TRIMMED_KINDS = ("request", "request_arrived", "request_finished", "engine_stats", "batch", "http_access")


def trim_messages(events: pl.DataFrame) -> pl.DataFrame:
    """`message` nulled on the bulk events (TRIMMED_KINDS) that need no text."""
    if events.height == 0:
        return events
    status = pl.col("http_status")
    drop = (
        pl.col("event").is_in(TRIMMED_KINDS)
        & ~pl.col("level").is_in(("WARNING", "ERROR", "CRITICAL")).fill_null(False)
        & ~((status == 429) | (status >= 500)).fill_null(False)
    )
    # the kept texts copied out (concat_str makes new strings): nulling rows of the column
    # itself would keep every dropped text's bytes alive in its buffers
    kept = pl.concat_str([pl.col("message"), pl.lit("")])
    return events.with_columns(pl.when(drop).then(None).otherwise(kept).alias("message"))


def _finish(item: tuple, ctx: ParseContext, carry: tuple[str, ...]) -> ParsedChunk:
    future, end_offset, end_line, n, bad, tail, nul, starts, crc = item
    events = with_byte_offsets(finalize(future.result(), ctx, carry=carry), starts, end_line - n)
    if not ctx.keep_lines:
        events = trim_messages(events)
    return ParsedChunk(events, end_offset, end_line, n, bad, tail, nul, crc)


def with_byte_offsets(events: pl.DataFrame, starts: np.ndarray, first_line: int) -> pl.DataFrame:
    """`byte_offset` of each event: where its `line` starts in the file's content (`starts`:
    the absolute start of each line of the chunk, the first being line `first_line`), so
    the raw lines can be read back from the source by offset (`servelens show`). A line
    outside the chunk (none should be) gets null, never another line's offset."""
    if events.height == 0 or len(starts) == 0:
        return events
    idx = (events["line"] - first_line).fill_null(-1).to_numpy()
    inside = (idx >= 0) & (idx < len(starts))
    offsets = pl.Series("byte_offset", starts[np.clip(idx, 0, len(starts) - 1)], dtype=pl.Int64)
    if inside.all():
        return events.with_columns(offsets)
    return events.with_columns(
        pl.when(pl.Series(inside)).then(offsets).otherwise(None).alias("byte_offset")
    )


TAIL_WINDOW_LINES = 256


def last_record_start(parser, text: pl.Series, asked: int = 0) -> int:
    """Index of the last line (after the first) where a record begins; 0 when none does.

    Only the end of the block matters. A parser whose `RECORD_LOOKBACK` says how many lines
    before a line decide whether it starts a record (vLLM: 1, TGI: 0) is asked about the
    last lines only (computing starts over a whole block cost 16% of vLLM ingest); the
    window doubles until it holds a start past its look-back lines. Without it (TensorRT-LLM:
    a traceback's state reaches back to its `Traceback` line) the whole block is used.
    `asked`: the lines before it (after the first) are known to begin no record (the held
    part of the block before, already asked): no window reaches further back than them."""
    n = len(text)
    lookback = getattr(parser, "RECORD_LOOKBACK", None)
    k = TAIL_WINDOW_LINES
    while lookback is not None and lookback + k < n:
        if asked > 1 and (n - k <= asked or (k > TAIL_WINDOW_LINES and 2 * asked >= n)):
            # the last window (at once when the first found nothing and most of the block
            # is a record held before: it goes on): the lines from `asked` on, with their
            # look-back lines (and one more: a newest-first export's oldest entries in a
            # window count as unknown)
            lo = max(0, asked - lookback - 1)
            j = _last_start(parser, text.slice(lo, n - lo))
            return lo + j if lo + j >= asked else 0
        size = lookback + k
        j = _last_start(parser, text.slice(n - size, size))
        if j >= max(lookback, 1):  # a line whose look-back lines are all in the window
            return n - size + j
        k *= 2
    return _last_start(parser, text)


def _last_start(parser, text: pl.Series) -> int:
    starts = parser.record_starts(text).fill_null(True)
    idx = np.flatnonzero(starts.to_numpy()[1:]) + 1
    return int(idx[-1]) if len(idx) else 0


def _split_chunks(
    stream: BinaryIO,
    parser,
    *,
    offset: int,
    next_line: int,
    block_bytes: int,
    hold_partial_line: bool,
    hold_last_record: bool,
    crc: int | None = None,
) -> Iterator[tuple]:
    """Cut the stream into chunks of complete records: (lines, offset after, next line
    number, lines in the chunk, invalid UTF-8 seen, the content's last TAIL_BYTES, NUL
    bytes dropped, the absolute byte offset where each of the chunk's lines starts, the CRC-32
    of the content up to the chunk's end when `crc` was given)."""
    held = b""
    tail = b""
    # the held lines (after the first) known to begin no record: a record held over many
    # blocks (a long traceback) is asked about its new lines only, not all of it each time
    asked = 0
    while True:
        block = stream.read(block_bytes)
        eof = len(block) < block_bytes
        buf = held + block if held else block
        if not buf:
            return
        # the complete lines are buf[:cut], read in place (a slice would copy the block)
        cut = len(buf) if eof and not hold_partial_line else complete_lines_end(buf)
        if not cut:
            held = buf
            if eof:
                return
            continue
        lines, bad, at = _decode_lines(buf, next_line, cut)
        keep = lines.height
        final = eof and not hold_last_record
        asked_now = 0
        if not final and cut < MAX_HELD_BYTES:
            # everything before the last record start is complete; the last record may
            # still continue in the next block
            keep = last_record_start(parser, lines["text"], asked)
            asked_now = lines.height
        if keep == 0:
            held = buf
            asked = asked_now
            if eof:
                return
            continue
        # (the lines after the last start begin none: held, they need not be asked again)
        asked = asked_now - keep if asked_now else 0
        # (the lines' offsets found once: counted again only where bad bytes were replaced)
        starts = (at if at is not None else line_start_offsets(memoryview(buf)[:cut]))[: lines.height]
        if keep < lines.height:
            cut_at = int(starts[keep])
            chunk = lines.head(keep)
        else:
            cut_at, chunk = cut, lines
        starts = starts[:keep] + offset
        offset += cut_at
        next_line += keep
        held = buf[cut_at:]
        tail = (tail + buf[max(0, cut_at - TAIL_BYTES):cut_at])[-TAIL_BYTES:]
        nul = buf.count(0, 0, cut_at) if buf.find(b"\x00", 0, cut) >= 0 else 0
        if crc is not None:
            crc = zlib.crc32(memoryview(buf)[:cut_at], crc)
        yield chunk, offset, next_line, keep, bad, tail, nul, starts, crc
        if eof and not held:
            return
        if eof:
            # only the held-back part is left; parse it unless it must wait for more data
            if hold_last_record or (hold_partial_line and b"\n" not in held):
                return
