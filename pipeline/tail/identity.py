"""Which content an open log file holds: a manifest entry to resume (same content, maybe
renamed, copied or compressed) or new content to read from its start (or, with --from-end,
from its end).

`Followed` is one open file (one inode) and how far its content has been read. The mixin's
methods run inside the Tailer (tail.py), which owns the open files (`followed`), the store
and the progress not committed yet (`files`): an entry followed by one open file is never
resumed by a second one at the same time, and a file that is a copy of an open one waits.
"""

from __future__ import annotations

import datetime as dt
import functools
import gzip
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelens.parsers import get_parser, wrappers
from servelens.parsers.base import ParseContext

from ..sources import fingerprint as fp
from ..sources.checkpoint import inherit_lineage, restore_ctx
from ..sources.detect_memo import DetectMemo
from ..sources.discover import display_path, looks_binary
from ..sources.lines import MAX_LINE_BYTES
from ..sources.naming import directory_instance

# bytes read from one file at a time (bounds memory; 0.5 s of 50k lines/s fits): one byte
# more than the longest line, so a line of exactly MAX_LINE_BYTES is seen whole with its
# newline and cut where ingest cuts it
MAX_READ = MAX_LINE_BYTES + 1
COPY_WAIT_S = 2.0  # a new file that looks like a copy still being written waits this long
DETECT_WAIT_S = 5.0  # a new file too short to recognise its engine waits this long
GZ_ERRORS = (EOFError, OSError, zlib.error, gzip.BadGzipFile)


@dataclass
class Followed:
    """One open file (one inode) and how far its content has been read."""

    path: Path
    dev: int
    ino: int
    fd: int
    is_gz: bool
    first_seen: float
    initial: bool  # found by the first scan: --from-end applies
    key: str | None = None  # manifest entry; None until resolved
    engine: str | None = None
    decode: tuple = ()  # wrapper layers undone before the engine parser (parsers/wrappers)
    instance: str = ""
    source: str = ""
    parser: Any = None
    ctx: ParseContext | None = None
    offset: int = 0  # bytes of content consumed (decompressed for .gz)
    next_line: int = 1
    head: bytes = b""  # content[: min(HEAD_BYTES, offset)]
    tail: bytes = b""  # content[offset - TAIL_BYTES : offset]
    crc: int | None = 0  # CRC-32 of content[:offset] (None: not known, not recorded)
    gz: Any = None  # decompressing stream positioned at offset + len(carry)
    carry: bytes = b""  # .gz bytes read but not consumed yet
    last_size: int = -1
    last_mtime: int = -1
    last_growth: float = 0.0
    pending_since: float | None = None
    settled: bool = False  # read while quiet and nothing changed since
    in_scan: bool = True  # still under a watched name
    next_try: float = 0.0
    done: bool = False
    skip: str = ""
    failures: int = 0  # reading or parsing it failed this many times in a row
    retry_at: float = 0.0  # after a failure: not read again before this (monotonic)



class IdentityMixin:
    """Identity decisions of the Tailer (see the module docstring). The Tailer provides:"""

    followed: dict[tuple[int, int], Followed]  # open files by (device, inode)
    files: dict[str, dict]  # manifest entries read but not committed yet
    store: Any
    engine: str
    instance: str | None
    instance_from: str | None
    year: int | None
    from_end: bool
    say: Any

    def _state(self, fol: Followed) -> dict:  # pragma: no cover - the Tailer's
        raise NotImplementedError

    def _owned(self) -> set[str]:
        return {f.key for f in self.followed.values() if f.key is not None}

    def _resolve(self, fol: Followed, now: float) -> bool:
        """Decide what content `fol` is: a known entry to resume, or new. False: not yet."""
        head = self._read_head(fol)
        if head is None or not head:
            return False
        if looks_binary(head):
            fol.skip = "binary file, not a text log"
            return False
        owned = self._owned()
        waiting = {(f.dev, f.ino): f for f in self.followed.values() if f.key is None and f is not fol}
        candidates = []
        maybe_copy = False
        # progress read but not committed yet counts: a file closed earlier in this poll
        # may have advanced the entry another file is about to resume
        entries = {**self.store.manifest["files"], **self.files}
        for key, known in entries.items():
            n = known.get("head_len", 0)
            if n == 0 or len(head) < n or fp.sha(head[:n]) != known["head_sha"]:
                continue
            try:
                ok = self._tail_matches(fol, known)
            except GZ_ERRORS:
                return False
            if ok is None:
                maybe_copy = True
                continue
            if not ok:
                continue
            if key in owned:
                # the same content is being followed in another file: this is a copy (the
                # copytruncate copy, a .gz of a rotated file); wait for the original to go
                return False
            original = waiting.get((known.get("dev"), known.get("inode")))
            if original is not None and self._holds(original, known):
                # the file this entry was read from is open, still holds that content and
                # is about to resume it: this one is a copy (matters after a restart, when
                # the copy may be seen first)
                return False
            same_inode = (known.get("dev"), known.get("inode")) == (fol.dev, fol.ino)
            candidates.append((same_inode, known["offset"], key))
        if candidates:
            _, _, key = max(candidates)
            return self._claim(fol, key, entries[key])
        if maybe_copy and now - fol.first_seen < COPY_WAIT_S:
            return False
        if self._copy_of_open_file(fol):
            return False
        engine = fol.engine or (self.engine if self.engine != "auto" else None)
        fol.decode, found = self._detect_memos[engine is None](head)
        if engine is None:
            engine, _score = found
            if engine == "unknown" and len(head) < fp.HEAD_BYTES and now - fol.first_seen < DETECT_WAIT_S and not fol.initial:
                return False  # a few lines more may tell
        return self._start_new(fol, engine, head)

    @functools.cached_property
    def _detect_memos(self) -> dict[bool, DetectMemo]:
        """Detection once per shape of a new file's first lines (sources/detect_memo.py), with
        the engine and without: a directory of many small files, one per pod, pays it once,
        as ingest does."""
        return {True: DetectMemo(engine=True), False: DetectMemo(engine=False)}

    def _holds(self, fol: Followed, known: dict) -> bool:
        """Does this open file still hold the content of the entry (not truncated since)?"""
        if fol.is_gz:
            return False
        n = known.get("head_len", 0)
        try:
            return fp.sha(os.pread(fol.fd, n, 0)) == known["head_sha"] and bool(self._tail_matches(fol, known))
        except OSError:
            return False

    def _copy_of_open_file(self, fol: Followed) -> bool:
        """Is all of this file the beginning of a file already open (a `cp` of a live log,
        taken before the original grew past it)? Its first and last 4 KiB are compared, the
        same evidence the fingerprint uses."""
        if fol.is_gz:
            return False
        size = os.fstat(fol.fd).st_size
        n = min(size, fp.HEAD_BYTES)
        first = os.pread(fol.fd, n, 0)
        last = os.pread(fol.fd, n, size - n)
        for other in self.followed.values():
            if other is fol or other.is_gz:
                continue
            try:
                if os.fstat(other.fd).st_size < size:
                    continue
                if os.pread(other.fd, n, 0) == first and os.pread(other.fd, n, size - n) == last:
                    return True
            except OSError:
                continue
        return False

    def _read_head(self, fol: Followed) -> bytes | None:
        if not fol.is_gz:
            return os.pread(fol.fd, wrappers.SAMPLE_BYTES, 0)
        try:
            with fp.open_stream(fol.path, cut_ok=False) as f:
                return f.read(wrappers.SAMPLE_BYTES)
        except GZ_ERRORS:
            return None  # still being written, or gone

    def _tail_matches(self, fol: Followed, known: dict) -> bool | None:
        """Does the content end, at the entry's offset, with the bytes the entry saw?
        None when the content is shorter than that offset."""
        offset = known["offset"]
        if offset == 0:
            return True
        if fol.is_gz:
            # an unreadable .gz (still being written) raises: the caller waits
            tail_sha, tail_len = fp.tail_check(fol.path, offset, cut_ok=False)
        else:
            n = min(offset, fp.TAIL_BYTES)
            data = os.pread(fol.fd, n, offset - n)
            if len(data) < n:
                return None
            tail_sha, tail_len = fp.sha(data), n
        if tail_len < 0:
            return None
        if tail_len != known["tail_len"] or tail_sha != known["tail_sha"]:
            return False
        # the whole content before the offset, not only its ends: a file rewritten in place
        # with the same size, start and end is another content
        return fol.is_gz or "crc" not in known or _crc_fd(fol.fd, offset) == known["crc"]

    def _claim(self, fol: Followed, key: str, known: dict) -> bool:
        offset = known["offset"]
        if fol.is_gz:
            try:
                gz = fp.open_stream(fol.path, cut_ok=False)
                head, tail = _skip_stream(gz, offset)
            except GZ_ERRORS:
                return False
            if head is None:
                gz.close()
                return False
            fol.gz = gz
        else:
            head = os.pread(fol.fd, min(offset, fp.HEAD_BYTES), 0)
            n = min(offset, fp.TAIL_BYTES)
            tail = os.pread(fol.fd, n, offset - n)
        if fp.sha(head[: known["head_len"]]) != known["head_sha"] or (
            offset and fp.sha(tail) != known["tail_sha"]
        ):
            if fol.gz is not None:
                fol.gz.close()
                fol.gz = None
            return False  # changed under us: try again next poll
        # (a .gz is not checked against it: its entry goes on without one)
        crc = None if fol.is_gz else known.get("crc")
        fol.key, fol.offset, fol.next_line = key, offset, known["lines"] + 1
        fol.head, fol.tail, fol.crc = head, tail, crc
        fol.engine = known["engine"]
        if "decode" in known:
            fol.decode = tuple(known["decode"])
        else:  # no layers kept (none, or a store from before the decoding stage): find them again
            fol.decode = wrappers.detect(wrappers.head_sample(self._read_head(fol) or head))
        fol.instance = self.instance or known["instance"]
        fol.source = known["source"]
        self._make_ctx(fol)
        restore_ctx(fol.ctx, known.get("ctx", {}))
        where = f"from line {fol.next_line}" if fol.next_line > 1 else "from the start"
        self.say(f"following {fol.path} ({fol.engine}, {where}, as {fol.source})")
        return True

    def _start_new(self, fol: Followed, engine: str, head: bytes) -> bool:
        fol.engine = engine
        fol.source = fol.source or display_path(fol.path)
        fol.instance = fol.instance or self.instance or self._instance_name(fol.path)
        key = fp.sha(head[: fp.HEAD_BYTES])
        taken = self._owned() | set(self.files)
        while key in self.store.manifest["files"] or key in taken:
            key = fp.sha((key + fol.source).encode())
        fol.key, fol.offset, fol.next_line, fol.head, fol.tail, fol.crc = key, 0, 1, b"", b"", 0
        self._make_ctx(fol)
        inherit_lineage(fol.ctx, [*self.store.manifest["files"].values(), *self.files.values()], fol.instance,
                        explicit_year=self.year is not None)
        if self.from_end and fol.initial:
            if fol.is_gz:
                fol.done = True  # a compressed archive is history
                return True
            self._skip_to_end(fol)
            self.say(f"following {fol.path} ({engine}, from the end: line {fol.next_line})")
        else:
            if fol.is_gz:
                try:
                    fol.gz = fp.open_stream(fol.path, cut_ok=False)
                except GZ_ERRORS:
                    fol.key = None
                    return False
            self.say(f"following {fol.path} ({engine}, new)")
        return True

    def _instance_name(self, path: Path) -> str:
        """The instance of a new file, named as ingest names it (naming.py) over every file
        the last scan found: two directories holding files of one name never merge, and
        the names the store already gave each directory are kept."""
        from ..sources.naming import InstanceNamer

        paths = tuple(self._scan_paths) if path in self._scan_paths else (*self._scan_paths, path)
        if self._namer is None or self._namer_paths != paths:
            entries = [*self.store.manifest["files"].values(), *self.files.values()]
            stored = [(Path(e["source"]), e["instance"]) for e in entries if e.get("source")]
            stored += [(f.path, f.instance) for f in self.followed.values() if f.instance]
            self._namer = InstanceNamer(list(paths), template=self.instance_from, stored=stored)
            self._namer_paths = paths
            for note in self._namer.notes:
                if note not in self._notes_said:
                    self._notes_said.add(note)
                    self.say(f"note: {note}")
        return self._namer.name(path)

    def _make_ctx(self, fol: Followed) -> None:
        from ..sources.naming import kube_identity

        fol.parser = wrappers.wrap(get_parser(fol.engine), fol.decode, kube_identity(fol.path))
        fol.ctx = ParseContext(engine=fol.engine, source=fol.source, instance=fol.instance, year=self.year,
                               directory_instance=directory_instance(fol.source))
        # --instance names the whole file, an export's too (as ingest: else its pods do)
        fol.ctx.file["instance_explicit"] = self.instance is not None
        # --engine names every stream's engine (else a pod of another engine is read as its own)
        fol.ctx.file["engine_explicit"] = self.engine != "auto"
        # a store ingested with --keep-lines keeps every line's text when tailed too
        fol.ctx.keep_lines = bool(self.store.manifest.get("keep_lines"))
        try:
            fol.ctx.mtime = dt.datetime.fromtimestamp(os.fstat(fol.fd).st_mtime, dt.timezone.utc)
        except OSError:
            pass

    def _skip_to_end(self, fol: Followed) -> None:
        """--from-end: start after the last complete line; count the lines skipped so line
        numbers stay true, and commit the position so a restart continues from it."""
        size = os.fstat(fol.fd).st_size
        pos, lines, last_nl, crc, crc_nl = 0, 0, -1, 0, 0
        while pos < size:
            block = os.pread(fol.fd, min(MAX_READ, size - pos), pos)
            if not block:
                break
            lines += block.count(b"\n")
            i = block.rfind(b"\n")
            if i >= 0:
                last_nl = pos + i
                crc_nl = zlib.crc32(memoryview(block)[: i + 1], crc)
            crc = zlib.crc32(block, crc)
            pos += len(block)
        offset = last_nl + 1
        fol.crc = crc_nl
        fol.offset, fol.next_line = offset, lines + 1
        fol.head = os.pread(fol.fd, min(offset, fp.HEAD_BYTES), 0)
        n = min(offset, fp.TAIL_BYTES)
        fol.tail = os.pread(fol.fd, n, offset - n)
        if offset:
            self.files[fol.key] = self._state(fol)

    def _truncated(self, fol: Followed, now: float) -> None:
        self.say(f"{fol.path} was truncated; reading it again from the start")
        fol.key, fol.offset, fol.next_line, fol.head, fol.tail, fol.crc = None, 0, 1, b"", b"", 0
        fol.first_seen, fol.next_try, fol.settled, fol.initial = now, 0.0, False, False
        fol.last_size = fol.last_mtime = -1


def _crc_fd(fd: int, offset: int) -> int | None:
    """CRC-32 of an open file's first `offset` bytes (None when it is shorter)."""
    crc, pos = 0, 0
    while pos < offset:
        block = os.pread(fd, min(MAX_READ, offset - pos), pos)
        if not block:
            return None
        crc = zlib.crc32(block, crc)
        pos += len(block)
    return crc


def _skip_stream(stream: Any, offset: int) -> tuple[bytes | None, bytes]:
    """Read `offset` bytes of a stream, keeping its head and the bytes just before offset.
    (None, b"") when the content is shorter."""
    head, tail, pos = b"", b"", 0
    while pos < offset:
        block = stream.read(min(MAX_READ, offset - pos))
        if not block:
            return None, b""
        if len(head) < fp.HEAD_BYTES:
            head += block[: fp.HEAD_BYTES - len(head)]
        tail = (tail + block)[-fp.TAIL_BYTES :]
        pos += len(block)
    return head[: min(offset, fp.HEAD_BYTES)], tail
