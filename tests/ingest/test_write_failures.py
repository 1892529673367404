"""Every writer stopped by the file system (a full disk, an immutable manifest) ends in one
line saying what to do, exit 1, no traceback, and the store answers as before; after the
cause is gone the same command does its job. Needs root (a small tmpfs, chattr); CI is root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.common import fill_up

LOG = (Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm" / "vllm-a.log").read_bytes()
EXE = str(Path(sys.executable).parent / "servelens")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tmpfs and set chattr +i")


def sl(*args: str) -> subprocess.CompletedProcess:
    """`servelens ARGS` as a process of its own: the command whose failure a test is about."""
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=300)


def cli(*args: str) -> subprocess.CompletedProcess:
    """`servelens ARGS` run in this process: the set-up, the reads and the re-run after the
    cause is gone, which are not about the process."""
    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app, build_app

    build_app()
    r = CliRunner().invoke(app, list(args))
    return subprocess.CompletedProcess(["servelens", *args], r.exit_code, r.stdout, r.stderr)


def count(store: Path) -> str:
    r = cli("sql", "select count(*) as n, max(line) as m from events", "--store", str(store), "-f", "csv")
    assert r.returncode == 0, r.stderr
    return r.stdout


def grow(store: Path, work: Path, pieces: int = 4) -> None:
    """A store of several parts: the same log ingested as it grew."""
    log = work / "vllm.log"
    for i in range(1, pieces + 1):
        log.write_bytes(LOG[: LOG.index(b"\n", len(LOG) * i // (pieces + 1)) + 1])
        assert cli("ingest", str(log), "--store", str(store), "-q").returncode == 0


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> Path:
    """A store of four parts (the log ingested as it grew), built once per module: each test
    that changes it changes a copy."""
    work = tmp_path_factory.mktemp("grown")
    grow(work / "store", work)
    return work / "store"


def copy_of(store: Path, to: Path) -> Path:
    shutil.copytree(store, to)  # file times kept: the manifest records them
    return to


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def skip_refreshes(monkeypatch) -> list[str]:
    """Record each rollup refresh a command asks for instead of running it: a refresh changes
    no event, one refused by the file system is a warning
    (tests/ingest/test_write_failures_every_writer.py), and its rows are
    tests/store/test_rollups.py's subject. Returns the stores asked for."""
    from servelens.pipeline.query import rollups

    asked: list[str] = []
    monkeypatch.setattr(rollups, "refresh", lambda store, *a, **k: asked.append(str(store.root)))
    return asked


def one_line(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("servelens: error: ") and "what was committed before is intact" in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.mark.parametrize("command", [["compact"], ["prune", "--before", "2026-05-12T08:02Z"]])
def test_a_full_disk(tiny_fs, tmp_path, grown, command, monkeypatch):
    store = copy_of(grown, tiny_fs / "store")
    before = count(store)
    fill = fill_up(tiny_fs / "fill")
    one_line(sl(*command, "--store", str(store)), "No space left on device", "free some space")
    fill.unlink()
    assert count(store) == before
    assert cli("check", "--store", str(store)).returncode == 0
    refreshes = skip_refreshes(monkeypatch)
    assert cli(*command, "--store", str(store)).returncode == 0
    assert refreshes == [str(store)]


@pytest.mark.parametrize("command", ["ingest", "compact", "prune"])
def test_an_immutable_manifest(tmp_path, grown, command, monkeypatch):
    store = tmp_path / "store"
    if command == "ingest":
        grow(store, tmp_path, pieces=2)
    else:
        copy_of(grown, store)
    manifest = store / "manifest.json"
    args = {"ingest": ["ingest", str(tmp_path / "vllm.log"), "-q"], "compact": ["compact"],
            "prune": ["prune", "--before", "2026-05-12T08:02Z"]}[command]
    if command == "ingest":
        (tmp_path / "vllm.log").write_bytes(LOG)
    before = count(store)
    if subprocess.run(["chattr", "+i", str(manifest)], capture_output=True).returncode != 0:
        pytest.fail("chattr +i is not supported on this file system")
    try:
        one_line(sl(*args, "--store", str(store)), "Operation not permitted", "immutable")
        assert count(store) == before
    finally:
        subprocess.run(["chattr", "-i", str(manifest)], check=True)
    refreshes = skip_refreshes(monkeypatch)
    assert cli(*args, "--store", str(store)).returncode == 0
    assert refreshes == ([] if command == "ingest" else [str(store)])  # the CLI's ingest defers it
    if command == "ingest":
        # every line once: as a store that ingested the whole log in one go holds it
        ref = tmp_path / "ref"
        assert cli("ingest", str(tmp_path / "vllm.log"), "--store", str(ref), "-q").returncode == 0
        got = count(store)
        assert got == count(ref) and got.split(",")[-1].strip() == str(LOG.count(b"\n"))
