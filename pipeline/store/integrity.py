"""Part integrity: every part a manifest lists exists, is whole Parquet and has the bytes its
commit recorded (size, modification time, CRC-32). Every read checks; `check` reads all."""

from __future__ import annotations

import contextlib
import os
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from .manifest import REPAIR_HINT, StoreError, part_location, read_manifest

if TYPE_CHECKING:
    from .commit import Store


# A Parquet file starts and ends with these four bytes; a part cut short ends otherwise.
PARQUET_MAGIC = b"PAR1"



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



def retimed(root: Path | str, manifest: dict) -> dict[str, int]:
    """The parts whose bytes are what their commit recorded but whose modification time is not
    (a store copied without its files' times), each with its time now: from the checksums this
    process's check read (check_parts reads a part's only when its time differs, so a check
    just before finds them all; nothing is read again here). Every read reads such a part
    whole to check it; recording the time spares that."""
    info = manifest.get("part_info") or {}
    seen = {path: (size, mtime_ns, crc) for (path, size, mtime_ns), crc in _checked.items()}
    base = str(root)
    out: dict[str, int] = {}
    for rel in manifest["parts"]:
        rec, now = info.get(rel), seen.get(_joined(base, rel))
        if not rec or now is None or "mtime_ns" not in rec:
            continue
        size, mtime_ns, crc = now
        if size == rec["size"] and mtime_ns != rec["mtime_ns"] and crc == rec.get("crc32"):
            out[rel] = mtime_ns
    return out



def verify_parts(root: Path | str, manifest: dict | None = None, always: bool = False) -> list[str]:
    """Integrity check of every part the manifest lists (what every read does): it exists,
    is readable, starts and ends with the Parquet magic (a part cut short, or overwritten,
    does not), and has the size and content its commit recorded (content_problem; `always`:
    read every part's checksum). One line per problem, naming the part; [] when all is well."""
    root = Path(root)
    return check_parts(root, read_manifest(root) if manifest is None else manifest, always)[1]



def check_parts(root: Path, manifest: dict, always: bool = False) -> tuple[list[str], list[str]]:
    """verify_parts' check, which also tells where each intact part is: (the files of the
    parts found intact, as committed_parts names them, in the manifest's order; the problems).
    One pass: a reader learns where the parts are and that they are whole from the same open."""
    info = manifest.get("part_info") or {}
    base = str(root)
    intact: list[str] = []
    problems = []
    for rel in manifest["parts"]:
        # where the part is (part_location), told by opening it, and read with bare system
        # calls: no Path and no file object per part (every read checks them all, and a big
        # store has thousands)
        try:
            path = _joined(base, rel)
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
        else:
            intact.append(path)
    return intact, problems



def _joined(base: str, rel: str) -> str:
    """`rel` under the store root `base`, spelled as str(Path(base, rel)) spells it (the name
    committed_parts gives, which the sandbox and the views then see), without a Path for the
    usual clean relative path."""
    path = os.path.join(base, rel)
    if os.sep != "/" or "//" in path or "/." in path or path.endswith("/"):
        return str(Path(path))
    return path



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



def readable_files(root: Path | str, manifest: dict | None = None) -> list[str]:
    """The files of the committed parts (committed_parts' names, as strings) when every part
    the manifest lists is intact; else a StoreError naming the first bad part, unless partial
    answers were asked for (ALLOW_PARTIAL_ENV), then the intact parts only, with a warning on
    stderr. One pass over the parts finds and checks them (check_parts).

    A part missing because a concurrent commit just moved or collected it is not damage:
    the manifest is read again before anything is reported.

    `manifest`: the store's manifest when the caller has just read it, checked first instead
    of reading it again (a big store's manifest is most of a connection's own cost)."""
    root = Path(root)
    for attempt in range(3):
        if attempt or manifest is None:
            manifest = read_manifest(root)
        files, problems = check_parts(root, manifest)
        if not problems:
            return files
        time.sleep(0.05)
    n = len(problems)
    more = f" (and {n - 1} more problem{'s' if n > 2 else ''})" if n > 1 else ""
    if os.environ.get(ALLOW_PARTIAL_ENV):
        import sys

        print(f"servelens: warning: store {root}: {problems[0]}{more}; answering from the "
              "intact parts only", file=sys.stderr)
        return files
    raise StoreError(
        f"store {root}: {problems[0]}{more}; answers would be wrong, so nothing was read: "
        f"{REPAIR_HINT} (or pass --allow-partial to read the intact parts)"
    )
