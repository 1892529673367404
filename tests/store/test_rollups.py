"""Rollups (pipeline/query/rollups.py): the stored views (requests, request_state, engine_stats,
queue_depth, batch_fill, kv_cache, and at the base width windows, errors, throughput,
latency_percentiles, window_metrics) must answer exactly what the raw views answer, on every sample set, on simulated stores, and after every way a store changes
(a tail of many small commits, re-ingest, compaction, a lost rollup file and repair); when it
cannot (dirty marks, other variables) the raw path answers."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from servelens.pipeline.query import rollups as rollup
from servelens.pipeline.query import stored
from servelens.pipeline.tail import tailer as tail_mod
from servelens.pipeline.tail import identity as tail_identity
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import connect
from servelens.pipeline.query.connect import run, run_on
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import read_manifest
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets
from servelens.pipeline.query.timerange import TimeRange
from tests.helpers import incident_truth as truth

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_logs"
UTC = dt.timezone.utc
# the stored views, and views over them (compared through the rollups and raw)
VIEWS = ("requests", "request_state", "engine_stats", "queue_depth", "batch_fill", "kv_cache", "event_catalog",
         "windows", "errors", "throughput", "latency_percentiles", "window_metrics", "scaling_signals")
# the stored views that do not read the window width (the dashboard binds them whatever width it shows)
WIDTH_FREE = {"requests", "request_state", "engine_stats", "queue_depth", "batch_fill", "kv_cache", "event_catalog"}

build_app()
runner = CliRunner()


def cli(*args) -> str:
    res = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def answer(store: Path, view: str, raw: bool, **kw) -> pl.DataFrame:
    return run(store, f"select * from {view} order by all", rollups=not raw, **kw)


def bound_views(store: Path, view: str, **kw) -> set[str]:
    """The views a connection for `view` binds. Not shared: computing a shared view into a
    table rebinds it under the same name, so the catalog is the same without the cost."""
    con = connect(store, views={view}, shared=False, **kw)
    try:
        return {r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
    finally:
        con.close()


def over_rollups(store: Path, view: str, **kw) -> set[str]:
    """The views a connection for `view` binds over a rollup file (not over their SQL).
    Not shared: a view bound over a rollup is never computed into a table, and one that is
    would read the table, not a rollup file, so the answer is the same without the cost."""
    con = connect(store, views={view}, shared=False, **kw)
    try:
        rows = con.execute("select view_name, sql from duckdb_views() where not internal").fetchall()
    finally:
        con.close()
    return {name for name, sql in rows if f"/{rollup.ROLLUP_DIR}/" in sql}


def over_rollups_and_answer(store: Path, view: str, **kw) -> tuple[set[str], pl.DataFrame]:
    """over_rollups(store, view) and answer(store, view, raw=False) from one connection (the
    one `answer` makes: shared)."""
    over, rows = over_rollups_and_answers(store, (view,), False, **kw)
    return over, rows[view]


def over_rollups_and_answers(store: Path, views, raw: bool, **kw) -> tuple[set[str], dict[str, pl.DataFrame]]:
    """answers(store, views, raw), and the views its connection binds over a rollup file. A
    view bound over a rollup is never computed into a table, and one computed from its SQL
    reads others by name, not a rollup file: the set is the one without sharing."""
    con = connect(store, views=set(views), rollups=not raw, shared=True, **kw)
    try:
        rows = con.execute("select view_name, sql from duckdb_views() where not internal").fetchall()
        return ({name for name, sql in rows if f"/{rollup.ROLLUP_DIR}/" in sql},
                {view: run_on(con, f"select * from {view} order by all") for view in views})
    finally:
        con.close()


def answers(store: Path, views, raw: bool, **kw) -> dict[str, pl.DataFrame]:
    """Each view's rows, every view from one connection (shared: the views read through
    several others computed once; tests/sql/test_shared_views.py proves the answers the same)."""
    return over_rollups_and_answers(store, views, raw, **kw)[1]


def assert_same(store: Path, views=VIEWS, raw: dict[str, pl.DataFrame] | None = None, **kw) -> dict[str, int]:
    """The rollup's answer equals the raw answer, row for row (floats to 1e-9: DuckDB may sum
    in another order); the rows compared, per view."""
    return {view: rows.height for view, rows in same_rows(store, views, raw, **kw).items()}


def same_rows(store: Path, views=VIEWS, raw: dict[str, pl.DataFrame] | None = None, **kw) -> dict[str, pl.DataFrame]:
    """assert_same, answering each view's rows (through the rollups: equal to the raw rows).
    `raw`: the raw answers (of `views`) read from this store earlier, when nothing has
    changed its events since (a refresh, a repair that drops no part, a re-ingest that
    commits nothing); the raw path reads no rollup."""
    for view in rollup.VIEWS:
        assert rollup.status(store, kw.get("variables"), view) == "fresh", view
    # the rollup path really is taken: no raw view beneath a stored view is bound
    assert "requests" not in bound_views(store, "scaling_signals", **kw)
    assert "requests" in bound_views(store, "scaling_signals", rollups=False, **kw)
    # events and samples (the scraped /metrics) are the base relations every connection binds;
    # latency_percentiles, stored at the base width, is read as stored
    assert bound_views(store, "latency_percentiles", **kw) - {"events", "samples"} == {"latency_percentiles"}
    # queue_depth is read as stored: not even the per-second state it is derived from is bound
    assert bound_views(store, "queue_depth", **kw) - {"events", "samples"} == {"queue_depth"}
    assert over_rollups(store, "queue_depth", **kw) == {"queue_depth"}
    assert "request_state" in bound_views(store, "queue_depth", rollups=False, **kw)
    # the summaries are stored at the refresh's variables, over the whole store: compared
    # where the other views are read with those
    want = (*views, *(v for v in stored.SUMMARIES if v not in views)) if not kw else tuple(views)
    if raw is None:
        raw = answers(store, want, True, **kw)
    elif missing := [v for v in want if v not in raw]:
        raw = {**raw, **answers(store, missing, True, **kw)}
    rolled = answers(store, views, False, **kw)
    for view in views:
        assert_frame_equal(rolled[view], raw[view], check_exact=False, rel_tol=1e-9, abs_tol=1e-9)
    if not kw:
        assert_summaries_stored(store, raw)
    return rolled


def stored_summaries(store: Path) -> dict[str, pl.DataFrame]:
    """The rows of each stored summary (stored.SUMMARIES), as read from its rollup file."""
    m = manifest(store)
    paths = {v: store / m["rollups"][v]["path"] for v in stored.SUMMARIES}
    con = connect(store, views=set(), rollups=False, readable=tuple(paths.values()))
    try:
        return {v: run_on(con, f"select * from read_parquet({stored.literal(p)}) order by all") for v, p in paths.items()}
    finally:
        con.close()


def assert_summaries_stored(store: Path, raw: dict[str, pl.DataFrame] | None = None) -> dict[str, pl.DataFrame]:
    """Each stored summary is fresh and holds exactly the rows its view computes from the
    events (the raw path, nothing stored read; `raw`: those answers read already)."""
    for view in stored.SUMMARIES:
        assert rollup.status(store, None, view) == "fresh", view
    got = stored_summaries(store)
    want = raw if raw is not None else answers(store, stored.SUMMARIES, True)
    for view in stored.SUMMARIES:
        assert_frame_equal(got[view], want[view], check_exact=False, rel_tol=1e-9, abs_tol=1e-9)
    return got


def manifest(store: Path) -> dict:
    return json.loads((store / "manifest.json").read_text())


# -- every sample set --------------------------------------------------------------------

SAMPLE_SETS = {
    "incident": [SAMPLES / "incident"],
    "incident+client": [SAMPLES / "incident", SAMPLES / "client"],
    "tgi": [SAMPLES / "tgi" / "real"],
    "vllm": [SAMPLES / "vllm" / "real"],
    "vllm-0.32": [SAMPLES / "vllm" / "real-0.32", SAMPLES / "vllm" / "real-0.32-b"],
    "trtllm": [SAMPLES / "trtllm" / "real"],
    "sglang": [SAMPLES / "sglang" / "real"],
    "llamacpp": [SAMPLES / "llamacpp" / "real"],
}


@pytest.fixture(scope="module")
def incident_raw(incident_store) -> dict[str, pl.DataFrame]:
    """The raw answers of VIEWS on the (read-only) incident store, once per module: for the
    tests that read it or a copy of it whose parts are the same (the raw path reads no rollup)."""
    return answers(incident_store, (*VIEWS, *(v for v in stored.SUMMARIES if v not in VIEWS)), True)


@pytest.mark.parametrize("name", sorted(SAMPLE_SETS))
def test_rollup_equals_raw_on_every_sample_set(tmp_path, name, request):
    raw = None
    if name == "incident":
        # the session's incident store is this ingest already (the library's, rollups refreshed
        # at its end, as --refresh-rollups asks: tests/store/test_rollup_second_ingest.py), and
        # this test only reads it
        store = request.getfixturevalue("incident_store")
        raw = request.getfixturevalue("incident_raw")
    else:
        store = tmp_path / "store"
        cli("ingest", *SAMPLE_SETS[name], "--store", store, "--refresh-rollups")
    m = manifest(store)
    assert "dirty" not in m and "dirty_all" not in m
    assert sorted(m["rollups"]) == sorted(rollup.STORED)
    for view, entry in m["rollups"].items():
        assert (store / entry["path"]).is_file()
    counts = assert_same(store, raw=raw)
    assert counts["window_metrics"] == m["rollups"]["window_metrics"]["rows"] > 0
    assert counts["requests"] == m["rollups"]["requests"]["rows"] > 0
    assert counts["request_state"] == m["rollups"]["request_state"]["rows"]
    for view in rollup.VIEWS:
        assert counts[view] == m["rollups"][view]["rows"], view
    if name.startswith("incident"):
        assert counts["scaling_signals"] > 0  # the incident fires signals: compared for real
        # and its vLLM servers log stats lines: every width-free view has rows to compare
        assert min(counts[v] for v in WIDTH_FREE) > 0


def test_the_stored_incident_summary_tells_what_the_truth_says(incident_store):
    """The whole store's incident_summary as stored (what the dashboard's first page reads)
    against the simulator's truth and the logs read with a plain regex: who died, how many
    requests each failed, and where its first error line is."""
    rows = stored_summaries(incident_store)["incident_summary"]
    failed = truth.failed_by_instance()  # the crashed instances, sorted
    assert rows.filter(pl.col("died"))["instance"].sort().to_list() == list(failed)
    by = {r["instance"]: r for r in rows.iter_rows(named=True)}
    assert {i: by[i]["failed"] for i in failed} == failed
    # the servers that log every request (TensorRT-LLM logs only the failed ones): each one's
    # finished and failed requests, as many as the simulator made
    t = truth.truth_requests()
    logged = sorted(i for i in by if not i.startswith("trtllm"))
    assert len(logged) == 4
    for instance in logged:
        mine = t.filter(pl.col("instance") == instance)
        assert by[instance]["finished"] == mine.filter(pl.col("status") == "ok").height, instance
        assert by[instance]["failed"] == mine.filter(pl.col("status") == "error").height, instance
    for instance in failed:
        line, at = truth.first_error(truth.log_of(instance))
        assert by[instance]["first_error_line"] == line, instance
        if not instance.startswith("trtllm"):  # (its error line has no time of its own)
            assert by[instance]["first_error_ts"] == at, instance


def test_the_stored_event_catalog_spans_each_log(incident_store):
    """Each server's first and last event as the stored catalog has them: its log's first and
    last stamped line, read with a plain regex (ISO-stamped logs: Triton's glog stamps carry
    no year)."""
    rows = run(incident_store, "select instance, min(first_ts) as first_ts, max(last_ts) as last_ts "
                               "from event_catalog group by all")
    assert over_rollups(incident_store, "event_catalog") == {"event_catalog"}
    by = {r["instance"]: r for r in rows.iter_rows(named=True)}
    checked = 0
    for log in truth.LOGS:
        if log.parent.name in ("vllm", "tgi"):
            first = truth.first_line(log, re.compile(r"."))[1]
            assert (by[log.stem]["first_ts"], by[log.stem]["last_ts"]) == (first, truth.newest(log)), log.stem
            checked += 1
    assert checked >= 4


def test_the_cli_forces_the_raw_path(incident_store):
    store = incident_store
    q = "select signal, count(*) as n from scaling_signals group by all order by all"
    assert cli("sql", q, "--store", store, "-f", "csv") == cli("sql", q, "--store", store, "-f", "csv", "--no-rollups")


@pytest.mark.parametrize("engine", ["tgi", "vllm", "trtllm"])
def test_rollup_equals_raw_on_a_simulated_store(tmp_path, engine):
    from servelens.pipeline.simulate import simulate

    out = tmp_path / engine
    duration_s = 900
    simulate(engine, "spike", duration_s, seed=11, out_dir=out, start="2026-05-12T08:00:00Z")
    store = out / "store"
    summary = ingest(sorted(out.glob("*.log")), store, year=2026)
    assert summary.rollup is not None and summary.rollup.whole
    rows = same_rows(store)
    assert rows["window_metrics"].height >= duration_s // 60  # a row per minute at least
    if engine == "trtllm":
        return  # TensorRT-LLM logs no per-request lines (only failures): no arrivals to count
    # and the simulator's truth: every request it generated is counted once (window_metrics
    # as read through its rollup, just shown equal to the raw view)
    truth = pl.read_parquet(out / "truth_requests.parquet")
    arrived = rows["window_metrics"]["arrived"].sum()
    assert abs(arrived - truth.height) <= max(2, truth.height // 100), (arrived, truth.height)


# -- a tail of many small commits ---------------------------------------------------------

@pytest.fixture
def no_waits(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tail_mod, "ROTATE_WAIT_S", 0.0)
    monkeypatch.setattr(tail_identity, "COPY_WAIT_S", 0.0)
    monkeypatch.setattr(tail_mod, "GZ_SETTLE_S", 0.0)


def _tail_in_steps(tmp: Path, sources: list[Path], steps: int, background: bool = False,
                   refresh_each: bool = True) -> tuple[Path, list]:
    """Write `sources` into a followed directory in `steps` slices of lines, one tailer poll
    (one commit) and one rollup refresh after each: the rollups are refreshed incrementally.
    Without `refresh_each` only the stopping tailer refreshes them (once, whole): a store of
    many small commits with fresh rollups, for a test about what comes after."""
    logs, store_dir = tmp / "logs", tmp / "store"
    logs.mkdir()
    texts = {src: src.read_text().splitlines(keepends=True) for src in sources}
    store = Store.open(store_dir, purpose="tail")
    tailer = Tailer(store, Targets([logs], None, skip_under=store_dir), quiet_s=0.0, compact_min_parts=0)
    tailer.rollup_every_s = 0.0
    tailer.background_compaction = background  # as under Tailer.run: refreshes computed on a thread
    for k in range(steps):
        for src, lines in texts.items():
            a, b = len(lines) * k // steps, len(lines) * (k + 1) // steps
            with open(logs / src.name, "a") as f:
                f.writelines(lines[a:b])
        tailer._next_rollup = 0.0 if refresh_each else float("inf")
        tailer.poll_once(rescan=True)
        if tailer._rollup_job is not None:
            tailer._rollup_job.result()  # ready: committed by the next poll
    tailer.close()
    store.close()
    return store_dir, tailer.rollup_refreshes


def test_rollup_after_a_tail_of_many_small_commits(tmp_path, no_waits):
    inc = SAMPLES / "incident"
    # vLLM (logged queue) beside TGI (reconstructed queue): one instance's lines stop early
    sources = [inc / "vllm" / "vllm-a.log", inc / "tgi" / "tgi-a.log", inc / "trtllm" / "trtllm-b.log"]
    steps = 5  # a whole refresh, then four incremental ones over new lines of every source
    store, refreshes = _tail_in_steps(tmp_path, sources, steps=steps)
    assert len(read_manifest(store)["parts"]) >= steps * 2  # many small commits
    assert len(refreshes) >= steps
    assert refreshes[0].whole and not any(r.whole for r in refreshes[1:])  # incremental after the first
    assert_same(store)
    # the same logs ingested at once: the same rollup
    other = tmp_path / "once"
    ingest(sources, other)
    a = pl.read_parquet(store / manifest(store)["rollups"]["window_metrics"]["path"]).drop("instance")
    b = pl.read_parquet(other / manifest(other)["rollups"]["window_metrics"]["path"]).drop("instance")
    assert_frame_equal(a.sort("engine", "window_index"), b.sort("engine", "window_index"),
                       check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


def test_an_incremental_refresh_recomputes_only_the_dirty_instance(tmp_path):
    inc = SAMPLES / "incident" / "vllm"
    logs = tmp_path / "logs"
    logs.mkdir()
    a, b = inc / "vllm-a.log", inc / "vllm-b.log"
    shutil.copy(a, logs / a.name)
    lines = b.read_text().splitlines(keepends=True)
    (logs / b.name).write_text("".join(lines[: len(lines) // 2]))
    store = tmp_path / "store"
    ingest([logs], store)
    before = {v: pl.read_parquet(store / e["path"]) for v, e in manifest(store)["rollups"].items()}
    with open(logs / b.name, "a") as f:
        f.writelines(lines[len(lines) // 2:])
    summary = ingest([logs], store)
    r = summary.rollup
    assert r is not None and not r.whole and r.instances == 1
    assert set(r.views) == set(rollup.STORED)
    for view in ("requests", "window_metrics"):
        after = pl.read_parquet(store / manifest(store)["rollups"][view]["path"])
        old = before[view]
        # the untouched instance's rows are carried over as they were
        assert_frame_equal(after.filter(pl.col("instance") == "vllm-a"), old.filter(pl.col("instance") == "vllm-a"))
        assert after.filter(pl.col("instance") == "vllm-b").height > old.filter(pl.col("instance") == "vllm-b").height
    assert_same(store)


# -- re-ingest, compact, a lost rollup, repair ------------------------------------------------

# `incident_store` (tests/conftest.py): the incident ingested once per process with its rollups
# refreshed, for the tests that only read it; a test that changes the store changes a copy

@pytest.fixture
def own_store(incident_store, tmp_path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(incident_store, store)
    return store


def test_a_refresh_short_of_its_memory_bound_is_computed_again_without_it(tmp_path, monkeypatch):
    """The refresh runs under a memory bound (ingest and the tailer stay under 1 GB); a plan
    that cannot stay within it costs time, never the rollup."""
    calls = []
    within = rollup._compute_view_within

    def recording(p, view, stored_rels, limits):
        calls.append((view, limits.memory_bytes))
        return within(p, view, stored_rels, limits)

    monkeypatch.setattr(rollup, "_compute_view_within", recording)
    monkeypatch.setattr(rollup, "REFRESH_MEMORY", "2MB")  # nothing fits
    store = tmp_path / "store"
    cli("ingest", SAMPLES / "incident", "--store", store, "--refresh-rollups")
    assert [v for v, _ in calls] == [v for view in rollup.STORED for v in (view, view)]
    assert {m for _, m in calls[::2]} == {2_000_000} and min(m for _, m in calls[1::2]) > 2_000_000
    assert_same(store)


def test_reingest_doubles_nothing_and_leaves_the_rollup(own_store, incident_raw):
    store = own_store  # a copy of incident_store: incident_raw are its raw answers
    before = manifest(store)
    first = answer(store, "window_metrics", raw=False)
    cli("ingest", SAMPLES / "incident", "--store", store, "--refresh-rollups")
    after = manifest(store)
    assert after["rollups"] == before["rollups"]  # the same file: nothing was committed
    assert after["parts"] == before["parts"]
    rows = same_rows(store, raw=incident_raw)
    assert_frame_equal(rows["window_metrics"], first)


def test_compaction_keeps_the_rollup_fresh(tmp_path, no_waits):
    inc = SAMPLES / "incident"
    # the incremental refreshes are test_rollup_after_a_tail_of_many_small_commits' subject:
    # here only the many parts and a fresh rollup matter
    sources, steps = [inc / "tgi" / "tgi-b.log", inc / "vllm" / "vllm-b.log"], 6
    store, refreshes = _tail_in_steps(tmp_path, sources, steps=steps, refresh_each=False)
    before = manifest(store)
    assert len(before["parts"]) >= steps * len(sources) and len(refreshes) == 1
    assert rollup.status(store) == "fresh"
    cli("compact", "--store", store)
    after = manifest(store)
    assert len(after["parts"]) < len(before["parts"])
    assert after["rollups"] == before["rollups"]  # compaction changes no row: no refresh needed
    assert "dirty_all" not in after and "dirty" not in after
    assert_same(store)


def test_lost_or_damaged_rollup_falls_back_and_repair_or_compact_rebuild_it(own_store, incident_raw):
    store = own_store
    # the raw answers of every view: this copy of incident_store's (incident_raw) until the
    # compaction, which is the first to change a part (the rollup files change before it,
    # and the raw path reads none)
    parts = manifest(store)["parts"]
    raw = incident_raw
    path = store / manifest(store)["rollups"]["window_metrics"]["path"]
    path.unlink()
    assert rollup.status(store) == "unusable"
    # window_metrics from its SQL, over the (intact) rollups of the views it reads
    over, got = over_rollups_and_answer(store, "scaling_signals")
    assert over == {"requests", "request_state", "queue_depth", "batch_fill", "kv_cache", "errors", "throughput"}
    assert_frame_equal(got, raw["scaling_signals"])
    # a lost requests rollup: requests from its SQL (over the engine stats, stored apart); the
    # stored views above it keep their own rollups, computed from the events as well
    (store / manifest(store)["rollups"]["requests"]["path"]).unlink()
    assert rollup.status(store, None, "requests") == "unusable"
    over, got = over_rollups_and_answer(store, "requests")
    assert over == {"engine_stats"}
    assert_frame_equal(got, raw["requests"])
    assert over_rollups(store, "latency_percentiles") == {"latency_percentiles"}
    out = cli("repair", "--store", store)
    assert "rollup" in out.lower()
    assert manifest(store)["parts"] == parts  # a lost rollup drops no part
    assert_same(store, raw=raw)
    # damaged (cut short): the same, rebuilt by compact
    path = store / manifest(store)["rollups"]["window_metrics"]["path"]
    path.write_bytes(path.read_bytes()[:100])
    assert rollup.status(store) == "unusable"
    assert_frame_equal(answer(store, "scaling_signals", raw=False), raw["scaling_signals"])
    cli("compact", "--store", store)
    assert_same(store)


def test_repair_that_drops_parts_rebuilds_the_rollup(own_store):
    store = own_store
    m = manifest(store)
    victim = next(p for p in m["parts"] if "engine=vllm" in p)
    (store / victim).write_bytes(b"garbage")
    cli("repair", "--store", store)
    after = manifest(store)
    assert victim not in after["parts"]
    assert after["rollups"]["window_metrics"]["path"] != m["rollups"]["window_metrics"]["path"]
    assert_same(store)


@pytest.fixture(scope="module")
def tgi_events(tmp_path_factory) -> pl.DataFrame:
    """The events of the real TGI logs, to commit into a store as a tailer would (read only:
    a frame is never changed in place)."""
    extra = tmp_path_factory.mktemp("tgi-events") / "store"
    ingest([SAMPLES / "tgi" / "real"], extra, rollups=False)  # only its events are read
    return run(extra, "select * from events")


def test_a_dirty_store_falls_back_to_raw(own_store, tgi_events):
    store = own_store
    # commit more events without refreshing (what a tailer does between refreshes)
    frame = tgi_events
    with Store.open(store) as st:
        st.commit_events([frame], {})
    m = manifest(store)
    assert m["dirty"] and rollup.status(store) == "dirty"
    # no view over a rollup on the connection that answers every view of VIEWS (scaling_signals'
    # among them): none for scaling_signals
    over, rolled = over_rollups_and_answers(store, VIEWS, raw=False)
    assert over == set()
    raw = answers(store, VIEWS, raw=True)
    for view in VIEWS:
        assert_frame_equal(rolled[view], raw[view])
    parts = manifest(store)["parts"]
    with Store.open(store) as st:
        r = rollup.refresh(st)
    assert r is not None and not r.whole
    assert manifest(store)["parts"] == parts  # a refresh commits no event: the same raw answers
    assert_same(store, raw=raw)


def test_prune_marks_everything_dirty(own_store):
    store = own_store
    from servelens.pipeline.store.prune import prune

    with Store.open(store) as st:
        prune(st, dt.datetime(2026, 5, 12, 8, 2, tzinfo=UTC))
    assert manifest(store).get("dirty_all") is True
    assert rollup.status(store) == "dirty"
    with Store.open(store) as st:
        assert rollup.refresh(st).whole
    assert_same(store)


@pytest.fixture(scope="module")
def incident_raw_30s(incident_store) -> pl.DataFrame:
    """window_metrics of the (read-only) incident store at 30 s from the raw views, once per
    module: the truth of the two tests below."""
    return answer(incident_store, "window_metrics", raw=True, variables={"window_s": 30})


def test_other_variables_fall_back_to_raw(incident_store, incident_raw_30s):
    store = incident_store
    thirty = {"window_s": 30}
    assert rollup.status(store, thirty) == "unusable"
    # window_metrics from its SQL at 30 s, over the width-independent rollups
    assert over_rollups(store, "scaling_signals", variables=thirty) == WIDTH_FREE - {"event_catalog"}  # (it reads no catalog)
    # and the per-window views from their SQL at 30 s (latency_percentiles over the requests,
    # and the scraped histograms where no request carries a latency)
    assert bound_views(store, "latency_percentiles", variables=thirty) - {"events", "samples"} == {
        "latency_percentiles", "requests", "scraped_latency"}
    got = answer(store, "window_metrics", raw=False, variables=thirty)
    assert_frame_equal(got, incident_raw_30s)
    assert got["window_s"].unique().to_list() == [30.0]
    # a threshold only the signals read leaves window_metrics' rollup usable
    strict = {"queue_waiting": 2}
    assert rollup.status(store, strict) == "fresh"
    assert_same(store, variables=strict)
    # the CLI's --window 1m is the base window: the rollup answers
    assert rollup.status(store, {"window_s": 60.0}) == "fresh"


def test_a_time_range_reads_the_rollup_rows_of_the_range(incident_store):
    store = incident_store
    rng = TimeRange(dt.datetime(2026, 5, 12, 8, 1, 30, tzinfo=UTC), dt.datetime(2026, 5, 12, 8, 3, 10, tzinfo=UTC))
    assert "requests" not in bound_views(store, "window_metrics", time_range=rng)
    got = answer(store, "window_metrics", raw=False, time_range=rng)
    whole = answer(store, "window_metrics", raw=False)
    utc = [pl.col(c).dt.convert_time_zone("UTC") for c in ("window_start", "window_end")]
    expected = whole.filter((utc[1] > rng.since) & (utc[0] < rng.until))
    assert 0 < got.height < whole.height
    assert_frame_equal(got, expected)


RANGES = [(dt.datetime(2026, 5, 12, 8, 1, 30, tzinfo=UTC), dt.datetime(2026, 5, 12, 8, 3, 10, tzinfo=UTC)),
          (dt.datetime(2026, 5, 12, 8, 2, tzinfo=UTC), None),
          (None, dt.datetime(2026, 5, 12, 8, 1, 45, tzinfo=UTC))]


@pytest.fixture(scope="module")
def incident_requests(incident_store) -> pl.DataFrame:
    """`requests` of the whole (read-only) incident store through its rollup, once per module."""
    return answer(incident_store, "requests", raw=False)


@pytest.mark.parametrize("since,until", RANGES)
def test_ranged_answers_through_the_rollups_equal_the_raw_ranged_answers(incident_store, incident_requests, since, until):
    store = incident_store
    rng = TimeRange(since, until)
    assert over_rollups(store, "latency_percentiles", time_range=rng) == {"latency_percentiles"}
    whole = incident_requests
    views = ("requests", "request_state", "latency_percentiles", "queue_depth", "batch_fill", "kv_cache", "windows",
             "errors", "throughput", "scaling_signals")
    rolled, raw = answers(store, views, raw=False, time_range=rng), answers(store, views, raw=True, time_range=rng)
    for view in views:
        got = rolled[view]
        assert_frame_equal(got, raw[view], check_exact=False, rel_tol=1e-9, abs_tol=1e-9)
        if view == "requests":  # really a part of the store
            assert 0 < got.height < whole.height


def test_the_dashboard_connection_reads_the_width_independent_rollups(incident_store, incident_raw_30s):
    """One connection serves every width (the dashboard's): the width-free views over their
    rollups, window_metrics from its SQL, right at any width set on it."""
    store = incident_store
    con = connect(store, rollups=tuple(sorted(WIDTH_FREE)))
    try:
        views = dict(con.execute("select view_name, sql from duckdb_views() where not internal").fetchall())
        assert all(f"/{rollup.ROLLUP_DIR}/" in views[v] for v in WIDTH_FREE)
        assert f"/{rollup.ROLLUP_DIR}/" not in views["window_metrics"]
        con.execute("set variable window_s = 30")
        got = con.sql("select * from window_metrics order by all").pl()
    finally:
        con.close()
    assert got["window_s"].unique().to_list() == [30.0]
    assert_frame_equal(got, incident_raw_30s, check_exact=False, rel_tol=1e-9, abs_tol=1e-9)


def test_rollup_of_other_sql_is_not_used(own_store, monkeypatch):
    store = own_store
    for module in (stored, rollup):  # the readers' check and the refresh's key
        monkeypatch.setattr(module, "sql_key", lambda view=stored.VIEW: "another-servelens")
    assert rollup.status(store) == "unusable"
    assert over_rollups(store, "scaling_signals") == set()
    with Store.open(store) as st:
        assert rollup.refresh(st).whole  # rebuilt from today's SQL
    assert manifest(store)["rollups"]["window_metrics"]["key"] == "another-servelens"


def test_no_rollups_environment_forces_raw(incident_store, monkeypatch):
    monkeypatch.setenv(stored.NO_ROLLUPS_ENV, "1")
    assert "requests" in bound_views(incident_store, "scaling_signals")
    assert over_rollups(incident_store, "scaling_signals") == set()
    assert over_rollups(incident_store, "latency_percentiles", rollups=("requests",)) == set()
    monkeypatch.delenv(stored.NO_ROLLUPS_ENV)
    assert "requests" not in bound_views(incident_store, "scaling_signals")
    assert over_rollups(incident_store, "latency_percentiles") == {"latency_percentiles"}
    assert os.environ.get(stored.NO_ROLLUPS_ENV) is None


def test_a_commit_during_a_background_refresh_stays_dirty(own_store, tgi_events):
    """The tailer computes a refresh on a thread of its own and commits it later: what was
    committed in between must stay marked, or the rollup would miss it."""
    store = own_store
    frame = tgi_events
    first, second = frame.head(frame.height // 2), frame.tail(frame.height - frame.height // 2)
    with Store.open(store) as st:
        st.commit_events([first], {})
        p = rollup.plan(st)
        # incremental, but for the store-wide summaries (always whole)
        assert p is not None and not any(w for v, w in p.whole.items() if v not in stored.SUMMARIES)
        assert all(p.whole[v] for v in stored.SUMMARIES)
        st.commit_events([second], {})  # while the refresh computes
        c = rollup.compute(p)
        done = rollup.commit(st, c)
        assert done is not None
        m = st.manifest
        touched = {(e, i) for e, i, *_ in second.select("engine", "instance").unique().rows()}
        assert {(d[0], d[1]) for d in m["dirty"]} == touched
        assert rollup.status(store) == "dirty"
        rollup.refresh(st)
    assert_same(store)


def test_rollup_after_a_tail_refreshed_in_the_background(tmp_path, no_waits):
    inc = SAMPLES / "incident"
    store, refreshes = _tail_in_steps(tmp_path, [inc / "vllm" / "vllm-b.log", inc / "tgi" / "tgi-a.log"], 5,
                                      background=True)
    # a refresh is computed after one poll and committed at the next: every other poll
    assert len(refreshes) >= 3
    assert_same(store)
