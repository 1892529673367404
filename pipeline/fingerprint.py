"""File identity by content, not by path.

A log file is known by the hash of its first bytes (the *head*) plus the hash of the bytes just
before the offset already ingested (the *tail check*). Together they recognise:
- the same file again (nothing new), or grown (ingest only the new part);
- a file renamed by rotation, or a compressed rotated copy (`.gz`, compared on its
  decompressed bytes): same head, same bytes up to the offset;
- a different file that happens to begin with the same bytes (two instances printing the same
  start-up banner): the head matches but the tail check does not, so it is a new file;
- a truncated file (copytruncate): shorter than the offset or a different head, so new.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

HEAD_BYTES = 4096
TAIL_BYTES = 4096
GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_stream(path: Path) -> BinaryIO:
    """The file's content as a binary stream, decompressed when it is gzip."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
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


def read_range(path: Path, start: int, end: int) -> bytes:
    """Bytes [start, end) of the (decompressed) content."""
    with open_stream(path) as f:
        if start:
            f.seek(start)
        return f.read(end - start)


def tail_check(path: Path, offset: int) -> tuple[str, int]:
    start = max(0, offset - TAIL_BYTES)
    data = read_range(path, start, offset)
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


def matches(path: Path, head: bytes, known: dict) -> bool:
    """Is the content of `path` (whose first bytes are `head`) the content `known` describes,
    possibly grown since?"""
    n = known["head_len"]
    if len(head) < n or sha(head[:n]) != known["head_sha"]:
        return False
    offset = known["offset"]
    if offset == 0:
        return True
    tail_sha, tail_len = tail_check(path, offset)
    return tail_len == known["tail_len"] and tail_sha == known["tail_sha"]


def file_key(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino
