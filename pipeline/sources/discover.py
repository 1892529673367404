"""Which files to read: expand the paths a user gives, decide what is a log, and name the
instance that wrote each file."""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..outfile import is_store_dir

# Files that are certainly not logs, passed over when walking a directory (and listed in the
# ingest summary, so that a log someone named .md is not lost without a word).
NOT_LOGS = {
    ".parquet", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".zip", ".tar", ".whl", ".pyc", ".so",
    ".db", ".md", ".rst", ".py", ".sh", ".toml", ".yaml", ".yml", ".html", ".ipynb",
}
# names that are mostly configuration, but also what `gcloud logging read` prints by default:
# passed over unless their head reads as a log platform's export
YAML = {".yaml", ".yml"}
HIDDEN = re.compile(r"^[._]")
ROTATION_SUFFIX = re.compile(r"(\.gz|\.\d+|[-_.]\d{8}(?:[-_]\d+)?|[-_.]\d{4}-\d{2}-\d{2}(?:[T_-][\d:.-]+)?)$")


class PathMissing(Exception):
    pass


class NotRegularFile(Exception):
    """A path named on the command line is a FIFO, socket or device: reading it could
    block forever (a FIFO with no writer) or never end."""

    def __init__(self, path: Path, kind: str):
        super().__init__(f"{path} is a {kind}, not a regular file; servelens reads log files "
                         "(save the stream to a file first, e.g. with tee)")
        self.path, self.kind = path, kind


def special_kind(path: Path) -> str | None:
    """'FIFO', 'socket', 'character device' or 'block device' when `path` is one (after
    following symlinks); None for regular files, directories and missing paths."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return None


@dataclass
class Found:
    path: Path
    explicit: bool  # named by the user, not found by walking a directory


def expand(paths: list[Path], skip_under: Path | None = None,
           passed_over: list[tuple[Path, str]] | None = None, follow_symlinks: bool = True) -> list[Found]:
    """Files named directly, plus every file under named directories (sorted, so rotated
    sets are read oldest-last predictably). Missing paths raise PathMissing.

    `passed_over` collects, with the reason, the files of a walked directory that are not
    read: names that are not logs, and the files of other servelens stores inside it (their
    manifest and parts are not logs either). Hidden files are left out without a word.
    `follow_symlinks` False: a file of a walked directory that is, or lies behind, a symlink
    leading out of that directory is passed over too (where whoever writes the logs is
    trusted less than whoever reads them)."""
    out: list[Found] = []
    skip = skip_under.resolve() if skip_under else None
    noted = passed_over if passed_over is not None else []
    for p in paths:
        if not p.exists():
            raise PathMissing(str(p))
        kind = special_kind(p)
        if kind is not None:
            raise NotRegularFile(p, kind)
        if p.is_dir():
            top = p.resolve()
            entries = sorted(p.rglob("*"))
            stores = [f.parent for f in entries if f.name == "manifest.json" and is_store_dir(f.parent)
                      and not (skip and is_under(f, skip))]
            for f in entries:
                if not f.is_file():
                    continue
                rel = f.relative_to(p)
                if any(HIDDEN.match(part) for part in rel.parts):
                    continue
                if skip and is_under(f, skip):
                    continue
                inside = next((st for st in stores if f.is_relative_to(st)), None)
                if inside is not None:
                    if f.parent == inside and f.name == "manifest.json":
                        noted.append((inside, "a servelens store, not logs: its files are not read"))
                    continue
                if not follow_symlinks and not is_under(f, top):
                    noted.append((f, f"a symlink out of {p} (--no-follow-symlinks)"))
                    continue
                if f.suffix.lower() in NOT_LOGS and not (f.suffix.lower() in YAML and exported_yaml(f)):
                    noted.append((f, f"not a log by its name ({f.suffix.lower()})"))
                    continue
                out.append(Found(f, explicit=False))
        else:
            out.append(Found(p, explicit=True))
    return out


# bytes of a YAML file's head read to tell an export from a configuration file
YAML_HEAD = 64 * 1024


def exported_yaml(f: Path) -> bool:
    """A `.yaml` file that is a log platform's export (gcloud's default output), by its head."""
    from servelens.parsers import wrappers

    try:
        with open(f, "rb") as fh:
            head = fh.read(YAML_HEAD)
    except OSError:
        return False
    return bool(wrappers.detect(wrappers.head_sample(head)))


def is_under(f: Path, root: Path) -> bool:
    try:
        f.resolve().relative_to(root)
        return True
    except ValueError:
        return False


# Bytes a text log holds besides printable text: tab, newline, vertical tab, form feed,
# carriage return, backspace and ESC (ANSI colours). NUL is judged apart: a crash leaves
# runs of zeros in a text log (the file system's preallocated blocks).
_TEXT_CONTROLS = frozenset(b"\t\n\x0b\x0c\r\x08\x1b")
_CONTROL = np.array([b < 0x20 and b not in _TEXT_CONTROLS and b != 0 or b == 0x7F for b in range(256)])
# share of control bytes and invalid UTF-8 sequences among the bytes that are not NUL past
# which a file is not text (random or compressed data: ~30%; text logs: 0 to a few per mille)
BINARY_SHARE = 0.10


def looks_binary(head: bytes) -> bool:
    """Not a text log: an executable, image, database or compressed archive.

    Judged by the share of non-text bytes in the sample, not by one NUL: NUL bytes are left
    out (a text log may hold runs of them after a crash; they are dropped when the lines
    are read), and of the rest, control characters and invalid UTF-8 must stay under
    BINARY_SHARE. A sample of nothing but NULs is not text either."""
    data = np.frombuffer(head, dtype=np.uint8)
    text = data[data != 0]
    if len(text) == 0:
        return len(data) > 0
    controls = int(_CONTROL[text].sum())
    if controls > BINARY_SHARE * len(text):
        return True
    # a multi-byte character cut by the end of the sample is not invalid
    decoded = text.tobytes().decode("utf-8", errors="replace")
    invalid = decoded.count("\ufffd") - (1 if decoded.endswith("\ufffd") else 0)
    return controls + invalid > BINARY_SHARE * len(text)


@functools.lru_cache(maxsize=4)
def _resolved_cwd(cwd: str) -> Path:
    return Path(cwd).resolve()


def display_path(path: Path) -> str:
    """The path as stored in `source`: relative to the working directory when under it."""
    try:
        # (the working directory resolved once per directory, not once per file)
        return str(path.resolve().relative_to(_resolved_cwd(os.getcwd())))
    except ValueError:
        return str(path.resolve())
