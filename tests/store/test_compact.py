"""Compaction merges small parts into few, keeps every row exactly once, and never shows a
reader a gap or a duplicate while it runs."""

from __future__ import annotations

import datetime as dt
import threading

import polars as pl
import pytest
from typer.testing import CliRunner

from servelens.parsers.text import parse_text
from servelens.pipeline.store import commit as store_mod
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.store.compact import compact, plan
from servelens.pipeline.query.connect import QueryError, run, run_on
from servelens.pipeline.query.connect import connect
from servelens.pipeline.store.commit import Store, new_txid
from servelens.pipeline.store.manifest import committed_parts

if not any((c.callback and c.callback.__name__ == "compact") for c in app.registered_commands):
    build_app()


def fill(root, n_commits: int, per_commit: int = 5) -> int:
    """n_commits small commits over two days (two partitions)."""
    with Store.open(root) as st:
        for c in range(n_commits):
            text = "".join(f"commit {c} row {i}\n" for i in range(per_commit))
            ev = parse_text("unknown", text, source=f"s{c % 3}.log")
            day = dt.datetime(2026, 5, 12 + c % 2, 8, 0, c, tzinfo=dt.timezone.utc)
            ev = ev.with_columns(pl.lit(day, pl.Datetime("us", "UTC")).alias("ts"), (pl.col("line") + 100 * c).alias("line"))
            st.commit(st.stage_events(ev, new_txid()), files={})
    return n_commits * per_commit


ALL = "select source, line, message from events order by source, line"


def test_compaction_keeps_every_row_once(tmp_path):
    root = tmp_path / "store"
    n = fill(root, 20)
    before = run(root, ALL)
    assert len(committed_parts(root)) == 20 and before.height == n
    with Store.open(root) as st:
        result = compact(st, min_parts=2)
    assert (result.parts_before, result.parts_after, result.merged, result.rows) == (20, 2, 20, n)
    after = run(root, ALL)
    assert after.equals(before)
    assert sorted(p.parent.name for p in committed_parts(root)) == ["day=2026-05-12", "day=2026-05-13"]
    # the merged part is sorted like every part the store writes
    merged = pl.read_parquet(committed_parts(root)[0])
    assert merged["line"].is_sorted()


def test_removed_parts_leave_events_at_once_and_garbage_after_the_grace_period(tmp_path, monkeypatch):
    """A directory glob over events/ (what another engine does) never counts a row twice,
    not even right after a compaction; the replaced parts wait under _garbage/ for the grace
    period, then go."""
    import duckdb

    root = tmp_path / "store"
    fill(root, 6)
    old = committed_parts(root)
    con = connect(root)  # a reader that took the part list before compaction
    with Store.open(root) as st:
        compact(st, min_parts=2)
    glob = f"{root}/events/**/*.parquet"
    assert duckdb.connect().execute(f"select count(*) from read_parquet('{glob}', hive_partitioning = true)").fetchone()[0] == 30
    assert not any(p.exists() for p in old)
    garbage = [root / "_garbage" / p.relative_to(root) for p in old]
    assert all(g.exists() for g in garbage)
    # the old connection's parts are gone: it says so (a fresh query reads the manifest again)
    with pytest.raises(QueryError, match="No such file|No files found"):
        run_on(con, "select count(*) from events")
    con.close()
    assert run(root, "select count(*) from events").item() == 30
    monkeypatch.setattr(store_mod, "GARBAGE_GRACE_S", 0.0)
    with Store.open(root) as st:
        st.commit([], files={})  # any later commit collects expired garbage
        assert st.manifest["garbage"] == []
    assert not any(g.exists() for g in garbage)
    assert run(root, "select count(*) from events").item() == 30


def test_readers_never_see_a_gap_or_a_duplicate(tmp_path):
    root = tmp_path / "store"
    n = fill(root, 12, per_commit=3)
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                seen.append(run(root, "select count(*), count(distinct message) from events").row(0))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    commits = 0
    try:
        with Store.open(root) as st:
            commit = st.commit

            def commit_then_let_a_reader_in(*a, **kw):
                nonlocal commits
                commit(*a, **kw)
                commits += 1
                reads = len(seen) + len(errors)
                for _ in range(2000):  # the reader also runs while the next merge is written (a read a commit overtook starts again)
                    if len(seen) + len(errors) > reads:
                        break
                    stop.wait(0.01)

            st.commit = commit_then_let_a_reader_in
            # small targets: many merge commits, then merges of merges
            size = max(p.stat().st_size for p in committed_parts(root))
            for target in (int(2.5 * size), 10**9):
                compact(st, min_parts=2, target_bytes=target)
    finally:
        stop.set()
        t.join()
    assert errors == []
    assert commits >= 4 and len(seen) >= commits and set(seen) == {(n, n)}
    assert len(committed_parts(root)) == 2


def test_plan_leaves_large_parts_and_lonely_parts_alone(tmp_path):
    root = tmp_path / "store"
    fill(root, 3)  # day 12: two parts, day 13: one part
    with Store.open(root) as st:
        groups = plan(st, min_parts=2)
        assert len(groups) == 1 and len(groups[0]) == 2
        assert plan(st, min_parts=2, small_bytes=1) == []


def test_compact_command(tmp_path):
    root = tmp_path / "store"
    fill(root, 4)
    runner = CliRunner()
    r = runner.invoke(app, ["compact", "--store", str(root)])
    assert r.exit_code == 0, r.output
    assert "4 parts merged into 2; 4 -> 2 parts" in r.stdout
    r = runner.invoke(app, ["compact", "--store", str(tmp_path / "nothing")])
    assert r.exit_code == 1 and "not a servelens store" in r.stderr
    with Store.open(root, purpose="tail"):
        r = runner.invoke(app, ["compact", "--store", str(root)])
    assert r.exit_code == 1 and "in use by servelens tail" in r.stderr and "compacts the store itself" in r.stderr
