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
    tail: bytes = b"", decode: tuple[str, ...] = (),
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
        **({"decode": list(decode)} if decode else {}),
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


def inherit_lineage(ctx: ParseContext, entries: list[dict], instance: str, *, explicit_year: bool = False) -> None:
    """Start a new file of `instance` where the instance's latest file read so far ended:
    the values a parser carries forward (`carry_*` in its state: the model named at
    start-up...) and, unless --year was given, the year of its last time. A rotated copy
    read after its older sibling, or the live file after its rotated copies, so keeps the
    model its first file named."""
    best, best_ts = None, None
    for known in entries:
        if known.get("instance") != instance:
            continue
        saved = known.get("ctx") or {}
        ts = saved.get("last_ts")
        if best is None or (ts and (best_ts is None or ts > best_ts)):
            best, best_ts = saved, ts
    if best is None:
        return
    for k, v in (best.get("state") or {}).items():
        if k.startswith("carry_"):
            ctx.state.setdefault(k, v)
    if best_ts and not explicit_year and ctx.year is None:
        last = dt.datetime.fromisoformat(best_ts)
        # a file last written before the instance's last time is older: its mtime knows better
        if ctx.mtime is None or ctx.mtime >= last:
            ctx.year_base, ctx.last_month = last.year, last.month
