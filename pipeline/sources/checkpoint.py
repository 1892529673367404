"""Checkpoints: what the store remembers about each file it has read.

One manifest entry per file content (see fingerprint.py), holding how far the file has been
read (byte offset in the decompressed content, lines), which engine and instance it belongs
to, and the parser state needed to resume mid-file (year inference, last timestamp). Ingest
and tail both read and write these entries, so batch and live data never double.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
from pathlib import Path
from typing import Any, Iterable

from servelens.parsers.base import ParseContext

from . import fingerprint as fp


class KnownFiles:
    """The manifest entry whose content a file is (same or grown), if any, for many files
    against one store: the entries indexed by their first bytes, so that a file costs a few hash lookups instead of a comparison with every entry
    (20,000 small files would be 400 million). Rebuilt after each commit of the store."""

    def __init__(self, store: Any):
        self.store = store
        self._generation: int | None = None
        self._full: dict[str, list[str]] = {}  # head_sha -> keys (heads of HEAD_BYTES)
        self._short: dict[int, dict[str, list[str]]] = {}  # head_len -> head_sha -> keys
        self._instances: dict[str | None, list[dict]] = {}

    def find(self, path: Path, head: bytes) -> tuple[str | None, dict | None]:
        files = self.store.manifest["files"]
        if self._generation != self.store.generation:
            self._build(files)
        return _best(files, self._candidates(head), path, head)

    def of_instance(self, instance: str | None) -> list[dict]:
        """The entries of one instance (for inherit_lineage)."""
        if self._generation != self.store.generation:
            self._build(self.store.manifest["files"])
        return self._instances.get(instance, [])

    def _build(self, files: dict) -> None:
        self._full, self._short, self._instances = {}, {}, {}
        for key, known in files.items():
            self._instances.setdefault(known.get("instance"), []).append(known)
            n = known["head_len"]
            by_sha = self._full if n == fp.HEAD_BYTES else self._short.setdefault(n, {})
            by_sha.setdefault(known["head_sha"], []).append(key)
        self._generation = self.store.generation

    def _candidates(self, head: bytes) -> list[str]:
        out = list(self._full.get(fp.sha(head[: fp.HEAD_BYTES]), ())) if len(head) >= fp.HEAD_BYTES else []
        # entries of files shorter than HEAD_BYTES when read: this file may be one grown;
        # one running hash over the head gives the digest at each such length
        h, pos = hashlib.sha256(), 0
        for n in sorted(n for n in self._short if n <= len(head)):
            h.update(head[pos:n])
            pos = n
            out.extend(self._short[n].get(h.copy().hexdigest()[:32], ()))
        return out


def _best(files: dict, keys: Iterable[str], path: Path, head: bytes) -> tuple[str | None, dict | None]:
    best: tuple[str | None, dict | None] = (None, None)
    for key in keys:
        known = files[key]
        if fp.matches(path, head, known):
            if best[1] is None or known["offset"] > best[1]["offset"]:
                best = (key, known)
    return best


def file_state(
    path: Path, head: bytes, offset: int, lines: int, *, source: str, engine: str, instance: str, ctx: ParseContext,
    tail: bytes = b"", decode: tuple[str, ...] = (), crc: int | None = None,
) -> dict:
    """The manifest entry for `path` read up to `offset` (`lines` lines). `tail`: the
    content just before `offset` as it was read, if at hand (else it is read again); `crc`:
    the CRC-32 of the content before `offset` as it was read (fingerprint.matches)."""
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
        "path": str(path.absolute()),  # `source` may be relative to where the command ran
        "engine": engine,
        "instance": instance,
        "dev": dev,
        "inode": ino,
        "ctx": save_ctx(ctx),
        **({"decode": list(decode)} if decode else {}),
        **({"crc": crc} if crc is not None else {}),
    }


def save_ctx(ctx: ParseContext) -> dict:
    """The context as it is now: a copy of the parser's state, which reading on changes in
    place (an entry kept while more is read, as a part's roll-back point, must not move)."""
    return {
        "last_ts": ctx.last_ts.isoformat() if ctx.last_ts else None,
        "last_month": ctx.last_month,
        "year_base": ctx.year_base,
        "rollovers": ctx.rollovers,
        "state": copy.deepcopy(ctx.state),
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
