"""What the tailer watches: which files match the user's paths and glob right now, and a
watchdog observer that wakes the tailer when files appear, move or vanish.

Watchdog events are only a hint (they are lost on overflow and absent on many network
filesystems): the tailer also rescans every few seconds, and it notices growth by polling the
files it has open, so correctness never depends on an event arriving.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from pathlib import Path

from ..sources.discover import HIDDEN, NOT_LOGS, is_under


class Targets:
    """The user's DIR_OR_FILE arguments plus the glob: answers "which files now?"."""

    def __init__(self, paths: list[Path], glob: str | None, skip_under: Path | None = None):
        self.paths = [Path(p) for p in paths]
        self.glob = glob
        self.skip = skip_under.resolve() if skip_under else None

    def wanted(self, path: Path, root: Path) -> bool:
        """Should a file found under directory `root` be followed?"""
        rel = path.relative_to(root)
        if any(HIDDEN.match(part) for part in rel.parts):
            return False
        if self.glob is not None:
            return fnmatch.fnmatch(path.name, self.glob) or fnmatch.fnmatch(str(rel), self.glob)
        return path.suffix.lower() not in NOT_LOGS

    def scan(self) -> list[Path]:
        """Every matching regular file that exists now (named files always match)."""
        out: list[Path] = []
        for p in self.paths:
            if p.is_dir():
                for dirpath, dirnames, filenames in os.walk(p):
                    d = Path(dirpath)
                    if (self.skip is not None and is_under(d, self.skip)) or is_store(d):
                        dirnames[:] = []  # never tail a store's own files
                        continue
                    dirnames[:] = sorted(n for n in dirnames if not HIDDEN.match(n))
                    for name in sorted(filenames):
                        f = d / name
                        if self.wanted(f, p) and f.is_file():
                            out.append(f)
            elif p.is_file():
                out.append(p)
        return out

    def watch_dirs(self) -> list[tuple[Path, bool]]:
        """(directory, recursive) pairs to hand to watchdog."""
        out = []
        for p in self.paths:
            # resolved, so event paths compare with the (resolved) store path
            p = p.resolve()
            out.append((p, True) if p.is_dir() else (p.parent, False))
        return out


def is_store(d: Path) -> bool:
    return (d / "manifest.json").is_file() and (d / ".lock").exists()


class Watcher:
    """Sets `rescan` when a file is created, moved or deleted under the watched directories
    (growth is not needed: the tailer polls the files it has open). Degrades to polling if
    watchdog cannot start (e.g. inotify watches exhausted)."""

    def __init__(self, targets: Targets):
        self.rescan = threading.Event()
        self._observer = None
        self.error: str | None = None
        try:
            from watchdog.events import (
                DirCreatedEvent, DirDeletedEvent, DirMovedEvent, FileCreatedEvent, FileDeletedEvent,
                FileMovedEvent, FileSystemEventHandler,
            )
            from watchdog.observers import Observer
        except ImportError as e:  # pragma: no cover - watchdog is a dependency
            self.error = str(e)
            return
        watcher = self
        skip = str(targets.skip) + os.sep if targets.skip is not None else None

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):  # noqa: D401 - watchdog callback
                if event.event_type in ("created", "moved", "deleted"):
                    # the store's own commits (a store inside a watched directory) are not news
                    if skip is None or not os.fspath(event.src_path).startswith(skip):
                        watcher.rescan.set()

        try:
            obs = Observer()
            for d, recursive in targets.watch_dirs():
                if d.is_dir():
                    # no modify/open/close events: one per write() of a busy log (and of
                    # the store's own files) would cost CPU in watchdog's threads for nothing
                    obs.schedule(Handler(), str(d), recursive=recursive, event_filter=[
                        FileCreatedEvent, FileMovedEvent, FileDeletedEvent,
                        DirCreatedEvent, DirMovedEvent, DirDeletedEvent,
                    ])
            obs.daemon = True
            obs.start()
            self._observer = obs
        except OSError as e:
            self.error = f"file events unavailable ({e.strerror or e}); polling instead"

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)
            self._observer = None
