"""Which files to read: expand the paths a user gives, decide what is a log, and name the
instance that wrote each file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .fingerprint import GZIP_MAGIC

# Files that are certainly not logs, skipped quietly when walking a directory.
NOT_LOGS = {
    ".parquet", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".zip", ".tar", ".whl", ".pyc", ".so",
    ".db", ".md", ".rst", ".py", ".sh", ".toml", ".yaml", ".yml", ".html", ".ipynb",
}
HIDDEN = re.compile(r"^[._]")
ROTATION_SUFFIX = re.compile(r"(\.gz|\.\d+|[-_.]\d{8}(?:[-_]\d+)?|[-_.]\d{4}-\d{2}-\d{2}(?:[T_-][\d:.-]+)?)$")
LOG_EXT = re.compile(r"\.(log|txt|out|err|jsonl|json|stdout|stderr)$", re.IGNORECASE)
GENERIC_STEMS = {"log", "logs", "stdout", "stderr", "output", "server", "current", "console", "container"}


class PathMissing(Exception):
    pass


@dataclass
class Found:
    path: Path
    explicit: bool  # named by the user, not found by walking a directory


def expand(paths: list[Path], skip_under: Path | None = None) -> list[Found]:
    """Files named directly, plus every file under named directories (sorted, so rotated
    sets are read oldest-last predictably). Missing paths raise PathMissing."""
    out: list[Found] = []
    skip = skip_under.resolve() if skip_under else None
    for p in paths:
        if not p.exists():
            raise PathMissing(str(p))
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if not f.is_file():
                    continue
                rel = f.relative_to(p)
                if any(HIDDEN.match(part) for part in rel.parts):
                    continue
                if f.suffix.lower() in NOT_LOGS:
                    continue
                if skip and is_under(f, skip):
                    continue
                out.append(Found(f, explicit=False))
        else:
            out.append(Found(p, explicit=True))
    return out


def is_under(f: Path, root: Path) -> bool:
    try:
        f.resolve().relative_to(root)
        return True
    except ValueError:
        return False


def looks_binary(head: bytes) -> bool:
    """NUL bytes in the first KiBs: an executable, image or database, not a text log."""
    return b"\x00" in head[:8192]


def is_gzip_bytes(first: bytes) -> bool:
    return first[:2] == GZIP_MAGIC


def instance_from_path(path: Path) -> str:
    """`logs/vllm-a.log.1.gz` -> `vllm-a`; a Kubernetes container log -> its pod
    (`pods/ns_web-0_<uid>/vllm/0.log` -> `web-0`, see naming.py)."""
    from .naming import identity_name, kube_identity

    kube = kube_identity(path)
    if kube:
        return identity_name(kube)
    name = path.name
    while True:
        new = ROTATION_SUFFIX.sub("", name)
        new = LOG_EXT.sub("", new)
        if new == name:
            break
        name = new
    if not name or name.isdigit() or name.lower() in GENERIC_STEMS:
        parent = path.parent
        if parent.name and parent != path:
            return instance_from_path(parent)
    return name or "default"


def display_path(path: Path) -> str:
    """The path as stored in `source`: relative to the working directory when under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())
