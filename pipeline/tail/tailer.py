"""Live tailing: follow growing log files into the store, exactly once through rotation,
truncation, deletion and crashes.

Every followed file is held open by descriptor and known by (device, inode), so a rename
(rotation) keeps reading the same content to its end and a new file at the old path is a new
file. What has been read is remembered in the same manifest entries `ingest` writes
(checkpoint.py), keyed by content fingerprint, and committed together with the events in one
Store.commit: after a crash at any moment the restart resumes each content exactly where the
committed data ends.

Rules that make it exactly once:
- only bytes actually read are fingerprinted (head and tail kept in memory), and the bytes
  before the offset are re-checked after every read: if they changed, the file was truncated
  (copytruncate) and the read is thrown away, the old content's entry is released, and the
  file is read again from 0 under a new entry;
- a manifest entry is followed by at most one file at a time: a second file with the same
  content (the copy of copytruncate, a .gz of a rotated file) waits until the first one is
  truncated, deleted or closed, then resumes the entry from its offset;
- the partial last line is held until its newline arrives, and the last record until the file
  is quiet (a traceback may still be growing); held bytes are never committed.
"""

from __future__ import annotations

import errno
import io
import os
import resource
import signal
import stat
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import polars as pl

from servelens.parsers import ENGINES

from ..store import compact as compact_mod
from ..sources import fingerprint as fp
from ..sources.checkpoint import save_ctx
from ..sources.discover import NotRegularFile, special_kind
from ..sources.lines import PARSE_THREADS, line_frames, parse_stream
from ..sources.naming import InstanceNamer, NamingError
from ..store.commit import Store
from ..store.manifest import StoreError, StoreFull
from ..store.repair import heal, healed_message
from .identity import GZ_ERRORS, MAX_READ, Followed, IdentityMixin
from .watch import Targets, Watcher

DEFAULT_FLUSH_S = 0.5
RESCAN_S = 5.0  # safety-net rescan of the directories (watchdog events can be lost)
QUIET_S = 0.3  # no growth for this long: the last record is complete
CHECK_BYTES = 256  # bytes before the offset re-checked after each read (truncation)
ROTATE_WAIT_S = 5.0  # a file renamed away or deleted is followed until quiet this long
IDLE_CLOSE_S = 300.0  # a drained file quiet this long is closed (reopened when it changes)
PARTIAL_WAIT_S = 300.0  # an unterminated last line quiet this long is taken as it is
FLUSH_ROWS = 200_000  # commit early when this many events are waiting
# A large read (a backlog) is parsed in blocks on both parse threads. Not smaller ones: a
# parse call has a fixed cost (for TGI, as much as megabytes of lines), so splitting
# what one poll reads when keeping up would cost more CPU than it saves in wall time.
PARSE_BLOCK_MIN = 16 * 1024 * 1024
COMPACT_EVERY_S = 30.0
RATE_WINDOW_S = 5.0  # lines/s in the status line is averaged over this long
COMPACT_MIN_PARTS = 64
# A file whose reading fails is retried after RETRY_BASE_S, doubling up to RETRY_MAX_S.
RETRY_BASE_S = 1.0
RETRY_MAX_S = 60.0
ROLLUP_EVERY_S = 30.0  # refresh the rollups (pipeline/query/rollups.py) at most this often ...
ROLLUP_SHARE = 0.1  # ... and spending at most this share of the time on it
FULL_RETRY_S = 5.0  # the store's disk is full: try the commit again this often
# Open files: at most this share of the soft RLIMIT_NOFILE (the rest is for the store,
# DuckDB, watchdog); drained files are closed to make room and reopened by identity.
OPEN_FILES_SHARE = 0.25
MIN_OPEN_FILES = 8
MAX_OPEN_FILES = 4096


def default_max_open() -> int:
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_OPEN_FILES, min(MAX_OPEN_FILES, int(soft * OPEN_FILES_SHARE)))
GZ_SETTLE_S = 1.0  # a .gz modified this recently may still be being written


_COMPACTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servelens-compact")
_ROLLUPS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servelens-rollups")


class TailError(Exception):
    """The tailer cannot start; the message says what to do."""


def check_engine(engine: str) -> None:
    if engine not in ("auto", "unknown") and engine not in ENGINES:
        raise TailError(f"unknown engine {engine!r}; choose one of: auto, {', '.join(ENGINES)}, unknown")


@dataclass
class Stats:
    lines: int = 0
    events: int = 0
    commits: int = 0
    rate: float = 0.0  # lines/s over the last few seconds
    lag_s: float = 0.0
    files: int = 0
    _window: list = field(default_factory=list)

    def add(self, now: float, lines: int) -> None:
        """Count committed lines (0: just let the rate decay when nothing comes)."""
        self.lines += lines
        if lines:
            self._window.append((now, lines))
        self._window = [(t, n) for t, n in self._window if now - t <= RATE_WINDOW_S]
        self.rate = sum(n for _, n in self._window) / RATE_WINDOW_S


class Tailer(IdentityMixin):
    """Follows the targets into an open (locked) store. `poll_once` does one step (rescan if
    due, read every file, commit); `run` loops until told to stop."""

    def __init__(
        self,
        store: Store,
        targets: Targets,
        *,
        engine: str = "auto",
        instance: str | None = None,
        instance_from: str | None = None,
        year: int | None = None,
        from_end: bool = False,
        flush_interval: float = DEFAULT_FLUSH_S,
        quiet_s: float = QUIET_S,
        compact_min_parts: int = COMPACT_MIN_PARTS,
        say: Callable[[str], None] | None = None,
        max_open: int | None = None,
        beside: Callable[..., None] | None = None,
    ):
        check_engine(engine)
        self.store = store
        # another source committed through this store after each commit of the logs (the
        # scrapes of `tail --scrape`): called with the store, and final=True when closing
        self.beside = beside
        self.targets = targets
        self.engine = engine
        self.instance = instance
        self.instance_from = instance_from
        self._scan_paths: list[Path] = []  # what the last scan found (instance naming)
        self._namer = None
        self._namer_paths: tuple[Path, ...] | None = None
        self._notes_said: set[str] = set()
        self.year = year
        self.from_end = from_end
        self.flush_interval = flush_interval
        self.quiet_s = quiet_s
        self.compact_min_parts = compact_min_parts
        self.say = say or (lambda msg: None)
        self.followed: dict[tuple[int, int], Followed] = {}
        self.closed: dict[tuple[int, int], tuple[int, int]] = {}  # inode -> (size, mtime) when closed
        self.frames: list[pl.DataFrame] = []
        self.files: dict[str, dict] = {}
        self.rows = 0
        self.stats = Stats()
        self._pending_lines = 0
        self._scanned = False
        self._waiting_for_quiet = False
        self._behind = False  # a file has more bytes than one read took: poll again at once
        self._next_rescan = 0.0
        self._next_compact = time.monotonic() + COMPACT_EVERY_S
        self.background_compaction = False  # run() sets it: poll_once alone merges in line
        self._merging: Future | None = None
        self._merge_queue: list[list[str]] = []
        self.max_open = max_open or default_max_open()
        self._deferred = 0  # files waiting for a free descriptor at the last rescan
        self._unopenable: dict[tuple[int, int], int] = {}  # file -> errno, said once until it opens
        self._full_since: float | None = None  # the store's disk is full since then
        self.rollup_every_s = ROLLUP_EVERY_S
        self._next_rollup = time.monotonic() + ROLLUP_EVERY_S
        self.rollup_refreshes: list = []  # pipeline/rollup.Refreshed of each refresh, for bench/tests
        self._rollup_job: Future | None = None
        self._next_full_try = 0.0

    # -- the loop ------------------------------------------------------------------------

    def poll_once(self, rescan: bool = False) -> None:
        now = time.monotonic()
        self._waiting_for_quiet = self._behind = False
        if self._full_since is not None:
            # the disk is full: read nothing more (memory), retry the held commit
            self.flush()
            if self._full_since is not None:
                return
        if rescan or not self._scanned or now >= self._next_rescan:
            self._rescan(initial=not self._scanned)
            self._scanned = True
            # files waiting for a descriptor: look again at the next poll
            self._next_rescan = now if self._deferred else now + RESCAN_S
        for fol in list(self.followed.values()):
            if now < fol.retry_at:
                continue
            try:
                self._poll(fol, now)
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self._too_many_open(fol, now, e)
                    continue
                self.say(f"{fol.path}: {e.strerror or e}; no longer following it")
                self._close(fol)
                continue
            except Exception as e:  # noqa: BLE001 - one bad file must not stop the others
                self._failed(fol, now, e)
                continue
            if fol.failures:
                self.say(f"{fol.path}: read again after {fol.failures} failure(s)")
                fol.failures = 0
        self.flush()
        self._commit_beside()
        self.stats.add(time.monotonic(), 0)
        lags = [now - f.pending_since for f in self.followed.values() if f.pending_since is not None]
        self.stats.lag_s = max(lags, default=0.0)
        self.stats.files = sum(1 for f in self.followed.values() if f.key is not None)
        try:
            self._compact(now)
        except (StoreError, OSError) as e:  # an optimisation: the next round tries again
            self.say(f"compaction failed ({e}); will try again")
        if now >= self._next_rollup or (self._rollup_job is not None and self._rollup_job.done()):
            self._refresh_rollups()

    def _refresh_rollups(self, wait: bool = False) -> None:
        """Recompute the rollups of the instances committed since the last refresh (the
        store's dirty marks; pipeline/query/rollups.py), rate-limited so that tailing barely slows:
        at most every `rollup_every_s`, and no more than ROLLUP_SHARE of the time. Under
        `run` the computing happens on a thread of its own (seconds on a big store: commits
        must not wait for it) and its commit here, at the first poll after it is ready;
        what was committed meanwhile stays dirty. Queries meanwhile use the raw path."""
        from ..query import rollups as rollup

        if self._rollup_job is not None:
            if not (wait or self._rollup_job.done()):
                return
            job, self._rollup_job = self._rollup_job, None
            try:
                done = rollup.commit(self.store, job.result())
            except Exception as e:  # noqa: BLE001 - an optimisation: the next round tries again
                self.say(f"rollup refresh failed ({' '.join(str(e).split())[:200]}); will try again")
                done = None
            self._rollup_done(done)
            return
        start = time.monotonic()
        try:
            plan = rollup.plan(self.store)
            if plan is not None and self.background_compaction and not wait:
                self._rollup_job = _ROLLUPS.submit(rollup.compute, plan)
                self._next_rollup = float("inf")  # until it is committed
                return
            done = rollup.commit(self.store, rollup.compute(plan)) if plan is not None else None
        except Exception as e:  # noqa: BLE001 - an optimisation: the next round tries again
            self.say(f"rollup refresh failed ({' '.join(str(e).split())[:200]}); will try again")
            done = None
        self._rollup_done(done, time.monotonic() - start)

    def _rollup_done(self, done, took: float | None = None) -> None:
        if done is not None:
            self.rollup_refreshes.append(done)
        took = took if took is not None else (done.seconds if done is not None else 0.0)
        self._next_rollup = time.monotonic() + max(self.rollup_every_s, took / ROLLUP_SHARE)

    def _failed(self, fol: Followed, now: float, e: Exception) -> None:
        """Reading or parsing `fol` raised: report it, and retry it later from where its
        committed (or held) progress ends; the other files go on."""
        fol.failures += 1
        wait = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (fol.failures - 1))
        fol.retry_at = now + wait
        if fol.ctx is None:
            fol.key = None  # failed while resolving: resolve again
        detail = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        self.say(f"{fol.path}: reading failed ({detail}); retrying in {wait:.0f}s, other files go on")

    def _too_many_open(self, fol: Followed, now: float, e: OSError) -> None:
        """Out of descriptors after all (a low limit, other processes): keep fewer open."""
        self.max_open = max(MIN_OPEN_FILES, min(self.max_open, len(self.followed)) * 3 // 4)
        self.say(f"too many open files ({e.strerror}); keeping at most {self.max_open} open")
        self._evict(len(self.followed) - self.max_open)
        fol.retry_at = now + RETRY_BASE_S

    def _evict(self, n: int) -> int:
        """Close up to `n` drained files, least recently grown first; they are reopened by
        identity (the manifest entry their content matches) when they change. Returns how
        many were closed."""
        if n <= 0:
            return 0
        idle = [
            f for f in self.followed.values()
            if f.key is not None and not f.is_gz and f.last_size >= 0 and f.offset >= f.last_size
            and f.pending_since is None
        ]
        idle.sort(key=lambda f: f.last_growth)
        for f in idle[:n]:
            self._close(f)
        return min(n, len(idle))

    def _compact(self, now: float) -> None:
        """Merge small parts every COMPACT_EVERY_S. In `run`, each merged part is written on
        a background thread (seconds for a long tail: commits must not wait for it) and
        committed here, on the store's thread, at the first poll after it is ready."""
        if self._merging is not None:
            if not self._merging.done():
                return
            self._commit_merge()
            if self._merge_queue:
                self._merging = _COMPACTOR.submit(compact_mod.merge, self.store.root, self._merge_queue.pop(0))
                return
        if not self.compact_min_parts or now < self._next_compact:
            return
        self._next_compact = now + COMPACT_EVERY_S
        if not self.background_compaction:
            compact_mod.compact(self.store, min_parts=self.compact_min_parts)
            return
        self._merge_queue = compact_mod.plan(self.store, min_parts=self.compact_min_parts)
        if self._merge_queue:
            self._merging = _COMPACTOR.submit(compact_mod.merge, self.store.root, self._merge_queue.pop(0))

    def _commit_merge(self) -> None:
        merging, self._merging = self._merging, None
        try:
            merged = merging.result()
        except Exception as e:  # noqa: BLE001 - compaction is an optimisation: retried later
            self.say(f"compaction failed ({e}); will try again")
            self._merge_queue = []
            return
        try:
            compact_mod.commit_merge(self.store, merged)
        except StoreError as e:  # a damaged part: reading goes on, merging waits for repair
            self.say(str(e))
            self._merge_queue = []
            self.compact_min_parts = 0

    def run(self, stop: threading.Event, on_status: Callable[[Stats], None] | None = None) -> None:
        self.background_compaction = True
        watcher = Watcher(self.targets)
        if watcher.error:
            self.say(watcher.error)
        try:
            next_status = 0.0
            while not stop.is_set():
                rescan = watcher.rescan.is_set()
                watcher.rescan.clear()
                started = time.monotonic()
                self.poll_once(rescan=rescan)
                if on_status and time.monotonic() >= next_status:
                    on_status(self.stats)
                    next_status = time.monotonic() + 1.0
                if self._behind:
                    continue  # a backlog: read on (each poll commits, so progress is kept)
                # polls start every interval: the time a poll took is not waited again
                # (else a busy tailer reads less than it is written); file events only
                # shorten the wait for new/moved files, growth is polled
                every = min(self.flush_interval, self.quiet_s) if self._waiting_for_quiet else self.flush_interval
                wait = every - (time.monotonic() - started)
                if wait > 0 and watcher.rescan.wait(wait):
                    stop.wait(0.05)  # let a burst of creates/renames settle
        finally:
            watcher.stop()
            self.close()

    def close(self) -> None:
        """Commit what has been read (held partial lines stay unread) and close the files."""
        self.flush()
        self._commit_beside(final=True)
        if self._merging is not None:
            self._commit_merge()  # waits for it: a merge written in full is worth its commit
        if self._rollup_job is not None:
            self._refresh_rollups(wait=True)  # commits the one being computed
        if self._full_since is None:
            self._refresh_rollups(wait=True)  # a stopped tail leaves its rollups fresh
        for fol in list(self.followed.values()):
            self._close(fol, remember=False)

    def _commit_beside(self, final: bool = False) -> None:
        if self.beside is None or self._full_since is not None:
            return
        try:
            self.beside(self.store, final=final)
        except (StoreError, OSError) as e:  # what is held is tried again after the next commit
            self.say(f"samples not committed ({e}); will try again")

    # -- discovery -----------------------------------------------------------------------

    def _rescan(self, initial: bool) -> None:
        present = set()
        deferred = 0
        self._scan_paths = list(self.targets.scan())
        for path in self._scan_paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            k = (st.st_dev, st.st_ino)
            present.add(k)
            fol = self.followed.get(k)
            if fol is not None:
                if fol.path != path and fol.key is not None:
                    self.say(f"{fol.path} is now {path}; still following it")
                fol.path = path
                continue
            if self.closed.get(k) == (st.st_size, st.st_mtime_ns):
                continue
            if len(self.followed) >= self.max_open and not self._evict(len(self.followed) - self.max_open + 1):
                deferred += 1  # opened at a later rescan, when a file has been drained
                continue
            self._open(path, k, initial)
        if deferred and not self._deferred:
            self.say(f"{deferred} file(s) wait for a free slot (at most {self.max_open} files are kept open)")
        self._deferred = deferred
        for k, fol in self.followed.items():
            fol.in_scan = k in present
        self.closed = {k: v for k, v in self.closed.items() if k in present}

    def _open(self, path: Path, k: tuple[int, int], initial: bool) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE) and len(self.followed) > MIN_OPEN_FILES:
                self.max_open = max(MIN_OPEN_FILES, len(self.followed) * 3 // 4)
                self.say(f"too many open files ({e.strerror}); keeping at most {self.max_open} open")
                self._evict(len(self.followed) - self.max_open)
            elif self._unopenable.get(k) != e.errno:  # named once, not at every scan
                self._unopenable[k] = e.errno
                self.say(f"{path}: cannot open it ({e.strerror}); not followed until it can be "
                         "(tried again at each scan): check its permissions")
            return
        self._unopenable.pop(k, None)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device under a watched name
            os.close(fd)
            return
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != k:  # replaced between stat and open: next scan
            os.close(fd)
            return
        is_gz = os.pread(fd, 2, 0) == fp.GZIP_MAGIC
        self.followed[k] = Followed(
            path=path, dev=k[0], ino=k[1], fd=fd, is_gz=is_gz,
            first_seen=time.monotonic(), initial=initial,
        )

    def _close(self, fol: Followed, remember: bool = True) -> None:
        k = (fol.dev, fol.ino)
        if remember:
            try:
                st = os.fstat(fol.fd)
                # remembered only when it holds no more than was read: a line written after
                # the last read but before this close would else never be noticed (its
                # size and time are the ones remembered) until the file changed again
                if fol.is_gz or st.st_size <= fol.offset + len(fol.carry):
                    self.closed[k] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
        if fol.gz is not None:
            try:
                fol.gz.close()
            except GZ_ERRORS:
                pass
        try:
            os.close(fol.fd)
        except OSError:
            pass
        self.followed.pop(k, None)

    # -- reading ---------------------------------------------------------------------------

    def _poll(self, fol: Followed, now: float) -> None:
        if fol.skip or fol.done:
            if fol.skip:
                self.say(f"skipping {fol.path}: {fol.skip}")
            self._close(fol)
            return
        st = os.fstat(fol.fd)
        changed = (st.st_size, st.st_mtime_ns) != (fol.last_size, fol.last_mtime)
        if changed:
            fol.last_size, fol.last_mtime, fol.last_growth = st.st_size, st.st_mtime_ns, now
            fol.settled = False
        if fol.key is None:
            if not changed and now < fol.next_try:
                return
            if fol.is_gz and time.time() - st.st_mtime < GZ_SETTLE_S:
                return  # probably still being compressed
            resolved = self._resolve(fol, now)
            fol.initial = False  # --from-end only for what was there at the start
            if not resolved:
                # retry at every poll while young, then only at rescans or on change
                young = now - fol.first_seen < 10.0
                fol.next_try = now if young else now + RESCAN_S
                if not fol.in_scan and now - fol.last_growth > ROTATE_WAIT_S:
                    self._close(fol)
                return
            if fol.done:
                self._close(fol)
                return
        if fol.is_gz:
            self._read_gz(fol, now)
            return
        if st.st_size < fol.offset:
            self._truncated(fol, now)
            return
        detached = st.st_nlink == 0 or not fol.in_scan
        # quiet: wall time since the last write, or (clock skew) time since we saw a change
        quiet_for = max(time.time() - st.st_mtime, now - fol.last_growth)
        partial_due = quiet_for >= PARTIAL_WAIT_S or (detached and quiet_for >= ROTATE_WAIT_S)
        if st.st_size > fol.offset and (changed or not fol.settled or partial_due):
            fol.pending_since = fol.pending_since or now
            n = min(st.st_size - fol.offset, MAX_READ)
            data = os.pread(fol.fd, n, fol.offset)
            # the bytes before the offset must still be the ones we read: checked after the
            # read, so `data` is known to come from the same content
            if fol.offset and not self._still_same(fol):
                self._truncated(fol, now)
                return
            end = fol.offset + len(data) >= st.st_size
            quiet = not changed or quiet_for >= self.quiet_s
            used = self._consume(fol, data, hold_partial=not (end and partial_due), hold_record=not (end and quiet), now=now)
            fol.settled = end and quiet
            self._behind |= not end
            # all of it held only until the file is quiet: look again sooner than usual
            self._waiting_for_quiet |= used == 0 and not fol.settled
        if fol.offset >= st.st_size:
            fol.pending_since = None
        drained = fol.offset >= st.st_size or (fol.settled and partial_due)
        if drained and detached and now - fol.last_growth >= ROTATE_WAIT_S:
            what = "deleted" if st.st_nlink == 0 else "moved away"
            self.say(f"{fol.path} was {what}; finished reading it")
            self._close(fol)
        elif drained and fol.offset >= st.st_size and quiet_for >= IDLE_CLOSE_S:
            # (an old file read to its end is let go at once: descriptors are limited)
            self._close(fol)

    def _still_same(self, fol: Followed) -> bool:
        n = min(len(fol.tail), CHECK_BYTES)
        return os.pread(fol.fd, n, fol.offset - n) == fol.tail[len(fol.tail) - n :]

    def _read_gz(self, fol: Followed, now: float) -> None:
        try:
            piece = fol.gz.read(MAX_READ)
            eof = len(piece) < MAX_READ
        except GZ_ERRORS as e:
            # cut short (or still being written): commit what was parsed, leave the rest
            # for when the file changes; the committed offset is where it resumes
            self.say(f"{fol.path}: cannot read further ({e}); will retry when it changes")
            self._close(fol)
            return
        data = fol.carry + piece
        used = self._consume(fol, data, hold_partial=not eof, hold_record=not eof, now=now)
        fol.carry = data[used:]
        self._behind |= not eof
        if eof:
            fol.done = True
            self._close(fol)

    def _consume(self, fol: Followed, data: bytes, *, hold_partial: bool, hold_record: bool, now: float) -> int:
        used = self._parse(fol, data, hold_partial, hold_record, now)
        if used == 0 and len(data) >= MAX_READ and hold_record:
            # one record longer than a whole read: take its complete lines rather than
            # stall (a line longer than MAX_LINE_BYTES is cut where ingest cuts it)
            used = self._parse(fol, data, hold_partial, False, now)
        if used == 0 and len(data) >= MAX_READ:
            used = self._parse(fol, data, False, False, now)
        return used

    def _parse(self, fol: Followed, data: bytes, hold_partial: bool, hold_record: bool, now: float) -> int:
        if not data:
            return 0
        if "scanned" not in fol.ctx.file:
            self._scan_backlog(fol)
        base, tail_before = fol.offset, fol.tail
        done = 0
        block = max(PARSE_BLOCK_MIN, -(-len(data) // PARSE_THREADS))
        for chunk in parse_stream(
            io.BytesIO(data), fol.parser, fol.ctx, offset=base, next_line=fol.next_line,
            block_bytes=block, hold_partial_line=hold_partial, hold_last_record=hold_record,
        ):
            used = chunk.offset - base
            # the head from a slice of `data` (no copy of the whole chunk); the tail is the
            # one the stream kept, after what came before this read
            if len(fol.head) < fp.HEAD_BYTES:
                fol.head += data[done : min(used, done + fp.HEAD_BYTES - len(fol.head))]
            fol.tail = (tail_before + chunk.tail)[-fp.TAIL_BYTES :]
            if fol.crc is not None:
                fol.crc = zlib.crc32(memoryview(data)[done:used], fol.crc)
            done = used
            fol.offset, fol.next_line = chunk.offset, chunk.next_line
            if chunk.events.height:
                self.frames.append(chunk.events)
                self.rows += chunk.events.height
            self._pending_lines += chunk.n_lines
            if chunk.nul_bytes:
                self.say(f"{fol.path}: {chunk.nul_bytes:,} NUL bytes dropped (zeros a crash left in the file)")
            self.files[fol.key] = self._state(fol)
            if self.rows >= FLUSH_ROWS:
                self.flush()
        return done

    def _scan_backlog(self, fol: Followed) -> None:
        """Once per opened file, as ingest does (ingest._scan_file): a parser with a
        `scan_file` hook reads a backlog longer than one parse block first (llama.cpp: so
        that it is anchored from the file's end, not from its first block's)."""
        fol.ctx.file["scanned"] = True
        scan = getattr(fol.parser, "scan_file", None)
        if scan is None or fol.is_gz or os.fstat(fol.fd).st_size - fol.offset <= PARSE_BLOCK_MIN:
            return
        from servelens.parsers import wrappers

        with os.fdopen(os.dup(fol.fd), "rb") as f:
            f.seek(fol.offset)
            frames = line_frames(f, fol.next_line)
            scan((wrappers.decode(fr, fol.decode) if fol.decode else fr for fr in frames), fol.ctx)

    def _state(self, fol: Followed) -> dict:
        """The manifest entry (the format checkpoint.file_state writes), computed from the
        bytes actually read rather than re-read from a path that may have moved."""
        head = fol.head[: min(fol.offset, fp.HEAD_BYTES)]
        return {
            "head_sha": fp.sha(head),
            "head_len": len(head),
            "tail_sha": fp.sha(fol.tail) if fol.offset else "",
            "tail_len": len(fol.tail) if fol.offset else 0,
            "offset": fol.offset,
            "lines": fol.next_line - 1,
            "source": fol.source,
            "path": str(fol.path.absolute()),
            "engine": fol.engine,
            "instance": fol.instance,
            "dev": fol.dev,
            "inode": fol.ino,
            "ctx": save_ctx(fol.ctx),
            **({"decode": list(fol.decode)} if fol.decode else {}),
            **({"crc": fol.crc} if fol.crc is not None else {}),
        }

    # -- committing --------------------------------------------------------------------------

    def flush(self) -> None:
        """Commit the events read so far together with the offsets they bring.

        On a full disk the events and offsets are held (nothing is read meanwhile) and the
        commit is tried again every FULL_RETRY_S until space returns: nothing lost, no
        place lost."""
        if not self.files and not self.frames:
            return
        now = time.monotonic()
        if self._full_since is not None and now < self._next_full_try:
            return
        try:
            written = self.store.commit_events(self.frames, self.files)
        except StoreFull as e:
            if self._full_since is None:
                self.say(f"{e} (waiting: retrying every {FULL_RETRY_S:.0f}s; nothing read is lost)")
                self._full_since = now
            self._next_full_try = now + FULL_RETRY_S
            return
        if self._full_since is not None:
            self.say(f"space is back after {now - self._full_since:.0f}s; committed what was waiting")
            self._full_since = None
        self.stats.events += written
        self.stats.commits += 1
        self.stats.add(time.monotonic(), self._pending_lines)
        self.frames, self.files, self.rows, self._pending_lines = [], {}, 0, 0


def tail(
    paths: list[Path | str],
    store_dir: Path | str,
    *,
    glob: str | None = None,
    engine: str = "auto",
    instance: str | None = None,
    instance_from: str | None = None,
    year: int | None = None,
    from_end: bool = False,
    flush_interval: float = DEFAULT_FLUSH_S,
    say: Callable[[str], None] | None = None,
    on_status: Callable[[Stats], None] | None = None,
    stop: threading.Event | None = None,
    beside: Callable[..., None] | None = None,
) -> Stats:
    """Follow `paths` into the store until SIGINT/SIGTERM (or `stop`), then commit and return."""
    store_dir = Path(store_dir)
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise TailError(f"path not found: {missing[0]}; check the path (a directory may be empty, but must exist)")
    if flush_interval <= 0:
        raise TailError("--flush-interval must be more than 0 seconds")
    for p in paths:
        kind = special_kind(Path(p))
        if kind is not None:
            raise TailError(str(NotRegularFile(Path(p), kind)))
    check_engine(engine)  # before the store is created
    if instance_from is not None:
        try:
            InstanceNamer([], template=instance_from)
        except NamingError as e:
            raise TailError(str(e)) from None
    targets = Targets([Path(p) for p in paths], glob, skip_under=store_dir)
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        store = _open_waiting_for_space(store_dir, stop, say or (lambda msg: None))
        if store is None:  # stopped while the disk was still full: nothing was read
            return Stats()
        with store:
            healed = heal(store)
            if healed is not None and say is not None:
                say(healed_message(healed))
            tailer = Tailer(
                store, targets, engine=engine, instance=instance, instance_from=instance_from, year=year,
                from_end=from_end, flush_interval=flush_interval, say=say, beside=beside,
            )
            tailer.run(stop, on_status)
            return tailer.stats
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _open_waiting_for_space(store_dir: Path, stop: threading.Event, say: Callable[[str], None]) -> Store | None:
    """Store.open for the tailer, which on a full disk waits for space (retrying every
    FULL_RETRY_S) as it does when the disk fills later, instead of exiting; None when stopped
    first."""
    waiting = False
    while True:
        try:
            return Store.open(store_dir, purpose="tail")
        except StoreFull as e:
            if not waiting:
                say(f"{e} (waiting: retrying every {FULL_RETRY_S:.0f}s)")
                waiting = True
        if stop.wait(FULL_RETRY_S):
            return None
