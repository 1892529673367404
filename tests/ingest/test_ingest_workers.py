"""Large files of different instances read side by side by the ingesting process and worker
processes (pipeline/ingest.py `_all_files`): each worker parses and stages its own parts, the
ingesting process commits them. What the store holds must be what the log files say, and what reading the files one
by one stores."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import polars as pl
import pytest
from tests.helpers.common import SAMPLE_LOGS, events, fill_up, write
from tests.helpers.incident_truth import truth_requests

from servelens.pipeline import ingest as ingest_mod, workers as workers_mod
from servelens.pipeline.ingest import IngestError, ingest as _ingest
from servelens.pipeline.query.connect import run
from servelens.pipeline.store.manifest import StoreFull

INCIDENT = SAMPLE_LOGS / "incident"


def ingest(*args, **kw):
    """The library ingest without the rollup refresh: these tests compare events, file
    entries and requests read raw."""
    return _ingest(*args, rollups=False, **kw)


@pytest.fixture
def by_workers(monkeypatch):
    """Every file large enough to be read side by side; the files whose reads a worker
    returned, by name (the first is always a worker's: it is handed over before this process
    reads one)."""
    monkeypatch.setattr(workers_mod, "WORKER_MIN_BYTES", 0)
    real, read = ingest_mod._commit_read, []

    def spy(opened, *rest):
        read.append(opened.path.name)
        return real(opened, *rest)

    monkeypatch.setattr(ingest_mod, "_commit_read", spy)
    return read


@pytest.fixture
def thread_workers(monkeypatch):
    """Worker threads of this process instead of processes (they see the flush limits a test
    sets here), sending their flushes on a queue that pickles what goes on it, as a real one
    does; the keys of the files whose flushes it carried, in order."""
    import pickle
    import queue
    from concurrent.futures import ThreadPoolExecutor

    sent, keys = queue.SimpleQueue(), []

    class Staged:
        def put(self, item):
            keys.append(item[0])
            sent.put(pickle.loads(pickle.dumps(item)))

        def get(self):
            return sent.get()

        def empty(self):
            return sent.empty()

    staged = Staged()
    monkeypatch.setattr(workers_mod, "_STAGED", staged)
    monkeypatch.setattr(workers_mod, "start", lambda n, progress: workers_mod.Workers(ThreadPoolExecutor(n), n, staged=staged))
    return keys


def _entries(store):
    files = json.loads((store / "manifest.json").read_text())["files"]
    return sorted((e["source"], e["instance"], e["offset"], e["lines"], e["crc"], e["ctx"]["last_ts"]) for e in files.values())


def _part_records(store):
    """Per part: (its rows and the sources of its rows, read from the file; what the
    manifest records of it)."""
    m = json.loads((store / "manifest.json").read_text())
    out = []
    for part, info in m["part_info"].items():
        rows = pl.read_parquet(store / part, columns=["source"])
        out.append(((rows.height, sorted(set(rows["source"]))),
                    (info["rows"], sorted(m["files"][k]["source"] for k in info["sources"]))))
    return out


def _logs(tmp_path):
    """The incident's six logs (two per engine, one instance each), aged copies."""
    out = []
    for log in sorted(INCIDENT.rglob("*.log")):
        out.append(write(tmp_path / "logs" / log.parent.name / log.name, log.read_bytes()))
    return out


def test_workers_read_the_files_of_distinct_instances_as_the_logs_and_the_truth_say(tmp_path, by_workers):
    logs = _logs(tmp_path)
    moved: list[int] = []
    summary = ingest([tmp_path / "logs"], tmp_path / "store", workers=2, on_progress=moved.append)

    assert by_workers and len(set(by_workers)) == len(by_workers) and set(by_workers) <= {log.name for log in logs}
    assert "6 large files read side by side by this process and 1 worker process (--workers 1: one at a time)" in summary.notes
    # the progress bar moved as the workers read, to the files' sizes in all
    assert sum(moved) == sum(log.stat().st_size for log in logs) and len(moved) >= len(logs)
    # every line of every file read, counted from the bytes
    lines = {log.stem: log.read_bytes().count(b"\n") for log in logs}
    assert {f.instance: f.lines for f in summary.files} == lines
    assert all(f.status == "ingested" and not f.failed and not f.reason for f in summary.files)
    # the requests each instance finished and failed, as the simulator that wrote the logs
    # recorded them (TensorRT-LLM's log names no request)
    truth = (truth_requests().filter(pl.col("status").is_in(["ok", "error"]) & ~pl.col("instance").str.starts_with("trtllm"))
             .group_by("instance", "status").len())
    want = sorted((i, {"ok": "finished", "error": "failed"}[s], n) for i, s, n in truth.iter_rows())
    got = run(tmp_path / "store", "select instance, status, count(*) from requests "
              "where engine <> 'trtllm' and status in ('finished', 'failed') group by all order by all").rows()
    assert got == want and len(want) == 6
    # and what reading them one by one in this process stores, file states included
    ingest([tmp_path / "logs"], tmp_path / "serial", workers=1)
    assert events(tmp_path / "store").equals(events(tmp_path / "serial"))
    assert _entries(tmp_path / "store") == _entries(tmp_path / "serial")
    assert not (tmp_path / "store" / "_staging").exists()
    # each part's record for check and repair: its rows, and the files it holds lines of, as
    # the part's own rows say
    records = _part_records(tmp_path / "store")
    # (a part per file a worker read at least; this process's files share its batch)
    assert len(records) > len(by_workers) and all(held == said for held, said in records)


def test_a_grown_file_read_by_a_worker_adds_exactly_its_new_lines(tmp_path, by_workers):
    logs = _logs(tmp_path)
    full = {log: log.read_bytes() for log in logs}
    for log, data in full.items():  # the first half of each log, then the whole
        write(log, data[: data.index(b"\n", len(data) // 2) + 1])
    ingest([tmp_path / "logs"], tmp_path / "store", workers=2)
    for log, data in full.items():
        write(log, data)
    again = ingest([tmp_path / "logs"], tmp_path / "store", workers=2)

    assert len(by_workers) >= 2  # (a worker's file in each ingest)
    assert sum(f.lines for f in again.files) == sum(
        data.count(b"\n") - data[: data.index(b"\n", len(data) // 2) + 1].count(b"\n") for data in full.values())
    # nothing is read twice
    assert sum(f.lines for f in ingest([tmp_path / "logs"], tmp_path / "store", workers=2).files) == 0
    # the events of the whole files read in one go, one by one
    ingest([tmp_path / "logs"], tmp_path / "serial", workers=1)
    assert events(tmp_path / "store").equals(events(tmp_path / "serial"))


def test_one_instance_small_files_and_the_library_default_stay_in_this_process(tmp_path, monkeypatch, by_workers):
    _logs(tmp_path)
    ingest([tmp_path / "logs"], tmp_path / "store", workers=2, instance="one")
    assert by_workers == []  # one instance: each file continues the one before
    ingest([tmp_path / "logs"], tmp_path / "library")
    assert by_workers == []  # the library spawns none unless asked (a script's main is imported again)
    monkeypatch.setattr(workers_mod, "WORKER_MIN_BYTES", 1 << 40)
    ingest([tmp_path / "logs"], tmp_path / "other", workers=2)
    assert by_workers == []


def test_a_worker_that_dies_stops_the_ingest_with_one_line_saying_what_to_do(tmp_path):
    opened = ingest_mod._Opened.__new__(ingest_mod._Opened)
    opened.source, opened.size = "logs/vllm-a.log", 10
    dead: Future = Future()
    dead.set_exception(BrokenProcessPool("a child process terminated abruptly"))
    with pytest.raises(IngestError) as e:
        ingest_mod._commit_read(opened, dead, lambda key, sent: pytest.fail("nothing was read to commit"))
    assert str(e.value).startswith("the worker process reading logs/vllm-a.log stopped before it finished")
    assert "--workers 1" in str(e.value) and "\n" not in str(e.value)


def test_a_worker_killed_while_this_process_reads_stops_the_ingest_with_its_line(tmp_path, monkeypatch, by_workers):
    """The worker is killed as it is handed its first file: the ingest stops with the
    worker's one line (not as a failure of the file this process reads), keeps what was
    committed, and the next ingest stores every line once."""
    import signal

    logs = _logs(tmp_path)
    real = workers_mod.start

    def start_then_kill(*a):
        w = real(*a)
        submit = w.executor.submit

        def submit_and_kill(*args, **kw):
            future = submit(*args, **kw)
            if args[0] is ingest_mod._read_in_worker:
                for child in w.processes:
                    os.kill(child.pid, signal.SIGKILL)
            return future

        w.executor.submit = submit_and_kill
        return w

    monkeypatch.setattr(workers_mod, "start", start_then_kill)
    seen: list = []
    with pytest.raises(IngestError) as e:
        ingest([tmp_path / "logs"], tmp_path / "store", workers=2, on_file=seen.append)
    assert str(e.value).startswith("the worker process reading ") and "stopped before it finished" in str(e.value)
    assert seen and not any(f.failed or f.reason for f in seen)  # the files this process read: whole
    monkeypatch.setattr(workers_mod, "start", real)
    ingest([tmp_path / "logs"], tmp_path / "store", workers=2)
    files = json.loads((tmp_path / "store" / "manifest.json").read_text())["files"].values()
    assert sorted(e["lines"] for e in files) == sorted(log.read_bytes().count(b"\n") for log in logs)
    assert run(tmp_path / "store", "select count(*) = count(distinct (source, line)) from events").item()


def test_the_cli_reads_with_workers_and_refuses_zero(tmp_path, by_workers):
    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app, build_app

    build_app()
    _logs(tmp_path)
    out = CliRunner().invoke(app, ["ingest", str(tmp_path / "logs"), "--store", str(tmp_path / "s"), "--workers", "2", "-q"])
    assert out.exit_code == 0, out.output
    assert by_workers
    bad = CliRunner().invoke(app, ["ingest", str(tmp_path / "logs"), "--store", str(tmp_path / "t"), "--workers", "0"])
    assert bad.exit_code == 2 and "--workers" in bad.output
    files = json.loads((tmp_path / "s" / "manifest.json").read_text())["files"].values()
    assert sorted(e["lines"] for e in files) == sorted(
        log.read_bytes().count(b"\n") for log in (tmp_path / "logs").rglob("*.log"))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs")
def test_a_full_disk_under_the_workers_stops_the_ingest_and_the_next_one_stores_every_line(tmp_path, by_workers):
    logs = _logs(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        ingest([logs[0]], mnt / "store")  # a store holding one file already
        fill = fill_up(mnt / "fill")
        with pytest.raises(StoreFull, match="no space left on device"):
            ingest([tmp_path / "logs"], mnt / "store", workers=2)
        fill.unlink()
        assert run(mnt / "store", "select count(distinct source) from events").item() == 1
        again = ingest([tmp_path / "logs"], mnt / "store", workers=2)
        files = json.loads((mnt / "store" / "manifest.json").read_text())["files"].values()
        assert sorted(e["lines"] for e in files) == sorted(log.read_bytes().count(b"\n") for log in logs)
        assert sum(f.lines for f in again.files) == sum(log.read_bytes().count(b"\n") for log in logs[1:])
        assert not (mnt / "store" / "_staging").exists()
        assert set(by_workers) <= {log.name for log in logs[1:]}  # (the first was stored)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("copy", ["the start of it", "all of it"])
def test_a_copy_of_a_file_a_worker_reads_is_stored_once(tmp_path, monkeypatch, by_workers, copy):
    """A log copied under other names (its first half saved earlier, or the whole), one copy
    large enough for a worker and one not: their lines are the original's, stored once."""
    logs = _logs(tmp_path)
    data = logs[0].read_bytes()
    cut = data[: data.index(b"\n", len(data) // 2) + 1] if copy == "the start of it" else data
    _, small = (write(tmp_path / "logs" / "copies" / name, cut) for name in ("copy-big.log", "copy-small.log"))
    picked = ingest_mod._for_workers
    monkeypatch.setattr(ingest_mod, "_for_workers", lambda *a: [i for i in picked(*a) if i.path != small])
    ingest([tmp_path / "logs"], tmp_path / "store", workers=2)

    alone = ingest(logs, tmp_path / "alone", workers=1)
    assert run(tmp_path / "store", "select count(*) from events").item() == alone.events
    assert small.name not in by_workers and by_workers


def test_this_process_reads_beside_its_workers_with_its_share_of_the_cores(tmp_path, monkeypatch, by_workers):
    """Reading a large file beside the workers, this process parses on its share of the
    cores, as each worker does: with its default threads it would take more than its share
    and finish its files early while the last worker's file is still read alone."""
    monkeypatch.setattr(workers_mod, "usable_cores", lambda: 4)  # two readers on four cores
    logs = _logs(tmp_path)
    real, threads = ingest_mod.parse_stream, {}

    def spy(stream, parser, ctx, **kw):
        threads[Path(ctx.source).name] = kw.get("threads")
        return real(stream, parser, ctx, **kw)

    monkeypatch.setattr(ingest_mod, "parse_stream", spy)
    ingest([tmp_path / "logs"], tmp_path / "store", workers=2)
    mine = {name: n for name, n in threads.items() if name not in by_workers}
    assert mine and set(mine.values()) == {2} and len(mine) + len(by_workers) == len(logs)
    # a user's SERVELENS_PARSE_THREADS is every reader's, this process's too (its default)
    monkeypatch.setenv("SERVELENS_PARSE_THREADS", "1")
    threads.clear()
    by_workers.clear()
    ingest([tmp_path / "logs"], tmp_path / "again", workers=2)
    mine = {name: n for name, n in threads.items() if name not in by_workers}
    assert mine and set(mine.values()) == {None}


def test_the_default_worker_count_is_the_cores_the_memory_holds(monkeypatch):
    import os as os_

    monkeypatch.setattr(os_, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(workers_mod, "available_memory", lambda: 64 << 30)
    assert workers_mod.worker_count(None) == 16
    monkeypatch.setattr(workers_mod, "available_memory", lambda: (5 << 30) + (1 << 29))
    assert workers_mod.worker_count(None) == 5
    monkeypatch.setattr(workers_mod, "available_memory", lambda: 1 << 28)
    assert workers_mod.worker_count(None) == 1
    assert workers_mod.worker_count(3) == 3  # asked for: as asked


def test_each_worker_takes_its_share_of_the_cores_and_this_process_keeps_its_own(monkeypatch):
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.delenv("SERVELENS_PARSE_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))  # an 8-core machine
    monkeypatch.setattr(workers_mod, "available_memory", lambda: 2 << 30)  # memory for two workers: not fewer threads
    import signal

    mine = signal.getsignal(signal.SIGINT)
    started = workers_mod.start(1, False)  # one worker, this process reading beside it
    pool = started.executor
    try:
        seen = [pool.submit(os.getenv, k).result() for k in ("POLARS_MAX_THREADS", "SERVELENS_PARSE_THREADS")]
        # Ctrl-C, sent to the whole process group, is this process's to handle: a worker
        # ignores it (and prints no traceback), this process's handler is unchanged
        ctrl_c = pool.submit(signal.getsignal, signal.SIGINT).result()
    finally:
        pool.shutdown()
    assert seen == ["4", "4"]
    assert ctrl_c == signal.SIG_IGN and signal.getsignal(signal.SIGINT) is mine
    # a worker skips its interpreter's teardown at the end, and still ends as a success
    assert [p.exitcode for p in started.processes] == [0]
    assert "POLARS_MAX_THREADS" not in os.environ and "SERVELENS_PARSE_THREADS" not in os.environ
    monkeypatch.setenv("SERVELENS_PARSE_THREADS", "3")  # a user's setting wins
    pool = workers_mod.start(1, False).executor
    try:
        assert pool.submit(os.getenv, "SERVELENS_PARSE_THREADS").result() == "3"
    finally:
        pool.shutdown()


@pytest.mark.parametrize("value, threads", [("1", 1), ("99999999", os.cpu_count() or 1), ("many", 2), ("", 2)])
def test_the_parse_threads_a_worker_is_told_are_bounded_by_the_cores(value, threads):
    """Each parse thread holds a chunk in flight: a share past the cores would read that many
    blocks into memory at once."""
    import sys

    out = subprocess.run([sys.executable, "-c", "from servelens.pipeline.sources import lines; print(lines.PARSE_THREADS)"],
                         capture_output=True, text=True, env={**os.environ, "SERVELENS_PARSE_THREADS": value}, check=True)
    assert int(out.stdout) == threads


def test_the_command_starts_workers_early_only_for_two_large_files_it_has_not_read(tmp_path, monkeypatch):
    """`servelens ingest` starts its workers before its own imports when two files it has
    not read to their end are large enough (a look at sizes and the manifest, no parsing)."""
    monkeypatch.setattr(workers_mod, "WORKER_MIN_BYTES", 1000)
    logs = _logs(tmp_path)
    big = [log for log in logs if log.stat().st_size >= 1000]
    assert len(big) == 6
    store = tmp_path / "logs" / "store"  # a store inside the directory: its parts are not logs

    def started(paths, requested=2):
        w = workers_mod.prestart(paths, store, requested, False)
        if w is None:
            return None
        w.close()
        return w.n

    assert started([tmp_path / "logs"]) == 1  # (this process reads beside it)
    assert started([tmp_path / "logs"], requested=8) == 5  # no more readers than large files
    for hidden in (".git/objects/pack/big.pack", ".big.log"):  # not read by the ingest either
        write(tmp_path / "logs" / hidden, b"x" * 2000)
    assert started([tmp_path / "logs"], requested=8) == 5
    assert started([tmp_path / "logs"], requested=1) is None
    assert started(big[:1]) is None  # one file: its blocks share the parse threads instead
    ingest([tmp_path / "logs"], store, workers=1)
    assert started([tmp_path / "logs"]) is None  # every file read to its end already
    with open(big[0], "ab") as f:
        f.write(big[0].read_bytes()[-200:])
    assert started([tmp_path / "logs"]) is None  # one grown file
    with open(big[1], "ab") as f:
        f.write(big[1].read_bytes()[-200:])
    assert started([tmp_path / "logs"]) == 1


def test_workers_started_early_and_not_needed_are_stopped_and_the_files_read_here(tmp_path, monkeypatch, by_workers):
    """Two large files that are one log under two names: the early workers are not needed
    (the copy is read once, here) and none is left running."""
    import multiprocessing

    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app, build_app

    build_app()
    log = _logs(tmp_path)[0]
    write(tmp_path / "logs" / "again" / log.name, log.read_bytes())
    real, started = workers_mod.start, []
    monkeypatch.setattr(workers_mod, "start", lambda *a: started.append(real(*a)) or started[-1])
    before = set(multiprocessing.active_children())
    out = CliRunner().invoke(app, ["ingest", str(log), str(tmp_path / "logs" / "again" / log.name),
                                   "--store", str(tmp_path / "s"), "-q", "--workers", "2"])
    assert out.exit_code == 0, out.output
    assert [w.n for w in started] == [1] and len(started[0].processes) == 1
    assert by_workers == [] and "worker processes" not in out.output
    assert set(multiprocessing.active_children()) - before == set()
    files = json.loads((tmp_path / "s" / "manifest.json").read_text())["files"].values()
    assert [e["lines"] for e in files] == [log.read_bytes().count(b"\n")]


def test_the_largest_files_are_handed_out_first(tmp_path, by_workers):
    """Each reader takes the next file when it is free: the largest first, so that what is
    left at the end, read while another reader may wait, is the smallest."""
    logs = _logs(tmp_path)
    ingest([tmp_path / "logs"], tmp_path / "store", workers=2)
    assert by_workers[0] == max(logs, key=lambda p: p.stat().st_size).name


def test_a_workers_flushes_are_committed_as_it_stages_them_and_store_what_reading_here_stores(
        tmp_path, monkeypatch, by_workers, thread_workers):
    """A worker sends each flush as soon as it has staged it, and this process commits it
    between its own blocks (not all of a file's once the file ends, when only the commits
    would run): the store holds what reading the files one by one here stores. More readers
    do not flush a file more often (each flush is a commit here)."""
    from collections import Counter

    keys = thread_workers
    largest = max(_logs(tmp_path), key=lambda p: p.stat().st_size).name  # (a worker's: handed out first)
    monkeypatch.setattr(ingest_mod, "FLUSH_ROWS", 1_000)  # several flushes a file
    # (blocks of 64 KiB: files of several blocks, each block's events more than a flush's rows)
    ingest([tmp_path / "logs"], tmp_path / "serial", workers=1, block_bytes=1 << 16)
    flushes = {}
    for readers in (2, 4):
        store = tmp_path / f"store{readers}"
        keys.clear()
        by_workers.clear()
        ingest([tmp_path / "logs"], store, workers=readers, block_bytes=1 << 16)

        manifest = json.loads((store / "manifest.json").read_text())
        sources = Counter(manifest["files"][k]["source"].rsplit("/", 1)[-1] for k in keys)
        assert set(sources) == set(by_workers) and sources[largest] >= 2
        flushes[readers] = sources[largest]
        assert events(store).equals(events(tmp_path / "serial"))
        assert _entries(store) == _entries(tmp_path / "serial")
        assert not (store / "_staging").exists()
        assert all(held == said for held, said in _part_records(store))
    assert flushes[4] == flushes[2]


def test_a_workers_flushes_record_the_parsers_state_at_their_end_as_reading_here_does(
        tmp_path, monkeypatch, thread_workers):
    """Each flush a worker commits says where the file was read to and the parser's state
    there (the manifest's entry, and the next part's roll-back point, which a resume or a
    repair starts from): the state at that flush's end, as reading the file alone here
    records it at the same flushes, not the state at the file's end."""
    from servelens.pipeline.simulate import simulate

    simulate("llamacpp", "steady", "20m", seed=7, out_dir=tmp_path / "sim", instances=2)
    logs = tmp_path / "logs"
    for log in sorted((tmp_path / "sim").glob("*.log")):
        write(logs / log.name, log.read_bytes())
    largest = max(logs.iterdir(), key=lambda p: p.stat().st_size)
    monkeypatch.setattr(workers_mod, "WORKER_MIN_BYTES", 0)
    monkeypatch.setattr(ingest_mod, "FLUSH_ROWS", 2_000)  # a worker flushes at half of it
    ingest([logs], tmp_path / "store", workers=2, block_bytes=1 << 18)
    # the largest file alone here, flushing as often as the worker did
    monkeypatch.setattr(ingest_mod, "FLUSH_ROWS", 1_000)
    monkeypatch.setattr(ingest_mod, "FLUSH_BYTES", ingest_mod.FLUSH_BYTES // 2)
    ingest([largest], tmp_path / "serial", workers=1, block_bytes=1 << 18)

    def roll_back_points(store):
        m = json.loads((store / "manifest.json").read_text())
        key = next(k for k, e in m["files"].items() if e["source"].endswith(largest.name))
        points = sorted((src["from"]["offset"], json.dumps(src["from"]["ctx"], sort_keys=True))
                        for info in m["part_info"].values() for k, src in info["sources"].items()
                        if k == key and src["from"] is not None)
        return points, m["files"][key]["ctx"]

    points, final = roll_back_points(tmp_path / "store")
    assert len(points) >= 2 and len({ctx for _, ctx in points}) >= 2  # (the state moves on in the file)
    assert (points, final) == roll_back_points(tmp_path / "serial")


def test_files_read_beside_workers_keep_the_plain_block(tmp_path, monkeypatch, by_workers, thread_workers):
    """A long plain file read alone takes PLAIN_BLOCK_SCALE times the default block; read
    side by side with workers, each reader keeps the plain block, so that the readers
    together hold no more than one ingest's blocks would at twice the size."""
    monkeypatch.setattr(ingest_mod, "DEFAULT_BLOCK_BYTES", 64 * 1024)
    logs = _logs(tmp_path)
    assert all(log.stat().st_size > 64 * 1024 for log in logs)
    real, scales = ingest_mod._open_file, {}

    def spy(path, *args, **kw):
        opened = real(path, *args, **kw)
        scales[path.name] = opened.block_scale
        return opened

    monkeypatch.setattr(ingest_mod, "_open_file", spy)
    ingest([tmp_path / "logs"], tmp_path / "side", workers=2)
    assert by_workers and set(scales.values()) == {1.0} and len(scales) == len(logs)
    scales.clear()
    ingest([tmp_path / "logs"], tmp_path / "alone", workers=1)
    assert set(scales.values()) == {ingest_mod.PLAIN_BLOCK_SCALE} and len(scales) == len(logs)
    cols = ["source", "line", "event", "ts", "request_id"]
    side = run(tmp_path / "side", f"select {', '.join(cols)} from events order by all")
    alone = run(tmp_path / "alone", f"select {', '.join(cols)} from events order by all")
    assert side.height == alone.height > 0 and side.equals(alone)
