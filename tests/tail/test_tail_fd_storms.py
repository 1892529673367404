"""The tailer's descriptor budget and rotation storms: exactly the lines written, no more, no
fewer, counted from what the test wrote (each line names its file and number)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline.tail import tailer as tail_mod
from servelens.pipeline.tail import identity as tail_identity
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets
from tests.helpers.tailing import events_only


@pytest.fixture(autouse=True)
def _no_waits(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tail_mod, "ROTATE_WAIT_S", 0.0)
    monkeypatch.setattr(tail_identity, "COPY_WAIT_S", 0.0)
    monkeypatch.setattr(tail_mod, "GZ_SETTLE_S", 0.0)


def make_tailer(logs: Path, store_dir: Path) -> tuple[Store, Tailer, list[str]]:
    store = Store.open(store_dir, purpose="tail")
    # (only the committed lines are read: no rollups)
    tailer = events_only(Tailer(store, Targets([logs], None, skip_under=store_dir), engine="unknown", quiet_s=0.0,
                                compact_min_parts=0))
    said: list[str] = []
    tailer.say = said.append
    return store, tailer, said


def texts(store_dir: Path) -> list[str]:
    """The text of every stored line (unknown-engine events keep their message)."""
    parts = committed_parts(store_dir)
    return sorted(pl.read_parquet(parts)["message"].to_list()) if parts else []


def test_a_line_written_between_the_last_read_and_the_close_is_read(tmp_path):
    """The descriptor budget closes files read to their end; one that grew after its last
    read but before it was closed used to be remembered at its new size, and its new lines
    waited until the file changed again (minutes, or for ever)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "a.log"
    log.write_text("a 1\na 2\n")
    store, tailer, _ = make_tailer(logs, tmp_path / "store")
    tailer.poll_once(rescan=True)
    with open(log, "a") as f:
        f.write("a 3\n")
    (fol,) = tailer.followed.values()
    tailer._close(fol)  # what the budget does to a file read to its end
    for _ in range(3):
        tailer.poll_once(rescan=True)
    tailer.close()
    store.close()
    assert texts(tmp_path / "store") == ["a 1", "a 2", "a 3"]


def in_use() -> int:
    """Descriptors this process holds already (what earlier tests in this worker left open):
    a budget is set above them, so it is the tailer's own use that meets it."""
    return len(os.listdir("/proc/self/fd"))


def test_more_files_than_the_budget_every_file_growing_while_others_wait(tmp_path):
    """400 files under a limit 64 descriptors above those in use (a quarter of it open at
    most), each written to again while most are closed or waiting for a slot: every line
    committed once."""
    logs = tmp_path / "logs"
    logs.mkdir()
    n = 400
    for i in range(n):
        (logs / f"f{i:03d}.log").write_text(f"f{i} 1\nf{i} 2\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = in_use() + 64
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        store, tailer, said = make_tailer(logs, tmp_path / "store")
        assert tailer.max_open == limit // 4
        for round_ in range(3, 6):
            for _ in range(3):
                tailer.poll_once(rescan=True)
            for i in range(0, n, 3):  # a third of the files, open or not
                with open(logs / f"f{i:03d}.log", "a") as f:
                    f.write(f"f{i} {round_}\n")
        for _ in range(200):
            tailer.poll_once(rescan=True)
            if tailer._deferred == 0 and not tailer.files and len(texts(tmp_path / "store")) >= 2 * n + 3 * len(range(0, n, 3)):
                break
        for _ in range(3):
            tailer.poll_once(rescan=True)
        tailer.close()
        store.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    expected = sorted([f"f{i} {k}" for i in range(n) for k in (1, 2)]
                      + [f"f{i} {k}" for i in range(0, n, 3) for k in (3, 4, 5)])
    assert texts(tmp_path / "store") == expected


@pytest.mark.parametrize("limit", [None, 40])
def test_a_rotation_storm_between_two_polls(tmp_path, limit):
    """Twelve rename rotations of one log between two polls (each generation written, then
    renamed away, a new file created), with and without a tight descriptor budget: every
    generation's lines once, the live file's too."""
    logs = tmp_path / "logs"
    logs.mkdir()
    live = logs / "app.log"
    live.write_text("g0 1\ng0 2\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limit:
        resource.setrlimit(resource.RLIMIT_NOFILE, (in_use() + limit, hard))
    try:
        store, tailer, _ = make_tailer(logs, tmp_path / "store")
        tailer.poll_once(rescan=True)
        with open(live, "a") as f:
            f.write("g0 3\n")  # written after the last read, before the rotation
        for g in range(1, 13):
            os.rename(live, logs / f"app.log.{g}")
            live.write_text(f"g{g} 1\ng{g} 2\n")
            with open(logs / f"app.log.{g}", "a") as f:
                f.write(f"g{g - 1} late\n")  # the old writer's last line, after the rename
        for _ in range(40):
            tailer.poll_once(rescan=True)
        tailer.close()
        store.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    expected = sorted(["g0 1", "g0 2", "g0 3"] + [f"g{g} {k}" for g in range(1, 13) for k in (1, 2)]
                      + [f"g{g} late" for g in range(12)])
    assert texts(tmp_path / "store") == expected
