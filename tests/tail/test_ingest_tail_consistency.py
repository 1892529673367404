"""The same input gives the same events through `ingest` and through `tail`: lines longer than
the maximum line size, an unterminated last line, NUL bytes; and a file copytruncated while
ingest reads it loses nothing and renumbers nothing."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline import ingest as ingest_mod
from servelens.pipeline.sources import lines as lines_mod
from servelens.pipeline.tail import tailer as tail_mod
from servelens.pipeline.tail import identity as tail_identity
from servelens.pipeline.ingest import ingest
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets
from tests.helpers.tailing import events_only

MAX = 1000  # a small maximum line size, so the test needs no 32 MiB lines


@pytest.fixture(autouse=True)
def small_lines(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(lines_mod, "MAX_LINE_BYTES", MAX)
    monkeypatch.setattr(tail_mod, "MAX_READ", MAX + 1)
    monkeypatch.setattr(tail_identity, "MAX_READ", MAX + 1)
    monkeypatch.setattr(tail_mod, "PARTIAL_WAIT_S", 0.0)
    monkeypatch.setattr(tail_mod, "ROTATE_WAIT_S", 0.0)


def old(path: Path) -> Path:
    """Make the file look finished (ingest holds a live file's unterminated last line)."""
    t = time.time() - 3600
    os.utime(path, (t, t))
    return path


def via_ingest(log: Path, store: Path, block: int = 4096) -> pl.DataFrame:
    ingest([log], store, engine="auto", block_bytes=block, rollups=False)  # its parts are compared
    return pl.read_parquet(committed_parts(store)).select("line", "n_lines", "message").sort("line")


def via_tail(logdir: Path, store: Path) -> pl.DataFrame:
    with Store.open(store, purpose="tail") as st:
        # (its parts are compared, as ingest's without rollups)
        t = events_only(Tailer(st, Targets([logdir], None, skip_under=store), engine="auto", quiet_s=0.0, compact_min_parts=0))
        for _ in range(40):
            t.poll_once(rescan=True)
        t.close()
    return pl.read_parquet(committed_parts(store)).select("line", "n_lines", "message").sort("line")


CASES = {
    "long lines": "short\n" + "x" * (2 * MAX + 17) + "\nafter\n" + "y" * MAX + "\n" + "z" * (MAX + 1) + "\nend\n",
    "long unterminated last line": "a\n" + "q" * (3 * MAX + 5),
    "unterminated last line": "one\ntwo\nthree",
    "NUL bytes": "first\n" + "\0" * 3000 + "second\nthird\0\0\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ingest_and_tail_give_the_same_events(tmp_path, name):
    text = CASES[name]
    for d in ("i", "t"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "a.log").write_text(text)
        old(tmp_path / d / "a.log")
    a = via_ingest(tmp_path / "i" / "a.log", tmp_path / "si")
    b = via_tail(tmp_path / "t", tmp_path / "st")
    assert a.equals(b), (a, b)
    # every byte of text is in exactly one event, in order
    assert "".join(a["message"].to_list()) == text.replace("\n", "").replace("\0", "")


def test_long_line_pieces():
    text = "x" * (2 * MAX + 17) + "\n"
    df, _ = lines_mod.decode_lines(text.encode(), 1)
    assert [len(t) for t in df["text"]] == [MAX, MAX, 17]
    df, _ = lines_mod.decode_lines(("y" * MAX + "\n").encode(), 1)  # exactly the maximum: whole
    assert [len(t) for t in df["text"]] == [MAX]


def test_copytruncate_during_ingest_loses_and_renumbers_nothing(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    log.write_text("".join(f"old line {i}\n" for i in range(1, 2001)))
    old(log)
    real = ingest_mod.parse_stream
    state = {"n": 0}

    def rotating(*a, **kw):
        for chunk in real(*a, **kw):
            state["n"] += 1
            if state["n"] == 2:  # logrotate's copytruncate, then the server writes on
                shutil.copy2(log, logs / "app.log.1")
                with open(log, "r+") as f:
                    f.truncate(0)
                with open(log, "a") as f:
                    f.write("".join(f"new line {i}\n" for i in range(1, 1501)))
            yield chunk

    monkeypatch.setattr(ingest_mod, "parse_stream", rotating)
    store = tmp_path / "store"
    first = ingest([log], store, engine="auto", block_bytes=4096, rollups=False)  # the events are read
    assert "changed while being read" in first.files[0].reason
    monkeypatch.setattr(ingest_mod, "parse_stream", real)
    old(log)
    old(logs / "app.log.1")
    ingest([logs], store, engine="auto", block_bytes=4096, rollups=False)
    ev = pl.read_parquet(committed_parts(store)).select("line", "message")
    olds = ev.filter(pl.col("message").str.starts_with("old")).sort("line")
    news = ev.filter(pl.col("message").str.starts_with("new")).sort("line")
    assert olds["message"].to_list() == [f"old line {i}" for i in range(1, 2001)]
    assert olds["line"].to_list() == list(range(1, 2001))  # numbered as in the original file
    assert news["message"].to_list() == [f"new line {i}" for i in range(1, 1501)]
    assert news["line"].to_list() == list(range(1, 1501))
    assert ev.height == 3500  # no fragments
