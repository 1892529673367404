"""A file rewritten in place with the same size, the same first and last 4 KiB and the same
modification time is another content: ingest and tail read it whole, and the store holds
both contents' lines once, checked against the values written (not against servelens)."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline.tail import tailer as tail_mod
from servelens.pipeline.tail import identity as tail_identity
from servelens.pipeline.ingest import ingest
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets

RUNNING = re.compile(rb"Running: (\d) reqs")


def stats_log(n: int, seed: int) -> bytes:
    """vLLM stats lines, one event each, whose `Running` values the test sums itself."""
    rnd = random.Random(seed)
    return b"".join(
        f"INFO 06-10 14:{(i // 60) % 60:02d}:{i % 60:02d} metrics.py:341] Avg prompt throughput: "
        f"{rnd.randint(10, 99)}.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: "
        f"{rnd.randint(1, 9)} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: "
        f"0.{rnd.randint(1, 9)}%, CPU KV cache usage: 0.0%.\n".encode()
        for i in range(n)
    )


def rewrite_middle(path: Path) -> bytes:
    """Change every `Running` value of the middle third, in place: same size, same ends,
    the modification time put back."""
    old = path.read_bytes()
    st = os.stat(path)
    a, z = len(old) // 3, 2 * len(old) // 3
    mid = RUNNING.sub(lambda m: b"Running: %d reqs" % (int(m.group(1)) % 9 + 1), old[a:z])
    new = old[:a] + mid + old[z:]
    assert len(new) == len(old) and new != old and new[:4096] == old[:4096] and new[-4096:] == old[-4096:]
    with open(path, "r+b") as f:
        f.write(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return new


def running_sum(data: bytes) -> int:
    return sum(int(v) for v in RUNNING.findall(data))


def stored(store_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(committed_parts(store_dir), hive_partitioning=True)


def test_ingest_reads_a_same_size_rewrite(tmp_path):
    log = tmp_path / "vllm.log"
    first = stats_log(3000, 1)
    log.write_bytes(first)
    os.utime(log, (1_700_000_000, 1_700_000_000))  # not live: the whole file is read
    ingest([log], tmp_path / "store", rollups=False)
    second = rewrite_middle(log)
    s = ingest([log], tmp_path / "store", rollups=False)
    assert s.lines == 3000
    ev = stored(tmp_path / "store")
    assert ev.height == 6000
    assert ev["running"].sum() == running_sum(first) + running_sum(second)
    # nothing new the third time: the rewritten content is known now
    assert ingest([log], tmp_path / "store", rollups=False).lines == 0
    assert stored(tmp_path / "store").height == 6000


def test_ingest_after_an_older_entry_without_a_checksum(tmp_path):
    """Entries written before checksums: the next read of the file records one, and a later
    same-size rewrite is then told."""

    log = tmp_path / "vllm.log"
    first = stats_log(2000, 2)
    log.write_bytes(first[: len(first) // 2])
    os.utime(log, (1_700_000_000, 1_700_000_000))
    ingest([log], tmp_path / "store", rollups=False)
    mpath = tmp_path / "store" / "manifest.json"


    m = json.loads(mpath.read_text())
    for entry in m["files"].values():
        entry.pop("crc", None)
    mpath.write_text(json.dumps(m))
    log.write_bytes(first)
    os.utime(log, (1_700_000_000, 1_700_000_000))
    ingest([log], tmp_path / "store", rollups=False)
    assert "crc" in next(iter(json.loads(mpath.read_text())["files"].values()))
    second = rewrite_middle(log)
    ingest([log], tmp_path / "store", rollups=False)
    ev = stored(tmp_path / "store")
    assert ev.height == 4000
    assert ev["running"].sum() == running_sum(first) + running_sum(second)


@pytest.fixture
def _no_waits(monkeypatch):
    monkeypatch.setattr(tail_mod, "ROTATE_WAIT_S", 0.0)
    monkeypatch.setattr(tail_identity, "COPY_WAIT_S", 0.0)
    monkeypatch.setattr(tail_mod, "GZ_SETTLE_S", 0.0)


def tail_once(logs: Path, store_dir: Path, polls: int = 4) -> None:
    store = Store.open(store_dir, purpose="tail")
    tailer = Tailer(store, Targets([logs], None, skip_under=store_dir), engine="auto", quiet_s=0.0,
                    compact_min_parts=0)
    tailer.say = lambda m: None
    for _ in range(polls):
        tailer.poll_once(rescan=True)
    tailer.close()
    store.close()


def test_tail_restarted_after_a_same_size_rewrite_reads_it_whole(tmp_path, _no_waits):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "vllm.log"
    first = stats_log(3000, 3)
    log.write_bytes(first)
    tail_once(logs, tmp_path / "store")
    assert stored(tmp_path / "store").height == 3000
    second = rewrite_middle(log)
    tail_once(logs, tmp_path / "store")
    ev = stored(tmp_path / "store")
    assert ev.height == 6000
    assert ev["running"].sum() == running_sum(first) + running_sum(second)
    # and ingest agrees that both contents are read: nothing more
    assert ingest([log], tmp_path / "store", rollups=False).lines == 0


def test_tail_then_ingest_of_the_grown_file_adds_only_the_new_lines(tmp_path, _no_waits):
    """The checksum the tailer records continues over what it read: ingest of the file grown
    since resumes it (no false 'rewritten')."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "vllm.log"
    data = stats_log(3000, 4)
    log.write_bytes(data[: len(data) // 3])
    tail_once(logs, tmp_path / "store")
    with open(log, "ab") as f:
        f.write(data[len(data) // 3: 2 * len(data) // 3])
    tail_once(logs, tmp_path / "store")
    with open(log, "ab") as f:
        f.write(data[2 * len(data) // 3:])
    os.utime(log, (1_700_000_000, 1_700_000_000))
    ingest([log], tmp_path / "store", rollups=False)
    ev = stored(tmp_path / "store")
    assert ev.height == 3000
    assert ev["running"].sum() == running_sum(data)
    assert ev["line"].sort().to_list() == list(range(1, 3001))
