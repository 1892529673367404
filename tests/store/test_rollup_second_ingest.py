"""A second ingest of new lines into a store with rollups (pipeline/query/rollups.py): the
rollup files then hold exactly the rows the views compute from the events (the raw views,
which the rollup code does not produce), also for the window the first ingest had already
rolled up and the new lines land in; refreshed at the ingest's end or, with
`--defer-rollups`, by the first query that reads a stored view."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.ingest import ingest
from servelens.pipeline.query import rollups as rollup
from servelens.pipeline.query.connect import connect, run, run_on
from servelens.pipeline.simulate import simulate

build_app()

STAMP = re.compile(rb"^\(APIServer pid=\d+\) INFO (\d\d-\d\d \d\d:\d\d):(\d\d) ")
RECEIVED = re.compile(rb"\] Received request ")


def manifest(store: Path) -> dict:
    return json.loads((store / "manifest.json").read_text())


def stored_rows(store: Path, view: str) -> pl.DataFrame:
    return pl.read_parquet(store / manifest(store)["rollups"][view]["path"])


def raw_rows(store: Path, view: str) -> pl.DataFrame:
    """The view computed from the events (its SQL over every event, no rollup read)."""
    return run(store, f"select * from {view}", rollups=False)


def raw_views(store: Path, queries: dict[str, str] | None = None) -> dict[str, pl.DataFrame]:
    """raw_rows of every stored view, and of `queries` (a view -> a query of it) their raw
    answers, from one connection (the views several others read computed once:
    tests/sql/test_shared_views.py proves the answers the same)."""
    queries = queries or {}
    views = set(rollup.VIEWS) | set(queries)
    con = connect(store, views=views, rollups=False, shared=True)
    try:
        return {**{view: run_on(con, f"select * from {view}") for view in rollup.VIEWS},
                **{name: run_on(con, sql) for name, sql in queries.items()}}
    finally:
        con.close()


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> dict[str, Path]:
    """The simulated logs the tests ingest (only read): two instances for 300 s, one for 120 s."""
    base = tmp_path_factory.mktemp("sims")
    simulate("vllm", "steady", 300, seed=5, out_dir=base / "two", instances=2, rate=4, variant="v1",
             start="2026-05-12T08:00:00Z")
    simulate("vllm", "steady", 120, seed=5, out_dir=base / "one", instances=1, rate=4, variant="v1",
             start="2026-05-12T08:00:00Z")
    return {"two": base / "two", "one": base / "one"}


def utc(df: pl.DataFrame) -> pl.DataFrame:
    """Times in one zone's name (a Parquet file says UTC, DuckDB's session Etc/UTC)."""
    return df.with_columns(pl.col(pl.Datetime(time_zone="*")).dt.convert_time_zone("UTC"))


def same_rows(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns
    a, b = utc(a), utc(b)
    assert_frame_equal(a.sort(a.columns, nulls_last=True), b.sort(b.columns, nulls_last=True),
                       check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


def cut_mid_minute(lines: list[bytes]) -> tuple[int, str]:
    """The index of a `Received request` line past the first half whose second is 20-40 (lines
    of its minute fall on both sides of it), and that minute ("MM-DD HH:MM")."""
    for i in range(len(lines) // 2, len(lines)):
        m = STAMP.match(lines[i])
        if m and RECEIVED.search(lines[i]) and 20 <= int(m.group(2)) <= 40:
            return i, m.group(1).decode()
    raise AssertionError("no request line in the middle of a minute")


def received_in(lines: list[bytes], minute: str) -> int:
    """Requests received in `minute`, counted on the log's own lines."""
    return sum(1 for line in lines if RECEIVED.search(line) and (m := STAMP.match(line)) and m.group(1).decode() == minute)


def refresh_by_query(store: Path) -> None:
    """What the first query reading a stored view does on a store whose ingest deferred it."""
    res = CliRunner().invoke(app, ["sql", "select count(*) from window_metrics", "--store", str(store)])
    assert res.exit_code == 0, res.output
    assert "rollups refreshed now" in res.output


@pytest.mark.parametrize("mode", ["at-ingest", "deferred"])
def test_second_ingest_rolls_up_what_the_views_compute(tmp_path, mode, sims):
    sim = sims["two"]
    a, b = sim / "vllm-a.log", sim / "vllm-b.log"
    lines = b.read_bytes().splitlines(keepends=True)
    cut, minute = cut_mid_minute(lines)
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(a, logs / a.name)
    (logs / b.name).write_bytes(b"".join(lines[:cut]))
    store = tmp_path / "store"
    rollups = True if mode == "at-ingest" else "defer"

    ingest([logs], store, year=2026, rollups=rollups)
    if mode == "deferred":
        assert manifest(store).get("dirty") and "rollups" not in manifest(store)  # nothing computed yet
        refresh_by_query(store)
    first = {v: stored_rows(store, v) for v in rollup.VIEWS}
    raw = raw_views(store)
    for view in rollup.VIEWS:
        same_rows(first[view], raw[view])
    before = first["window_metrics"].filter(pl.col("instance") == "vllm-b")
    # the minute of the cut was rolled up already, from its first lines only
    rolled = before.filter(pl.col("window_start").dt.strftime("%m-%d %H:%M") == minute)
    assert rolled.height == 1 and rolled["arrived"][0] == received_in(lines[:cut], minute) > 0

    with open(logs / b.name, "ab") as f:
        f.write(b"".join(lines[cut:]))
    summary = ingest([logs], store, year=2026, rollups=rollups)
    assert summary.lines == len(lines) - cut
    if mode == "deferred":
        assert summary.rollup is None and manifest(store).get("dirty")
        refresh_by_query(store)
    else:
        assert summary.rollup is not None and not summary.rollup.whole and summary.rollup.instances == 1
    m = manifest(store)
    assert "dirty" not in m and "dirty_all" not in m and "rollups_deferred" not in m
    q = "select * from latency_percentiles order by all"
    raw = raw_views(store, {"latency_percentiles": q})
    for view in rollup.VIEWS:
        same_rows(stored_rows(store, view), raw[view])
    after = stored_rows(store, "window_metrics").filter(pl.col("instance") == "vllm-b")
    # that window now counts the requests of both ingests, as the whole log says
    grown = after.filter(pl.col("window_start").dt.strftime("%m-%d %H:%M") == minute)
    assert grown["arrived"][0] == received_in(lines, minute) > rolled["arrived"][0]
    assert after.height > before.height  # and the windows the new lines opened
    # the untouched instance's rows are carried over as they were
    assert_frame_equal(stored_rows(store, "requests").filter(pl.col("instance") == "vllm-a"),
                       first["requests"].filter(pl.col("instance") == "vllm-a"))
    # and a query through the rollups answers as the raw views do
    assert_frame_equal(run(store, q), raw["latency_percentiles"], check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


def test_a_query_on_a_store_in_use_reads_the_raw_views(tmp_path, sims):
    """A deferred refresh needs the writer's lock: held (a tailer), the query does not wait
    for it and answers from the events. The library's queries (a server's, the dashboard's)
    never run it: only a command's start does."""
    from servelens.pipeline.store.commit import Store

    sim = sims["one"]
    store = tmp_path / "store"
    ingest([sim / "vllm-a.log"], store, year=2026, rollups="defer")
    deferred = manifest(store)
    run(store, "select * from scaling_signals")
    assert manifest(store) == deferred
    with Store.open(store, purpose="tail"):
        assert rollup.refresh_deferred(store, {"window_metrics"}) is None
        raw = run(store, "select * from window_metrics order by all", rollups=False)
        assert_frame_equal(run(store, "select * from window_metrics order by all"), raw)
    assert manifest(store).get("rollups_deferred") and manifest(store).get("dirty")
    assert rollup.refresh_deferred(store, {"events"}) is None  # a query of the events alone needs none
    # nor one of the sample series or the error windows: stored, but cheap to derive from the
    # few events they read (a first question about a log's KV usage does not pay for them all)
    for view in ("engine_stats", "kv_cache", "errors", "windows"):
        assert rollup.refresh_deferred(store, {view}) is None, view
        assert manifest(store).get("rollups_deferred")
        assert_frame_equal(run(store, f"select * from {view} order by all"),
                           run(store, f"select * from {view} order by all", rollups=False))
    assert rollup.refresh_deferred(store, {"scaling_signals"}) is not None
    assert "rollups_deferred" not in manifest(store) and "dirty" not in manifest(store)
    same_rows(stored_rows(store, "window_metrics"), raw)


def test_the_cli_defers_by_default_refreshes_when_asked_and_not_with_rollups_off(tmp_path, monkeypatch, sims):
    sim = sims["one"]
    store = tmp_path / "store"
    runner = CliRunner()
    for flag in ("--defer-rollups", "--refresh-rollups"):
        res = runner.invoke(app, ["ingest", str(sim / "vllm-a.log"), "--store", str(store), "--no-rollups", flag])
        assert res.exit_code != 0 and "exclude each other" in res.output
    res = runner.invoke(app, ["ingest", str(sim / "vllm-a.log"), "--store", str(store)])
    assert res.exit_code == 0 and "first query" in res.output and "refreshed" not in res.output
    monkeypatch.setenv("SERVELENS_NO_ROLLUPS", "1")
    res = runner.invoke(app, ["sql", "select count(*) from window_metrics", "--store", str(store)])
    assert res.exit_code == 0 and "rollups refreshed" not in res.output
    assert manifest(store).get("rollups_deferred")
    monkeypatch.delenv("SERVELENS_NO_ROLLUPS")
    refresh_by_query(store)
    assert "rollups_deferred" not in manifest(store)
    # asked for, the refresh happens before the ingest returns
    now = tmp_path / "now"
    res = runner.invoke(app, ["ingest", str(sim / "vllm-a.log"), "--store", str(now), "--refresh-rollups"])
    assert res.exit_code == 0 and "refreshed" in res.output and "first query" not in res.output
    assert "rollups_deferred" not in manifest(now) and "dirty" not in manifest(now)


def test_a_deferring_ingest_that_commits_nothing_still_marks_a_stale_store(tmp_path, sims):
    """Left stale by an ingest without rollups, then ingested again with --defer-rollups and
    nothing new: the mark is written all the same, and the first query refreshes."""
    sim = sims["one"]
    store = tmp_path / "store"
    ingest([sim / "vllm-a.log"], store, year=2026, rollups=False)
    assert manifest(store).get("dirty") and "rollups_deferred" not in manifest(store)
    assert ingest([sim / "vllm-a.log"], store, year=2026, rollups="defer").lines == 0
    assert manifest(store).get("rollups_deferred")
    refresh_by_query(store)
    same_rows(stored_rows(store, "window_metrics"), raw_rows(store, "window_metrics"))


def test_rollups_of_another_servelens_are_rebuilt_by_the_first_query_that_reads_them(tmp_path, sims):
    """After an upgrade whose views differ, the store's rollups are of other SQL: every reader
    would compute the views from the events until the next write refreshed them. The first
    query reading a request-derived view rebuilds them once and says why; a query of the
    events alone does not."""
    from servelens.pipeline.query import stored

    sim = sims["one"]
    store = tmp_path / "store"
    ingest([sim / "vllm-a.log"], store, year=2026, rollups=True)
    m = manifest(store)
    assert not m.get("rollups_deferred") and m["rollups"]["window_metrics"]["key"] == stored.sql_key("window_metrics")
    m["rollups"]["window_metrics"]["key"] = "an-older-servelens"
    (store / "manifest.json").write_text(json.dumps(m))
    runner = CliRunner()
    res = runner.invoke(app, ["sql", "select count(*) from events", "--store", str(store)])
    assert res.exit_code == 0 and "refreshed" not in res.output, res.output
    assert manifest(store)["rollups"]["window_metrics"]["key"] == "an-older-servelens"
    res = runner.invoke(app, ["sql", "select count(*) from scaling_signals", "--store", str(store)])
    assert res.exit_code == 0, res.output
    assert "rollups refreshed now, as another servelens's views had computed them" in res.output
    assert manifest(store)["rollups"]["window_metrics"]["key"] == stored.sql_key("window_metrics")
    same_rows(stored_rows(store, "window_metrics"), raw_rows(store, "window_metrics"))
    res = runner.invoke(app, ["sql", "select count(*) from scaling_signals", "--store", str(store)])
    assert res.exit_code == 0 and "refreshed" not in res.output, res.output
