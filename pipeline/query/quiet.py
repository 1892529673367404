"""Keep a Rust panic's report off stderr: polars and pyarrow's Rust code prints its panic
("thread '...' panicked at ...", a backtrace under RUST_BACKTRACE) on file descriptor 2 before
Python sees the exception, so catching it is not enough for a one-line error.

`panics_hidden()` sends descriptor 2 to a temporary file while a conversion runs; what was
written there goes back to stderr afterwards, less any panic report. Use it around a single
call on the main thread: another thread writing to stderr meanwhile is held back too.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

# a panic's report: its first line, the message lines, then the backtrace and its note
_PANIC_START = re.compile(r"^thread '.*' (?:\(\d+\) )?panicked at ")
_PANIC_TAIL = re.compile(r"^(?:stack backtrace:|\s+\d+: |\s+at |note: )")


def is_panic(e: BaseException) -> bool:
    """A Rust panic surfaced in Python (pyo3's PanicException, a BaseException)."""
    return type(e).__name__ == "PanicException"


def without_panics(text: str) -> str:
    """`text` less every panic report in it."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if _PANIC_START.match(line):
            if out and not out[-1].strip():  # Rust opens the report with an empty line
                out.pop()
            skipping = True
            continue
        if skipping and (_PANIC_TAIL.match(line) or not _looks_like_ours(line)):
            continue
        skipping = False
        out.append(line)
    return "".join(out)


def _looks_like_ours(line: str) -> bool:
    # a panic's message runs until its backtrace; servelens' own lines start with its name
    return line.startswith("servelens")


@contextlib.contextmanager
def panics_hidden() -> Iterator[None]:
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real descriptor (a test's capture)
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            kept = without_panics(tmp.read().decode("utf-8", "replace"))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
