"""The store: a directory of Hive-partitioned Parquet files plus one manifest.

Layout (pipeline/layout.py says how other engines read it):
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

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import shutil
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from servelens.parsers.schema import events_to_arrow

from .layout import FILE_SCHEMA, file_table, part_dir

MANIFEST_VERSION = 1
DEFAULT_STORE = "servelens-store"
# Parts removed by compaction leave events/ at once (for engines globbing it) and are kept
# this long under _garbage/ (a reader that opened one already reads on; a post-mortem can look).
GARBAGE_GRACE_S = 300.0
GARBAGE_DIR = "_garbage"
# How parts are written. Dictionary pages and min/max statistics pay off on the short,
# repetitive columns; on `message` and `attrs` (most of the bytes, nearly all distinct) they
# cost write time for nothing: 10-20% of the Parquet write.
_WIDE_TEXT = ("message", "attrs", "request_id")
PARQUET_OPTIONS = dict(
    compression="zstd",
    row_group_size=256_000,
    use_dictionary=[f.name for f in FILE_SCHEMA if f.name not in _WIDE_TEXT and f.name not in ("ts", "line", "byte_offset")],
    write_statistics=[f.name for f in FILE_SCHEMA if f.name not in ("message", "attrs")],
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
    _write_json(path, data)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".new")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def empty_manifest() -> dict:
    return {"version": MANIFEST_VERSION, "files": {}, "parts": [], "pending": [], "garbage": []}


REPAIR_HINT = "run servelens check, then servelens repair"


def read_manifest(root: Path) -> dict:
    """The manifest, checked for shape. A store that holds parts but no manifest, or a
    manifest that is not valid JSON of the right shape, is a clear StoreError, never an
    empty store or a KeyError later."""
    path = root / "manifest.json"
    if not path.exists():
        if (root / "events").is_dir() and any((root / "events").rglob("*.parquet")):
            raise StoreError(
                f"store {root} holds Parquet parts but no manifest.json (deleted?); "
                f"{REPAIR_HINT} to set the parts aside and start the store again"
            )
        return empty_manifest()
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise StoreError(f"cannot read {path}: {' '.join(str(e).split())}; {REPAIR_HINT}") from None
    if not isinstance(data, dict):
        raise StoreError(f"{path} is not a servelens manifest (not a JSON object); {REPAIR_HINT}")
    if data.get("version") != MANIFEST_VERSION:
        raise StoreError(
            f"{path} has manifest version {data.get('version')}, this servelens reads "
            f"version {MANIFEST_VERSION}: upgrade servelens or use another --store"
        )
    problem = manifest_shape_problem(data)
    if problem:
        raise StoreError(f"{path} is malformed ({problem}); {REPAIR_HINT}")
    return data


# every manifest entry of a file carries these (checkpoint.file_state writes them)
FILE_ENTRY_KEYS = {"head_sha": str, "head_len": int, "offset": int, "lines": int}


def manifest_shape_problem(data: dict) -> str | None:
    """What is wrong with the manifest's shape, or None."""
    if not isinstance(data.get("files"), dict):
        return "`files` is not an object"
    for key, entry in data["files"].items():
        if not isinstance(entry, dict):
            return f"files[{key!r}] is not an object"
        for name, typ in FILE_ENTRY_KEYS.items():
            if not isinstance(entry.get(name), typ) or isinstance(entry.get(name), bool):
                return f"files[{key!r}].{name} is missing or not a {typ.__name__}"
    if not isinstance(data.get("parts"), list) or not all(isinstance(p, str) for p in data["parts"]):
        return "`parts` is not a list of paths"
    for name in ("pending", "garbage"):
        value = data.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, list) and len(v) == 2 for v in value):
            return f"`{name}` is not a list of pairs"
    if not all(isinstance(a, str) and isinstance(b, str) for a, b in data.get("pending", [])):
        return "`pending` holds something else than path pairs"
    if not isinstance(data.get("part_info", {}), dict):
        return "`part_info` is not an object"
    dirty = data.get("dirty", [])
    if not isinstance(dirty, list) or not all(isinstance(d, list) and len(d) == 4 for d in dirty):
        return "`dirty` is not a list of [engine, instance, first, last]"
    rollups = data.get("rollups", {})
    if not isinstance(rollups, dict) or not all(isinstance(r, dict) and isinstance(r.get("path"), str) for r in rollups.values()):
        return "`rollups` is not an object of entries with a path"
    # every file the manifest names is joined to the store root and read (and, for garbage,
    # deleted): a path that leaves the store would let a hand-edited manifest point the
    # sandbox's allowed files at any Parquet file, or a collection at any file
    named = [*data["parts"], *(p for pair in data.get("pending", []) for p in pair),
             *(rel for rel, _t in data.get("garbage", [])), *(r["path"] for r in rollups.values())]
    for rel in named:
        if not isinstance(rel, str) or outside_store(rel):
            return f"path {rel!r} is not inside the store"
    return None


def outside_store(rel: str) -> bool:
    """True when `rel`, joined to a store root, names a file outside it (absolute, `..`, or
    another drive)."""
    # string operations, not PurePosixPath: the manifest of a big store names thousands of
    # parts and every read checks them all (the same answer: absolute is a leading `/`, and
    # `..` is a component of the `/`-split path)
    posix = rel.replace("\\", "/")
    return not rel or posix.startswith("/") or ".." in posix.split("/") or ":" in rel


# A Parquet file starts and ends with these four bytes; a part cut short ends otherwise.
PARQUET_MAGIC = b"PAR1"


def part_location(root: Path, manifest: dict, rel: str) -> Path | None:
    """Where a committed part is right now (in events/, or still in staging), or None."""
    final = os.path.join(root, rel)
    if os.path.exists(final):
        return Path(final)
    for staged, dest in manifest.get("pending", []):
        if dest == rel and os.path.exists(os.path.join(root, staged)):
            return Path(root, staged)
    return None


def part_checksum(fd: int) -> str:
    """CRC-32 of a whole part file (hex): recorded at commit, compared by reads and check.
    A checksum for damage, not for tampering: it catches a flipped bit at disk speed."""
    crc, pos = 0, 0
    while chunk := os.pread(fd, CHECKSUM_CHUNK, pos):
        crc = zlib.crc32(chunk, crc)
        pos += len(chunk)
    return f"{crc:08x}"


CHECKSUM_CHUNK = 1 << 22
# parts whose checksum this process has already compared: (path, size, mtime_ns) -> checksum
_checked: dict[tuple[str, int, int], str] = {}


def content_problem(fd: int, path: str, st: os.stat_result, recorded: dict | None, always: bool = False) -> str | None:
    """What is wrong with an open part's bytes against what its commit recorded (size,
    modification time, checksum), or None. The checksum is read only when the file's size
    or time differ from the record, or `always` (check): a part written once and never
    touched costs a read-only fstat; one rewritten in place, bit-flipped by a tool, or
    copied without its times is read whole once per process."""
    if not recorded or "crc32" not in recorded:  # a part from before checksums
        return None
    if st.st_size != recorded["size"]:
        return f"is damaged ({st.st_size} bytes; {recorded['size']} when it was committed)"
    if not always and st.st_mtime_ns == recorded.get("mtime_ns"):
        return None
    key = (path, st.st_size, st.st_mtime_ns)
    crc = None if always else _checked.get(key)
    if crc is None:
        crc = part_checksum(fd)
        _checked[key] = crc
    if crc != recorded["crc32"]:
        return f"is damaged (its content changed since it was committed: checksum {crc}, recorded {recorded['crc32']})"
    return None


def verify_parts(root: Path | str, manifest: dict | None = None, always: bool = False) -> list[str]:
    """Integrity check of every part the manifest lists (what every read does): it exists,
    is readable, starts and ends with the Parquet magic (a part cut short, or overwritten,
    does not), and has the size and content its commit recorded (content_problem; `always`:
    read every part's checksum). One line per problem, naming the part; [] when all is well."""
    root = Path(root)
    manifest = read_manifest(root) if manifest is None else manifest
    info = manifest.get("part_info") or {}
    base = str(root)
    problems = []
    for rel in manifest["parts"]:
        # where the part is (part_location), told by opening it, and read with bare system
        # calls: no Path and no file object per part (every read checks them all, and a big
        # store has thousands)
        try:
            path = os.path.join(base, rel)
            try:
                fd = os.open(path, os.O_RDONLY)
            except (FileNotFoundError, NotADirectoryError):  # not in events/: still in staging?
                staged = part_location(root, manifest, rel)
                if staged is None:
                    problems.append(f"part {rel} is missing")
                    continue
                path = str(staged)
                fd = os.open(path, os.O_RDONLY)
            try:
                st = os.fstat(fd)
                size = st.st_size
                head = os.pread(fd, 4, 0)
                end = os.pread(fd, 4, max(0, size - 4))
                if size < 12 or head != PARQUET_MAGIC or end != PARQUET_MAGIC:
                    problems.append(f"part {rel} is damaged (not a complete Parquet file: {size} bytes)")
                    continue
                problem = content_problem(fd, path, st, info.get(rel), always)
            finally:
                os.close(fd)
        except OSError as e:
            problems.append(f"part {rel} cannot be read ({e.strerror})")
            continue
        if problem:
            problems.append(f"part {rel} {problem}")
    return problems


def require_intact(store: "Store", parts: list[str] | None = None, always: bool = False) -> None:
    """A StoreError naming the first damaged or missing part among `parts` (default: all),
    before a writer rewrites them: merging a damaged part would give its wrong rows a new,
    valid checksum."""
    m = store.manifest
    problems = verify_parts(store.root, m if parts is None else {**m, "parts": parts}, always=always)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise StoreError(f"store {store.root}: {problems[0]}{more}; nothing was changed: {REPAIR_HINT}")


# Set (to anything) to read what is readable of a damaged store instead of refusing it:
# `servelens sql --allow-partial` does.
ALLOW_PARTIAL_ENV = "SERVELENS_ALLOW_PARTIAL"


@contextlib.contextmanager
def allowing_partial(allow: bool = True) -> Iterator[None]:
    """Within: reads answer from the intact parts of a damaged store (the CLI's
    --allow-partial); the setting is an environment variable so that every reader in the
    process (report, dashboard) sees it."""
    if not allow:
        yield
        return
    old = os.environ.get(ALLOW_PARTIAL_ENV)
    os.environ[ALLOW_PARTIAL_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ALLOW_PARTIAL_ENV, None)
        else:
            os.environ[ALLOW_PARTIAL_ENV] = old


def readable_parts(root: Path | str, parts: list[Path], manifest: dict | None = None) -> list[Path]:
    """`parts` (from committed_parts) when every part the manifest lists is intact; else a
    StoreError naming the first bad part, unless partial answers were asked for
    (ALLOW_PARTIAL_ENV), then the intact parts only, with a warning on stderr.

    A part missing because a concurrent commit just moved or collected it is not damage:
    the manifest is read again before anything is reported.

    `manifest`: the one `parts` were listed from (committed_parts), checked first instead of
    reading it again (a big store's manifest is most of a connection's own cost)."""
    root = Path(root)
    for attempt in range(3):
        if attempt or manifest is None:
            manifest = read_manifest(root)
        problems = verify_parts(root, manifest)
        if not problems:
            return parts if attempt == 0 else committed_parts(root)
        time.sleep(0.05)
        parts = committed_parts(root)
    n = len(problems)
    more = f" (and {n - 1} more problem{'s' if n > 2 else ''})" if n > 1 else ""
    if os.environ.get(ALLOW_PARTIAL_ENV):
        import sys

        print(f"servelens: warning: store {root}: {problems[0]}{more}; answering from the "
              "intact parts only", file=sys.stderr)
        # part names are unique (they carry the commit's id), wherever the part is now
        bad = {Path(p.split()[1]).name for p in problems}
        return [p for p in parts if p.name not in bad]
    raise StoreError(
        f"store {root}: {problems[0]}{more}; answers would be wrong, so nothing was read: "
        f"{REPAIR_HINT} (or pass --allow-partial to read the intact parts)"
    )


def committed_parts(root: Path, manifest: dict | None = None) -> list[Path]:
    """The part files a reader should read: committed ones, each where it is right now
    (still in staging when a commit's moves are not done yet). A part that is nowhere is
    left out here; verify_parts / readable_parts say so. `manifest`: the store's manifest
    when the caller has just read it (default: read it)."""
    manifest = read_manifest(root) if manifest is None else manifest
    out = []
    for rel in manifest["parts"]:
        path = part_location(root, manifest, rel)
        if path is not None:
            out.append(path)
    return out


@dataclass
class Store:
    """A writer's handle on the store: holds the lock for its lifetime."""

    root: Path
    manifest: dict = field(default_factory=empty_manifest)
    _lock_fd: int | None = None
    remote: Any = None  # a remote.Mirror publishing each commit (a --store s3://... URL)
    # commits made through this handle, and per (engine, instance) ("*": all) the number of
    # the last one that changed its rows: a refresh computed off the writer's thread keeps
    # the dirty marks of what changed after it began (pipeline/rollup.py)
    generation: int = 0
    touched_at: dict = field(default_factory=dict)

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
                _write_json(root / "manifest.json", store.manifest)  # not a commit
            store._recover()
        except OSError as e:
            store.close()
            if e.errno in NO_SPACE:
                raise _no_space(root, e) from None
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
        keyed = events.with_columns(pl.col("ts").dt.strftime("%Y-%m-%d").alias("_day"))
        moves = []
        stage_dir = self.root / "_staging" / txid
        stage_dir.mkdir(parents=True, exist_ok=True)
        for n, ((engine, day), part) in enumerate(
            keyed.group_by(["engine", "_day"], maintain_order=True)
        ):
            name = f"part-{txid}-{n:04d}.parquet"
            final = f"{part_dir(engine, day)}/{name}"
            # staged under its partition path too: a reader given a part still in staging
            # takes the partition values from its path
            staged = stage_dir / final
            staged.parent.mkdir(parents=True, exist_ok=True)
            table = events_to_arrow(part.drop("_day").sort("ts", "line", nulls_last=True))
            table = file_table(table)  # the partition values are in the path
            import pyarrow.parquet as pq

            with open(staged, "wb") as f:
                pq.write_table(table, f, **PARQUET_OPTIONS)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(staged.parent)
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
        (pipeline/rollup.py): [[engine, instance, first ts, last ts], ...] added to the
        manifest's dirty marks, "all" (every rollup is stale), or "clean" (a refresh: the
        marks are cleared). Left None, a commit that adds or removes parts marks everything
        dirty (commit_events says what its events touch; compaction, which keeps every row,
        says []). ("clean", generation): clear the marks of what no commit through this
        handle changed after `generation` (a refresh computed meanwhile). `rollups`: name -> entry of a rollup
        file this commit makes current (the file it replaces goes to the garbage).

        Either the commit happens (the manifest is renamed into place) or nothing changes,
        on disk or in `self.manifest`: a failure before the rename (a full disk) leaves the
        handle as it was, so the caller can retry the same commit later."""
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
        events = pl.concat(frames) if frames else pl.DataFrame()
        txid = new_txid()
        try:
            moves = self.stage_events(events, txid) if events.height else []
            self.commit(moves, files=files, dirty=dirty_marks(events))
        except OSError as e:
            shutil.rmtree(self.root / "_staging" / txid, ignore_errors=True)
            if e.errno in NO_SPACE:
                raise _no_space(self.root, e) from None
            raise
        return events.height

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
            try:
                rows = pq.read_metadata(self.root / staged).num_rows
                if sources and not removed:
                    # a commit's parts are split by engine and day: each holds only some of
                    # its files, and losing it should roll back only those
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
            _fsync_dir(d)

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


def dirty_marks(events: pl.DataFrame) -> list[list]:
    """Per (engine, instance) of `events`, its first and last time (ISO text; None when it
    has none): what a commit of them changes (one group-by over the batch)."""
    if events.height == 0:
        return []
    spans = events.group_by("engine", "instance").agg(
        pl.col("ts").min().dt.to_string("%Y-%m-%dT%H:%M:%S%.f%z").alias("lo"),
        pl.col("ts").max().dt.to_string("%Y-%m-%dT%H:%M:%S%.f%z").alias("hi"),
    )
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
ROLLBACK_KEYS = ("head_sha", "head_len", "tail_sha", "tail_len", "offset", "lines", "ctx")


def _rollback_state(entry: dict | None) -> dict | None:
    if entry is None:
        return None
    return {k: entry[k] for k in ROLLBACK_KEYS if k in entry}


def new_txid() -> str:
    # time-ordered, so part names sort in commit order
    return f"{time.time_ns():x}-{uuid.uuid4().hex[:8]}"
