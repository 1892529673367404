"""The tailer stepped by hand (Tailer.poll_once) through the situations live logs create:
partial lines, new files, rotation by rename and by copytruncate, .gz copies, deletion,
--from-end, restarts after a crash."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline.tail import tailer as tail_mod
from servelens.pipeline.tail import identity as tail_identity
from servelens.pipeline.query.connect import run
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets
from tests.helpers.tailing import events_only


@pytest.fixture(autouse=True)
def _no_waits(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # sources are shown relative to the working directory
    # the wall-clock waits are for real writers; these tests step the tailer by hand
    monkeypatch.setattr(tail_mod, "ROTATE_WAIT_S", 0.0)
    monkeypatch.setattr(tail_identity, "COPY_WAIT_S", 0.0)
    monkeypatch.setattr(tail_mod, "GZ_SETTLE_S", 0.0)


class Harness:
    def __init__(self, tmp: Path, **kw):
        self.tmp = tmp
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.store_dir = tmp / "store"
        self.kw = kw
        self.start()

    def start(self, **over):
        kw = {"engine": "unknown", "quiet_s": 0.0, "compact_min_parts": 0, **self.kw, **over}
        self.store = Store.open(self.store_dir, purpose="tail")
        # (the rollups are not what these tests read: only the events committed)
        self.tailer = events_only(Tailer(self.store, Targets([self.logs], None, skip_under=self.store_dir), **kw))
        self.messages: list[str] = []
        self.tailer.say = self.messages.append

    def poll(self, n: int = 1):
        for _ in range(n):
            self.tailer.poll_once(rescan=True)

    def crash(self):
        """Like kill -9: nothing more is committed, the lock goes with the process."""
        for fol in list(self.tailer.followed.values()):
            os.close(fol.fd)
        self.store.close()

    def stop(self):
        self.tailer.close()
        self.store.close()

    def rows(self):
        # the committed parts, read the way query.connect reads them (query.run itself is
        # used where the SQL layer matters; it loads every view, too slow to call often)
        parts = committed_parts(self.store_dir)
        if not parts:
            return []
        df = pl.read_parquet(parts).sort("source", "line")
        return df.select("source", "line", "message").rows()

    def messages_in_store(self):
        return sorted(r[2] for r in self.rows())


def write(path: Path, text: str, mode: str = "a"):
    with open(path, mode) as f:
        f.write(text)


def lines(prefix: str, a: int, b: int) -> str:
    return "".join(f"{prefix} {i}\n" for i in range(a, b))


def test_partial_line_is_held_until_complete(tmp_path):
    h = Harness(tmp_path)
    write(h.logs / "a.log", "first\nsecond\npart")
    h.poll()
    assert h.rows() == [("logs/a.log", 1, "first"), ("logs/a.log", 2, "second")]
    write(h.logs / "a.log", "ial line\nfourth\n")
    h.poll()
    assert [r[1:] for r in h.rows()] == [(1, "first"), (2, "second"), (3, "partial line"), (4, "fourth")]
    h.stop()


def test_last_record_held_until_quiet(tmp_path):
    # a traceback may still be growing: its last record waits until the file is quiet
    h = Harness(tmp_path, engine="trtllm", quiet_s=3600.0)
    log = h.logs / "t.log"
    write(log, "[TensorRT-LLM][INFO] one\n[TensorRT-LLM][ERROR] boom\nTraceback (most recent call last):\n")
    h.poll()  # first sight: the file changed since the last poll, so not quiet
    assert [r[1] for r in h.rows()] == [1, 2]
    write(log, '  File "x.py", line 1, in <module>\nValueError: bad\n')
    h.poll()
    assert [r[1] for r in h.rows()] == [1, 2]  # still growing: held
    h.poll()  # unchanged since the last poll: quiet, the record is flushed whole
    got = pl.read_parquet(committed_parts(h.store_dir)).filter(pl.col("line") >= 3).select("line", "n_lines").rows()
    assert sum(n for _, n in got) == 3 and got[0][0] == 3
    h.stop()


def test_new_file_in_watched_directory(tmp_path):
    h = Harness(tmp_path)
    write(h.logs / "a.log", lines("a", 0, 3))
    h.poll()
    (h.logs / "sub").mkdir()
    write(h.logs / "sub" / "b.log", lines("b", 0, 2))
    h.poll()
    assert h.messages_in_store() == ["a 0", "a 1", "a 2", "b 0", "b 1"]
    assert {r[0] for r in h.rows()} == {"logs/a.log", "logs/sub/b.log"}
    h.stop()


def test_rename_rotation_reads_old_to_end_then_new(tmp_path):
    h = Harness(tmp_path)
    log = h.logs / "app.log"
    write(log, lines("g0", 0, 5))
    h.poll()
    write(log, lines("g0", 5, 8))  # written before rotation, not read yet
    os.rename(log, h.logs / "app.log.1")
    write(log, lines("g1", 0, 4))
    h.poll(2)
    msgs = h.messages_in_store()
    assert msgs == sorted([f"g0 {i}" for i in range(8)] + [f"g1 {i}" for i in range(4)])
    # the rotated content keeps its source and its line numbers
    old = [r for r in h.rows() if r[2].startswith("g0")]
    assert {r[0] for r in old} == {"logs/app.log"} and [r[1] for r in old] == list(range(1, 9))
    h.stop()


def test_copytruncate_loses_nothing_and_doubles_nothing(tmp_path):
    h = Harness(tmp_path)
    log = h.logs / "app.log"
    write(log, lines("g0", 0, 5))
    h.poll()
    write(log, lines("g0", 5, 9))  # not read before the copy
    shutil.copyfile(log, h.logs / "app.log.1")
    os.truncate(log, 0)
    write(log, lines("g1", 0, 3))
    h.poll(3)
    assert h.messages_in_store() == sorted([f"g0 {i}" for i in range(9)] + [f"g1 {i}" for i in range(3)])
    assert any("truncated" in m for m in h.messages)
    h.stop()


def test_truncation_seen_after_regrowth_past_offset(tmp_path):
    # truncated and written again beyond the old offset before the next poll: the bytes
    # before the offset changed, so it is new content, read from 0
    h = Harness(tmp_path)
    log = h.logs / "app.log"
    write(log, lines("old", 0, 3))
    h.poll()
    write(log, lines("new-content-longer", 0, 6), mode="w")
    h.poll(2)
    assert h.messages_in_store() == sorted([f"old {i}" for i in range(3)] + [f"new-content-longer {i}" for i in range(6)])
    h.stop()


def test_gzipped_rotated_file_is_not_read_twice(tmp_path):
    h = Harness(tmp_path)
    log = h.logs / "app.log"
    write(log, lines("g0", 0, 6))
    h.poll()
    write(log, lines("g0", 6, 10))  # unread when rotated and compressed
    os.rename(log, h.logs / "app.log.1")
    write(log, lines("g1", 0, 2))
    # the tailer crashes; meanwhile logrotate compresses app.log.1
    h.crash()
    with open(h.logs / "app.log.1", "rb") as src, gzip.open(h.logs / "app.log.1.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.unlink(h.logs / "app.log.1")
    h.start()
    h.poll(3)
    assert h.messages_in_store() == sorted([f"g0 {i}" for i in range(10)] + [f"g1 {i}" for i in range(2)])
    # lines 7..10 came from the .gz, continuing the numbering of the content it holds
    assert [r[1] for r in h.rows() if r[2].startswith("g0")] == list(range(1, 11))
    h.stop()


def test_gz_of_a_followed_file_waits_for_the_original(tmp_path):
    h = Harness(tmp_path)
    log = h.logs / "app.log"
    write(log, lines("g0", 0, 4))
    h.poll()
    os.rename(log, h.logs / "app.log.1")
    with open(h.logs / "app.log.1", "rb") as src, gzip.open(h.logs / "app.log.1.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    h.poll(2)  # both exist: the .gz is the same content, followed elsewhere: it waits
    os.unlink(h.logs / "app.log.1")
    h.poll(3)
    assert h.messages_in_store() == [f"g0 {i}" for i in range(4)]
    h.stop()


def test_deleted_while_followed_is_read_to_its_end(tmp_path):
    h = Harness(tmp_path)
    log = h.logs / "a.log"
    write(log, lines("a", 0, 3))
    h.poll()
    assert len(h.tailer.followed) == 1
    write(log, lines("a", 3, 6))
    os.unlink(log)  # the open descriptor still reads what was written before
    h.poll(2)
    assert h.messages_in_store() == [f"a {i}" for i in range(6)]
    assert h.tailer.followed == {}
    assert any("deleted" in m for m in h.messages)
    h.stop()


def test_from_end_skips_history_and_keeps_line_numbers(tmp_path):
    log = tmp_path / "logs"
    log.mkdir()
    write(log / "a.log", lines("history", 0, 5) + "unfinished")
    h = Harness(tmp_path, from_end=True)
    h.poll()
    assert h.rows() == []
    write(log / "a.log", " now\n" + lines("live", 0, 2))
    write(log / "b.log", lines("b", 0, 2))  # a new file is read from its start
    h.poll()
    assert [r[1:] for r in h.rows() if r[0] == "logs/a.log"] == [(6, "unfinished now"), (7, "live 0"), (8, "live 1")]
    assert [r[2] for r in h.rows() if r[0] == "logs/b.log"] == ["b 0", "b 1"]
    # a restart without --from-end resumes where the store left off: history stays skipped
    h.stop()
    write(log / "a.log", lines("live", 2, 3))
    h.start(from_end=False)
    h.poll()
    assert [r[2] for r in h.rows() if r[0] == "logs/a.log"] == ["unfinished now", "live 0", "live 1", "live 2"]
    h.stop()


def test_crash_between_commits_rereads_exactly_once(tmp_path):
    h = Harness(tmp_path)
    log = h.logs / "a.log"
    write(log, lines("a", 0, 4))
    h.poll()
    write(log, lines("a", 4, 7))
    # read but not committed when the process dies
    fol = next(iter(h.tailer.followed.values()))
    h.tailer._poll(fol, 0.0)
    assert h.tailer.frames
    h.crash()
    h.start()
    h.poll()
    assert h.messages_in_store() == [f"a {i}" for i in range(7)]
    h.stop()


def test_ingest_after_tail_adds_nothing(tmp_path):
    from servelens.pipeline.ingest import ingest

    h = Harness(tmp_path, engine="trtllm")
    write(h.logs / "t.log", "[TensorRT-LLM][INFO] a\n[TensorRT-LLM][INFO] b\n")
    h.poll(2)
    h.stop()
    n = run(h.store_dir, "select count(*) from events").item()
    summary = ingest([h.logs], h.store_dir, rollups=False)  # events are what is counted
    assert [f.status for f in summary.files] == ["unchanged"]
    assert run(h.store_dir, "select count(*) from events").item() == n == 2


def test_glob_limits_what_is_followed(tmp_path):
    h = Harness(tmp_path)
    h.tailer.targets = Targets([h.logs], "*.log", skip_under=h.store_dir)
    write(h.logs / "a.log", "yes\n")
    write(h.logs / "notes.md", "no\n")
    h.poll()
    assert h.messages_in_store() == ["yes"]
    h.stop()


def test_copy_of_a_live_log_is_not_read_twice_even_after_restart(tmp_path):
    h = Harness(tmp_path)
    log = h.logs / "app.log"
    write(log, lines("a", 0, 3))
    h.poll()
    shutil.copyfile(log, h.logs / "0-copy.log")  # sorts before the original
    h.poll()
    h.crash()
    h.start()
    h.poll()
    write(log, lines("a", 3, 5))  # the original goes on growing
    h.poll(2)
    assert h.messages_in_store() == [f"a {i}" for i in range(5)]
    assert {r[0] for r in h.rows()} == {"logs/app.log"}
    h.stop()


def test_tailer_compacts_its_small_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(tail_mod, "COMPACT_EVERY_S", 0.0)
    h = Harness(tmp_path, compact_min_parts=4)
    log = h.logs / "a.log"
    for k in range(9):
        write(log, lines("a", 3 * k, 3 * k + 3))
        h.poll()
    assert h.messages_in_store() == sorted(f"a {i}" for i in range(27))
    assert [r[1] for r in h.rows()] == list(range(1, 28))
    assert len(committed_parts(h.store_dir)) < 4  # without compaction: 9
    h.stop()


def test_background_compaction_while_tailing_keeps_every_line_once(tmp_path, monkeypatch):
    """`run` merges on a background thread and commits the merge at a later poll, while new
    parts keep arriving: no line is lost or doubled, and the small parts are merged."""
    monkeypatch.setattr(tail_mod, "COMPACT_EVERY_S", 0.0)
    merged = []
    real_merge = tail_mod.compact_mod.merge
    monkeypatch.setattr(tail_mod.compact_mod, "merge", lambda *a: merged.append(a) or real_merge(*a))
    monkeypatch.setattr(tail_mod.compact_mod, "compact", None)  # the in-line path is not taken
    h = Harness(tmp_path, compact_min_parts=4)
    h.tailer.background_compaction = True
    log = h.logs / "a.log"
    for k in range(30):
        write(log, lines("a", 3 * k, 3 * k + 3))
        h.poll()
    h.stop()  # waits for a merge still being written and commits it
    assert [r[1] for r in h.rows()] == list(range(1, 91))
    assert h.messages_in_store() == sorted(f"a {i}" for i in range(90))
    assert len(merged) >= 2
    assert len(committed_parts(h.store_dir)) < 10  # without compaction: 30
    # what the store's readers see agrees: every line once
    n = run(h.store_dir, "select count(*) as n, count(distinct line) as d from events").row(0)
    assert n == (90, 90)


def test_old_files_read_to_the_end_are_let_go(tmp_path):
    h = Harness(tmp_path)
    old = h.logs / "old.log"
    write(old, lines("old", 0, 2))
    os.utime(old, (1, 1))  # untouched for decades
    write(h.logs / "live.log", lines("live", 0, 2))
    h.poll(2)
    assert [f.path.name for f in h.tailer.followed.values()] == ["live.log"]
    write(old, lines("old", 2, 3))  # it changes after all: opened again, resumed
    h.poll(2)
    assert h.messages_in_store() == ["live 0", "live 1", "old 0", "old 1", "old 2"]
    h.stop()


def test_copytruncate_to_empty_right_after_a_read(tmp_path):
    # found by the model test: the truncated original (empty, unresolved) must not make the
    # copy wait for it
    h = Harness(tmp_path)
    log = h.logs / "a.log"
    write(log, "a 0\na")
    h.poll()
    write(log, " 1\n")
    shutil.copyfile(log, h.logs / "a.log.1")
    os.truncate(log, 0)
    h.poll(3)
    assert h.messages_in_store() == ["a 0", "a 1"]
    h.stop()


def test_tail_continues_where_ingest_stopped(tmp_path):
    from servelens.pipeline.ingest import ingest

    logs = tmp_path / "logs"
    logs.mkdir()
    write(logs / "t.log", "[TensorRT-LLM][INFO] a\n[TensorRT-LLM][INFO] b\n")
    ingest([logs], tmp_path / "store", engine="trtllm", rollups=False)  # the tailer reads only its offsets
    write(logs / "t.log", "[TensorRT-LLM][INFO] c\n")
    h = Harness(tmp_path, engine="auto")
    h.poll(2)
    rows = h.rows()
    assert [(r[1], r[2].endswith(("a", "b", "c"))) for r in rows] == [(1, True), (2, True), (3, True)]
    assert any("from line 3" in m for m in h.messages)
    h.stop()


def test_status_line_counts_files_rate_and_lag(tmp_path, capsys):
    from servelens.pipeline.cli.tail import StatusLine

    h = Harness(tmp_path)
    write(h.logs / "a.log", lines("a", 0, 40))
    write(h.logs / "b.log", "unfinished")  # held: its bytes wait, which is lag
    h.poll(2)
    StatusLine(enabled=True).status(h.tailer.stats)
    err = capsys.readouterr().err
    assert "following 2 files | " in err and "40 lines committed" in err
    assert h.tailer.stats.rate == 40 / tail_mod.RATE_WINDOW_S and h.tailer.stats.lag_s > 0
    h.stop()


@pytest.mark.parametrize("name", ["vllm/vllm-a.log", "tgi/tgi-a.log", "trtllm/trtllm-a.log"])
def test_live_real_log_gives_the_same_events_as_ingest(tmp_path, name):
    """A real engine log written in random pieces (cut mid-line), polled between pieces,
    yields exactly the events a batch ingest of the finished file yields."""
    import random

    from servelens.pipeline.ingest import ingest

    src = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / name
    data = src.read_bytes()
    h = Harness(tmp_path, engine="auto", year=2026)
    log = h.logs / src.name
    rng = random.Random(name)
    cuts = sorted(rng.sample(range(1, len(data)), 6)) + [len(data)]
    pos = 0
    for cut in cuts:
        with open(log, "ab") as f:
            f.write(data[pos:cut])
        pos = cut
        h.poll()
    h.poll()
    h.stop()
    ingest([log], tmp_path / "batch", year=2026, rollups=False)  # its parts are compared
    # the engine is a partition column: in the parts' paths (pipeline/store/layout.py), not in the files
    live = pl.read_parquet(committed_parts(h.store_dir), hive_partitioning=True).sort("line", "event", "request_id", nulls_last=True)
    batch = pl.read_parquet(committed_parts(tmp_path / "batch"), hive_partitioning=True).sort("line", "event", "request_id", nulls_last=True)
    assert live["engine"][0] == batch["engine"][0] != "unknown"
    assert live.height == batch.height and live["line"].max() == data.count(b"\n")
    assert live.equals(batch)


@pytest.mark.parametrize("where", ["stage_events", "_apply_moves", "_collect_garbage"])
def test_crash_inside_a_commit_then_restart_is_exactly_once(tmp_path, monkeypatch, where):
    """Dying before the commit point (parts staged), at it (manifest written, parts not
    moved) or after it: the restart neither loses nor doubles a line."""
    h = Harness(tmp_path)
    log = h.logs / "a.log"
    write(log, lines("a", 0, 3))
    h.poll()
    write(log, lines("a", 3, 7))

    class Died(Exception):
        pass

    real = getattr(Store, where)

    def dying(self, *a, **kw):
        real(self, *a, **kw)
        raise Died

    monkeypatch.setattr(Store, where, dying)
    with pytest.raises(Died):
        h.poll()
    monkeypatch.setattr(Store, where, real)
    h.crash()
    h.start()
    h.poll()
    write(log, lines("a", 7, 8))
    h.poll()
    assert h.messages_in_store() == [f"a {i}" for i in range(8)]
    h.stop()


def test_stores_inside_watched_directories_are_not_tailed(tmp_path):
    h = Harness(tmp_path)
    write(h.logs / "a.log", "line\n")
    other = h.logs / "old-store"
    with Store.open(other):
        pass
    write(other / "manifest.json", "{}\n", mode="w")
    h.poll()
    assert h.messages_in_store() == ["line"]
    assert [f.path.name for f in h.tailer.followed.values()] == ["a.log"]
    h.stop()


def test_watchdog_reports_new_files(tmp_path):
    import time

    from servelens.pipeline.tail.watch import Watcher

    (tmp_path / "d").mkdir()
    w = Watcher(Targets([tmp_path / "d"], None))
    try:
        assert w.error is None
        time.sleep(0.2)
        write(tmp_path / "d" / "new.log", "x\n")
        assert w.rescan.wait(5)
    finally:
        w.stop()


def test_watchdog_ignores_the_stores_own_writes(tmp_path):
    import time

    from servelens.pipeline.tail.watch import Watcher

    (tmp_path / "store").mkdir()
    w = Watcher(Targets([tmp_path], None, skip_under=tmp_path / "store"))
    try:
        time.sleep(0.2)
        write(tmp_path / "store" / "part.parquet", "x")
        assert not w.rescan.wait(0.5)
        write(tmp_path / "app.log", "x\n")
        assert w.rescan.wait(5)
    finally:
        w.stop()
