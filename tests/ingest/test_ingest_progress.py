"""`servelens ingest` on a terminal (a pseudo-terminal, the stdlib `pty`): the progress bar
says what it is doing, also after the reading, while the rollups are refreshed."""

from __future__ import annotations

import pytest

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm"
SERVELENS = Path(sys.executable).parent / "servelens"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BOUND_S = 120  # only a bound on a broken run: the test reads until the program exits


def run_on_a_terminal(*args: str) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(SERVELENS), *args], stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                            env={**os.environ, "TERM": "xterm", "COLUMNS": "160"})
    os.close(slave)
    out = b""
    end = time.monotonic() + BOUND_S
    try:
        while time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:  # the program exited and closed its side
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=BOUND_S), ANSI.sub("", out.decode("utf-8", errors="replace"))
    finally:
        os.close(master)


def test_the_bar_says_ingesting_then_refreshing_rollups(tmp_path):
    code, out = run_on_a_terminal("ingest", str(INCIDENT), "--store", str(tmp_path / "store"), "--refresh-rollups")
    assert code == 0, out
    assert "ingesting" in out and "refreshing rollups" in out
    assert out.index("ingesting") < out.index("refreshing rollups")
    assert "rollups of 2 instance(s) refreshed" in out  # the summary after the bar


@pytest.mark.parametrize("flag", ["--no-rollups", None])
def test_without_rollups_no_refresh_stage(tmp_path, flag):
    """--no-rollups, and the default (the first query that reads them refreshes them)."""
    code, out = run_on_a_terminal("ingest", str(INCIDENT), "--store", str(tmp_path / "store"), *([flag] if flag else []))
    assert code == 0, out
    assert "ingesting" in out and "refreshing rollups" not in out
