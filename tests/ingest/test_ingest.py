"""Batch ingest: idempotence, growth, gzip, rotation copies, chunking, multi-line records,
year inference. Driven through the library API with the test-only `fake` engine."""

from __future__ import annotations

import datetime as dt
import gzip
import os
import shutil

import polars as pl
import pytest
from tests.helpers.common import events, write

from servelens.pipeline.ingest import ingest as _ingest


def ingest(*args, **kw):
    """The library ingest without the rollup refresh after each commit: these tests read
    the events (and the ingest's own counts), not the rollups (the layout test, which
    counts their files, calls the default)."""
    return _ingest(*args, rollups=False, **kw)


def fake_lines(n: int, start: int = 0) -> str:
    return "".join(f"FAKE 06-10 14:{(i // 60) % 60:02d}:{i % 60:02d} INFO message {i}\n" for i in range(start, start + n))


def test_reingest_adds_nothing(tmp_path, fake_engine):
    log = write(tmp_path / "logs" / "a.log", fake_lines(100))
    store = tmp_path / "store"
    first = ingest([log.parent], store)
    assert first.lines == 100 and first.events == 100
    assert first.files[0].engine == "fake"
    again = ingest([log.parent], store)
    assert again.lines == 0 and again.files[0].status == "unchanged"
    df = events(store)
    assert df.height == 100
    assert df["line"].to_list() == list(range(1, 101))
    assert df["message"][7] == "message 7"


def test_grown_file_adds_exactly_the_new_lines(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", fake_lines(50))
    store = tmp_path / "store"
    ingest([log], store)
    with open(log, "a") as f:
        f.write(fake_lines(30, start=50))
    grown = ingest([log], store)
    assert grown.lines == 30
    df = events(store)
    assert df.height == 80
    assert df["line"].to_list() == list(range(1, 81))
    assert df["message"].to_list() == [f"message {i}" for i in range(80)]


def test_gzip_input_and_rotated_gzip_copy_is_not_ingested_twice(tmp_path, fake_engine):
    text = fake_lines(200)
    plain = write(tmp_path / "live" / "a.log", text)
    store = tmp_path / "store"
    ingest([plain], store)
    # logrotate: a.log -> a.log.1.gz (same content, compressed)
    rotated = tmp_path / "rotated" / "a.log.1.gz"
    rotated.parent.mkdir()
    with gzip.open(rotated, "wb") as f:
        f.write(text.encode())
    res = ingest([rotated], store)
    assert res.lines == 0 and res.files[0].status == "unchanged"
    assert events(store).height == 200
    # a gzip file never seen before is read through its decompressed content
    other = tmp_path / "other" / "b.log.gz"
    other.parent.mkdir()
    with gzip.open(other, "wb") as f:
        f.write(fake_lines(10, start=500).encode())
    res = ingest([other], store)
    assert res.lines == 10
    df = events(store).filter(pl.col("instance") == "b")
    assert df["message"].to_list() == [f"message {i}" for i in range(500, 510)]


def test_same_first_bytes_but_different_files_are_both_kept(tmp_path, fake_engine):
    banner = fake_lines(100)  # both instances print the same start-up lines
    a = write(tmp_path / "a.log", banner + "FAKE 06-10 15:00:00 INFO only in a\n")
    b = write(tmp_path / "b.log", banner + "FAKE 06-10 15:00:00 INFO only in b\n")
    store = tmp_path / "store"
    ingest([a, b], store)
    df = events(store)
    assert df.height == 202
    assert set(df.filter(pl.col("line") == 101)["message"]) == {"only in a", "only in b"}


def test_copy_of_an_ingested_file_adds_nothing(tmp_path, fake_engine):
    a = write(tmp_path / "a.log", fake_lines(40))
    store = tmp_path / "store"
    ingest([a], store)
    copy = tmp_path / "copy" / "a.log"
    copy.parent.mkdir()
    shutil.copy(a, copy)
    assert ingest([copy], store).lines == 0
    assert events(store).height == 40


@pytest.mark.parametrize("block_bytes", [64, 1000, 1 << 20])
def test_multiline_records_are_one_event_across_chunk_boundaries(tmp_path, fake_engine, block_bytes):
    body = []
    for i in range(30):
        body.append(f"FAKE 06-10 14:00:{i:02d} INFO message {i}\n")
        if i % 7 == 3:
            body.append("  Traceback (most recent call last):\n")
            body.append('    File "x.py", line 1, in <module>\n')
            body.append("  ValueError: boom\n")
    log = write(tmp_path / "a.log", "".join(body))
    store = tmp_path / "store"
    res = ingest([log], store, block_bytes=block_bytes)
    assert res.lines == 30 + 4 * 3
    df = events(store)
    assert df.height == 30
    multi = df.filter(pl.col("n_lines") > 1)
    assert multi["message"].to_list() == [f"message {i}" for i in (3, 10, 17, 24)]
    assert multi["n_lines"].to_list() == [4, 4, 4, 4]
    assert multi["event"].unique().to_list() == ["error"]
    # every physical line is covered exactly once
    covered = sorted(k for line, n in df.select("line", "n_lines").iter_rows() for k in range(line, line + n))
    assert covered == list(range(1, res.lines + 1))


def test_year_from_mtime_and_rollover_inside_a_file(tmp_path, fake_engine):
    text = (
        "FAKE 12-31 23:59:58 INFO last of the year\n"
        "[continuation-free line without a time]\n"
        "FAKE 01-01 00:00:01 INFO first of the next\n"
        "FAKE 01-01 00:00:02 INFO and on\n"
    )
    mtime = dt.datetime(2026, 1, 1, 0, 5, tzinfo=dt.timezone.utc).timestamp()
    log = write(tmp_path / "a.log", text, mtime=mtime)
    store = tmp_path / "store"
    ingest([log], store)
    df = events(store)
    ts = df["ts"].to_list()
    assert ts[0] == dt.datetime(2025, 12, 31, 23, 59, 58, tzinfo=dt.timezone.utc)
    # a line with no time of its own takes the previous one, flagged
    assert ts[1] == ts[0] and df["ts_inferred"].to_list() == [False, True, False, False]
    assert ts[2] == dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)
    assert df["event"][1] == "unparsed"


def test_year_option_overrides_mtime(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", "FAKE 06-10 14:23:45 INFO hello\n")
    store = tmp_path / "store"
    ingest([log], store, year=2024)
    assert events(store)["ts"][0] == dt.datetime(2024, 6, 10, 14, 23, 45, tzinfo=dt.timezone.utc)


def test_rollover_state_survives_a_resumed_ingest(tmp_path, fake_engine):
    mtime = dt.datetime(2026, 1, 2, tzinfo=dt.timezone.utc).timestamp()
    log = write(tmp_path / "a.log", "FAKE 12-31 23:00:00 INFO a\nFAKE 01-01 01:00:00 INFO b\n", mtime=mtime)
    store = tmp_path / "store"
    ingest([log], store)
    with open(log, "a") as f:
        f.write("FAKE 01-02 02:00:00 INFO c\n")
    ingest([log], store)
    assert [t.year for t in events(store)["ts"]] == [2025, 2026, 2026]


def test_engine_is_detected_per_file_and_unknown_files_are_kept(tmp_path, fake_engine):
    write(tmp_path / "logs" / "fake.log", fake_lines(5))
    write(tmp_path / "logs" / "other.txt", "some line\nanother line\n")
    store = tmp_path / "store"
    res = ingest([tmp_path / "logs"], store)
    by_name = {f.source.rsplit("/", 1)[-1]: f for f in res.files}
    assert by_name["fake.log"].engine == "fake"
    assert by_name["other.txt"].engine == "unknown"
    df = events(store).filter(pl.col("engine") == "unknown")
    assert df["event"].to_list() == ["unparsed", "unparsed"]
    assert df["message"].to_list() == ["some line", "another line"]


def test_instance_option_and_default_from_path(tmp_path, fake_engine):
    write(tmp_path / "vllm-a.log.1", fake_lines(1))
    write(tmp_path / "pods" / "web-0" / "0.log", fake_lines(1, start=1))
    store = tmp_path / "store"
    ingest([tmp_path], store)
    assert sorted(events(store)["instance"].to_list()) == ["vllm-a", "web-0"]
    write(tmp_path / "x" / "c.log", fake_lines(1, start=2))
    ingest([tmp_path / "x"], store, instance="gpu-3")
    assert "gpu-3" in events(store)["instance"].to_list()


def test_unterminated_last_line_of_a_finished_file_is_kept(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", "FAKE 06-10 14:00:00 INFO a\nFAKE 06-10 14:00:01 INFO b")
    store = tmp_path / "store"
    assert ingest([log], store).lines == 2


def test_unterminated_last_line_of_a_live_file_waits(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", "FAKE 06-10 14:00:00 INFO a\nFAKE 06-10 14:00:01 INFO b", age_s=0)
    store = tmp_path / "store"
    first = ingest([log], store)
    assert first.lines == 1
    # the summary says what waits: the bytes after the last newline
    assert first.files[0].held_bytes == len("FAKE 06-10 14:00:01 INFO b")
    with open(log, "a") as f:
        f.write("cd\n")
    again = ingest([log], store)
    assert again.lines == 1 and again.files[0].held_bytes == 0
    assert events(store)["message"].to_list() == ["a", "bcd"]


def test_a_byte_order_mark_is_no_part_of_the_first_line(tmp_path, fake_engine):
    # a log or an export saved by a Windows tool opens with U+FEFF
    text = "FAKE 06-10 14:00:00 INFO a\nFAKE 06-10 14:00:01 INFO b\n"
    log = tmp_path / "a.log"
    log.write_bytes("\ufeff".encode() + text.encode())
    os.utime(log, (1_781_100_000, 1_781_100_000))
    store = tmp_path / "store"
    s = ingest([log], store)
    assert (s.files[0].engine, s.lines, s.unparsed) == ("fake", 2, 0)
    assert events(store)["message"].to_list() == ["a", "b"]


def test_store_layout_is_hive_partitioned_parquet(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", fake_lines(3))
    store = tmp_path / "store"
    _ingest([log], store)  # the default: the rollups refreshed after the commit
    parts = sorted(p.relative_to(store).as_posix() for p in store.rglob("*.parquet"))
    # one part of events, and one rollup file per stored view (pipeline/query/rollups.py): the
    # request-derived ones, the sample series, the base width's per-window views, the event
    # catalog and the dashboard's store-wide summaries
    stored = ["batch_fill", "engine_stats", "errors", "event_catalog", "incident_summary", "kv_cache",
              "latency_percentiles", "metric_availability", "queue_depth", "request_state", "requests",
              "scaling_signals", "throughput", "window_metrics", "windows"]
    assert len(parts) == 1 + len(stored)
    assert parts[0].startswith("events/engine=fake/day=")
    assert [p.split("/")[1].split("-")[0] for p in parts[1:]] == stored
    assert all(p.startswith("rollups/") for p in parts[1:])
    assert not (store / "_staging").exists()


@pytest.mark.parametrize("gz", [False, True])
def test_checkpoints_hash_the_bytes_as_read_without_reading_the_file_again(tmp_path, fake_engine, monkeypatch, gz):
    """Each chunk's checkpoint hashes the 4 KiB before its offset. They come from the
    stream being parsed: reading them again would decompress a .gz from its start at every
    chunk (quadratic in the file's size). The hashes equal what the file holds there."""
    from servelens.pipeline.sources import fingerprint as fp
    from servelens.pipeline.store.manifest import read_manifest

    text = fake_lines(3000)
    path = tmp_path / ("a.log.gz" if gz else "a.log")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(text.encode())
        os.utime(path, (path.stat().st_mtime - 3600,) * 2)
    else:
        write(path, text)
    store = tmp_path / "store"
    reads = []
    real_read_range = fp.read_range
    monkeypatch.setattr(fp, "read_range", lambda *a, **k: reads.append(a) or real_read_range(*a, **k))
    res = ingest([path], store, block_bytes=8192)
    assert res.lines == 3000
    assert reads == []  # 12 chunks, not one re-read
    entry = next(iter(read_manifest(store)["files"].values()))
    monkeypatch.setattr(fp, "read_range", real_read_range)
    assert entry["offset"] == len(text.encode())
    assert (entry["tail_sha"], entry["tail_len"]) == fp.tail_check(path, entry["offset"])
    # and the file is known by it: a second ingest adds nothing
    assert ingest([path], store).lines == 0


def test_many_small_files_grown_past_their_first_bytes_add_exactly_the_new_lines(tmp_path, fake_engine):
    """Files of many different lengths under HEAD_BYTES, each found again by its first
    bytes once it has grown past them (and a copy of one found as the same content)."""
    logs = tmp_path / "logs"
    for n in range(1, 41):
        write(logs / f"f{n:02d}.log", fake_lines(n, start=n * 1000))
    store = tmp_path / "store"
    assert ingest([logs], store).lines == sum(range(1, 41))
    for n in range(1, 41, 3):  # a third of them grow far past 4 KiB
        with open(logs / f"f{n:02d}.log", "a") as f:
            f.write(fake_lines(120, start=n * 1000 + n))
    shutil.copy(logs / "f07.log", logs / "copy-of-f07.log")
    again = ingest([logs], store)
    grown = len(range(1, 41, 3))
    assert again.lines == 120 * grown
    assert sorted(r.status for r in again.files).count("unchanged") == 41 - grown
    df = events(store)
    assert df.height == sum(range(1, 41)) + 120 * grown
    per_file = df.group_by("source").agg(pl.col("line").max())
    assert per_file.height == 40


def test_a_long_plain_file_is_read_in_larger_blocks_by_default(tmp_path, fake_engine, monkeypatch):
    """Without a block given, a file longer than the default block whose block is not scaled
    for a platform download takes PLAIN_BLOCK_SCALE times the default (fewer chunks, each
    paying the parser's fixed cost once); a given block is kept; the events are the same."""
    import servelens.pipeline.ingest as ing

    blocks: list[int] = []
    real = ing.parse_stream

    def spy(*args, **kw):
        blocks.append(kw["block_bytes"])
        return real(*args, **kw)

    monkeypatch.setattr(ing, "parse_stream", spy)
    monkeypatch.setattr(ing, "DEFAULT_BLOCK_BYTES", 4096)
    log = write(tmp_path / "a.log", fake_lines(400))  # longer than 4096 bytes
    assert log.stat().st_size > 4096
    ingest([log], tmp_path / "default")
    ingest([log], tmp_path / "given", block_bytes=4096)
    assert blocks == [int(4096 * ing.PLAIN_BLOCK_SCALE), 4096]
    assert ing.PLAIN_BLOCK_SCALE > 1
    cols = ["line", "n_lines", "event", "message", "ts"]
    assert events(tmp_path / "default").select(cols).equals(events(tmp_path / "given").select(cols))
    small = write(tmp_path / "b.log", fake_lines(10))  # one block either way: not scaled
    assert small.stat().st_size < 4096
    ingest([small], tmp_path / "small")
    assert blocks[-1] == 4096
