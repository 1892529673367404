"""Checking a store in depth and repairing it (`servelens check`, `servelens repair`).

Every read already does the cheap check (store.verify_parts: each listed part exists and is
a whole Parquet file). `check` goes further: each part's footer opens, its columns have the
schema's types, its row count is the one recorded at commit (manifest `part_info`), and with
`deep` every page decodes. Files under events/ that no manifest references are listed.

`repair` makes the store true again so that re-ingesting the logs restores exactly what was
lost:
- a lost or damaged part is dropped, and every file entry it holds events of is rolled back
  to the state before those events (`part_info.sources[key].from`): the next ingest or tail
  reads those bytes again;
- a part holding events of a rolled-back file from after that point is dropped too (its
  events will be read again), and so on until nothing changes;
- files no manifest references are deleted;
- a store whose manifest is missing or unreadable is started again: its parts are moved to
  `lost+found/<time>/` (kept, never read) and the manifest begins empty, so re-ingesting
  every log rebuilds it.
Parts written before `part_info` existed cannot be tied to their bytes: repair drops such a
part if it is damaged and says that its events cannot be restored by re-ingesting.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from servelens.parsers.schema import EVENT_SCHEMA

from ..outfile import is_store_dir
from .commit import Store
from .manifest import StoreError, StoreLocked, part_location, read_manifest
from .integrity import retimed, verify_parts


@dataclass
class CheckResult:
    parts: int = 0
    rows: int = 0
    damaged: dict[str, str] = field(default_factory=dict)  # part -> what is wrong
    unreferenced: list[str] = field(default_factory=list)  # files under events/ no manifest lists
    unrecorded: list[str] = field(default_factory=list)  # parts without part_info (older stores)

    @property
    def ok(self) -> bool:
        return not self.damaged


def check(root: Path | str, deep: bool = False) -> CheckResult:
    """Verify every part of the store (raises StoreError when the manifest itself is
    missing or malformed)."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"store {root} does not exist; give --store")
    manifest = read_manifest(root)
    if not (root / "manifest.json").exists():
        raise StoreError(f"{root} is not a servelens store (no manifest.json); give --store")
    out = CheckResult(parts=len(manifest["parts"]))
    cheap = {p.split()[1]: p for p in verify_parts(root, manifest, always=True)}
    info = manifest.get("part_info", {})
    for rel in manifest["parts"]:
        if rel in cheap:
            out.damaged[rel] = cheap[rel].split(" ", 2)[2]
            continue
        problem, rows = _check_part(part_location(root, manifest, rel), deep)
        recorded = (info.get(rel) or {}).get("rows")
        if problem is None and recorded is not None and rows != recorded:
            problem = f"holds {rows} rows, the manifest recorded {recorded}"
        if problem is not None:
            out.damaged[rel] = problem
            continue
        out.rows += rows
        if rel not in info or info[rel].get("sources") is None:
            out.unrecorded.append(rel)
    out.unreferenced = unreferenced_files(root, manifest)
    return out


def _is_text(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _check_part(path: Path, deep: bool) -> tuple[str | None, int]:
    try:
        meta = pq.read_metadata(path)
        schema = meta.schema.to_arrow_schema()
    except Exception as e:  # noqa: BLE001 - any failure to read the footer is damage
        return f"footer cannot be read ({_one_line(e)})", 0
    for f in schema:
        if EVENT_SCHEMA.get_field_index(f.name) < 0:
            return f"has column {f.name!r}, which the schema does not know", 0
        want = EVENT_SCHEMA.field(f.name).type
        # string, large_string and a dictionary of strings read the same (DuckDB: VARCHAR)
        if f.type != want and not (_is_text(f.type) and _is_text(want)):
            return f"column {f.name} is {f.type}, the schema says {want}", 0
    if deep:
        try:
            pf = pq.ParquetFile(path)
            rows = sum(pf.read_row_group(i).num_rows for i in range(pf.num_row_groups))
        except Exception as e:  # noqa: BLE001
            return f"data cannot be read ({_one_line(e)})", 0
        if rows != meta.num_rows:
            return f"pages hold {rows} rows, the footer says {meta.num_rows}", 0
    return None, meta.num_rows


def unreferenced_files(root: Path, manifest: dict) -> list[str]:
    """Parquet files under events/ that the manifest neither lists nor is about to move
    or collect."""
    known = set(manifest["parts"]) | {final for _, final in manifest.get("pending", [])}
    known |= {rel for rel, _t in manifest.get("garbage", [])}
    events = root / "events"
    if not events.is_dir():
        return []
    return sorted(
        rel for p in events.rglob("*.parquet") if (rel := str(p.relative_to(root))) not in known
    )


@dataclass
class RepairResult:
    dropped: list[str] = field(default_factory=list)  # damaged or lost parts
    dropped_overlap: list[str] = field(default_factory=list)  # intact parts whose events will be read again
    rolled_back: dict[str, tuple[int, int]] = field(default_factory=dict)  # source -> (offset, lines) now
    unrestorable: list[str] = field(default_factory=list)  # dropped parts no re-ingest can restore
    deleted_unreferenced: list[str] = field(default_factory=list)
    reset: str | None = None  # where the parts of a store without a usable manifest went
    rows_dropped: int = 0
    rollup: Any = None  # what `rebuild` returned (pipeline/query/rollups.Refreshed)
    rollup_error: str | None = None  # why they could not be (queries then use the raw path)
    problems: list[str] = field(default_factory=list)  # what a writer found (heal)
    # dropped or unreferenced files that could not be deleted (a directory not writable): no
    # manifest lists them, so servelens never reads them; the next repair deletes them
    not_deleted: list[str] = field(default_factory=list)
    retimed: int = 0  # intact parts whose times (copied without them) were recorded again


def repair(root: Path | str, dry_run: bool = False, deep: bool = False,
           rebuild: Callable[[Store, bool], Any] | None = None) -> RepairResult:
    """Drop damaged parts and roll their files' offsets back so a re-ingest restores them;
    then `rebuild(store, whole)` the rollups (the command passes pipeline/query/rollups.rebuild:
    the store does not import the readers)."""
    root = Path(root)
    if not root.is_dir():
        raise StoreError(f"store {root} does not exist; give --store")
    if not is_store_dir(root) and not (root / "events").is_dir():
        # a directory of something else (followed through a symlink, or mistyped): repair
        # would write a store's files into it, or set its manifest.json aside
        raise StoreError(f"{root} is not a servelens store (no store manifest and no events/ folder); "
                         "nothing was changed: give the store with --store")
    try:
        read_manifest(root)
    except StoreError as e:
        if "manifest version" in str(e):
            raise
        return _reset(root, dry_run)
    result = RepairResult()
    with Store.open(root, purpose="repair") as store:
        damaged = check(root, deep=deep).damaged
        result.deleted_unreferenced = unreferenced_files(root, store.manifest)
        lost = _drop(store, set(damaged), result, dry_run)
        if dry_run:
            return result
        result.retimed = record_times(store)
        for rel in result.deleted_unreferenced:
            if not _unlink(root / rel):
                result.not_deleted.append(rel)
        _prune_empty_dirs(root / "events")
        # the rollups: rebuilt when rows were dropped, or when the file is lost or damaged
        try:
            if rebuild is not None:
                result.rollup = rebuild(store, bool(lost))
        except (StoreError, RuntimeError, OSError) as e:
            result.rollup_error = " ".join(str(e).split())[:200]
    return result


def heal(store: Store) -> RepairResult | None:
    """What a writer (ingest, tail) does before it writes: a committed part that is missing
    or whose size or content is not what its commit recorded is dropped, and the files it
    held events of are rolled back, as `repair` does, so that this very run reads those
    bytes again instead of building on a hole. None when every part is intact. A remote
    store's mirror holds only some of its parts locally: not checked here."""
    if store.remote is not None:
        return None
    problems = verify_parts(store.root, store.manifest)
    if not problems:
        record_times(store)
        return None
    result = RepairResult(problems=problems)
    _drop(store, {p.split()[1] for p in problems}, result, dry_run=False)
    record_times(store)
    return result


def record_times(store: Store) -> int:
    """Record the modification times of the parts whose bytes are intact but whose times are
    not their commits' (a store copied without them), as this process's check of the store
    just found them (integrity.retimed), so that reads trust the times again instead of
    reading those parts whole; how many. A store that cannot be written is left as it is
    (reads still check those parts, at the cost of reading them)."""
    times = retimed(store.root, store.manifest)
    if not times:
        return 0
    info = store.manifest["part_info"]
    for rel, mtime_ns in times.items():
        info[rel] = {**info[rel], "mtime_ns": mtime_ns}
    try:
        store.commit([], dirty=[])
    except OSError:
        return 0
    return len(times)


def healed_message(result: RepairResult) -> str:
    """One line for what heal did."""
    n = len(result.problems)
    files = sorted(result.rolled_back)
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    what = f"{result.problems[0]}" + (f" (and {n - 1} more)" if n > 1 else "")
    again = f"; {len(files)} file(s) are read again from where that part began: {shown}" if files else ""
    lost = f"; {len(result.unrestorable)} part(s) predate the record and their events are lost" if result.unrestorable else ""
    return f"{what}: dropped ({result.rows_dropped:,} events){again}{lost}"


def _drop(store: Store, damaged: set[str], result: RepairResult, dry_run: bool) -> set[str]:
    """Drop the damaged parts and what overlaps them, roll their files back (filling
    `result`); the parts dropped."""
    m = store.manifest
    info = m.get("part_info", {})
    lost, rollback = _cascade(m, info, damaged)
    result.dropped = sorted(damaged)
    result.dropped_overlap = sorted(lost - damaged)
    result.unrestorable = sorted(p for p in damaged if (info.get(p) or {}).get("sources") is None)
    for p in (*result.dropped_overlap, *result.dropped):
        result.rows_dropped += (info.get(p) or {}).get("rows") or 0
    for key, state in rollback.items():
        entry = m["files"].get(key)
        if entry is None:
            continue
        src = entry.get("source", key)
        result.rolled_back[src] = (0, 0) if state is None else (state["offset"], state["lines"])
    if dry_run or not (lost or rollback):
        return lost
    for key, state in rollback.items():
        if key not in m["files"]:
            continue
        if state is None:
            del m["files"][key]
        else:
            # (a state recorded before content checksums has none: the later one must go)
            kept = {k: v for k, v in m["files"][key].items() if k != "crc"}
            m["files"][key] = {**kept, **state}
    # what is dropped is wrong or will be read again: gone at once, not after the
    # garbage grace time
    m["parts"] = [p for p in m["parts"] if p not in lost]
    m["part_info"] = {p: v for p, v in info.items() if p not in lost}
    store.commit([], dirty="all")  # rows are gone: every rollup is rebuilt
    for p in lost:
        if not _unlink(store.root / p):
            result.not_deleted.append(p)
    return lost


def _cascade(m: dict, info: dict, damaged: set[str]) -> tuple[set[str], dict[str, dict | None]]:
    """Parts to drop and the file entries to roll back (key -> state, None: read the file
    from its start), until no kept part holds events of a rolled-back range."""
    lost = set(damaged)
    rollback: dict[str, dict | None] = {}
    changed = True
    while changed:
        changed = False
        for p in list(lost):
            for key, rng in ((info.get(p) or {}).get("sources") or {}).items():
                frm = rng["from"]
                start = 0 if frm is None else frm["offset"]
                if key not in rollback or start < _offset(rollback[key]):
                    rollback[key] = frm
                    changed = True
        for p in m["parts"]:
            if p in lost:
                continue
            for key, rng in ((info.get(p) or {}).get("sources") or {}).items():
                if key in rollback and rng["to"] > _offset(rollback[key]):
                    lost.add(p)
                    changed = True
                    break
    return lost, rollback


def _offset(state: dict | None) -> int:
    return 0 if state is None else state["offset"]


def _reset(root: Path, dry_run: bool) -> RepairResult:
    """The manifest is missing or unreadable: nothing ties the parts to the logs any more.
    Set them aside and start an empty store; re-ingesting the logs rebuilds it exactly."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = root / "lost+found" / stamp
    result = RepairResult(reset=str(dest))
    if dry_run:
        return result
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StoreLocked(f"store {root} is in use; stop the process using it, then repair") from None
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("events", "manifest.json", "_staging", "rollups"):
            if (root / name).exists():
                os.replace(root / name, dest / name)
    finally:
        os.close(fd)  # releases the lock; Store.open takes it again below
    with Store.open(root, purpose="repair"):
        pass  # writes a new, empty manifest
    return result


def _unlink(path: Path) -> bool:
    """Delete a file no manifest lists any more; False when it cannot be (the commit that
    dropped it has happened: failing the command here would say the store is unchanged)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _prune_empty_dirs(top: Path) -> None:
    if not top.is_dir():
        return
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            d.rmdir()
        except OSError:
            pass


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]

