"""The store: a directory of Hive-partitioned Parquet files plus one manifest.

Layout (pipeline/store/layout.py says how other engines read it):
    <store>/manifest.json                         the commit point (versioned JSON)
    <store>/events/engine=<e>/day=<YYYY-MM-DD>/part-<txid>-<n>.parquet
    <store>/_staging/<txid>/...                   parts being written
    <store>/_garbage/events/...                   parts compaction replaced, deleted after a grace time
    <store>/.lock                                 one writer at a time

The manifest lists the committed part files and, per ingested file (keyed by content
fingerprint), how far it has been read. Data and offsets are committed together:

1. parts are written and fsynced under `_staging/<txid>/`;
2. the manifest, with the new offsets, the new part list and the moves still to do, is
   written to `manifest.json.new`, fsynced and renamed over `manifest.json`: the commit;
3. parts the commit removes (compaction) are moved out of `events/` to `_garbage/`, the new
   parts are renamed into `events/`, then the manifest is rewritten without the moves.

A crash before 2 leaves orphans in `_staging` (deleted on the next open, offsets not
advanced: the lines are read again, nothing doubled); a crash after 2 is rolled forward on the
next open. Readers take the part list from the manifest, so they never see a half-written
file or a part whose offsets were not committed.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from servelens.parsers.schema import events_to_arrow

from .columns import PARTITION_COLUMNS
from .integrity import part_checksum
from .layout import FILE_SCHEMA, file_table, part_dir
from .manifest import (
    NO_SPACE,
    StoreError,
    StoreLocked,
    create_manifest,
    empty_manifest,
    fsync_dir,
    no_space,
    read_manifest,
    write_json_atomic,
)

# Parts removed by compaction leave events/ at once (for engines globbing it) and are kept
# this long under _garbage/ (a reader that opened one already reads on; a post-mortem can look).
GARBAGE_GRACE_S = 300.0
GARBAGE_DIR = "_garbage"
# How parts are written. Dictionary pages and min/max statistics pay off on the short,
# repetitive columns; on `message` and `attrs` (most of the bytes, nearly all distinct) they
# cost write time for nothing (bench/RESULTS.md).
_WIDE_TEXT = ("message", "attrs", "request_id")
# The throughputs an engine logs per interval are nearly all distinct too: their dictionary is
# as large as the values, so its indices are extra bytes and its hashing extra time. (Request
# durations repeat: printed to the millisecond, they keep their dictionary, as kv_usage does.)
_MEASURED = ("prompt_tps", "gen_tps")
# A part's rows are in file order within each source: its line numbers and byte offsets
# rise in small steps, which the delta encoding stores in a few bits each, faster than the
# compressor takes their eight bytes (times repeat within a second: plain and compressed).
_STEPPED = ("line", "byte_offset")
PARQUET_OPTIONS = dict(
    compression="zstd",
    row_group_size=256_000,
    use_dictionary=[f.name for f in FILE_SCHEMA
                    if f.name not in (*_WIDE_TEXT, *_MEASURED, "ts", *_STEPPED)],
    write_statistics=[f.name for f in FILE_SCHEMA if f.name not in ("message", "attrs")],
    column_encoding={name: "DELTA_BINARY_PACKED" for name in _STEPPED},
)


@dataclass(frozen=True)
class Staged:
    """Parts written under `_staging/<txid>` and what committing them changes."""

    txid: str
    moves: list[tuple[str, str]]
    dirty: list[list]
    rows: int
    sources: dict = field(default_factory=dict)  # staged part -> the sources of its rows


@dataclass
class Store:
    """A writer's handle on the store: holds the lock for its lifetime."""

    root: Path
    manifest: dict = field(default_factory=empty_manifest)
    _lock_fd: int | None = None
    remote: Any = None  # a remote.Mirror publishing each commit (a --store s3://... URL)
    # commits made through this handle, and per (engine, instance) ("*": all) the number of
    # the last one that changed its rows: a refresh computed off the writer's thread keeps
    # the dirty marks of what changed after it began (pipeline/query/rollups.py)
    generation: int = 0
    touched_at: dict = field(default_factory=dict)
    # the sources of the events of each part staged through this handle (its path under the
    # store): what `_part_info` would otherwise read back from the file
    _staged_sources: dict = field(default_factory=dict)

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(cls, root: Path | str, purpose: str = "ingest") -> "Store":
        from . import remote

        url = remote.store_url(root)
        if url is not None:  # object storage: a local mirror publishing every commit
            return remote.open_store(cls, url, purpose)
        root = remote.local_store(root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:
            raise StoreError(
                f"cannot write to store {root}: permission denied; "
                "choose another --store or fix its permissions"
            ) from None
        except FileExistsError:
            raise StoreError(f"store {root} exists and is not a directory; choose another --store") from None
        except OSError as e:
            raise StoreError(
                f"cannot write to store {root}: {e.strerror}; choose another --store"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreLocked(
                    f"store {root} is in use by {holder}; stop it or use another --store"
                ) from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"servelens {purpose} (pid {os.getpid()})".encode(), 0)
        except OSError as e:  # the holder's name is a courtesy; a full disk is not fatal here
            if e.errno not in NO_SPACE:
                os.close(fd)
                raise
        if not os.access(root, os.W_OK):
            os.close(fd)
            raise StoreError(
                f"cannot write to store {root}: permission denied; "
                "choose another --store or fix its permissions"
            )
        store = cls(root=root, _lock_fd=fd)
        try:
            store.manifest = read_manifest(root)
            if not (root / "manifest.json").exists():
                # a new store: its manifest exists from the start, so a store without one
                # is always a damaged store, never an empty one
                create_manifest(root, store.manifest)
            store._recover()
        except OSError as e:
            store.close()
            if e.errno in NO_SPACE:
                raise no_space(root, e) from None
            raise StoreError(f"cannot open store {root}: {e.strerror or e}") from None
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        if self.remote is not None and self.remote.unpublished and self._lock_fd is not None:
            try:
                self.remote.push(self.manifest)
                self.remote.unpublished = None
            except OSError:
                pass
            if self.remote.unpublished:
                os.close(self._lock_fd)
                self._lock_fd = None
                raise StoreError(
                    f"committed to the local mirror {self.root} but not published to "
                    f"{self.remote.url} ({self.remote.unpublished}); run the same command again "
                    "when the store is reachable: nothing is read twice")
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recover(self) -> None:
        """Roll a committed transaction forward (its moves, and its compacted-away parts out
        of `events/`, also those a store older than `_garbage/` left there); delete
        uncommitted staging files."""
        if self.manifest.get("pending"):
            self._apply_moves(self.manifest["pending"])
            self.manifest["pending"] = []
            write_json_atomic(self.root / "manifest.json", self.manifest)
        self._retire([rel for rel, _t in self.manifest.get("garbage", [])])
        staging = self.root / "_staging"
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

    # -- writing -----------------------------------------------------------------------

    def stage_events(self, events: pl.DataFrame, txid: str) -> list[tuple[str, str]]:
        """Write events as Parquet parts under staging, one per (engine, day).
        Returns (staged, final) relative paths."""
        if events.height == 0:
            return []
        groups = partitions(events)
        moves = []
        stage_dir = self.root / "_staging" / txid
        stage_dir.mkdir(parents=True, exist_ok=True)
        for n, ((engine, day), part) in enumerate(groups):
            name = f"part-{txid}-{n:04d}.parquet"
            final = f"{part_dir(engine, day)}/{name}"
            # staged under its partition path too: a reader given a part still in staging
            # takes the partition values from its path
            staged = stage_dir / final
            staged.parent.mkdir(parents=True, exist_ok=True)
            table = events_to_arrow(by_time(part))
            # the partition values are in the path (a table of the schema's types needs no cast)
            kept = table.drop_columns([c for c in PARTITION_COLUMNS if c in table.column_names])
            table = kept if kept.schema.equals(FILE_SCHEMA) else file_table(table)
            if "source" in part.columns:
                self._staged_sources[str(staged.relative_to(self.root))] = set(part["source"].unique().to_list())
            import pyarrow.parquet as pq

            with open(staged, "wb") as f:
                pq.write_table(table, f, **PARQUET_OPTIONS)
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(staged.parent)
            moves.append((str(staged.relative_to(self.root)), final))
        return moves

    def commit(
        self,
        moves: list[tuple[str, str]],
        files: dict[str, dict] | None = None,
        remove_parts: list[str] | None = None,
        *,
        dirty: list[list] | str | tuple | None = None,
        rollups: dict[str, dict] | None = None,
    ) -> None:
        """Atomically make staged parts visible and record file offsets.

        `dirty`: what the commit changes of the data the rollups were computed from
        (pipeline/query/rollups.py): [[engine, instance, first ts, last ts], ...] added to the
        manifest's dirty marks, "all" (every rollup is stale), or "clean" (a refresh: the
        marks are cleared). Left None, a commit that adds or removes parts marks everything
        dirty (commit_events says what its events touch; compaction, which keeps every row,
        says []). ("clean", generation): clear the marks of what no commit through this
        handle changed after `generation` (a refresh computed meanwhile). `rollups`: name -> entry of a rollup
        file this commit makes current (the file it replaces goes to the garbage).

        Either the commit happens (the manifest is renamed into place) or nothing changes,
        on disk or in `self.manifest`: a failure before the rename (a full disk) leaves the
        handle as it was, so the caller can retry the same commit later."""
        self._probe_moves(moves, remove_parts or [])
        m = self.manifest
        before = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in m.items()}
        removed = set(remove_parts or [])
        if dirty is None:  # a caller that does not say what changed: every rollup is stale
            dirty = "all" if (removed or moves) else []
        if isinstance(dirty, tuple) and dirty[0] == "clean":  # ("clean", generation): keep what changed since
            since = dirty[1]
            if self.touched_at.get("*", -1) <= since:
                m.pop("dirty_all", None)
            kept = [d for d in m.get("dirty", []) if self.touched_at.get((d[0], d[1]), -1) > since]
            if kept:
                m["dirty"] = kept
            else:
                m.pop("dirty", None)
        elif dirty == "clean":
            m.pop("dirty", None)
            m.pop("dirty_all", None)
        elif dirty == "all":
            m["dirty_all"] = True
        elif dirty:
            m["dirty"] = merge_dirty(m.get("dirty", []), dirty)
        retired_rollups = []
        if rollups:
            m["rollups"] = dict(m.get("rollups", {}))
            for name, entry in rollups.items():
                old = m["rollups"].get(name)
                if old and old.get("path") and old["path"] != entry.get("path"):
                    retired_rollups.append(old["path"])
                m["rollups"][name] = entry
        removed |= set(retired_rollups)
        info = self._part_info(moves, files or {}, removed)
        for key, state in (files or {}).items():
            m["files"][key] = state
        m["part_info"] = {p: v for p, v in m.get("part_info", {}).items() if p not in removed}
        m["part_info"].update(info)
        now = time.time()
        m["parts"] = [p for p in m["parts"] if p not in removed] + [final for _, final in moves]
        m["garbage"] = m.get("garbage", []) + [[p, now] for p in sorted(removed)]
        m["pending"] = [list(mv) for mv in moves]
        m["committed_at"] = dt.datetime.now(dt.timezone.utc).isoformat()
        try:
            write_json_atomic(self.root / "manifest.json", m)
        except BaseException:
            m.clear()
            m.update(before)
            try:
                (self.root / "manifest.json.new").unlink()
            except OSError:
                pass
            raise
        self.generation += 1
        if dirty == "all":
            self.touched_at["*"] = self.generation
        elif isinstance(dirty, list):
            for d in dirty:
                self.touched_at[(d[0], d[1])] = self.generation
        self.settle(moves, removed, now)
        stage_dirs = {d for staged, _ in moves for d in Path(staged).parents if d.parts and d != Path("_staging")}
        for d in [*sorted(stage_dirs, key=lambda d: -len(d.parts)), Path("_staging")]:
            try:
                (self.root / d).rmdir()
            except OSError:
                pass

    def _probe_moves(self, moves: list, removed: list[str]) -> None:
        """Raise now, before the manifest names them, if the parts cannot be moved into (or
        out of) their directories: a partition directory that is immutable, read-only or not
        ours. Those moves happen after the manifest is replaced; failing there would leave a
        committed part missing until the next writer, and the command saying it succeeded."""
        dirs = {(self.root / final).parent for _, final in moves}
        dirs |= {(self.root / rel).parent for rel in removed if (self.root / rel).exists()}
        if not dirs:
            return
        staging = self.root / "_staging"
        staging.mkdir(parents=True, exist_ok=True)
        for d in sorted(dirs):
            d.mkdir(parents=True, exist_ok=True)
            probe = staging / f".probe-{os.getpid()}"
            probe.touch()
            try:
                # a hidden name: an engine globbing events/**/*.parquet never reads it
                os.replace(probe, d / probe.name)
                os.unlink(d / probe.name)
            finally:
                probe.unlink(missing_ok=True)

    def settle(self, moves: list, removed: set[str] | frozenset[str] = frozenset(), now: float | None = None) -> None:
        """After a commit's manifest is in place: its parts moved into place (the parts it
        replaces out of events/ first), the manifest rewritten with nothing pending, the
        garbage collected (at `now`), and a remote store told. The commit has happened: a
        failure here (a full disk when the manifest is rewritten) is rolled forward by the
        next open or commit."""
        try:
            # replaced parts out of events/ before their replacement moves in: a glob over
            # events/ may briefly miss those rows, never count them twice
            self._retire(sorted(removed))
            self._apply_moves(moves)
            self.manifest["pending"] = []
            if now is not None:
                self._collect_garbage(now)
            write_json_atomic(self.root / "manifest.json", self.manifest)
        except OSError:
            pass
        if self.remote is not None:
            try:
                self.remote.push(self.manifest)
                self.remote.unpublished = None
            except OSError as e:  # committed here; published by the next commit, or at close
                self.remote.unpublished = " ".join(str(e).split())[:300]

    def commit_events(self, frames: list[pl.DataFrame], files: dict[str, dict]) -> int:
        """Write these events and commit them together with the file states they bring
        (what ingest and tail both do at every flush). Returns the events written.

        A full disk raises StoreFull with nothing changed (the staged parts are removed):
        the same frames and files can be committed again once there is space."""
        if not files and not frames:
            return 0
        staged = self.stage_flush(frames)
        self.commit_staged(staged, files)
        return staged.rows

    def stage_flush(self, frames: list[pl.DataFrame]) -> Staged:
        """Write a flush's events as staged parts, not yet committed: what a worker process
        does with the store's directory (it holds no lock) before the writer commits them
        (commit_staged). A full disk raises StoreFull with the staged parts removed."""
        events = pl.concat(frames) if frames else pl.DataFrame()
        txid = new_txid()
        try:
            moves = self.stage_events(events, txid) if events.height else []
        except OSError as e:
            raise self._unstaged(txid, e) from None
        sources = {staged: self._staged_sources[staged] for staged, _ in moves if staged in self._staged_sources}
        return Staged(txid, moves, dirty_marks(events), events.height, sources)

    def commit_staged(self, staged: Staged, files: dict[str, dict]) -> None:
        """Commit staged parts with the file states they bring; a failure removes them (the
        same events are staged again by a later ingest: their offsets were not committed)."""
        self._staged_sources.update(staged.sources)  # (staged by a worker: its handle knew them)
        try:
            self.commit(staged.moves, files=files, dirty=staged.dirty)
        except OSError as e:
            raise self._unstaged(staged.txid, e) from None

    def _unstaged(self, txid: str, e: OSError) -> Exception:
        shutil.rmtree(self.root / "_staging" / txid, ignore_errors=True)
        return no_space(self.root, e) if e.errno in NO_SPACE else e

    def _part_info(self, moves: list[tuple[str, str]], files: dict[str, dict], removed: set[str]) -> dict:
        """What each new part holds, for `check` and `repair`: its row count, and per file
        entry the range it covers: `from`, the entry as it was before (what to roll the
        entry back to if the part is lost; None for a file read from its start) and `to`,
        the offset after. A merged part (compaction) covers what the parts it replaces did;
        when one of those has no record (a store older than this), neither has it."""
        import pyarrow.parquet as pq

        if removed:
            olds = [self.manifest.get("part_info", {}).get(p) for p in removed]
            sources: dict | None = {}
            if any(o is None or o.get("sources") is None for o in olds):
                sources = None
            else:
                for o in olds:
                    for key, rng in o["sources"].items():
                        cur = sources.get(key)
                        if cur is None:
                            sources[key] = dict(rng)
                            continue
                        f_old, f_new = cur["from"], rng["from"]
                        if f_new is None or (f_old is not None and f_new["offset"] < f_old["offset"]):
                            cur["from"] = f_new
                        cur["to"] = max(cur["to"], rng["to"])
        else:
            sources = {key: {"from": _rollback_state(self.manifest["files"].get(key)), "to": state["offset"]}
                       for key, state in files.items()}
        out = {}
        for staged, final in moves:
            mine = sources
            held = self._staged_sources.pop(staged, None)
            try:
                rows = pq.read_metadata(self.root / staged).num_rows
                if sources and not removed:
                    # a commit's parts are split by engine and day: each holds only some of
                    # its files, and losing it should roll back only those
                    if held is None:
                        held = set(pq.ParquetFile(self.root / staged).read(columns=["source"])["source"].unique().to_pylist())
                    mine = {k: v for k, v in sources.items() if files[k].get("source", held and next(iter(held))) in held}
            except Exception:  # noqa: BLE001 - unreadable now: check will say so
                rows = None
            out[final] = {"rows": rows, "sources": mine, **_content_record(self.root / staged)}
        return out

    def _apply_moves(self, moves: list) -> None:
        dirs = set()
        for staged, final in moves:
            src, dst = self.root / staged, self.root / final
            if src.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
                dirs.add(dst.parent)
        for d in dirs:
            fsync_dir(d)

    def _retire(self, rels: list[str]) -> None:
        """Move parts the manifest no longer lists out of `events/` (to `_garbage/`, same
        path below it) at once, so that an engine globbing `events/` never reads them twice
        beside the part that replaced them. A reader holding the old part list finds them
        gone and reads the manifest again (query.READ_RETRIES)."""
        for rel in rels:
            src = self.root / rel
            if not src.exists():
                continue
            dst = self.root / GARBAGE_DIR / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)

    def _collect_garbage(self, now: float) -> None:
        keep = []
        for rel, t in self.manifest.get("garbage", []):
            if now - t >= GARBAGE_GRACE_S:
                for path in (self.root / GARBAGE_DIR / rel, self.root / rel):
                    try:
                        path.unlink()
                    except FileNotFoundError:
                        pass
            else:
                keep.append([rel, t])
        self.manifest["garbage"] = keep


def _content_record(path: Path) -> dict:
    """What a new part is, for content_problem: its size, modification time (a rename into
    events/ keeps it) and checksum."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "crc32": part_checksum(fd)}
    finally:
        os.close(fd)


def partitions(events: pl.DataFrame) -> list[tuple[tuple[str | None, str | None], pl.DataFrame]]:
    """The events of each (engine, day), in the order each first appears, each one's rows in
    their order: what a group-by keeping the order gives. A batch is mostly one engine's rows
    in time order (a long log's crosses midnight or several): then its days are runs, and
    each part a slice of the batch, without the group-by's copy of every row."""
    engine = events["engine"]
    day = events["ts"].dt.date().to_physical()
    if engine.null_count() == 0 and day.null_count() == 0 and (engine == engine[0]).all() \
            and (day.diff().drop_nulls() >= 0).all():
        starts = (day != day.shift(1)).fill_null(True).arg_true()
        # each run's day written as the group-by's key is (the first row's, by strftime)
        days = events.select(pl.col("ts").gather(starts).dt.strftime("%Y-%m-%d")).to_series().to_list()
        bounds = [*starts.to_list(), events.height]
        return [((engine[0], d), events.slice(lo, hi - lo)) for d, lo, hi in zip(days, bounds, bounds[1:])]
    keyed = events.with_columns(pl.col("ts").dt.strftime("%Y-%m-%d").alias("_day"))
    return [(key, part.drop("_day")) for key, part in keyed.group_by(["engine", "_day"], maintain_order=True)]


def by_time(events: pl.DataFrame) -> pl.DataFrame:
    """Events in (ts, line) order, nulls last. A batch of chunks read in file order mostly is
    already: the sort (a copy of every column) only when some pair of rows is not strictly
    in it (a tie is sorted as before, whatever order the sort gives it)."""
    ts, line = pl.col("ts"), pl.col("line")
    ordered = events.select(
        ts.is_not_null().all() & line.is_not_null().all()
        & ((ts > ts.shift(1)) | ((ts == ts.shift(1)) & (line > line.shift(1)))).all()
    ).item()
    return events if ordered else events.sort("ts", "line", nulls_last=True)


def dirty_marks(events: pl.DataFrame) -> list[list]:
    """Per (engine, instance) of `events`, its first and last time (ISO text; None when it
    has none): what a commit of them changes (one group-by over the batch)."""
    if events.height == 0:
        return []
    span = (
        pl.col("ts").min().dt.to_string("%Y-%m-%dT%H:%M:%S%.f%z").alias("lo"),
        pl.col("ts").max().dt.to_string("%Y-%m-%dT%H:%M:%S%.f%z").alias("hi"),
    )
    # most batches are one file's: one group, without the group-by's hashing of every row
    if events.select((pl.col("engine").n_unique() == 1) & (pl.col("instance").n_unique() == 1)).item():
        spans = events.select(pl.col("engine").first(), pl.col("instance").first(), *span)
    else:
        spans = events.group_by("engine", "instance").agg(*span)
    return [list(r) for r in spans.iter_rows()]


def merge_dirty(marks: list[list], new: list[list]) -> list[list]:
    """Dirty marks, one per (engine, instance), spanning the times of both."""
    out: dict[tuple, list] = {}
    for e, i, lo, hi in [*marks, *new]:
        cur = out.get((e, i))
        if cur is None:
            out[(e, i)] = [e, i, lo, hi]
        else:
            cur[2] = min((t for t in (cur[2], lo) if t is not None), default=None)
            cur[3] = max((t for t in (cur[3], hi) if t is not None), default=None)
    return sorted(out.values(), key=lambda r: (str(r[0]), str(r[1])))


# what a rollback needs of a file entry: where its content was read to and the state to
# resume there (source, engine, instance and identity stay those of the current entry)
ROLLBACK_KEYS = ("head_sha", "head_len", "tail_sha", "tail_len", "offset", "lines", "ctx", "crc")


def _rollback_state(entry: dict | None) -> dict | None:
    if entry is None:
        return None
    return {k: entry[k] for k in ROLLBACK_KEYS if k in entry}


def new_txid() -> str:
    # time-ordered, so part names sort in commit order
    return f"{time.time_ns():x}-{uuid.uuid4().hex[:8]}"
