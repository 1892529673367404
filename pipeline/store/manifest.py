"""The manifest: the store's commit point, one versioned JSON file listing the committed parts
and, per file read, how far it was read. Reading and checking it, writing it atomically, and
the errors a store raises."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path


MANIFEST_VERSION = 1



DEFAULT_STORE = "servelens-store"

# the mark of an ingest that left its rollup refresh to the first query reading a stored view
# (`servelens ingest --defer-rollups`, pipeline/query/rollups.py); the refresh clears it
ROLLUPS_DEFERRED = "rollups_deferred"



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



def no_space(root: Path, e: OSError) -> StoreFull:
    if e.errno == errno.EDQUOT:
        return StoreFull(
            f"disk quota exceeded for store {root}; raise the disk quota or free some space (or use "
            "another --store): what was committed before is intact"
        )
    return StoreFull(
        f"no space left on device for store {root}; free some space (or use another "
        "--store): what was committed before is intact"
    )



def fsync_dir(path: Path) -> None:
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
    fsync_dir(path.parent)



def create_manifest(root: Path, manifest: dict) -> None:
    """Write a new store's first manifest (not a commit: it lists nothing)."""
    write_json_atomic(root / "manifest.json", manifest)


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



def part_location(root: Path, manifest: dict, rel: str) -> Path | None:
    """Where a committed part is right now (in events/, or still in staging), or None."""
    final = os.path.join(root, rel)
    if os.path.exists(final):
        return Path(final)
    for staged, dest in manifest.get("pending", []):
        if dest == rel and os.path.exists(os.path.join(root, staged)):
            return Path(root, staged)
    return None



def committed_parts(root: Path, manifest: dict | None = None) -> list[Path]:
    """The part files a reader should read: committed ones, each where it is right now
    (still in staging when a commit's moves are not done yet). A part that is nowhere is
    left out here; verify_parts / readable_files say so. `manifest`: the store's manifest
    when the caller has just read it (default: read it)."""
    manifest = read_manifest(root) if manifest is None else manifest
    out = []
    for rel in manifest["parts"]:
        path = part_location(root, manifest, rel)
        if path is not None:
            out.append(path)
    return out


# What a writer cannot get past on its own, and what the person can do about it. Every writer
# commits by replacing the manifest last, so a command stopped by one of these leaves the
# store as it was before it (a staged file may be left, and is cleaned by the next writer).
_WRITE_FAILURES = {
    errno.ENOSPC: "free some space (or use another --store)",
    errno.EDQUOT: "raise the disk quota or free some space (or use another --store)",
    errno.EROFS: "the file system is read-only: remount it read-write or use another --store",
    errno.EACCES: "check the permissions (and immutable attributes) of the store's directory and files",
    errno.EPERM: "check the permissions (and immutable attributes) of the store's directory and files",
}



def write_failure(e: OSError) -> str | None:
    advice = _WRITE_FAILURES.get(e.errno or 0)
    if advice is None:
        return None
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or 'cannot write'}{where}; {advice}; what was committed before is intact"

