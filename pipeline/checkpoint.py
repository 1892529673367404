"""Checkpoints: what the store remembers about each file it has read.

One manifest entry per file content (see fingerprint.py), holding how far the file has been
read (byte offset in the decompressed content, lines), which engine and instance it belongs
to, and the parser state needed to resume mid-file (year inference, last timestamp). Ingest
and tail both read and write these entries, so batch and live data never double.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from servelens.parsers.base import ParseContext

from . import fingerprint as fp


def find_known(manifest: dict, path: Path, head: bytes) -> tuple[str | None, dict | None]:
    """The manifest entry whose content this file is (same or grown), if any."""
    best: tuple[str | None, dict | None] = (None, None)
    for key, known in manifest["files"].items():
        if fp.matches(path, head, known):
            if best[1] is None or known["offset"] > best[1]["offset"]:
                best = (key, known)
    return best


def file_state(
    path: Path, head: bytes, offset: int, lines: int, *, source: str, engine: str, instance: str, ctx: ParseContext,
    tail: bytes = b"",
) -> dict:
    """The manifest entry for `path` read up to `offset` (`lines` lines). `tail`: the
    content just before `offset` as it was read, if at hand (else it is read again)."""
    ident = fp.identity_at(path, head[: fp.HEAD_BYTES], offset, tail)
    try:
        dev, ino = fp.file_key(path)
    except OSError:
        dev, ino = 0, 0
    return {
        "head_sha": ident.head_sha,
        "head_len": ident.head_len,
        "tail_sha": ident.tail_sha,
        "tail_len": ident.tail_len,
        "offset": offset,
        "lines": lines,
        "source": source,
        "engine": engine,
        "instance": instance,
        "dev": dev,
        "inode": ino,
        "ctx": save_ctx(ctx),
    }


def save_ctx(ctx: ParseContext) -> dict:
    return {
        "last_ts": ctx.last_ts.isoformat() if ctx.last_ts else None,
        "last_month": ctx.last_month,
        "year_base": ctx.year_base,
        "rollovers": ctx.rollovers,
        "state": ctx.state,
    }


def restore_ctx(ctx: ParseContext, saved: dict) -> None:
    if saved.get("last_ts"):
        ctx.last_ts = dt.datetime.fromisoformat(saved["last_ts"])
    ctx.last_month = saved.get("last_month")
    ctx.year_base = saved.get("year_base")
    ctx.rollovers = saved.get("rollovers", 0)
    ctx.state = dict(saved.get("state") or {})
