"""A part whose bytes are not the ones its commit wrote is never read as data: a flipped
bit, a rewrite of the same size, a missing part found by the next writer. The truth is the
store as it was before the damage: after the fault is found and the logs are read again,
exactly those events, no more, no fewer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from tests.store.test_store_integrity import all_events, cli, ingest_once

from servelens.pipeline import ingest as ingest_mod
from servelens.pipeline.store.manifest import committed_parts, read_manifest

SAMPLES = Path(__file__).parents[2] / "sample_logs"


def lines_in(logs: Path) -> int:
    """Lines of the logs, counted without servelens."""
    return sum(p.read_bytes().count(b"\n") for p in logs.rglob("*.log"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The logs and the store ingested from them, once per module: each test damages a copy
    of the store (`store`); the logs are only read."""
    base = tmp_path_factory.mktemp("checksums")
    d = base / "logs"
    for sub in ("vllm/real", "tgi/real"):
        for p in (SAMPLES / sub).glob("*.log"):
            dest = d / sub.replace("/", "_") / p.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(p.read_bytes())
    ingest_once(d, base)
    return base


@pytest.fixture
def logs(built):
    return built / "logs"


@pytest.fixture
def store(tmp_path, built, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ingest_mod, "FLUSH_ROWS", 700)  # a re-ingest commits as the first did
    s = tmp_path / "store"
    shutil.copytree(built / "store", s)  # with the parts' times, as the ingest left them
    return s


def biggest_part(store: Path) -> str:
    m = read_manifest(store)
    return max(m["parts"], key=lambda p: m["part_info"][p]["rows"])


def rows_now(store: Path) -> int:
    """Rows the manifest commits now; the tailer may compact a part away between the listing
    and the read, which counts as not yet."""
    try:
        return len(pl.read_parquet(committed_parts(store)))
    except FileNotFoundError:
        return -1


def flip_a_bit(path: Path, keep_mtime: bool = False) -> None:
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside a data page, far from the footer
    path.write_bytes(bytes(data))
    assert path.stat().st_size == st.st_size
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_every_part_records_its_size_and_checksum(store):
    import zlib

    m = read_manifest(store)
    for rel in m["parts"]:
        info, data = m["part_info"][rel], (store / rel).read_bytes()
        assert info["size"] == len(data)
        assert info["crc32"] == f"{zlib.crc32(data):08x}"


def test_a_flipped_bit_is_refused_then_repaired_exactly(store, logs):
    before = all_events(store)
    assert int(before.height) >= lines_in(logs) * 0.5  # the store holds real data
    victim = biggest_part(store)
    flip_a_bit(store / victim)
    r = cli("sql", "select count(*) from events", "--store", str(store))
    assert r.exit_code == 1
    assert victim in r.stderr and "content changed since it was committed" in r.stderr
    r = cli("check", "--store", str(store))
    assert r.exit_code != 0 and victim in r.output
    r = cli("repair", "--store", str(store))
    assert r.exit_code == 0, r.output
    assert cli("check", "--store", str(store)).exit_code == 0
    assert cli("ingest", str(logs), "--store", str(store), "-q").exit_code == 0
    assert all_events(store).equals(before)


def test_check_reads_every_checksum_even_when_the_time_was_kept(store):
    """Reads trust a part whose size and time are the committed ones; check does not."""
    victim = biggest_part(store)
    flip_a_bit(store / victim, keep_mtime=True)
    r = cli("check", "--store", str(store))
    assert r.exit_code != 0 and victim in r.output and "checksum" in r.output


def test_the_next_ingest_rolls_back_a_missing_part_itself(store, logs):
    """Without repair: the writer sees the part is gone, says so, and reads its lines again."""
    before = all_events(store)
    victim = biggest_part(store)
    (store / victim).unlink()
    r = cli("ingest", str(logs), "--store", str(store))
    assert r.exit_code == 0, r.output
    assert f"part {victim} is missing: dropped" in r.stderr
    assert cli("check", "--store", str(store)).exit_code == 0
    assert all_events(store).equals(before)


def test_the_next_ingest_rolls_back_a_damaged_part_itself(store, logs):
    before = all_events(store)
    victim = biggest_part(store)
    flip_a_bit(store / victim)
    r = cli("ingest", str(logs), "--store", str(store))
    assert r.exit_code == 0, r.output
    assert f"part {victim} is damaged" in r.stderr
    assert all_events(store).equals(before)


def test_compact_refuses_to_merge_a_damaged_part(store):
    m = read_manifest(store)
    victim = m["parts"][0]
    flip_a_bit(store / victim)
    r = cli("compact", "--store", str(store))
    assert r.exit_code == 1 and victim in r.stderr and "servelens repair" in r.stderr
    assert read_manifest(store)["parts"] == m["parts"]
    assert not list((store / "_staging").rglob("*.parquet")) if (store / "_staging").exists() else True


def test_prune_refuses_a_damaged_store(store):
    m = read_manifest(store)
    (store / m["parts"][0]).unlink()
    r = cli("prune", "--store", str(store), "--before", "2100-01-01")
    assert r.exit_code == 1 and m["parts"][0] in r.stderr
    assert read_manifest(store)["parts"] == m["parts"]


def test_a_copy_without_its_times_reads_the_same(store, tmp_path):
    """Times are a shortcut, not the truth: a copy whose times changed reads its checksums
    and answers."""
    copy = tmp_path / "copy"
    shutil.copytree(store, copy, copy_function=shutil.copyfile)
    want = cli("sql", "select count(*) as n from events", "--store", str(store), "-f", "csv").stdout
    r = cli("sql", "select count(*) as n from events", "--store", str(copy), "-f", "csv")
    assert r.exit_code == 0 and r.stdout == want and int(want.split()[1]) > 0
    assert cli("check", "--store", str(copy)).exit_code == 0


def _times_differ(store: Path) -> list[str]:
    """The parts whose time on disk is not the one their commit recorded (stat, not servelens)."""
    m = read_manifest(store)
    return [p for p in m["parts"] if (store / p).stat().st_mtime_ns != m["part_info"][p]["mtime_ns"]]


def test_repair_records_the_times_of_a_copy_made_without_them(store, tmp_path):
    """A copy's parts are read whole by every read until their times are recorded again;
    `repair` records them for the intact parts only, and a part changed after that is still
    found."""
    copy = tmp_path / "copy"
    shutil.copytree(store, copy, copy_function=shutil.copyfile)
    parts = read_manifest(copy)["parts"]
    assert len(_times_differ(copy)) == len(parts) > 1
    damaged = copy / biggest_part(copy)
    flip_a_bit(damaged)
    r = cli("repair", "--store", str(copy))
    assert r.exit_code == 0, r.stderr
    assert f"recorded the modification times of {len(parts) - 1:,} intact part(s)" in r.stdout
    assert _times_differ(copy) == []  # (the damaged part was dropped, not retimed)
    assert str(damaged.relative_to(copy)) not in read_manifest(copy)["parts"]
    flip_a_bit(copy / read_manifest(copy)["parts"][0])
    r = cli("sql", "select count(*) from events", "--store", str(copy))
    assert r.exit_code == 1 and "content changed since it was committed" in r.stderr


def test_the_next_ingest_records_the_times_of_a_copy_made_without_them(store, logs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy, copy_function=shutil.copyfile)
    want = all_events(store)
    assert _times_differ(copy)
    r = cli("ingest", str(logs), "--store", str(copy), "-q")
    assert r.exit_code == 0, r.stderr
    assert _times_differ(copy) == []
    assert all_events(copy).equals(want)


def test_tail_rolls_back_a_missing_part_itself(store, logs):
    import threading
    import time

    from servelens.pipeline.tail.tailer import tail

    before = all_events(store)
    victim = biggest_part(store)
    (store / victim).unlink()
    said: list[str] = []
    stop = threading.Event()
    runner_thread = threading.Thread(target=tail, args=([logs], store),
                                     kwargs={"say": said.append, "stop": stop, "flush_interval": 0.2})
    runner_thread.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and rows_now(store) < before.height:
            time.sleep(0.2)
    finally:
        stop.set()
        runner_thread.join()
    assert any(f"part {victim} is missing: dropped" in s for s in said), said
    assert all_events(store).equals(before)
