"""llama.cpp relative times in files longer than one read block: ingest's first pass
(`llamacpp.scan_file`) anchors every chunk from the file's end, so the times equal the
simulator's truth however the file is cut, through restarts, and a grown file keeps the
anchor it was first read with."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline.ingest import ingest
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.simulate import simulate

UTC = dt.timezone.utc


def stored(store: Path) -> pl.DataFrame:
    return pl.read_parquet(committed_parts(store)).sort("source", "line")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    summary = simulate("llamacpp", "spike", "240s", 5, out, variant="v2026", instances=1)
    (name,) = summary["files"]
    return out / name, pl.read_parquet(out / "truth_requests.parquet")


def test_a_file_of_many_blocks_is_anchored_from_its_end(sim, tmp_path):
    log, truth = sim
    size = log.stat().st_size
    block = size // 9  # the file is read in about nine blocks
    assert size > 4 * block
    ingest([log], tmp_path / "store", block_bytes=block, rollups=False)
    ev = stored(tmp_path / "store")
    assert ev["ts"].null_count() == 0
    req = ev.filter(pl.col("event") == "request")
    ok = truth.filter(pl.col("status") == "ok")
    got = ok.join(req, on="request_id", suffix="_log")
    assert got.height == ok.height == req.height > 100
    # every request ends when the simulator finished it (the log prints times to the us)
    worst = got.select((pl.col("ts") - pl.col("finish_ts")).abs().max()).item()
    assert worst <= dt.timedelta(microseconds=10)


def _two_runs(path: Path) -> dt.datetime:
    """Two process runs (a restart in the middle), 4000 lines each, mtime at the last line."""
    run1 = [f"{i // 600}.{i % 600 // 10:02d}.{i % 10 * 100:03d}.000 I srv  update_slots: run one line {i}" for i in range(4000)]
    run2 = ["0.00.010.000 I build: b7400 (8c6a1f2) with cc (GCC) 13.2.0 for x86_64-linux-gnu"] + [
        f"{i // 600}.{i % 600 // 10:02d}.{i % 10 * 100:03d}.000 I srv  update_slots: run two line {i}" for i in range(1, 4000)]
    path.write_text("\n".join(run1 + run2) + "\n")
    mtime = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
    os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return mtime


def test_a_restart_in_a_later_block_anchors_the_earlier_blocks(tmp_path):
    log = tmp_path / "llama-server.log"
    mtime = _two_runs(log)
    ingest([log], tmp_path / "small", block_bytes=20_000, rollups=False)  # about 30 blocks
    ingest([log], tmp_path / "whole", rollups=False)  # one block
    small, whole = stored(tmp_path / "small"), stored(tmp_path / "whole")
    assert small.height == whole.height == 8000
    assert small["ts"].equals(whole["ts"])
    # the truth by hand: the last line (6 min 39.9 s after the second start) was written at
    # mtime; the first run's last line (6 min 39.9 s) at the second start
    second_start = mtime - dt.timedelta(seconds=399.9)
    ts = small["ts"].to_list()
    assert ts[-1] == mtime and ts[4000] == second_start + dt.timedelta(seconds=0.01)
    assert ts[3999] == second_start and ts[0] == second_start - dt.timedelta(seconds=399.9)


def test_a_grown_file_keeps_its_first_anchor(tmp_path):
    """Read once, then appended to (the same run goes on) and read again in small blocks:
    the new lines follow the anchor of the first read, whatever the mtime is by then."""
    log = tmp_path / "llama-server.log"
    lines = [f"{i // 600}.{i % 600 // 10:02d}.{i % 10 * 100:03d}.000 I srv  update_slots: line {i}" for i in range(3000)]
    log.write_text("\n".join(lines[:1000]) + "\n")
    m1 = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
    os.utime(log, (m1.timestamp(), m1.timestamp()))
    ingest([log], tmp_path / "store", block_bytes=8_000, rollups=False)
    with log.open("a") as f:
        f.write("\n".join(lines[1000:]) + "\n")
    m2 = m1 + dt.timedelta(hours=3)  # not when line 3000 was written: the first anchor stands
    os.utime(log, (m2.timestamp(), m2.timestamp()))
    ingest([log], tmp_path / "store", block_bytes=8_000, rollups=False)
    ts = stored(tmp_path / "store")["ts"].to_list()
    assert len(ts) == 3000
    assert ts[999] == m1 and ts[2999] == m1 + dt.timedelta(seconds=200)


# --- request identity per process run -------------------------------------------------------


def _session(task: int, slot: int, t0: float, e2e_ms: float) -> list[str]:
    """One request's lines in the 2025 text form (timestamps from --log-timestamps)."""
    def at(s: float) -> str:
        us = int(round(s * 1e6))
        return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d} I "
    tag = f"id {slot:2d} | task {task} | "
    return [
        at(t0) + f"slot launch_slot_: {tag}processing task",
        at(t0 + e2e_ms / 1000) + f"slot print_timing: {tag}prompt eval time =     100.00 ms /    10 tokens (   10.00 ms per token,   100.00 tokens per second)",
        at(t0 + e2e_ms / 1000) + f"slot print_timing: {tag}       eval time =     {e2e_ms - 100:.2f} ms /    11 tokens (   10.00 ms per token,   100.00 tokens per second)",
        at(t0 + e2e_ms / 1000) + f"slot print_timing: {tag}      total time =     {e2e_ms:.2f} ms /    21 tokens",
        at(t0 + e2e_ms / 1000) + f"slot      release: {tag}stop processing: n_tokens = 21, truncated = 0",
    ]


def _start(t: float) -> list[str]:
    us = int(t * 1e6)
    pre = f"0.{us // 1_000_000:02d}.{us // 1000 % 1000:03d}.000 I "
    return [pre + "build: b7400 (8c6a1f2) with cc (GCC) 13.2.0 for x86_64-linux-gnu",
            pre + "system info: n_threads = 16, n_threads_batch = 16, total_threads = 32",
            pre + "main: server is listening on http://0.0.0.0:8080"]


def _sql(store: Path, query: str) -> list[str]:
    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app

    res = CliRunner().invoke(app, ["sql", query, "--store", str(store), "--format", "csv"])
    assert res.exit_code == 0, res.output
    return res.output.strip().splitlines()


@pytest.mark.parametrize("block", [None, 700])
def test_task_ids_of_two_process_runs_are_two_requests_each(tmp_path, block):
    """The server restarts and numbers its tasks from 0 again: task 0 and task 1 of each run
    are four requests, not two merged ones, also when a read block ends inside a run."""
    log = tmp_path / "llama-server.log"
    run1 = _start(0.1) + _session(0, 0, 2.0, 1000.0) + _session(1, 1, 3.5, 2000.0)
    run2 = _start(0.2) + _session(0, 0, 3.0, 3000.0) + _session(1, 0, 7.0, 4000.0)
    log.write_text("\n".join(run1 + run2) + "\n")
    t = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    os.utime(log, (t, t))
    store = tmp_path / "store"
    ingest([log], store, **({"block_bytes": block} if block else {}), rollups=False)
    rows = _sql(store, "select request_id, status, e2e_s, output_tokens, line from requests order by line")
    assert rows == [
        "request_id,status,e2e_s,output_tokens,line",
        "0,finished,1.0,11,4", "1,finished,2.0,11,9",
        "0@run2,finished,3.0,11,17", "1@run2,finished,4.0,11,22",
    ]
    # the second run ends at mtime with request 1 (started 4 s before)
    start = _sql(store, "select strftime(arrival_ts, '%H:%M:%S.%f') from requests where request_id = '1@run2'")
    assert start[1] == "11:59:56.000000"


def test_the_first_pass_reads_the_relative_times_the_parser_reads(sim):
    from servelens.parsers.engines.llamacpp import parser as llamacpp

    real = Path(__file__).resolve().parents[2] / "sample_logs" / "llamacpp" / "real"
    texts = [p.read_text() for p in sorted(real.rglob("*.log"))] + [sim[0].read_text()[:200_000]]
    texts.append("\x1b[32m0.01.000.000 I srv  x: y\x1b[0m\n[  42] 3.00.000.001 W slot a: b\n1.2.3.4 no\n")
    for text in texts:
        s = pl.Series(text.splitlines(), dtype=pl.String)
        assert llamacpp._relative(s).equals(llamacpp._header(s)["_rel"], check_names=False)


def test_a_tailer_started_on_a_long_backlog_anchors_it_from_the_end(tmp_path, monkeypatch):
    """`servelens tail` started on an existing log longer than its parse block: the backlog's
    times equal ingest's (the tailer makes the same first pass), through the restart."""
    from servelens.pipeline.tail import tailer as tail_mod
    from servelens.pipeline.store.commit import Store
    from servelens.pipeline.tail.tailer import Tailer
    from servelens.pipeline.tail.watch import Targets

    monkeypatch.setattr(tail_mod, "PARSE_BLOCK_MIN", 20_000)  # the 500 kB log is ~25 parse blocks
    logs = tmp_path / "logs"
    logs.mkdir()
    _two_runs(logs / "llama-server.log")
    ingest([logs / "llama-server.log"], tmp_path / "ingested", rollups=False)
    store = tmp_path / "tailed"
    with Store.open(store, purpose="tail") as st:
        t = Tailer(st, Targets([logs], None, skip_under=store), engine="auto", quiet_s=0.0, compact_min_parts=0)
        for _ in range(10):
            t.poll_once(rescan=True)
        t.close()
    tailed, ingested = stored(store), stored(tmp_path / "ingested")
    assert tailed.height == ingested.height == 8000
    assert tailed["ts"].equals(ingested["ts"])


def test_router_children_number_their_tasks_apart(tmp_path):
    """Router mode: each child (its `[port] ` prefix) is a process numbering its own tasks, and
    one may start while another serves: task 0 of two children is two requests, and a child's
    start does not split the other's request."""
    log = tmp_path / "llama-server.log"
    a = ["[41001] " + x for x in _start(0.1) + _session(0, 0, 2.0, 1000.0)]
    b_start = ["[41002] " + x for x in _start(0.2)]
    b_req = ["[41002] " + x for x in _session(0, 0, 3.0, 2000.0)]
    # child 41002 starts after 41001 took task 0 and before it finished
    lines = a[:4] + b_start + a[4:] + b_req
    log.write_text("\n".join(lines) + "\n")
    t = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    os.utime(log, (t, t))
    ingest([log], tmp_path / "store", rollups=False)
    rows = _sql(tmp_path / "store", "select request_id, status, e2e_s from requests order by request_id")
    assert rows == ["request_id,status,e2e_s", "0@41001,finished,1.0", "0@41002,finished,2.0"]
