"""A user's query in a fresh process of its own, for a caller that cannot fork: the dashboard
serves every visitor from one process with threads (a forked child could wait forever on a
lock another thread held), so its SQL page runs each query here instead.

The worker is a new interpreter (`python -m` this module, like the
'spawn' start method), told what to run on its stdin. It runs the guarded path (query.run:
the statement check, the sandbox, DuckDB's own limits, the result's size checked while it is
read) and answers on its stdout: one byte when it is ready, then either the result as an
Arrow IPC stream or a one-line error. The caller watches it from outside as
pipeline/query/bounded.py watches a forked child: SIGKILL once its resident memory grows past the
memory limit (plus a margin for the result's own copy) over what it held when ready, once it
runs past the time limit plus a grace, or once its answer is larger than the memory limit.
Its stderr goes nowhere: a panic's report or a traceback cannot reach the caller's terminal
or page, only the one line.

`max_workers` bounds how many run at once (each may take its memory limit): a query that
finds them all busy waits up to its time limit, then is told so.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

READY = b"R"
OK = b"O"
ERROR = b"E"
START_S = 60.0  # the interpreter's start and imports, on a loaded machine; not the query's time

_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def _slot(max_workers: int) -> threading.BoundedSemaphore:
    with _slots_lock:
        return _slots.setdefault(max_workers, threading.BoundedSemaphore(max_workers))


def run(store: Path | str, sql: str, *, variables: dict[str, Any] | None = None, limits: Any = None,
        time_range: Any = None, max_workers: int = 2) -> Any:
    """query.run(store, sql, ...) in a watched worker process: a polars DataFrame, or
    QueryError / StoreError with one line (the limit's words when one was passed)."""
    from .bounded import RESULT_MARGIN, Exceeded, resident_bytes, watch
    from .connect import Limits, QueryError
    from ..store.manifest import StoreError

    limits = limits or Limits.from_env()
    slot = _slot(max(1, max_workers))
    if not slot.acquire(timeout=limits.timeout_s or None):
        raise QueryError(f"{max_workers} other queries were running for the whole {limits.timeout_s:g} s time "
                         "limit; try again in a moment")
    try:
        request = pickle.dumps({"store": str(store), "sql": sql, "variables": variables, "limits": limits,
                                "time_range": time_range}, protocol=pickle.HIGHEST_PROTOCOL)
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
                                start_new_session=True)
        try:
            try:
                proc.stdin.write(request)  # type: ignore[union-attr]
                proc.stdin.close()  # type: ignore[union-attr]
            except BrokenPipeError:
                pass
            fd = proc.stdout.fileno()  # type: ignore[union-attr]
            # until it is ready: only the start-up's time; then the query's limits, over the
            # memory the worker holds once its libraries are loaded
            ready, _, _ = select.select([fd], [], [], START_S)
            if not ready or os.read(fd, 1) != READY:
                raise QueryError("the query's process did not start; try again")
            base = resident_bytes(proc.pid) or 0
            cap = base + limits.memory_bytes + RESULT_MARGIN if limits.memory_bytes else None
            chunks, stopped = watch(proc.pid, fd, timeout_s=limits.timeout_s, cap=cap, base=base,
                                    memory_bytes=limits.memory_bytes, raise_timeout=limits.raise_timeout,
                                    raise_memory=limits.raise_memory,
                                    max_read=(limits.memory_bytes + RESULT_MARGIN) if limits.memory_bytes else None)
            if stopped is not None:
                raise Exceeded(stopped)
        except Exceeded as e:
            raise QueryError(str(e)) from None
        finally:
            _reap(proc.pid)
            proc.stdout.close()  # type: ignore[union-attr]
            proc.returncode = 0  # reaped by _kill: Popen must not wait for it again
    finally:
        slot.release()
    answer = b"".join(chunks)
    if answer[:1] == OK:
        import polars as pl

        try:
            return pl.read_ipc_stream(io.BytesIO(answer[1:]))
        except BaseException as e:  # noqa: BLE001 - a panic too: one line, never a traceback
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            raise QueryError(f"cannot read the query's result ({type(e).__name__}); cast the column to varchar") from None
    if answer[:1] == ERROR:
        try:
            kind, message = json.loads(answer[1:].decode("utf-8"))
        except (ValueError, TypeError):
            kind, message = "query", "the query failed"
        raise (StoreError if kind == "store" else QueryError)(message)
    raise QueryError("the query's process ended without an answer; if it ran out of memory, raise the limit with "
                     f"{limits.raise_memory}")


# the largest resident set of the last worker reaped, as the kernel counted it (wait4): what
# a query cost, for a log line or a test
last_peak_bytes = 0


def _reap(pid: int) -> None:
    """Kill the worker (it may already have ended) and collect it."""
    global last_peak_bytes
    import signal

    # read while it lives: a process that reaps every child (a SIGCHLD handler of a library
    # in this process) would leave wait4 nothing to report, and the figure of an older worker
    last_peak_bytes = _high_water(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        _, _, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return
    # wait4's figure also counts this process's own peak (the kernel carries a parent's peak
    # into a vfork()ed child at exec): only for a worker that ended before it could be read
    if not last_peak_bytes:
        last_peak_bytes = usage.ru_maxrss * 1024


def _high_water(pid: int) -> int:
    """The process's largest resident set so far (VmHWM), 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _main() -> int:
    """The worker: a request on stdin, the answer on stdout (see the module's text)."""
    _die_with_parent()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing a library prints can mix into the answer
    request = pickle.loads(sys.stdin.buffer.read())
    from .connect import QueryError, run
    from ..store.manifest import StoreError

    out.write(READY)
    out.flush()
    try:
        df = run(request["store"], request["sql"], variables=request["variables"], limits=request["limits"],
                 time_range=request["time_range"])
        buf = io.BytesIO()
        df.write_ipc_stream(buf)
        answer = OK + buf.getbuffer()
    except BaseException as e:  # noqa: BLE001 - everything ends in one line for the caller
        kind = "store" if isinstance(e, StoreError) else "query"
        if isinstance(e, (QueryError, StoreError)):
            message = " ".join(str(e).split())
        else:
            message = f"the query failed ({type(e).__name__}); try `servelens sql` for details"
        answer = ERROR + json.dumps([kind, message]).encode("utf-8")
    out.write(answer)
    out.flush()
    return 0


def _die_with_parent() -> None:
    """SIGKILL this worker when the thread that started it ends (the dashboard killed, its
    watch gone): a query must never run on unwatched."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the query's own limits only
        return
    if os.getppid() == 1:  # the parent went before the call above
        os._exit(1)


if __name__ == "__main__":
    sys.exit(_main())
