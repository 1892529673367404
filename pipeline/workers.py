"""The worker processes an ingest reads large files in; imports only the standard library
until a worker runs, so the command can start them before its own heavy imports."""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

# A worker costs an interpreter's start and its imports: paid back by large files only.
WORKER_MIN_BYTES = 64 * 1024 * 1024

# what a worker may hold at its peak (an ingest's own peak, with room): the default count
# is capped by the memory available for them
WORKER_MEMORY_BYTES = 1 << 30


def worker_count(requested: int | None) -> int:
    """The processes that may read an ingest's large files side by side (the ingesting one and
    its workers): `requested`, else one per usable core, as many as the available memory holds."""
    if requested is not None:
        return max(1, requested)
    return max(1, min(usable_cores(), available_memory() // WORKER_MEMORY_BYTES))


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory() -> int:
    """Bytes of memory available to new processes (MemAvailable); unknown: no limit."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 62


@dataclass
class Workers:
    """Started worker processes (`executor`, `n` of them), the queue they report the bytes
    they have read on (None: no progress shown), each reader's parse threads, its share
    of the cores (None: the user's SERVELENS_PARSE_THREADS, which every reader keeps), and
    the queue they send each staged flush on, to be committed as soon as it is staged."""

    executor: Any
    n: int
    progress: Any = None
    processes: tuple = ()
    share: int | None = None
    staged: Any = None

    @property
    def readers(self) -> int:
        """The processes reading side by side: the workers and the ingesting one."""
        return self.n + 1

    def close(self) -> None:
        """Stop them now, whatever they are doing (their imports, their files: what they
        staged is removed at the store's next open)."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        for child in self.processes:
            if child.is_alive():
                child.terminate()
        self.executor.shutdown(wait=True)


def start(n: int, with_progress: bool) -> Workers:
    """`n` worker processes, started now (their imports run while this process goes on),
    each with its share of the cores for polars' threads and the parse threads (this
    process reads beside them: n + 1 readers)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    before = set(multiprocessing.active_children())
    # spawned, not forked: a fork of a process whose polars and parse threads run may deadlock
    spawn = multiprocessing.get_context("spawn")
    progress = spawn.SimpleQueue() if with_progress else None
    staged = spawn.SimpleQueue()
    pool = ProcessPoolExecutor(n, mp_context=spawn, initializer=_start_worker, initargs=(progress, staged))
    share = max(1, usable_cores() // (n + 1))
    # (a worker inherits the environment as it is when it starts; a user's setting wins)
    mine = [k for k in ("POLARS_MAX_THREADS", "SERVELENS_PARSE_THREADS") if k not in os.environ]
    os.environ.update({k: str(share) for k in mine})
    threads = share if "SERVELENS_PARSE_THREADS" in mine else None
    # Ctrl-C reaches the whole process group: this process says what was kept and stops its
    # workers, which would otherwise each print a traceback. Started with SIGINT ignored, a
    # worker keeps ignoring it (Python installs its handler only over the default).
    main = threading.current_thread() is threading.main_thread()
    was = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        for _ in range(n):
            pool.submit(len, "")  # (a no-op: the process starts now)
    finally:
        if main:
            signal.signal(signal.SIGINT, was)
        for k in mine:
            del os.environ[k]
    return Workers(pool, n, progress, tuple(set(multiprocessing.active_children()) - before), threads, staged)


def prestart(paths: list[Path], store_dir: Path, requested: int, with_progress: bool) -> Workers | None:
    """Workers for an ingest of `paths` into `store_dir` by `requested` readers (this process
    and one fewer workers), started before the command's own imports (theirs then run beside
    them), when it will likely read two or more large files it has not read to their end;
    else None. Which files they read is decided once the files are opened: a pool started
    here may go unused."""
    if requested < 2:
        return None
    big = _large_unread(paths, store_dir)
    if big < 2:
        return None
    return start(min(requested, big) - 1, with_progress)


def _large_unread(paths: list[Path], store_dir: Path) -> int:
    """How many files under `paths` are at least WORKER_MIN_BYTES and not yet read to
    their end by the store (by device, inode and offset: a cheap look, not the ingest's)."""
    done = set()
    try:
        with open(store_dir / "manifest.json", "rb") as f:
            for e in json.load(f).get("files", {}).values():
                done.add((e.get("dev"), e.get("inode"), e.get("offset")))
    except (OSError, ValueError, AttributeError):
        pass
    skip = os.path.realpath(store_dir)
    count = 0
    for top in paths:
        top = str(top)
        if os.path.isdir(top):
            candidates = _files_under(top, skip)
        else:
            candidates = iter((top,))
        for name in candidates:
            try:
                st = os.stat(name)
            except OSError:
                continue
            if st.st_size >= WORKER_MIN_BYTES and (st.st_dev, st.st_ino, st.st_size) not in done:
                count += 1
    return count


def _files_under(top: str, skip: str) -> Iterator[str]:
    """The files an ingest of the directory `top` may read, as far as names tell: hidden
    files and folders left out as the ingest leaves them, and the store `skip`. (Directory
    links are not followed: a link cycle would never end; a guess may miss.)"""
    for d, dirs, files in os.walk(top):
        if _under(os.path.realpath(d), skip):
            dirs[:] = []  # (a store's thousands of part folders are not walked)
            continue
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        yield from (os.path.join(d, f) for f in files if not f.startswith("."))


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


_PROGRESS: Any = None  # in a worker process: where it says how many bytes it has read
_STAGED: Any = None  # in a worker process: where it sends each flush it staged


@contextmanager
def lasting_imports(first: str):
    """Imports whose objects last as long as the process (the libraries an ingest loads, led
    by the module `first`): the cyclic collector does not run while they load (they leave
    next to no garbage, and its passes would walk every new object, several times) and never
    looks at their objects again (frozen). Nothing done when `first` is loaded already (a
    process that ran an ingest before, a test run): what is frozen is never collected."""
    if first in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


# polars' allocator (jemalloc), as polars configures it, hands the pages freed back to the
# system within a second; an ingest frees and allocates buffers of the same sizes at every
# block, so each page handed back is faulted in and zeroed again at the next (under a loaded
# host, where a second holds less work, ever more of them). Kept instead, for reuse: the
# process then holds about its peak (a little above it: pages kept unused) until it ends.
ALLOCATOR_CONF = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:-1,muzzy_decay_ms:-1")


def keep_freed_pages() -> Callable[[], None]:
    """From now on, polars' allocator in this process and the workers started from it keeps
    the pages it frees (ALLOCATOR_CONF), when polars is not loaded yet (its allocator reads
    the setting once, at load) and the user set none (theirs wins). Returns what undoes it
    (for the processes started afterwards, which are no ingest's)."""
    name, value = ALLOCATOR_CONF
    if name in os.environ or "polars" in sys.modules:
        return lambda: None
    os.environ[name] = value

    def undo() -> None:
        os.environ.pop(name, None)

    return undo


def _start_worker(progress: Any, staged: Any) -> None:
    global _PROGRESS, _STAGED
    _PROGRESS, _STAGED = progress, staged
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (started from another thread: see start)
    atexit.register(_exit_now)
    # what reading a file needs, imported now: before the first file is handed over
    with lasting_imports("servelens.pipeline.store.commit"):
        from servelens.parsers import wrappers  # noqa: F401
        from .sources import lines  # noqa: F401
        from .store import commit  # noqa: F401


def _exit_now() -> None:
    """A worker's end, once its pool is shut down: what it read is committed or staged on
    disk, so the interpreter's teardown of its modules and memory (a large share of a second
    that the ingesting process would wait for) is skipped."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def progress() -> Any:
    """In a worker process: the queue its read bytes go on (None: nobody shows them)."""
    return _PROGRESS


def staged() -> Any:
    """In a worker process: the queue its staged flushes go on."""
    return _STAGED
