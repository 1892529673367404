"""Limits that hold for one huge value: `servelens sql` (a real process, as a user runs it)
stops a query whose single function call builds gigabytes or computes for seconds past the
limits DuckDB itself checks, in one line, with the child's memory bounded. Truth: the
kernel's accounting of the process tree (wait4's max RSS)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVELENS = Path(sys.executable).parent / "servelens"
INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm"
MB = 10**6


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from servelens.pipeline.ingest import ingest

    # built in this process (the queries' processes are what is measured), as `servelens
    # ingest` builds it: rollups left to the first query that reads them
    s = tmp_path_factory.mktemp("bounded") / "store"
    ingest([INCIDENT], s, rollups="defer")
    return s


# Linux carries a parent's peak resident set into a vfork()ed child at its exec, so wait4
# on a child of this (large, long-lived) test process reports at least this process's own
# peak. A small shim process runs the command instead: its child starts from the shim's size.
SHIM = ("import os, sys\n"
        "pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)\n"
        "_, status, usage = os.wait4(pid, 0)\n"
        "open(sys.argv[1], 'w').write(f'{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}')\n")


# Only keeps a stop that never comes from hanging the suite; no claim about speed (bench/).
HANG_GUARD_S = 600


def sql(store: Path, query: str, *opts: str) -> tuple[int, str, str, int]:
    """exit code, stdout, stderr, the largest RSS of the command and its child."""
    outcome = store.parent / "outcome"
    proc = subprocess.run([sys.executable, "-c", SHIM, str(outcome), str(SERVELENS), "sql", query,
                           "--store", str(store), *opts], env={**os.environ, "COLUMNS": "120"},
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    code, maxrss = map(int, outcome.read_text().split())
    return code, proc.stdout, proc.stderr, maxrss * 1024


@pytest.mark.parametrize("value", [
    "length(lpad('x', 500000000, 'y'))",
    "len(list_resize([1], 200000000))",
    "length(repeat('abcd', 150000000))",
])
def test_one_huge_value_is_stopped_at_the_memory_limit(store, value):
    code, out, err, rss = sql(store, f"select {value} as n", "--timeout", "30", "--memory-limit", "200MB")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("servelens: error: the query went past its memory limit of 200.0 MB")
    assert "--memory-limit" in err and "Traceback" not in err
    # the child may reach the limit, the margin for a result and the process's own size
    assert rss < 200 * MB + 256 * 2**20 + 400 * MB


def test_one_long_call_is_stopped_at_the_time_limit(store):
    # levenshtein keeps two rows of its table: one call of hours in little memory (DuckDB
    # checks its interrupt only between calls), so the time limit, not the memory limit, is
    # what stops it, and the command returning at all is the stop
    code, out, err, _ = sql(store, "select levenshtein(repeat('ab', 1000000), repeat('ba', 1000000)) as d",
                            "--timeout", "0.5")
    assert code == 1 and out == ""
    assert err == ("servelens: error: the query ran past its 0.5 s time limit and was stopped; "
                   "raise it with --timeout SECONDS or $SERVELENS_QUERY_TIMEOUT\n")


def test_ordinary_queries_answer_as_before(store):
    code, out, err, _ = sql(store, "select count(*) as n from events where event = 'request_finished'",
                               "-f", "csv", "--memory-limit", "200MB")
    assert code == 0, err
    finished = sum(p.read_text().count("Finished request") for p in INCIDENT.glob("*.log"))
    assert out == f"n\n{finished}\n" and finished > 0
    code, out, err, _ = sql(store, "select * from nosuchview")
    assert code == 1 and err.startswith("servelens: error: no table or view named nosuchview")
