"""Batch ingest: paths -> engine -> parsed chunks -> Parquet store.

Idempotent per file content: the manifest remembers, per file fingerprint, how far the file
has been read, so ingesting the same files again adds nothing and a grown file adds only its
new part. Memory stays bounded: files are read in blocks and events are flushed to the store
every FLUSH_ROWS rows or FLUSH_BYTES of events held, whichever comes first.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, NamedTuple

import polars as pl

from servelens.parsers import ENGINES, detect_engine, get_parser
from servelens.parsers import wrappers
from servelens.parsers.base import ParseContext

from .sources.detect_memo import DetectMemo
from .sources import fingerprint as fp
from .sources.same_content import set_aside
from .sources.discover import NotRegularFile, PathMissing, display_path, expand, looks_binary
from .sources.checkpoint import KnownFiles, file_state, inherit_lineage, restore_ctx
from .sources.naming import InstanceNamer, NamingError, directory_instance, lineage_order
from .sources.carry_scan import scan_carry
from .sources.lines import DEFAULT_BLOCK_BYTES, line_frames, parse_stream
from .store.commit import Staged, Store
from .store.manifest import ROLLUPS_DEFERRED, StoreError, read_manifest, write_failure
from .store.repair import heal, healed_message
from . import workers as workers_mod
from .workers import Workers

FLUSH_ROWS = 500_000
# Rows alone do not bound memory: a vLLM `Received request` event carries the whole prompt in
# its message (kilobytes), so 500,000 of them would hold about a gigabyte.
FLUSH_BYTES = 64 * 1024 * 1024  # held in frames; the flush (concat, sort, Arrow, Parquet) needs a few times that
# Readers side by side (worker processes) each flush at their share of those limits, so that
# together they hold about what one ingest would; but never at less than this share: each
# flush is a commit in the ingesting process (manifest writes and their fsyncs), so with
# ever smaller shares the commits would grow as the square of the readers, and the parts
# shrink, until that process's commits bound the ingest.
MAX_FLUSH_SHARE = 2
DETECT_BYTES = wrappers.SAMPLE_BYTES
DETECT_LINES = wrappers.SAMPLE_LINES
LIVE_WINDOW_S = 60.0
# A chunk costs the engine parser a fixed number of passes and calls besides its lines,
# whatever its size: a long file whose block is not scaled for a platform download (by its
# envelopes) takes blocks this many times the default, which halves those costs for a
# little more memory held at the peak (when read alone: not beside worker processes).
PLAIN_BLOCK_SCALE = 2.0


class IngestError(Exception):
    """The command could not do its job; the message says what to do."""


@dataclass
class FileResult:
    source: str
    engine: str
    instance: str
    lines: int = 0
    events: int = 0
    status: str = "ingested"  # ingested | unchanged | skipped
    reason: str = ""
    detected_score: float | None = None
    invalid_utf8: bool = False
    counts: Counter = field(default_factory=Counter)
    failed: bool = False  # the parser raised: part of the file was not read
    invalid: Counter = field(default_factory=Counter)  # impossible values nulled, per column
    nul_bytes: int = 0  # NUL bytes dropped from the text (zeros a crash left in the file)
    parse_failures: int = 0  # records the parser raised on (kept as unparsed): a servelens bug
    decode: tuple[str, ...] = ()  # the wrapper layers undone before the engine parser
    # bytes of an unterminated last line left for the next ingest (a live file's writer may
    # not have finished it)
    held_bytes: int = 0


@dataclass
class IngestSummary:
    files: list[FileResult] = field(default_factory=list)
    events_by_kind: Counter = field(default_factory=Counter)
    lines: int = 0
    notes: list[str] = field(default_factory=list)  # e.g. instance names made distinct
    # files of the named directories that were not read, and why (an image, another store)
    passed_over: list[tuple[str, str]] = field(default_factory=list)
    samples: list[Any] = field(default_factory=list)  # files of /metrics scrapes (sample_ingest.SampleResult)
    rollup: Any = None  # the rollup refresh at the end (pipeline/rollup.Refreshed), if one ran

    @property
    def unparsed(self) -> int:
        return self.events_by_kind.get("unparsed", 0)

    @property
    def skipped(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "skipped"]

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.failed]

    @property
    def events(self) -> int:
        return sum(self.events_by_kind.values())

    @property
    def invalid(self) -> Counter:
        """Impossible values nulled by the domain checks (parsers/domain.py), per column."""
        total: Counter = Counter()
        for f in self.files:
            total.update(f.invalid)
        return total


class _Batch:
    """Events waiting to be written, and the file states they bring with them."""

    def __init__(self, store: Store):
        self.store = store
        self.frames: list[pl.DataFrame] = []
        self.rows = 0
        self.bytes = 0
        self.files: dict[str, dict] = {}
        self.of_instance: dict[str | None, dict[str, dict]] = {}  # instance -> key -> state
        self.share = 1  # of one ingest's flush limits, when others read beside it

    def add(self, events: pl.DataFrame, key: str, state: dict, read: int = 0) -> None:
        """`read`: the bytes of text the events were parsed from, counted as held too: their
        string columns may still hold those bytes (views into the lines' buffers) when the
        events' own size, without the text of the lines that keep none
        (lines.trim_messages), is far less."""
        if events.height:
            self.frames.append(events)
            self.rows += events.height
            self.bytes += events.estimated_size() + read
        self.files[key] = state
        self.of_instance.setdefault(state.get("instance"), {})[key] = state

    @property
    def full(self) -> bool:
        return self.rows >= FLUSH_ROWS // self.share or self.bytes >= FLUSH_BYTES // self.share

    def flush(self) -> None:
        self._store_errors(self._write)
        self.frames, self.rows, self.bytes, self.files, self.of_instance = [], 0, 0, {}, {}

    def _write(self) -> None:
        self.store.commit_events(self.frames, self.files)

    def commit_staged(self, staged: Staged, files: dict[str, dict]) -> None:
        """Commit parts a worker process staged, with the file states they bring."""
        self._store_errors(lambda: self.store.commit_staged(staged, files))

    @staticmethod
    def _store_errors(write: Callable[[], Any]) -> None:
        try:
            write()
        except StoreError:
            raise
        except OSError as e:
            # the store, not the file being read: stop the command with the store's line
            # (a log file's own PermissionError would otherwise be taken for it)
            line = write_failure(e)
            if line is None:
                raise
            raise StoreError(line) from None


class _StagedBatch(_Batch):
    """A worker process's batch: a flush writes its parts to staging and sends them, with the
    file states they bring and `token`, on `send` as soon as they are staged, for the writer
    to commit (the worker holds no lock). `sent`: how many flushes went."""

    def __init__(self, store: Store, send: Callable[[Any], None], token: Any):
        super().__init__(store)
        self.send, self.token, self.sent = send, token, 0

    def _write(self) -> None:
        if self.frames or self.files:
            self.send((self.token, self.store.stage_flush(self.frames), self.files))
            self.sent += 1


def ingest(
    paths: list[Path | str],
    store_dir: Path | str,
    *,
    engine: str = "auto",
    instance: str | None = None,
    year: int | None = None,
    block_bytes: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_file: Callable[[FileResult], None] | None = None,
    instance_from: str | None = None,
    rollups: bool | str = True,
    keep_lines: bool = False,
    on_stage: Callable[[str], None] | None = None,
    follow_symlinks: bool = True,
    workers: int = 1,
    pool: Workers | None = None,
) -> IngestSummary:
    """Ingest files and directories (recursively, plain or .gz) into the store.

    `keep_lines`: keep the text (`message`) of every event, in this ingest and every later
    one into the store (and its tailer); by default the bulk events whose columns say what
    their line said keep none (pipeline/sources/lines.py `trim_messages`).

    `rollups`: bring the store's rollups up to date at the end (pipeline/query/rollups.py), after
    `on_stage("refreshing rollups")`; without it the instances stay marked dirty (queries
    compute their windows from the events) until the next ingest, tail or compact
    refreshes them. "defer": neither; the manifest says so, and the first query that reads a
    stored view refreshes them (rollups.refresh_deferred).

    `follow_symlinks` False: files of the named directories that lead out of them through a
    symlink are passed over (discover.expand).

    `block_bytes`: the read block (a chunk's bytes); by default DEFAULT_BLOCK_BYTES, scaled
    for a platform download, else PLAIN_BLOCK_SCALE times that for a file longer than it (a
    given one is kept, scaled for a platform download only).

    Each file's instance is `instance`, else the template `instance_from` over its path
    (see naming.py), else its name (Kubernetes pod for container logs), made distinct
    where two directories hold files of the same name. Files of one instance are read
    oldest first (rotated copies before the live file), so what one teaches the parser
    (model, year) carries to the next.

    `workers`: processes that read large files of different instances side by side, this one
    and `workers - 1` worker processes (1: every file read here, one at a time;
    `worker_count(None)`, the CLI's default: one per core). The workers are spawned: a script
    that asks for them must guard its main module (`if __name__ == "__main__":`), which each
    worker imports again. `pool`: workers started before (workers.prestart), used instead of
    starting them here, or closed once no file needs them."""
    plain_scale = PLAIN_BLOCK_SCALE if block_bytes is None else 1.0
    block_bytes = DEFAULT_BLOCK_BYTES if block_bytes is None else block_bytes
    if engine != "auto" and engine not in ENGINES:
        raise IngestError(
            f"unknown engine {engine!r}; choose one of: auto, {', '.join(ENGINES)}"
        )
    store_dir = Path(store_dir)
    passed_over: list[tuple[Path, str]] = []
    try:
        found = expand([Path(p) for p in paths], skip_under=store_dir, passed_over=passed_over,
                       follow_symlinks=follow_symlinks)
    except PathMissing as e:
        raise IngestError(f"path not found: {e}; check the path and try again") from None
    except NotRegularFile as e:
        raise IngestError(str(e)) from None
    if not found:
        raise IngestError(
            f"no log files found under {', '.join(str(p) for p in paths)}"
            + (f" ({len(passed_over):,} file(s) passed over as not logs, e.g. {display_path(passed_over[0][0])})"
               if passed_over else "")
            + "; point servelens at log files or directories that contain them"
        )

    from .sample_ingest import adopt_scraped_instances, ingest_metrics_files, split_metrics_files

    found, metrics_files = split_metrics_files(found)
    if instance_from is not None:
        try:
            InstanceNamer([], template=instance_from)
        except NamingError as e:
            raise IngestError(str(e)) from None
    summary = IngestSummary()
    # display_path resolves symlinks: a link passed over is named itself
    summary.passed_over = [(str(f) if f.is_symlink() else display_path(f), why) for f, why in passed_over]
    found, duplicates = set_aside(found)
    for d in duplicates:
        # display_path resolves symlinks: name the link itself
        shown = str(d.found.path) if d.found.path.is_symlink() else display_path(d.found.path)
        result = FileResult(source=shown, engine="-", instance="-", status="unchanged",
                            reason=f"{d.how} {display_path(d.same_as)}, which is read instead")
        summary.files.append(result)
        if on_file:
            on_file(result)
    with Store.open(store_dir, purpose="ingest") as store:
        healed = heal(store)
        if healed is not None:
            summary.notes.append(healed_message(healed))
        stored = [(Path(e["source"]), e["instance"]) for e in store.manifest["files"].values() if e.get("source")]
        namer = InstanceNamer([f.path for f in found], template=instance_from, stored=stored)
        summary.notes.extend(namer.notes)
        found = sorted(found, key=lambda f: lineage_order(f.path, namer.name(f.path)))
        if keep_lines and not store.manifest.get("keep_lines"):
            store.manifest["keep_lines"] = True  # written with the next commit
        if rollups == "defer":
            store.manifest[ROLLUPS_DEFERRED] = True  # written with the commits of what it stales
        keep_lines = bool(store.manifest.get("keep_lines"))
        batch = _Batch(store)
        known_files = KnownFiles(store)
        memo = DetectMemo(engine == "auto")

        def open_file(item, reserved: set[str] | frozenset[str] = frozenset(),
                      side_by_side: bool = False) -> _Opened | FileResult:
            # (files read side by side keep the plain block: each reader holds its own
            # blocks, and together they would hold twice what one ingest does)
            opened = _open_file(item.path, store, known_files, batch, engine, instance or namer.name(item.path), year,
                                block_bytes, on_progress, explicit=instance is not None,
                                labels=namer.labels(item.path), reserved=reserved, memo=memo,
                                plain_scale=1.0 if side_by_side else plain_scale)
            if isinstance(opened, _Opened):
                opened.ctx.keep_lines = keep_lines
            return opened

        reading = _Reading(open_file, batch, block_bytes, on_progress, lambda item: instance or namer.name(item.path))
        for result in _all_files(found, reading, workers, summary.notes, pool):
            summary.files.append(result)
            summary.lines += result.lines
            summary.events_by_kind.update(result.counts)
            if on_file:
                on_file(result)
            if batch.full:
                batch.flush()
        batch.flush()
        if metrics_files:  # after the logs: their instances name the scrapes' (sample_ingest.py)
            ingest_metrics_files(store, metrics_files, instance, summary)
        renamed = adopt_scraped_instances(store)
        if renamed:
            summary.notes.append("samples scraped before their log now carry its instance: "
                                 + ", ".join(f"{a} -> {b}" for a, b in sorted(renamed.items())))
        if rollups is True:
            if on_stage:
                on_stage("refreshing rollups")
            summary.rollup = refresh_rollups(store, summary.notes)
        elif rollups == "defer" and (store.manifest.get("dirty") or store.manifest.get("dirty_all")):
            try:
                if not read_manifest(store.root).get(ROLLUPS_DEFERRED):
                    store.commit([], dirty=[])  # the mark alone: this ingest committed nothing (stale before)
                summary.notes.append("rollups left to the first query that reads them, which refreshes them once (--refresh-rollups: now)")
            except (OSError, StoreError) as e:
                summary.notes.append(f"rollups not marked for the first query ({getattr(e, 'strerror', None) or e}); "
                                     "queries compute them from the events until the next ingest, tail or compact")
    return summary


def refresh_rollups(store: Store, notes: list[str] | None = None) -> Any:
    """Bring the store's rollups up to date after a commit (pipeline/query/rollups.py). A failure
    costs only speed (readers use the raw path while the marks stay dirty): a note, not an
    error."""
    from .query import rollups as rollup

    try:
        return rollup.refresh(store)
    except Exception as e:  # noqa: BLE001 - an optimisation; the data is committed
        if notes is not None:
            notes.append(f"rollups not refreshed ({' '.join(str(e).split())[:200]}); queries compute them from the events until the next ingest, tail or compact")
        return None


@dataclass
class _Opened:
    """A file ready to be read: what `_open_file` found out before parsing it."""

    path: Path
    result: FileResult
    parser: Any
    ctx: ParseContext
    head: bytes
    key: str
    known: dict | None
    offset: int
    next_line: int
    live: bool
    size: int
    source: str
    crc: int | None = None  # CRC-32 of the content before `offset`
    # a platform download's read block is larger: as many engine lines as a plain log's
    block_scale: float = 1.0
    labels: dict[str, str] | None = None  # the instance's labels (naming.py), for the parser
    threads: int | None = None  # parse threads: its share of the cores when read beside workers


def _open_file(
    path: Path,
    store: Store,
    known_files: KnownFiles,
    batch: _Batch,
    engine: str,
    instance: str | None,
    year: int | None,
    block_bytes: int,
    on_progress: Callable[[int], None] | None,
    *,
    explicit: bool = False,
    labels: dict[str, str] | None = None,
    reserved: set[str] | frozenset[str] = frozenset(),
    memo: DetectMemo,
    plain_scale: float = 1.0,
) -> _Opened | FileResult:
    """Detect, find in the manifest and set up the parse of one file; a FileResult when there
    is nothing to parse (empty, binary, unreadable). `reserved`: manifest keys taken by files
    opened but not yet added to the batch; `memo`: detection by shape (sources/detect_memo.py);
    `plain_scale`: the block scale of a file longer than a block whose block is not scaled
    for a platform download."""
    source = display_path(path)
    result = FileResult(source=source, engine=engine, instance=instance)
    try:
        size = path.stat().st_size
        with fp.open_stream(path) as f:
            head = f.read(DETECT_BYTES)
    except PermissionError:
        return _skip(result, "permission denied; check the file's permissions")
    except (OSError, EOFError) as e:
        reason = getattr(e, "strerror", None) or str(e) or e.__class__.__name__
        return _skip(result, f"cannot read it ({reason})")
    if not head:
        result.status, result.reason = "unchanged", "empty file"
        _progress(on_progress, size)
        return result
    if looks_binary(head):
        _progress(on_progress, size)
        return _skip(result, "binary file, not a text log")

    key, known = known_files.find(path, head)
    if known is not None and known["offset"] == size and not fp.is_transcoded(path):
        # read to its end before: nothing to detect or parse (a re-ingest of many files)
        result.engine, result.instance = known["engine"], instance if explicit else known["instance"]
        result.status, result.reason = "unchanged", "already ingested"
        _progress(on_progress, size)
        return result
    if known is not None:
        # entries of stores written before the decoding stage hold no layers: found again
        # (the engine parsers no longer undo wrappers themselves)
        result.decode = tuple(known["decode"]) if "decode" in known else wrappers.detect(wrappers.head_sample(head))
        result.engine, result.instance = known["engine"], instance if explicit else known["instance"]
    else:
        result.decode, found = memo(head)
        if engine == "auto":
            result.engine, result.detected_score = found
    if known is None and engine == "auto" and result.engine == "unknown":
        further = _detect_beyond_head(path, size, result.decode)
        if further is not None:
            result.engine, result.detected_score = further
    parser = wrappers.wrap(get_parser(result.engine), result.decode, labels)

    ctx = ParseContext(engine=result.engine, source=source, instance=result.instance, year=year,
                       directory_instance=directory_instance(source))
    ctx.file["instance_explicit"] = explicit  # (else an export's pod labels name instances)
    ctx.file["engine_explicit"] = engine != "auto"  # (else a stream of another engine is its own)
    ctx.mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
    offset, next_line = 0, 1
    # a file written to in the last minute is live: its unterminated last line is not
    # finished yet, so leave it for the next ingest (or the tailer) instead of cutting it;
    # a file its writer writes whole at once (a client's results) has no such line
    live = (
        not getattr(get_parser(result.engine), "WRITTEN_WHOLE", False)
        and not wrappers.written_whole(result.decode)
        and time.time() - path.stat().st_mtime < LIVE_WINDOW_S
    )
    if known is not None:
        offset, next_line = known["offset"], known["lines"] + 1
        restore_ctx(ctx, known.get("ctx", {}))
    else:
        # a new file of a known instance continues its lineage (model, year...)
        entries = [*known_files.of_instance(result.instance), *batch.of_instance.get(result.instance, {}).values()]
        inherit_lineage(ctx, entries, result.instance, explicit_year=year is not None)
    if key is None:
        key = fp.sha(head[: fp.HEAD_BYTES])
        # two different files may share their first bytes: keep both entries
        while key in store.manifest["files"] or key in batch.files or key in reserved:
            key = fp.sha((key + source).encode())
    crc = 0
    if known is not None:
        # entries written before the checksum have none: computed from the content, whose
        # start and end were found to be the known ones
        crc = known["crc"] if "crc" in known else fp.content_crc(path, offset, head)
    # (a file read in one block either way needs no scale)
    scale = wrappers.block_scale(result.decode, head) if size - offset > block_bytes else 1.0
    if scale == 1.0 and size - offset > block_bytes:
        scale = plain_scale
    if offset == 0 and size > block_bytes and result.decode:
        # the order of an export's entries as its detection read them (the carry scan of a
        # file read in several blocks asks it)
        newest = wrappers.sample_newest_first(wrappers.head_sample(head), result.decode)
        if newest is not None:
            ctx.file["newest_first"] = newest
    return _Opened(path, result, parser, ctx, head, key, known, offset, next_line, live, size, source, crc, scale, labels)


def _block(opened: _Opened, block_bytes: int) -> int:
    """The read block of an opened file (`block_bytes`, scaled for a platform download)."""
    return max(block_bytes, int(block_bytes * opened.block_scale))


def _detect_beyond_head(path: Path, size: int, decode: tuple[str, ...]) -> tuple[str, float] | None:
    """The engine of a file whose first lines name none, from samples of its middle and its
    end: a newest-first platform export starts with the server's last lines (a shutdown's
    noise), a log may start with an installer's output. None when neither names one (or the
    file is compressed: its middle is a decompression away)."""
    if size <= DETECT_BYTES or fp.is_transcoded(path):
        return None
    best = None
    for start in sorted({size // 2, max(size - DETECT_BYTES, DETECT_BYTES // 2)}):
        try:
            block = fp.read_range(path, start, start + DETECT_BYTES)
        except (OSError, EOFError):
            return best
        # (the block's first line is cut short; head_sample leaves out its last)
        found = detect_engine(wrappers.decode_texts(wrappers.head_sample(block)[1:], decode))
        if found[0] != "unknown" and (best is None or found[1] > best[1]):
            best = found
    return best


def _read_file(
    opened: _Opened,
    batch: _Batch,
    block_bytes: int,
    on_progress: Callable[[int], None] | None,
    parsed: Future | None = None,
) -> FileResult:
    """Parse an opened file and add its chunks to the batch, in order. `parsed`: the file
    already parsed on another thread (`_parse_whole`), its chunks to add instead."""
    path, result, ctx, key = opened.path, opened.result, opened.ctx, opened.key
    offset, next_line, size = opened.offset, opened.next_line, opened.size
    block_bytes = _block(opened, block_bytes)
    try:
        if parsed is None:
            _scan_file(path, result, ctx, offset, next_line, block_bytes)
            scan_carry(path, result.engine, result.decode, ctx, offset, next_line, block_bytes)
        with fp.open_stream(path) as f:
            if offset:
                f.seek(offset)
            # progress follows the bytes on disk (the compressed ones for .gz)
            raw = getattr(f, "fileobj", None)
            done = 0
            read_to = offset
            if parsed is None:
                chunks = ((c, None) for c in _parse_opened(opened, f, block_bytes))
            else:
                chunks = _replay(parsed)
            for chunk, state in chunks:
                if raw is None and not _same_content(f, chunk):
                    # truncated (copytruncate) or rewritten under us: these bytes may be
                    # the new content's; keep what was committed, the rotated copy resumes it
                    result.reason = (
                        f"changed while being read (truncated or rewritten, e.g. copytruncate) "
                        f"after line {next_line + result.lines - 1}; the rest is read from the "
                        "rotated copy, or as new content, at the next ingest"
                    )
                    break
                result.counts.update(dict(chunk.events["event"].value_counts().iter_rows()))
                result.lines += chunk.n_lines
                result.events += chunk.events.height
                result.invalid_utf8 |= chunk.invalid_utf8
                result.nul_bytes += chunk.nul_bytes
                state = state or _state(opened, chunk)
                batch.add(chunk.events, key, state, read=chunk.offset - read_to)
                read_to = chunk.offset
                if batch.full:
                    batch.flush()
                pos = raw.tell() if raw is not None else chunk.offset
                _progress(on_progress, max(0, min(pos, size) - done))
                done = max(done, min(pos, size))
            _progress(on_progress, max(0, size - done))
            if opened.live and raw is None and not result.reason:
                result.held_bytes = max(0, size - read_to)
            lost = getattr(f, "problem", None)  # a damaged .gz: what could not be read
            if lost and not result.reason:
                result.reason = lost
    except StoreError:
        raise  # the store, not this file: stop the command (a full disk says so in one line)
    except PermissionError:
        return _skip(result, "permission denied; check the file's permissions")
    except (OSError, EOFError) as e:
        # a truncated .gz: keep what was read, say so
        result.reason = f"stopped early: {e}"
    except Exception as e:  # noqa: BLE001 - a parser bug must not stop the other files
        # what was parsed before the failing chunk is kept (its offset is committed), the
        # rest of the file is left for a fixed servelens
        result.failed = True
        detail = " ".join(str(e).split())[:200]
        result.reason = (
            f"stopped after line {next_line + result.lines - 1}: the {result.engine} parser failed "
            f"({type(e).__name__}: {detail}); this is a servelens bug, please report it"
        )
    result.invalid.update(ctx.invalid)
    result.parse_failures = ctx.parse_failures
    if result.lines == 0 and opened.known is not None:
        result.status, result.reason = "unchanged", result.reason or "already ingested"
    return result


def _parse_opened(opened: _Opened, f, block_bytes: int):
    """The chunks of an opened file, from its offset (`f` positioned there)."""
    return parse_stream(f, opened.parser, opened.ctx, offset=opened.offset, next_line=opened.next_line,
                        block_bytes=block_bytes, hold_partial_line=opened.live, crc=opened.crc,
                        threads=opened.threads)


def _state(opened: _Opened, chunk) -> dict:
    """The manifest entry for the file read up to the end of `chunk` (its context as it is
    right after that chunk)."""
    r = opened.result
    return file_state(
        opened.path, opened.head, chunk.offset, chunk.next_line - 1,
        source=opened.source, engine=r.engine, instance=r.instance, ctx=opened.ctx,
        tail=chunk.tail, decode=r.decode, crc=chunk.crc,
    )


# Many small files: each is one read block, so parsing one file at a time leaves one core
# idle. While one file is parsed (and its events added), the next one, when it is small and
# independent of it (another instance: nothing of the first carries to it), is parsed on a
# second thread. Its chunks and their manifest entries are added after the first's, so the
# store, the manifest and the order of results are those of reading the files one by one.
_FILE_EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="servelens-file")


def _parse_whole(opened: _Opened, block_bytes: int) -> tuple[list, BaseException | None]:
    """Every chunk of a (small) file with its manifest entry, taken as the file is read
    (as `_read_file` takes it); a failure is kept to be raised where the chunks are added,
    after those before it, as reading the file one chunk at a time would raise it."""
    items: list = []
    try:
        with fp.open_stream(opened.path) as f:
            if opened.offset:
                f.seek(opened.offset)
            for chunk in _parse_opened(opened, f, _block(opened, block_bytes)):
                items.append((chunk, _state(opened, chunk)))
    except BaseException as e:  # noqa: BLE001 - raised again by _replay, in order
        return items, e
    return items, None


def _replay(parsed: Future) -> Iterator[tuple]:
    items, error = parsed.result()
    yield from items
    if error is not None:
        raise error


def _small(opened: _Opened, block_bytes: int) -> bool:
    """Is what is left of the file one read block (in memory whole without harm)?"""
    return opened.size - opened.offset <= _block(opened, block_bytes) and not fp.is_transcoded(opened.path)


def _independent(a: _Opened, b: _Opened) -> bool:
    """Can `b` be opened and parsed before `a` is added to the batch? Not when it continues
    `a`'s instance (its lineage: model, year) or could be a copy of `a` (same first bytes:
    the manifest would know it once `a` is committed)."""
    n = min(len(a.head), len(b.head), fp.HEAD_BYTES)
    return a.result.instance != b.result.instance and a.key != b.key and a.head[:n] != b.head[:n]


class _Reading(NamedTuple):
    """How one ingest opens its files (`open_file`), reads them into its batch and names
    their instances (`name_of`)."""

    open_file: Callable[..., _Opened | FileResult]
    batch: _Batch
    block_bytes: int
    on_progress: Callable[[int], None] | None
    name_of: Callable[[Any], str | None]


def _files_in_order(found: list, reading: _Reading) -> Iterator[FileResult]:
    """Each file's result, in `found`'s order, small independent files two at a time."""
    open_file, batch, block_bytes, on_progress, name_of = reading
    i, n = 0, len(found)
    ahead: tuple[_Opened, Future | None] | FileResult | None = None
    while i < n:
        if isinstance(ahead, FileResult):
            yield ahead
            ahead, i = None, i + 1
            continue
        if ahead is not None:
            opened, parsed = ahead
            ahead = None
        else:
            first = open_file(found[i])
            if isinstance(first, FileResult):
                yield first
                i += 1
                continue
            opened = first
            parsed = _FILE_EXECUTOR.submit(_parse_whole, opened, block_bytes) if _small(opened, block_bytes) else None
        if parsed is not None and i + 1 < n and name_of(found[i + 1]) not in (name_of(found[i]), opened.result.instance):
            nxt = open_file(found[i + 1], reserved={opened.key})
            if isinstance(nxt, FileResult):
                ahead = nxt
            elif _small(nxt, block_bytes) and _independent(opened, nxt):
                ahead = (nxt, _FILE_EXECUTOR.submit(_parse_whole, nxt, block_bytes))
            # else: opened again, after this one is in the batch (opening has no side effect)
        yield _read_file(opened, batch, block_bytes, on_progress, parsed)
        i += 1


# Large files of instances that have no other file in the ingest (nothing one teaches the
# parser carries to another) are read in worker processes (workers.py), each parsing and
# staging its own parts; this process opens them (detection, the manifest's offsets) and
# commits each flush with the file states it brings, so nothing is committed that the
# writer did not commit.


def _for_workers(found: list, name_of: Callable[[Any], str | None], workers: int) -> list:
    """The files to read in worker processes: large ones whose instance has no other file
    here, when there are two or more (one file alone gains nothing from a process: the
    parse threads already share its blocks), largest first."""
    if workers < 2:
        return []
    names = Counter(name_of(item) for item in found)
    big = []
    for item in found:
        try:
            size = item.path.stat().st_size
        except OSError:
            continue  # opened here, which says what is wrong
        if names[name_of(item)] == 1 and size >= workers_mod.WORKER_MIN_BYTES:
            big.append((size, item))
    # each reader takes the next file when it is free: the largest handed out first leave
    # the small ones to even out the readers' ends (a large file last would be read alone)
    big.sort(key=lambda x: -x[0])
    return [item for _, item in big] if len(big) >= 2 else []


def _flush_share(readers: int) -> int:
    """The share of the flush limits each of `readers` reading side by side flushes at."""
    return max(1, min(readers, MAX_FLUSH_SHARE))


def _all_files(found: list, reading: _Reading, workers: int, notes: list[str],
               pool: Workers | None = None) -> Iterator[FileResult]:
    """Each file's result: the files `_for_workers` picks read side by side by this process
    and worker processes (`pool`, started before: else started here, one fewer than
    `workers`), the others read here first, in order."""
    open_file, batch, block_bytes, on_progress, name_of = reading
    big = _for_workers(found, name_of, pool.readers if pool is not None else max(1, workers))
    if not big:
        if pool is not None:
            pool.close()  # (its imports would compete with the reading here)
        yield from _files_in_order(found, reading)
        return
    try:
        if pool is None:
            pool = workers_mod.start(min(workers, len(big)) - 1, on_progress is not None)
    except (OSError, ImportError) as e:  # no process support here (e.g. no /dev/shm): read them here
        notes.append(f"large files read one at a time: no worker processes here ({e})")
        yield from _files_in_order(found, reading)
        return
    notes.append(f"{len(big):,} large files read side by side by this process and {pool.n} worker "
                 f"process{'es' if pool.n > 1 else ''} (--workers 1: one at a time)")
    side = _SideBySide(pool, batch, block_bytes, on_progress)
    batch.share = _flush_share(pool.readers)
    finished = False
    try:
        reserved: set[str] = set()
        for item in big:
            opened = open_file(item, reserved=frozenset(reserved), side_by_side=True)
            if isinstance(opened, FileResult):
                yield opened
                continue
            reserved.add(opened.key)
            side.queue.append(opened)
        side.hand_over()
        picked = {id(item) for item in big}
        rest = [item for item in found if id(item) not in picked]

        def open_rest(item, reserved_here: set[str] | frozenset[str] = frozenset()):
            return open_file(item, reserved=reserved | set(reserved_here))

        for result in _files_in_order(rest, reading._replace(open_file=open_rest, on_progress=side.progress)):
            yield result
            yield from side.committed()
        while side.queue:
            opened = side.queue.popleft()
            opened.threads = pool.share  # (this process's share of the cores, as each worker's)
            yield _read_file(opened, batch, block_bytes, side.progress)
            yield from side.committed()
        if side.running:
            # this process's last events are written while the workers still read, not
            # after their last file, where nothing else would run beside the writing
            batch.flush()
        yield from side.committed(wait=True)
        finished = True
    finally:
        batch.share = 1
        if finished:
            pool.executor.shutdown(wait=True)
        else:
            # an error or an interrupt: the workers stop now (what they staged is removed
            # at the store's next open), not after their files
            pool.close()


class _SideBySide:
    """Large files (`queue`, opened) read by worker processes and this process side by side.
    Whenever this process's own reading moves on (`progress`, between its blocks) or it
    waits, what the workers finished is committed and a free worker is handed the next
    file; this process takes the next file when it is free."""

    def __init__(self, pool: Workers, batch: _Batch, block_bytes: int, on_progress: Callable[[int], None] | None):
        self.pool, self.batch, self.block_bytes, self.on_progress = pool, batch, block_bytes, on_progress
        self.queue: deque[_Opened] = deque()
        self.running: list[tuple[_Opened, Future]] = []
        self.ready: list[FileResult] = []  # committed, not yet reported
        self.flushes: Counter = Counter()  # per file (its key): the flushes committed as they came

    def hand_over(self) -> None:
        from concurrent.futures.process import BrokenProcessPool

        busy = sum(1 for _, f in self.running if not f.done())
        while busy < self.pool.n and self.queue:
            opened = self.queue[0]
            portable = dataclasses.replace(opened, parser=None)  # (a parser is a module: rebuilt there)
            try:
                future = self.pool.executor.submit(_read_in_worker, str(self.batch.store.root), portable,
                                                   self.block_bytes, self.batch.share)
            except BrokenProcessPool:
                return  # a worker died: said where this process waits for its file (`committed`)
            self.running.append((self.queue.popleft(), future))
            busy += 1

    def progress(self, n: int) -> None:
        """This process read `n` more bytes: the bar moves by them and by what the workers
        say they read; what they finished is committed, a free worker gets the next file."""
        _progress(self.on_progress, n)
        self._workers_read()
        self._staged()
        # (a worker's failure is left to `committed`: raised here, it would pass for a
        # failure of the file this process is reading)
        for r in [r for r in self.running if r[1].done() and r[1].exception() is None]:
            self._commit(r)
        self.hand_over()

    def _workers_read(self) -> None:
        queue = self.pool.progress
        while queue is not None and not queue.empty():
            _progress(self.on_progress, queue.get())

    def _staged(self, key: str | None = None, until: int = 0) -> None:
        """Commit the flushes the workers staged so far, in the order they were sent (a
        worker's file's last ones are then all that is left once it ends); with `key`, wait
        until that file's `until` flushes are in."""
        queue = self.pool.staged
        while not queue.empty() or (key is not None and self.flushes[key] < until):
            token, parts, files = queue.get()
            self.batch.commit_staged(parts, files)
            self.flushes[token] += 1

    def _commit(self, r: tuple[_Opened, Future]) -> None:
        self.running.remove(r)
        self._workers_read()
        self.ready.append(_commit_read(*r, self._staged))
        if self.pool.progress is None:
            _progress(self.on_progress, r[0].size)

    def committed(self, wait: bool = False) -> Iterator[FileResult]:
        """The results of the files workers have finished, committed; with `wait`, of all
        of them."""
        from concurrent.futures import FIRST_COMPLETED, wait as wait_for

        while True:
            while self.ready:
                yield self.ready.pop(0)
            if not self.running:
                return
            done = [r for r in self.running if r[1].done()]
            if not done:
                if not wait:
                    return
                wait_for([f for _, f in self.running], timeout=0.2, return_when=FIRST_COMPLETED)
                self._workers_read()
                self._staged()
                self.hand_over()
                continue
            for r in done:
                self._commit(r)
            self.hand_over()


def _read_in_worker(root: str, opened: _Opened, block_bytes: int, share: int = 1) -> tuple[FileResult, int]:
    """In a worker process (flushing at `share` of the limits): read an opened file as
    `_read_file` does, each flush staged in the store's directory, not committed, and sent on
    the workers' queue as soon as it is staged; returns the file's result and the count of
    flushes sent."""
    r = opened.result
    opened.parser = wrappers.wrap(get_parser(r.engine), r.decode, opened.labels)
    batch = _StagedBatch(Store(root=Path(root)), workers_mod.staged().put, opened.key)
    batch.share = share
    queue = workers_mod.progress()
    said = queue.put if queue is not None else None
    result = _read_file(opened, batch, block_bytes, said)
    batch.flush()
    return result, batch.sent


def _commit_read(opened: _Opened, pending: Future, committed: Callable[[str, int], None]) -> FileResult:
    """What a worker read of one file (finished), its flushes committed: those not yet in
    are waited for (`committed(key, count)`), in the order it staged them."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        result, sent = pending.result()
    except BrokenProcessPool:
        raise IngestError(
            f"the worker process reading {opened.source} stopped before it finished (killed, e.g. out of "
            "memory); what was committed is kept: run the same command again, with --workers 1 to read "
            "one file at a time"
        ) from None
    committed(opened.key, sent)
    return result


def _scan_file(path: Path, result: FileResult, ctx: ParseContext, offset: int, next_line: int, block_bytes: int) -> None:
    """A parser with a `scan_file` hook first reads the lines about to be parsed (offset to
    the end, wrappers undone) and leaves what only the whole file tells in `ctx.file`
    (llama.cpp: where each process run's relative times end, to anchor them)."""
    scan = getattr(get_parser(result.engine), "scan_file", None)
    # (what is left fits in one read block: its one chunk sees all of it already)
    if scan is None or (not fp.is_transcoded(path) and path.stat().st_size - offset <= block_bytes):
        return
    with fp.open_stream(path) as f:
        if offset:
            f.seek(offset)
        frames = line_frames(f, next_line, block_bytes)
        scan((wrappers.decode(fr, result.decode) if result.decode else fr for fr in frames), ctx)


# bytes before a chunk's end re-read to tell that the file still holds the content read
SAME_CONTENT_BYTES = 256


def _same_content(f, chunk) -> bool:
    """Do the bytes just before the chunk's end, read again now, equal the ones parsed?"""
    n = min(len(chunk.tail), SAME_CONTENT_BYTES)
    if n == 0:
        return True
    try:
        return os.pread(f.fileno(), n, chunk.offset - n) == chunk.tail[len(chunk.tail) - n :]
    except OSError:
        return False


def _skip(result: FileResult, reason: str) -> FileResult:
    result.status, result.reason = "skipped", reason
    return result


def _progress(cb: Callable[[int], None] | None, n: int) -> None:
    if cb and n:
        cb(n)

