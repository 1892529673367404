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
from servelens.pipeline.store import committed_parts
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
    ingest([log], tmp_path / "store", block_bytes=block)
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
    ingest([log], tmp_path / "small", block_bytes=20_000)  # about 30 blocks
    ingest([log], tmp_path / "whole")  # one block
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
    ingest([log], tmp_path / "store", block_bytes=8_000)
    with log.open("a") as f:
        f.write("\n".join(lines[1000:]) + "\n")
    m2 = m1 + dt.timedelta(hours=3)  # not when line 3000 was written: the first anchor stands
    os.utime(log, (m2.timestamp(), m2.timestamp()))
    ingest([log], tmp_path / "store", block_bytes=8_000)
    ts = stored(tmp_path / "store")["ts"].to_list()
    assert len(ts) == 3000
    assert ts[999] == m1 and ts[2999] == m1 + dt.timedelta(seconds=200)
