"""Limits enforced from outside DuckDB: a user's query runs in a child process that this
process watches and kills when it runs past its time or its resident memory.

DuckDB's own limits bound what DuckDB accounts for (its buffer pool, spilling operators) and
what it checks between steps. One huge value built by one function call (`lpad('x', 500000000,
'y')`, `list_resize`, `repeat`) is neither: it takes gigabytes and runs for seconds past an
interrupt. Here the kernel's view is the limit: the child's resident set size, read from
/proc every WATCH_S, may grow by the memory limit plus a margin for the result's own copy
(RESULT_MARGIN), and the child is killed (SIGKILL, which nothing in it can delay) at the time
limit plus GRACE_S. Either ends in one line naming the limit and how to raise it.

Only where fork() and /proc exist (Linux), and only from a process whose threads a child
cannot need (`available`: the CLI before its first query): elsewhere the query runs in this
process, under DuckDB's own limits.
"""

from __future__ import annotations

import os
import pickle
import select
import re
import signal
import threading
import time
from typing import Any, Callable

POOL_THREAD = re.compile(r"polars-\d|tokio-")
WATCH_S = 0.05
GRACE_S = 2.0  # DuckDB's own interrupt gets this long to end the query cleanly first
RESULT_MARGIN = 256 * 1024 * 1024  # the result converted in the child, beyond DuckDB's limit
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Exceeded(Exception):
    """The child was stopped by a limit (the message says which, and how to raise it)."""


def available() -> bool:
    """fork() and /proc, and no thread here that a forked child could need: a Python thread
    (a server's workers) or a started thread pool (polars' `polars-N` workers, tokio's) could
    hold a lock the child then waits on forever. jemalloc's background threads are fork-safe
    (it locks itself around fork()); DuckDB's workers belong to their database, and the child
    opens its own."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return False
    try:
        names = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
    except OSError:
        return False
    return not any(POOL_THREAD.match(n) for n in names)


def resident_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def call(fn: Callable[[], Any], *, timeout_s: float | None, memory_bytes: int | None,
         raise_timeout: str = "", raise_memory: str = "") -> Any:
    """fn() in a watched child; its return value, or the exception it raised (re-raised here
    as it was, when it pickles), or Exceeded. Without fork: fn() here."""
    if not available():
        return fn()
    base = resident_bytes(os.getpid()) or 0
    cap = None if not memory_bytes else base + memory_bytes + RESULT_MARGIN
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, and leave without running the parent's exit code
        os.close(r)
        code = 0
        try:
            try:
                payload = pickle.dumps(("ok", fn()), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
                try:
                    if not isinstance(e, Exception):  # a Rust panic: its one line, never re-raised as it is
                        raise TypeError
                    payload = pickle.dumps(("raise", e), protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:  # noqa: BLE001 - an exception that does not pickle
                    payload = pickle.dumps(("error", f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"))
            with os.fdopen(w, "wb") as out:
                out.write(payload)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    try:
        chunks, stopped = watch(pid, r, timeout_s=timeout_s, cap=cap, base=base, memory_bytes=memory_bytes,
                                raise_timeout=raise_timeout, raise_memory=raise_memory)
    except BaseException:  # Ctrl-C here: the child goes too
        _kill(pid)
        raise
    finally:
        os.close(r)
    if stopped is not None:
        _kill(pid)
        raise Exceeded(stopped)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.waitstatus_to_exitcode(status)}")
        raise Exceeded(f"the query's process ended without an answer ({how}); "
                       f"if it ran out of memory, raise the limit with {raise_memory or '--memory-limit'}")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "ok":
        return value
    if kind == "raise":
        raise value
    raise Exceeded(value)


def watch(pid: int, fd: int, *, timeout_s: float | None, cap: int | None, base: int, memory_bytes: int | None,
          raise_timeout: str = "", raise_memory: str = "", max_read: int | None = None) -> tuple[list[bytes], str | None]:
    """Read `fd` (the child's answer) to its end while watching process `pid`: (what was read,
    None), or (what was read so far, why the child must be stopped) once it runs past
    `timeout_s` + GRACE_S, its resident memory past `cap`, or its answer past `max_read`
    bytes. The caller kills it."""
    deadline = None if not timeout_s else time.monotonic() + timeout_s + GRACE_S
    chunks: list[bytes] = []
    read = 0
    while True:
        wait = WATCH_S if deadline is None else max(0.0, min(WATCH_S, deadline - time.monotonic()))
        ready, _, _ = select.select([fd], [], [], wait)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return chunks, None
            chunks.append(chunk)
            read += len(chunk)
            if max_read is not None and read > max_read:
                return chunks, (f"the result is larger than the memory limit ({_size(memory_bytes or 0)}): add a LIMIT "
                                f"or aggregate, or raise the limit with {raise_memory or 'the memory limit'}")
            continue
        if deadline is not None and time.monotonic() >= deadline:
            return chunks, (f"the query ran past its {timeout_s:g} s time limit and was stopped; "
                            f"raise it with {raise_timeout}" if raise_timeout else "the query ran past its time limit")
        rss = resident_bytes(pid)
        if cap is not None and rss is not None and rss > cap:
            return chunks, (f"the query went past its memory limit of {_size(memory_bytes or 0)} (one value or "
                            f"its result took {_size(rss - base)}) and was stopped; raise it with {raise_memory}"
                            if raise_memory else "the query went past its memory limit")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _size(n: int) -> str:
    # the decimal units --memory-limit reads (sandbox.parse_size: 1 MB = 1,000,000 bytes)
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
