"""A read-only store built once per test run: under pytest-xdist the first worker that needs
it builds it (under a lock in the run's own temporary folder) and the others read it, or
build their own while it is being built; the fixture's teardown fails if a test changed it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


_RUN_TMP: list = []  # this run's tmp_path_factory (tests/conftest.py)


def remember_run_tmp(tmp_path_factory) -> None:
    _RUN_TMP[:] = [tmp_path_factory]


def run_tmp():
    """This run's tmp_path_factory, for a store built once by a cached function (which
    cannot take a fixture)."""
    return _RUN_TMP[0]


def tree(store: Path) -> dict[str, tuple[int, int]]:
    """Every file of a store with its size and mtime: what a test that only reads leaves alone."""
    return {str(p.relative_to(store)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(store.rglob("*")) if p.is_file()}


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The store `build(store)` writes, built once per run (once per process without xdist,
    or where there is no POSIX file lock; twice when two workers need it at the same time)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or os.name != "posix":
        store = tmp_path_factory.mktemp(name) / "store"
        build(store)
        return store
    import fcntl

    root = tmp_path_factory.getbasetemp().parent  # this run's, shared by its workers
    store = root / name / "store"
    built = store.parent / "built"  # written once the store is whole
    if built.exists():
        return store
    with open(root / f"{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # another worker is building it: build one of this worker's own rather than wait
            # (with as many workers as cores, a wait leaves a core idle for the whole build)
            own = tmp_path_factory.mktemp(name) / "store"
            build(own)
            return own
        if not built.exists():
            shutil.rmtree(store, ignore_errors=True)  # a worker that failed while building it
            build(store)
            built.touch()
    return store


def read_only(store: Path, what: str) -> Iterator[Path]:
    """Yield `store` to the tests, then fail if one of them changed it."""
    before = tree(store)
    yield store
    assert tree(store) == before, f"a test changed the shared {what}: give it a store of its own"
