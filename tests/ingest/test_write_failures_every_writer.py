"""Every writer (ingest, tail, compact, prune, repair, the rollup refresh) stopped by the file
system: ENOSPC, EDQUOT, EROFS, EACCES, EPERM. The command ends in one line saying what to do,
or (the rollup refresh, an optimisation) a warning; the store answers as before; once the
cause is gone, exactly the lines written are stored: counted from the log the test wrote,
never from servelens's own earlier output.

The file-system faults are injected where the store writes (a monkeypatched os call inside
the real commands); an immutable partition directory (chattr +i) is real and needs root."""

from __future__ import annotations

import errno
import functools
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline.cli import app as cli_mod
from servelens.pipeline.query import rollups as rollup_mod
from servelens.pipeline.ingest import ingest
from servelens.pipeline.store import commit as commit_mod
from servelens.pipeline.store.manifest import committed_parts, read_manifest, write_failure

FAULTS = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "raise the disk quota",
    errno.EROFS: "read-only",
    errno.EACCES: "check the permissions",
    errno.EPERM: "check the permissions",
}
N = 1800  # lines of the log: one event each, 30 minutes of 14:00-14:29


@functools.lru_cache(maxsize=None)
def log_text(n: int = N, seed: int = 5) -> str:
    """vLLM stats lines (one event each); line i+1 is printed at 14:MM:SS with MM = i // 60.
    The same for the same arguments: made once per process."""
    rnd = random.Random(seed)
    return "".join(
        f"INFO 06-10 14:{i // 60:02d}:{i % 60:02d} metrics.py:341] Avg prompt throughput: "
        f"{rnd.randint(10, 99)}.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: "
        f"{rnd.randint(1, 9)} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.5%, "
        "CPU KV cache usage: 0.0%.\n" for i in range(n))


def write_log(path: Path, n: int = N, seed: int = 5) -> None:
    path.write_text(log_text(n, seed))
    os.utime(path, (1_781_100_000, 1_781_100_000))  # 2026-06-10: not live, and the year


def grow(store: Path, log: Path, pieces: int = 3) -> None:
    """A store of several parts: the log ingested as it grew, then whole."""
    text = log.read_bytes()
    for i in range(1, pieces):
        part = log.with_name("grow.log")
        part.write_bytes(text[: text.index(b"\n", len(text) * i // pieces) + 1])
        os.utime(part, (1_781_100_000, 1_781_100_000))
        ingest([part], store, rollups=False)
    part.write_bytes(text)
    os.utime(part, (1_781_100_000, 1_781_100_000))
    ingest([part], store, rollups=False)
    part.unlink()


def lines_stored(store: Path) -> list[int]:
    return sorted(pl.read_parquet(committed_parts(store))["line"].to_list())


def run_cli_out(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`servelens ARGS` in this process: exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["servelens", *args])
    code = 0
    try:
        cli_mod.main()
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    code, _, err = run_cli_out(monkeypatch, capsys, *args)
    return code, err


def one_line(code: int, err: str, advice: str) -> None:
    assert code == 1, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("servelens: error: ") and advice in err, err


def skip_refreshes(monkeypatch) -> list[str]:
    """Record each rollup refresh a command asks for instead of running it: a refresh changes
    no event (a failing one is a warning: test_the_rollup_refresh_under_each_errno_is_a_warning),
    and its rows are tests/store/test_rollups.py's subject. Returns the stores asked for."""
    asked: list[str] = []
    monkeypatch.setattr(rollup_mod, "refresh", lambda store, *a, **k: asked.append(str(store.root)))
    return asked


def fail_manifest_writes(monkeypatch, eno: int) -> None:
    def refuse(path, data):
        raise OSError(eno, os.strerror(eno), str(path))

    monkeypatch.setattr(commit_mod, "write_json_atomic", refuse)


@pytest.fixture
def log(tmp_path) -> Path:
    p = tmp_path / "logs" / "vllm.log"
    p.parent.mkdir()
    write_log(p)
    return p


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The stores the tests start from, built once per module (each test changes a copy):
    `grown`, the log ingested as it grew (several parts); `half`, the first half of the log
    at `log` ingested. A test that ingests on top of `half` rewrites that same file whole
    (the same path and inode: a log that grew), as the test did when it built its own."""
    root = tmp_path_factory.mktemp("built")
    log = root / "logs" / "vllm.log"
    log.parent.mkdir()
    write_log(log)
    grow(root / "grown", log)
    first = log.read_bytes()[: len(log.read_bytes()) // 2]
    log.write_bytes(first[: first.rindex(b"\n") + 1])
    os.utime(log, (1_781_100_000, 1_781_100_000))
    ingest([log], root / "half", rollups=False)
    return {"grown": root / "grown", "half": root / "half", "log": log}


def copy_store(built: dict[str, Path], which: str, tmp_path: Path) -> Path:
    """A store of the test's own: a copy of a built one (file times kept: the manifest
    records them)."""
    store = tmp_path / "store"
    shutil.copytree(built[which], store)
    return store


def store_for(built: dict[str, Path], command: str, tmp_path: Path, log: Path) -> tuple[Path, Path]:
    """(store, log) a command starts from: for `ingest`, the first half of the log stored and
    the log then written whole; otherwise the log ingested as it grew."""
    if command == "ingest":
        store = copy_store(built, "half", tmp_path)
        log = built["log"]
        write_log(log)
        return store, log
    return copy_store(built, "grown", tmp_path), log


@pytest.mark.parametrize("eno", list(FAULTS))
@pytest.mark.parametrize("command", ["ingest", "compact", "prune", "repair"])
def test_every_writer_every_errno_is_one_line_and_the_store_unchanged(tmp_path, log, built, monkeypatch, capsys, command, eno):
    store, log = store_for(built, command, tmp_path, log)
    if command == "repair":
        (store / read_manifest(store)["parts"][0]).unlink()
    before = read_manifest(store)
    files_before = sorted(p.relative_to(store) for p in (store / "events").rglob("*.parquet"))
    with monkeypatch.context() as m:
        fail_manifest_writes(m, eno)
        args = {"ingest": ["ingest", str(log), "-q"], "compact": ["compact"], "repair": ["repair"],
                "prune": ["prune", "--before", "2026-06-10T14:10Z"]}[command]
        code, err = run_cli(m, capsys, *args, "--store", str(store))
    one_line(code, err, FAULTS[eno])
    after = read_manifest(store)
    assert (after["parts"], after["files"]) == (before["parts"], before["files"])
    assert sorted(p.relative_to(store) for p in (store / "events").rglob("*.parquet")) == files_before
    # the cause gone, the same command does its job, and the lines are the ones written.
    # Its rollup refresh after the commit is left out: it changes no event (a failing one is
    # a warning, test_the_rollup_refresh_under_each_errno_is_a_warning), and its rows are
    # tests/store/test_rollups.py's subject
    with monkeypatch.context() as m:
        refreshes = skip_refreshes(m)
        code, err = run_cli(m, capsys, *args, "--store", str(store))
    assert code == 0, err
    assert refreshes == ([] if command == "ingest" else [str(store)])  # the CLI's ingest defers it
    if command == "repair":
        code, err = run_cli(monkeypatch, capsys, "ingest", str(log), "--store", str(store))
        assert code == 0, err
    expected = list(range(1, N + 1)) if command != "prune" else list(range(10 * 60 + 1, N + 1))
    assert lines_stored(store) == expected


@pytest.mark.parametrize("eno", list(FAULTS))
def test_the_tailer_under_each_errno(tmp_path, log, monkeypatch, eno):
    """A full disk or quota: the tailer waits and commits when space returns. A read-only or
    forbidden store: one line, exit 1, nothing committed that was not whole."""
    from servelens.pipeline.tail import tailer as tail_mod
    from servelens.pipeline.store.commit import Store
    from servelens.pipeline.tail.tailer import Tailer
    from servelens.pipeline.tail.watch import Targets

    monkeypatch.setattr(tail_mod, "FULL_RETRY_S", 0.0)
    # the stopping tailer's rollup refresh changes no event (and a failing one is a warning,
    # test_the_rollup_refresh_under_each_errno_is_a_warning): asked for, not computed
    planned: list[str] = []
    monkeypatch.setattr(rollup_mod, "plan", lambda store, *a, **k: planned.append(str(store.root)))
    store_dir = tmp_path / "store"
    store = Store.open(store_dir, purpose="tail")
    tailer = Tailer(store, Targets([log.parent], None, skip_under=store_dir), engine="auto", quiet_s=0.0,
                    compact_min_parts=0)
    said: list[str] = []
    tailer.say = said.append
    real = commit_mod.write_json_atomic
    with monkeypatch.context() as m:
        fail_manifest_writes(m, eno)
        if eno in (errno.ENOSPC, errno.EDQUOT):
            for _ in range(3):
                tailer.poll_once(rescan=True)
            assert any("waiting" in s for s in said), said
        else:
            with pytest.raises(OSError) as raised:
                for _ in range(3):
                    tailer.poll_once(rescan=True)
            assert write_failure(raised.value) is not None
    assert commit_mod.write_json_atomic is real
    assert read_manifest(store_dir)["parts"] == []
    for _ in range(3):
        tailer.poll_once(rescan=True)
    tailer.close()
    store.close()
    assert planned == [str(store_dir)]  # once, by the stopping tailer
    assert lines_stored(store_dir) == list(range(1, N + 1))


@pytest.mark.parametrize("eno", list(FAULTS))
@pytest.mark.parametrize("command", ["ingest", "compact", "prune", "repair"])
def test_the_rollup_refresh_under_each_errno_is_a_warning(tmp_path, log, built, monkeypatch, capsys, command, eno):
    """The refresh runs after the command's commit: the data is committed and right, the
    rollups stay marked stale (readers compute those views from the events), a warning says
    so, and no half-written rollup file is left."""
    store = copy_store(built, "grown", tmp_path)
    if command == "repair":
        (store / read_manifest(store)["parts"][0]).unlink()

    refused: list[str] = []

    def refuse(path, *a, **k):
        refused.append(str(path))
        raise OSError(eno, os.strerror(eno), str(path))

    monkeypatch.setattr(rollup_mod, "_write", refuse)
    # the CLI's ingest leaves the refresh to the first query unless asked: asked, it runs here
    args = {"ingest": ["ingest", str(log), "-q", "--refresh-rollups"], "compact": ["compact"], "repair": ["repair"],
            "prune": ["prune", "--before", "2026-06-10T14:10Z"]}[command]
    if command == "ingest":
        write_log(log, N + 60)  # a minute more to commit
    code, out, err = run_cli_out(monkeypatch, capsys, *args, "--store", str(store))
    assert code == 0, err
    assert "Traceback" not in err
    assert refused  # the refresh ran, and its write was refused
    # said (a warning; ingest's summary, a note), with the cause
    said = [line for line in (out + err).splitlines() if line.startswith(("warning", "note")) and "rollup" in line]
    assert said and os.strerror(eno) in said[0], (out, err)
    assert not list((store / "rollups").glob("*.parquet")) if (store / "rollups").exists() else True
    monkeypatch.undo()
    if command == "repair":  # the lost part's lines again, the rollups left stale (not deferred
        # to the query below, which then reads the raw views of a store whose refresh failed)
        assert run_cli(monkeypatch, capsys, "ingest", str(log), "--store", str(store), "--no-rollups")[0] == 0
    expected = {"ingest": range(1, N + 61), "prune": range(10 * 60 + 1, N + 1)}.get(command, range(1, N + 1))
    assert lines_stored(store) == list(expected)
    code, err = run_cli(monkeypatch, capsys, "sql", "select count(*) from requests", "--store", str(store), "-f", "csv")
    assert code == 0, err


needs_root = pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"),
                                reason="needs root to set chattr +i")


@needs_root
@pytest.mark.parametrize("command", ["ingest", "compact", "prune"])
def test_an_immutable_partition_directory(tmp_path, log, built, monkeypatch, capsys, command):
    """A partition directory the writer cannot move a part into (or out of): refused before
    the commit (it used to commit, then fail to move the part: a missing part until the
    next writer, and the command said it succeeded)."""
    store, log = store_for(built, command, tmp_path, log)
    part_dir = (store / read_manifest(store)["parts"][0]).parent
    before = read_manifest(store)
    args = {"ingest": ["ingest", str(log), "-q"], "compact": ["compact"],
            "prune": ["prune", "--before", "2026-06-10T14:10Z"]}[command]
    subprocess.run(["chattr", "+i", str(part_dir)], check=True)
    try:
        code, err = run_cli(monkeypatch, capsys, *args, "--store", str(store))
    finally:
        subprocess.run(["chattr", "-i", str(part_dir)], check=True)
    one_line(code, err, "check the permissions")
    after = read_manifest(store)
    assert (after["parts"], after["files"]) == (before["parts"], before["files"])
    assert run_cli(monkeypatch, capsys, "check", "--store", str(store))[0] == 0
    refreshes = skip_refreshes(monkeypatch)
    code, err = run_cli(monkeypatch, capsys, *args, "--store", str(store))
    assert code == 0, err
    assert refreshes == ([] if command == "ingest" else [str(store)])  # the CLI's ingest defers it
    expected = range(10 * 60 + 1, N + 1) if command == "prune" else range(1, N + 1)
    assert lines_stored(store) == list(expected)


@needs_root
def test_repair_that_cannot_delete_a_dropped_part_commits_and_says_so(tmp_path, log, built, monkeypatch, capsys):
    store = copy_store(built, "grown", tmp_path)
    refreshes = skip_refreshes(monkeypatch)
    parts = read_manifest(store)["parts"]
    (store / parts[0]).unlink()
    part_dir = (store / parts[1]).parent
    subprocess.run(["chattr", "+i", str(part_dir)], check=True)
    try:
        code, out, err = run_cli_out(monkeypatch, capsys, "repair", "--store", str(store))
    finally:
        subprocess.run(["chattr", "-i", str(part_dir)], check=True)
    assert code == 0, err
    assert "Traceback" not in err and "warning: could not delete" in out, out
    assert run_cli(monkeypatch, capsys, "ingest", str(log), "--store", str(store))[0] == 0
    assert lines_stored(store) == list(range(1, N + 1))
    code, out, err = run_cli_out(monkeypatch, capsys, "repair", "--store", str(store))
    assert code == 0 and "delete" in out, out
    assert run_cli(monkeypatch, capsys, "check", "--store", str(store))[0] == 0
    assert refreshes == [str(store)] * 2  # each repair rebuilds the rollups
    assert lines_stored(store) == list(range(1, N + 1))
