"""File identity by content, not by path.

A log file is known by the hash of its first bytes (the *head*) plus the hash of the bytes just
before the offset already ingested (the *tail check*). Together they recognise:
- the same file again (nothing new), or grown (ingest only the new part);
- a file renamed by rotation, or a compressed rotated copy (`.gz`, compared on its
  decompressed bytes): same head, same bytes up to the offset;
- a different file that happens to begin with the same bytes (two instances printing the same
  start-up banner): the head matches but the tail check does not, so it is a new file;
- a truncated file (copytruncate): shorter than the offset or a different head, so new.

A UTF-16 file (what Windows PowerShell 5's `>` writes) is read as its UTF-8 transcoding, as a
`.gz` is read as its decompressed bytes: offsets are those of the content read.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

HEAD_BYTES = 4096
TAIL_BYTES = 4096
GZIP_MAGIC = b"\x1f\x8b"


# a UTF-16 file's byte order mark (Windows PowerShell 5 redirects output so)
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _magic(path: Path) -> bytes:
    """A file's first two bytes: what says whether it is read through a transformation."""
    with open(path, "rb") as f:
        return f.read(2)


def is_transcoded(path: Path) -> bool:
    """Read through a transformation (gzip, UTF-16): its content's offsets are not the
    file's, and its size on disk is not its content's."""
    head = _magic(path)
    return head == GZIP_MAGIC or head in UTF16_BOMS


GZ_CHUNK = 1 << 20


class _GzipRaw(io.RawIOBase):
    """The decompressed bytes of a gzip file, every member in turn, that keeps what it could
    read when the file is damaged: zero padding after the last member is skipped (as `gzip -t`
    accepts it), other trailing bytes end the content, and a stream cut short (a copy that
    stopped mid-write) ends where the data ends. `problem` then says what was lost. Python's
    gzip module raises in both cases, which lost every line of such a file."""

    def __init__(self, path: Path, cut_ok: bool = True):
        self.fileobj = open(path, "rb")
        self.problem: str | None = None
        # False: a stream cut short raises EOFError as Python's gzip does (the tailer reads a
        # .gz that may still be being written, and waits for its end)
        self.cut_ok = cut_ok
        self._reset()

    def _reset(self) -> None:
        self.fileobj.seek(0)
        self._d = zlib.decompressobj(wbits=31)
        self._pending = b""
        self._pos = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def _more(self) -> bytes:
        """The next piece of decompressed content (empty at its end)."""
        while not self._done:
            data = self._d.unconsumed_tail or self.fileobj.read(GZ_CHUNK)
            if not data:
                if not self.cut_ok:
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
                self._done = True
                out = self._d.flush()
                self._lost(f"the gzip stream is cut short after {self._pos + len(self._pending) + len(out):,} "
                           "decompressed bytes; what was written before the cut is kept")
                return out
            out = self._inflate(data)
            if out:
                return out
        return b""

    def _inflate(self, data: bytes) -> bytes:
        """Decompress `data` with the current member's decompressor, and go on into the next
        member when this one ends within it."""
        try:
            out = self._d.decompress(data, GZ_CHUNK)
        except zlib.error as e:
            self._done = True
            self._lost(f"the gzip data is damaged after {self._pos + len(self._pending):,} decompressed bytes "
                       f"({e}); what comes before it is kept")
            return b""
        if self._d.eof:
            out += self._next_member(self._d.unused_data)
        return out

    def _next_member(self, rest: bytes) -> bytes:
        """After a member's end: another member (its first output), zero padding, or
        trailing bytes that are not gzip."""
        while len(rest) < 2:
            more = self.fileobj.read(GZ_CHUNK)
            if not more:
                break
            rest += more
        if rest[:2] == GZIP_MAGIC:
            self._d = zlib.decompressobj(wbits=31)
            return self._inflate(rest)
        tail = rest + self.fileobj.read()
        if tail.strip(b"\x00"):
            self._lost(f"{len(tail):,} bytes after the end of the gzip stream are not gzip data and were ignored")
        self._done = True
        return b""

    def _lost(self, what: str) -> None:
        self.problem = self.problem or what

    def readinto(self, b) -> int:  # type: ignore[override]
        while not self._pending and not self._done:
            self._pending = self._more()
        n = min(len(b), len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a gzip stream seeks from its start only")
        if offset < self._pos:
            self._reset()
        buf = bytearray(GZ_CHUNK)
        while self._pos < offset:
            n = self.readinto(memoryview(buf)[: min(GZ_CHUNK, offset - self._pos)])
            if not n:
                break
        return self._pos

    def close(self) -> None:
        self.fileobj.close()
        super().close()


class TranscodedStream(io.BufferedReader):
    """A buffered _GzipRaw (or _Utf16Raw) that shows the file on disk (`fileobj`, for progress
    in bytes on disk) and what was lost (`problem`)."""

    @property
    def fileobj(self) -> BinaryIO:
        return self.raw.fileobj  # type: ignore[attr-defined]

    @property
    def problem(self) -> str | None:
        return self.raw.problem  # type: ignore[attr-defined]


class _Utf16Raw(_GzipRaw):
    """The UTF-8 bytes of a UTF-16 file (its byte order mark dropped), read piece by piece:
    a stream like _GzipRaw's, seeking from its start by reading again."""

    def _reset(self) -> None:
        self.fileobj.seek(0)
        self._d = codecs.getincrementaldecoder("utf-16")(errors="replace")
        self._pending = b""
        self._pos = 0
        self._done = False

    def _more(self) -> bytes:
        while not self._done:
            data = self.fileobj.read(GZ_CHUNK)
            if not data:
                self._done = True
                return self._d.decode(b"", final=True).encode("utf-8")
            out = self._d.decode(data).encode("utf-8")
            if out:
                return out
        return b""


def open_stream(path: Path, *, cut_ok: bool = True) -> BinaryIO:
    """The file's content as a binary stream, decompressed when it is gzip (see _GzipRaw for
    damaged ones; `cut_ok` False: a .gz cut short raises EOFError), as UTF-8 when it is
    UTF-16."""
    head = _magic(path)
    if head == GZIP_MAGIC:
        return TranscodedStream(_GzipRaw(path, cut_ok), buffer_size=GZ_CHUNK)  # type: ignore[return-value]
    if head in UTF16_BOMS:
        return TranscodedStream(_Utf16Raw(path, cut_ok), buffer_size=GZ_CHUNK)  # type: ignore[return-value]
    return open(path, "rb")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


@dataclass
class Identity:
    """What the store remembers about a file's content."""

    head_sha: str
    head_len: int
    tail_sha: str  # hash of the TAIL_BYTES before `offset` (empty at offset 0)
    tail_len: int


def read_head(path: Path) -> bytes:
    with open_stream(path) as f:
        return f.read(HEAD_BYTES)


def read_range(path: Path, start: int, end: int, *, cut_ok: bool = True) -> bytes:
    """Bytes [start, end) of the (decompressed) content."""
    with open_stream(path, cut_ok=cut_ok) as f:
        if start:
            f.seek(start)
        return f.read(end - start)


def tail_check(path: Path, offset: int, *, cut_ok: bool = True) -> tuple[str, int]:
    start = max(0, offset - TAIL_BYTES)
    data = read_range(path, start, offset, cut_ok=cut_ok)
    if len(data) != offset - start:
        return "", -1  # the content is shorter than the offset: truncated
    return sha(data), len(data)


def identity_at(path: Path, head: bytes, offset: int, tail: bytes = b"") -> Identity:
    """The identity of the content read up to `offset`. `tail`: the content just before
    `offset` as it was read, if at hand; else it is read again (for a .gz, decompressing
    from the start)."""
    n = min(offset, TAIL_BYTES)
    if not offset:
        tail_sha, tail_len = "", 0
    elif len(tail) >= n:
        tail_sha, tail_len = sha(tail[len(tail) - n:]), n
    else:
        tail_sha, tail_len = tail_check(path, offset)
    return Identity(sha(head), len(head), tail_sha, tail_len)


def content_crc(path: Path, offset: int, head: bytes = b"") -> int | None:
    """CRC-32 of the content's first `offset` bytes (from `head` when it holds them all);
    None when the content is shorter."""
    if offset <= len(head):
        return zlib.crc32(memoryview(head)[:offset])
    crc, n = 0, 0
    with open_stream(path) as f:
        while n < offset:
            piece = f.read(min(GZ_CHUNK, offset - n))
            if not piece:
                return None
            crc = zlib.crc32(piece, crc)
            n += len(piece)
    return crc


def matches(path: Path, head: bytes, known: dict) -> bool:
    """Is the content of `path` (whose first bytes are `head`) the content `known` describes,
    possibly grown since? Its first bytes and those before the offset read are compared,
    then (entries that record it) the checksum of everything before that offset: a file
    rewritten in place with the same size, start and end is another content."""
    n = known["head_len"]
    if len(head) < n or sha(head[:n]) != known["head_sha"]:
        return False
    offset = known["offset"]
    if offset == 0:
        return True
    if offset <= len(head):
        start = max(0, offset - TAIL_BYTES)
        tail_sha, tail_len = sha(head[start:offset]), offset - start
    else:
        tail_sha, tail_len = tail_check(path, offset)
    if tail_len != known["tail_len"] or tail_sha != known["tail_sha"]:
        return False
    return "crc" not in known or content_crc(path, offset, head) == known["crc"]


def file_key(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino
