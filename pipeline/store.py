"""The store: a directory of Hive-partitioned Parquet files plus one manifest.

Layout:
    <store>/manifest.json                         the commit point (versioned JSON)
    <store>/events/engine=<e>/day=<YYYY-MM-DD>/part-<txid>-<n>.parquet
    <store>/_staging/<txid>/...                   parts being written
    <store>/.lock                                 one writer at a time

The manifest lists the committed part files and, per ingested file (keyed by content
fingerprint), how far it has been read. Data and offsets are committed together:

1. parts are written and fsynced under `_staging/<txid>/`;
2. the manifest, with the new offsets, the new part list and the moves still to do, is
   written to `manifest.json.new`, fsynced and renamed over `manifest.json`: the commit;
3. the parts are renamed into `events/`, then the manifest is rewritten without the moves.

A crash before 2 leaves orphans in `_staging` (deleted on the next open, offsets not
advanced: the lines are read again, nothing doubled); a crash after 2 is rolled forward on the
next open. Readers take the part list from the manifest, so they never see a half-written
file or a part whose offsets were not committed.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from servelens.parsers.schema import EVENT_SCHEMA

MANIFEST_VERSION = 1
DEFAULT_STORE = "servelens-store"
# Parts removed by compaction are kept this long so that readers holding an older part list
# can finish their query.
GARBAGE_GRACE_S = 300.0
# How parts are written. Dictionary pages and min/max statistics pay off on the short,
# repetitive columns; on `message` and `attrs` (most of the bytes, nearly all distinct) they
# cost write time for nothing: 10-20% of the Parquet write.
_WIDE_TEXT = ("message", "attrs", "request_id")
PARQUET_OPTIONS = dict(
    compression="zstd",
    row_group_size=256_000,
    use_dictionary=[f.name for f in EVENT_SCHEMA if f.name not in _WIDE_TEXT and f.name not in ("ts", "line")],
    write_statistics=[f.name for f in EVENT_SCHEMA if f.name not in ("message", "attrs")],
)


def default_store() -> Path:
    return Path(os.environ.get("SERVELENS_STORE", DEFAULT_STORE))


class StoreError(Exception):
    """A problem with the store the user can fix; the message says how."""


class StoreLocked(StoreError):
    pass


class StoreFull(StoreError):
    """The store's file system is full (or over quota): nothing of this commit was written;
    what was committed before stays, and the same commit can be tried again."""


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _no_space(root: Path, e: OSError) -> StoreFull:
    return StoreFull(
        f"no space left on device for store {root}; free some space (or use another "
        "--store): what was committed before is intact"
    )


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".new")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def empty_manifest() -> dict:
    return {"version": MANIFEST_VERSION, "files": {}, "parts": [], "pending": [], "garbage": []}


def read_manifest(root: Path) -> dict:
    path = root / "manifest.json"
    if not path.exists():
        return empty_manifest()
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise StoreError(f"cannot read {path}: {e}; is this a servelens store?") from e
    if data.get("version") != MANIFEST_VERSION:
        raise StoreError(
            f"{path} has manifest version {data.get('version')}, this servelens reads "
            f"version {MANIFEST_VERSION}: upgrade servelens or use another --store"
        )
    return data


def committed_parts(root: Path) -> list[Path]:
    """The part files a reader should read: committed ones, each where it is right now
    (still in staging when a commit's moves are not done yet)."""
    manifest = read_manifest(root)
    pending = {final: staged for staged, final in manifest.get("pending", [])}
    out = []
    for rel in manifest["parts"]:
        final = root / rel
        if final.exists():
            out.append(final)
        elif rel in pending and (root / pending[rel]).exists():
            out.append(root / pending[rel])
    return out


@dataclass
class Store:
    """A writer's handle on the store: holds the lock for its lifetime."""

    root: Path
    manifest: dict = field(default_factory=empty_manifest)
    _lock_fd: int | None = None

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def open(cls, root: Path | str, purpose: str = "ingest") -> "Store":
        root = Path(root)
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
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"servelens {purpose} (pid {os.getpid()})".encode(), 0)
        if not os.access(root, os.W_OK):
            os.close(fd)
            raise StoreError(
                f"cannot write to store {root}: permission denied; "
                "choose another --store or fix its permissions"
            )
        store = cls(root=root, _lock_fd=fd)
        store.manifest = read_manifest(root)
        store._recover()
        return store

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recover(self) -> None:
        """Roll a committed transaction forward; delete uncommitted staging files."""
        if self.manifest.get("pending"):
            self._apply_moves(self.manifest["pending"])
            self.manifest["pending"] = []
            write_json_atomic(self.root / "manifest.json", self.manifest)
        staging = self.root / "_staging"
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)

    # -- writing -----------------------------------------------------------------------

    def stage_events(self, events: pl.DataFrame, txid: str) -> list[tuple[str, str]]:
        """Write events as Parquet parts under staging, one per (engine, day).
        Returns (staged, final) relative paths."""
        if events.height == 0:
            return []
        keyed = events.with_columns(
            pl.col("ts").dt.strftime("%Y-%m-%d").fill_null("unknown").alias("_day")
        )
        moves = []
        stage_dir = self.root / "_staging" / txid
        stage_dir.mkdir(parents=True, exist_ok=True)
        for n, ((engine, day), part) in enumerate(
            keyed.group_by(["engine", "_day"], maintain_order=True)
        ):
            name = f"part-{txid}-{n:04d}.parquet"
            staged = stage_dir / name
            table = part.drop("_day").sort("ts", "line", nulls_last=True).to_arrow()
            table = table.cast(EVENT_SCHEMA)
            import pyarrow.parquet as pq

            with open(staged, "wb") as f:
                pq.write_table(table, f, **PARQUET_OPTIONS)
                f.flush()
                os.fsync(f.fileno())
            final = f"events/engine={engine}/day={day}/{name}"
            moves.append((str(staged.relative_to(self.root)), final))
        _fsync_dir(stage_dir)
        return moves

    def commit(
        self,
        moves: list[tuple[str, str]],
        files: dict[str, dict] | None = None,
        remove_parts: list[str] | None = None,
    ) -> None:
        """Atomically make staged parts visible and record file offsets.

        Either the commit happens (the manifest is renamed into place) or nothing changes,
        on disk or in `self.manifest`: a failure before the rename (a full disk) leaves the
        handle as it was, so the caller can retry the same commit later."""
        m = self.manifest
        before = {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in m.items()}
        for key, state in (files or {}).items():
            m["files"][key] = state
        removed = set(remove_parts or [])
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
        # committed: what follows only tidies up, and a failure here (a full disk when the
        # manifest is rewritten) is rolled forward by the next open or commit
        try:
            self._apply_moves(moves)
            m["pending"] = []
            self._collect_garbage(now)
            write_json_atomic(self.root / "manifest.json", m)
        except OSError:
            pass
        stage_dirs = {Path(staged).parent for staged, _ in moves}
        for d in [*stage_dirs, Path("_staging")]:
            try:
                (self.root / d).rmdir()
            except OSError:
                pass

    def commit_events(self, frames: list[pl.DataFrame], files: dict[str, dict]) -> int:
        """Write these events and commit them together with the file states they bring
        (what ingest and tail both do at every flush). Returns the events written.

        A full disk raises StoreFull with nothing changed (the staged parts are removed):
        the same frames and files can be committed again once there is space."""
        if not files and not frames:
            return 0
        events = pl.concat(frames) if frames else pl.DataFrame()
        txid = new_txid()
        try:
            moves = self.stage_events(events, txid) if events.height else []
            self.commit(moves, files=files)
        except OSError as e:
            shutil.rmtree(self.root / "_staging" / txid, ignore_errors=True)
            if e.errno in NO_SPACE:
                raise _no_space(self.root, e) from None
            raise
        return events.height

    def _apply_moves(self, moves: list) -> None:
        dirs = set()
        for staged, final in moves:
            src, dst = self.root / staged, self.root / final
            if src.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
                dirs.add(dst.parent)
        for d in dirs:
            _fsync_dir(d)

    def _collect_garbage(self, now: float) -> None:
        keep = []
        for rel, t in self.manifest.get("garbage", []):
            if now - t >= GARBAGE_GRACE_S:
                try:
                    (self.root / rel).unlink()
                except FileNotFoundError:
                    pass
            else:
                keep.append([rel, t])
        self.manifest["garbage"] = keep


def new_txid() -> str:
    # time-ordered, so part names sort in commit order
    return f"{time.time_ns():x}-{uuid.uuid4().hex[:8]}"
