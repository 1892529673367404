"""Where a command may write its `--output`: never inside a store (a result written over the
manifest or a part would damage it), and never over an existing file unless asked.

Imports only the standard library: every command that writes a file calls it first.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

MANIFEST = "manifest.json"


class OutputRefused(ValueError):
    """The output path may not be written; the message says why and what to do."""


def is_store_dir(directory: Path) -> bool:
    """A servelens store: a directory whose manifest.json is a store's (or, damaged, sits
    beside the store's part folders)."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return False
    try:
        with manifest.open("rb") as f:
            if isinstance(json.loads(f.read(64 << 20)).get("parts"), list):
                return True
    except (OSError, ValueError, AttributeError):
        pass
    # a damaged manifest beside part folders is still a store (to protect, and to repair)
    return (directory / "events").is_dir() or (directory / "_staging").is_dir()


def store_holding(path: Path) -> Path | None:
    """The store directory that `path` (resolved through symlinks) lies in, if any."""
    resolved = Path(path).expanduser().resolve()
    for directory in (resolved, *resolved.parents):
        if is_store_dir(directory):
            return directory
    return None


def check_output(path: Path, *, force: bool = False) -> None:
    """Raise OutputRefused when `path` is inside a store, is a directory, or exists (without
    `force`)."""
    store = store_holding(path)
    if store is not None:
        raise OutputRefused(f"--output {path} is inside the store {store}; write the result somewhere else")
    if path.is_dir():
        raise OutputRefused(f"--output {path} is a directory; give a file name")
    if not force and (path.exists() or path.is_symlink()):
        raise OutputRefused(f"--output {path} exists; add --force to overwrite it")
    try:
        st = path.stat()
    except OSError:
        return
    _refuse_hard_links(path, st)


def _refuse_hard_links(path: Path, st: os.stat_result) -> None:
    # a hard link is another name of the same file, and no path check can tell where the other
    # names are: one may be a store's manifest or part, which writing here would overwrite
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise OutputRefused(f"--output {path} is a file with {st.st_nlink - 1} other hard link(s), which writing "
                            "would change too (one may be in a store); remove it or write somewhere else")


def write_output(path: Path, data: str | bytes, *, force: bool = False) -> None:
    """Check `path` (see check_output), then write `data` to it. OSError passes through."""
    check_output(path, force=force)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    # the hard-link check again on the file actually opened, before anything in it changes
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    try:
        _refuse_hard_links(path, os.fstat(fd))
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, 0)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(raw)
    finally:
        if fd >= 0:
            os.close(fd)
