"""One content under several names in one ingest (a log, its rotated `.1`, `.1.gz`, a backup
copy, a symlink) is read once: the files whose content is the same as, or the beginning of,
another file's in the same run are set aside before anything is parsed.

Across runs the manifest does this (checkpoint.KnownFiles); within one run the manifest does
not know the files yet. Only files whose first bytes match another's are compared in full,
so a directory of different logs costs one small read per file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from . import fingerprint as fp
from .discover import ROTATION_SUFFIX, Found

BLOCK = 1 << 20


@dataclass
class Duplicate:
    found: Found
    same_as: Path
    how: str  # "the same file as" | "the same content as" | "the first N bytes of"


def _preference(path: Path) -> tuple:
    """Which name of one content to read: the file itself before a symlink to it, a plain file
    before a compressed one, a name without a rotation suffix before a rotated one, then the
    shorter path."""
    try:
        gz = fp.is_transcoded(path)
    except OSError:
        gz = False  # unreadable: ingest says why when it opens it
    return (path.is_symlink(), gz, bool(ROTATION_SUFFIX.search(path.name)), len(str(path)), str(path))


def _digest(path: Path, limit: int | None = None) -> tuple[str, int]:
    """sha256 of the (decompressed) content, or of its first `limit` bytes, and its length."""
    h = hashlib.sha256()
    n = 0
    with fp.open_stream(path) as f:
        while limit is None or n < limit:
            piece = f.read(BLOCK if limit is None else min(BLOCK, limit - n))
            if not piece:
                break
            h.update(piece)
            n += len(piece)
    return h.hexdigest(), n


def set_aside(found: list[Found]) -> tuple[list[Found], list[Duplicate]]:
    """The files to read, in their order, and those whose content another file holds whole."""
    real: dict[str, Found] = {}
    duplicates: list[Duplicate] = []
    for f in sorted(found, key=lambda f: _preference(f.path)):
        key = os.path.realpath(f.path)
        if key in real:  # a symlink to a file already listed, or the same path twice
            duplicates.append(Duplicate(f, real[key].path, "the same file as"))
        else:
            real[key] = f
    heads: dict[bytes, list[Found]] = {}
    for f in real.values():
        try:
            with fp.open_stream(f.path) as s:
                head = s.read(fp.HEAD_BYTES)
        except (OSError, EOFError):
            continue  # ingest says why it cannot read it
        if head:
            heads.setdefault(head, []).append(f)
    dropped: set[int] = set()
    for group in heads.values():
        if len(group) < 2:
            continue
        try:
            whole = {id(f): _digest(f.path) for f in group}
        except (OSError, EOFError):
            continue
        # longest first: a shorter file is covered when it is the beginning of a longer one
        ordered = sorted(group, key=lambda f: (-whole[id(f)][1], _preference(f.path)))
        kept: list[Found] = []
        for f in ordered:
            sha, n = whole[id(f)]
            for k in kept:
                if whole[id(k)] == (sha, n):
                    duplicates.append(Duplicate(f, k.path, "the same content as"))
                    break
                try:
                    if _digest(k.path, n) == (sha, n):
                        duplicates.append(Duplicate(f, k.path, f"the first {n:,} bytes of"))
                        break
                except (OSError, EOFError):
                    continue
            else:
                kept.append(f)
                continue
            dropped.add(id(f))
    keep = {id(f) for f in real.values()} - dropped
    return [f for f in found if id(f) in keep], duplicates
