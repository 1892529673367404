"""Ctrl-C during an ingest ends with one line saying what the store holds and how to go on;
the same command then completes it, every line once (as a store that read it all in one go)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

LOG = (Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm" / "vllm-a.log").read_text()
N = 12
EXE = str(Path(sys.executable).parent / "servelens")


def count(store: Path) -> tuple[int, int]:
    """(events, distinct sources) of a store, read in this process (the process under test is
    the interrupted ingest, not this query)."""
    from servelens.pipeline.query.connect import run

    return run(store, "select count(*) as n, count(distinct source) as s from events").row(0)


def test_ctrl_c_says_what_was_committed_and_a_rerun_completes(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    # distinct contents (one line of each names its file); after the first file, a second or
    # more of parsing left for the interrupt to land in
    for i in range(N):
        (logs / f"v{i:02d}.log").write_text(
            f"2026-05-12T07:59:00.000000000Z INFO 05-12 07:59:00 api_server.py:1] file {i}\n" + LOG)
    store = tmp_path / "store"
    proc = subprocess.Popen([EXE, "ingest", str(logs), "--store", str(store)], stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # the first file is parsed: stop the run mid-way
    assert first.strip().startswith("ingested"), first
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith("servelens: error: interrupted: the store holds ")
    assert last.endswith("run the same command again to go on where it stopped (committed lines are not read again)")
    assert "Traceback" not in rest
    done = subprocess.run([EXE, "ingest", str(logs), "--store", str(store), "-q"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    # the reference: the same files read in one go (in this process, without the rollups:
    # only its events are compared)
    from servelens.pipeline.ingest import ingest

    ref = tmp_path / "ref"
    ingest([logs], ref, rollups=False)
    want = count(ref)
    assert count(store) == want and want[1] == N
