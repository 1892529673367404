"""`servelens top` under a pseudo-terminal (the stdlib `pty`): it shows every instance of the
sample store with the values its log says, sorts on a key press, filters, and quits on `q`.

Truth: the instances are the sample's log files; the queue, running and KV values of the
window shown are the averages of that window's stats lines, read from the log by the test."""

from __future__ import annotations

import datetime as dt
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servelens.pipeline.cli.app import build_app

build_app()
INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident"
SERVELENS = Path(sys.executable).parent / "servelens"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BOUND_S = 120  # only a bound on a broken run: the test waits for content, not for time


@pytest.fixture(scope="module")
def store(incident_store):
    return incident_store


class Terminal:
    """servelens top on a pseudo-terminal of 200 columns; frames are read as it draws them."""

    def __init__(self, *args: str):
        self.master, slave = pty.openpty()
        import fcntl
        import struct
        import termios

        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen([str(SERVELENS), "top", *args], stdin=slave, stdout=slave, stderr=slave,
                                     close_fds=True, env={**os.environ, "TERM": "xterm", "COLUMNS": "200"})
        os.close(slave)
        self.buf = ""

    def frame_with(self, *needles: str) -> str:
        """The newest complete frame holding every needle (waiting for the program to draw it)."""
        end = time.monotonic() + BOUND_S
        while time.monotonic() < end:
            frames = [ANSI.sub("", f) for f in self.buf.split("\x1b[2J")[1:]]
            complete = [f for f in frames if "q quit" in f]
            if complete and all(n in complete[-1] for n in needles):
                return complete[-1]
            r, _, _ = select.select([self.master], [], [], 0.5)
            if r:
                try:
                    self.buf += os.read(self.master, 1 << 16).decode("utf-8", errors="replace")
                except OSError:
                    break
        raise AssertionError(f"no frame with {needles}; last output: {self.buf[-2000:]!r}")

    def press(self, keys: str) -> None:
        self.buf = ""
        os.write(self.master, keys.encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=BOUND_S)
        finally:
            os.close(self.master)


def rows_of(frame: str) -> dict[str, list[str]]:
    lines = frame.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("INSTANCE"))
    out = {}
    for ln in lines[head + 1:]:
        if ln.startswith("q quit") or not ln.strip():
            break
        cells = ln.split()
        out[cells[0]] = cells
    return out


def stats_truth(log: Path, start: dt.datetime) -> tuple[float, float, float]:
    """Window averages of the vLLM stats lines in [start, start + 1 min): Pending, Running, KV%."""
    vals = []
    for ln in log.read_text().splitlines():
        if "Avg prompt throughput" not in ln:
            continue
        t = dt.datetime.fromisoformat(ln.split(" ", 1)[0][:26]).replace(tzinfo=dt.timezone.utc)
        if start <= t < start + dt.timedelta(minutes=1):
            m = re.search(r"Running: (\d+) reqs.*Pending: (\d+) reqs, GPU KV cache usage: ([\d.]+)%", ln)
            vals.append((int(m.group(2)), int(m.group(1)), float(m.group(3))))
    assert vals
    return tuple(sum(v[i] for v in vals) / len(vals) for i in range(3))  # type: ignore[return-value]


def test_top_shows_the_store_sorts_filters_and_quits(store):
    term = Terminal("--store", str(store), "--interval", "0.5")
    try:
        frame = term.frame_with("vllm-b", "trtllm-a")
        rows = rows_of(frame)
        # every server of the sample (its log files), and the client-less store has no other
        want = sorted(p.name.split(".")[0] for p in INCIDENT.glob("*/*.log"))
        assert sorted(rows) == want
        assert "sort: queue v" in frame
        # sorted by queue, highest first ("-" for none last)
        queues = [float(r[4]) for r in rows.values() if r[4] != "-"]
        assert queues == sorted(queues, reverse=True)
        # the values of the window shown are the log's
        for inst in ("vllm-a", "vllm-b"):
            cells = rows[inst]
            start = dt.datetime(2026, 5, 12, int(cells[3][:2]), int(cells[3][3:5]), tzinfo=dt.timezone.utc)
            pending, running, kv = stats_truth(INCIDENT / "vllm" / f"{inst}.log", start)
            assert cells[4] == f"{pending:.1f}" and cells[5] == f"{running:.1f}"
            assert cells[6] == f"{kv:.0f}%"

        term.press("n")  # sort by name
        frame = term.frame_with("sort: name ^")
        assert list(rows_of(frame)) == sorted(want)
        term.press("n")  # again: reversed
        frame = term.frame_with("sort: name v")
        assert list(rows_of(frame)) == sorted(want, reverse=True)
        term.press("k")  # KV, highest first
        frame = term.frame_with("sort: KV v")
        kvs = [int(r[6].rstrip("%")) for r in rows_of(frame).values() if r[6] != "-"]
        assert kvs == sorted(kvs, reverse=True) and len(kvs) == 4

        term.press("/tgi\r")  # filter
        frame = term.frame_with("filter 'tgi'")
        assert sorted(rows_of(frame)) == ["tgi-a", "tgi-b"]
        assert "2 of 6 instance(s)" in frame
        term.press("\x1b")  # clear it
        frame = term.frame_with("no filter")
        assert len(rows_of(frame)) == 6

        term.press("q")
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()


def test_top_without_a_terminal_prints_one_frame(store):
    r = subprocess.run([str(SERVELENS), "top", "--store", str(store)], capture_output=True, text=True, timeout=BOUND_S,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0
    assert "\x1b" not in r.stdout
    assert sorted(rows_of(r.stdout)) == sorted(p.name.split(".")[0] for p in INCIDENT.glob("*/*.log"))


def test_top_on_a_log_file_is_one_line():
    log = INCIDENT / "vllm" / "vllm-a.log"
    r = subprocess.run([str(SERVELENS), "top", "--store", str(log)], capture_output=True, text=True, timeout=BOUND_S)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"servelens: error: --store {log} is a file")
    assert lines[0].endswith(f"servelens ingest {log} --store DIR, then --store DIR")
