"""Client benchmark results joined to the server's log (issue 17): a `vllm bench serve
--save-result --save-detailed` file and AIPerf's `profile_export.jsonl`, built from the
simulator's truth the way those clients measure (their clock is the truth), ingested with the
server's V1 output-logging log; the requests view then carries the client's exact TTFT / ITL
/ E2E beside the server's arrival and queue, and ttft_queueing explains the tail."""

from __future__ import annotations

import datetime as dt
import json
import re
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import connect, run, run_on
from servelens.pipeline.simulate import simulate

NS = 1_000_000_000
# Stores are ingested without refreshing the rollups (rollups=False), but for `_store`: the
# views then come from the events, which tests/store/test_rollups.py shows the rollups
# equal (client results included); `_store`'s checks against the truth read the rollups.
# A test over the simulated server's log as it was written starts from a copy of the store
# that log was ingested into once (`_with_log`) and ingests its client's file into it: the
# requests view joins the two whichever came first (test_a_results_file_belongs_to_... adds
# results files to a store of logs too).


@pytest.fixture(scope="module", autouse=True)
def _shared_run_unchanged():
    from tests.helpers.run_store import tree

    yield
    if _built.cache_info().currsize:  # shared with the other workers: read only
        out = _built().parent
        assert tree(out) == _BUILT_TREE[0], "a test changed the shared simulated run: give it a copy"


def _simulated(store: Path) -> None:
    """The simulated run beside `store`, and its server's log alone ingested into it."""
    out = store.parent
    # overloaded: the queue builds, so the tail TTFT is queueing
    simulate("vllm", "steady", 300, seed=5, out_dir=out, variant="v1_outputs", instances=1, rate=9.0)
    res = ingest([out / "vllm-a.log"], store, year=2026, rollups=False)
    assert {f.engine for f in res.files} == {"vllm"}


@lru_cache(maxsize=None)
def _built() -> Path:
    """The simulated run and the store of its server's log (no rollups): built once per run,
    read by every pytest-xdist worker whose tests need them (tests/helpers/run_store.py);
    nothing is written beside them."""
    from tests.helpers.run_store import built_once, run_tmp, tree

    store = built_once(run_tmp(), "client-results-sim", _simulated)
    _BUILT_TREE[:] = [tree(store.parent)]
    return store


_BUILT_TREE: list = []


@lru_cache(maxsize=None)
def _sim() -> tuple[Path, pl.DataFrame]:
    out = _built().parent
    truth = pl.read_parquet(out / "truth_requests.parquet").with_columns(
        pl.col("request_id").str.extract(r"-(\d+)$", 1).cast(pl.Int64).alias("index")
    ).sort("index")
    return out, truth


def _log_store() -> Path:
    """The simulated server's log alone, ingested once (no rollups)."""
    return _built()


def _with_log(store: Path) -> Path:
    """`store`: a copy of the store holding the simulated server's log."""
    shutil.copytree(_log_store(), store)
    return store


def _old(path: Path) -> Path:
    # ingest leaves a file written in the last minute without a final newline for later
    t = dt.datetime.now().timestamp() - 120
    os.utime(path, (t, t))
    return path


def _vllm_bench_file(out: Path, truth: pl.DataFrame) -> Path:
    """What `vllm bench serve` saves: parallel per-request arrays in issue order,
    perf_counter start times, the run's end as `date`, no request ids."""
    t = truth.with_columns(
        ((pl.col("first_token_ts") - pl.col("arrival_ts")).dt.total_nanoseconds() / NS).alias("ttft"),
        ((pl.col("finish_ts") - pl.col("first_token_ts")).dt.total_nanoseconds() / NS).alias("decode"),
    )
    ok = t["status"] == "ok"
    arrival_ns = t["arrival_ts"].dt.epoch("ns")
    end_ns = int(t["finish_ts"].dt.epoch("ns").max())
    first_ns = int(arrival_ns.min())
    itls = [
        [d / (n - 1)] * (n - 1) if good and n > 1 else []
        for d, n, good in zip(t["decode"].fill_null(0), t["output_tokens"], ok)
    ]
    obj = {
        "date": dt.datetime.fromtimestamp(end_ns / NS, dt.timezone.utc).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat", "label": None, "model_id": "tiny-llama", "tokenizer_id": "tiny-llama",
        "num_prompts": truth.height, "request_rate": 9.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": (end_ns - first_ns) / NS, "completed": int(ok.sum()),
        "input_lens": t["prompt_tokens"].to_list(),
        "output_lens": [n if good else 0 for n, good in zip(t["output_tokens"], ok)],
        "ttfts": [x if good else 0.0 for x, good in zip(t["ttft"].fill_null(0), ok)],
        "itls": itls,
        "start_times": [12345.678 + (a - first_ns) / NS for a in arrival_ns],
        "generated_texts": ["" for _ in range(truth.height)],
        "errors": ["" if good else "aiohttp.client_exceptions.ServerDisconnectedError" for good in ok],
    }
    path = out / "vllm-bench-results.json"
    # one line, no final newline, as vLLM writes it; ingested at once, as a user would right
    # after the run (a results file is never held back as a live log's unfinished line)
    path.write_text(json.dumps(obj))
    return path


def _aiperf_file(out: Path, truth: pl.DataFrame) -> Path:
    lines = []
    for r in truth.filter(pl.col("status") == "ok").iter_rows(named=True):
        start = int(r["arrival_ts"].timestamp() * NS)
        ttft_ms = (r["first_token_ts"] - r["arrival_ts"]).total_seconds() * 1e3
        e2e_ms = (r["finish_ts"] - r["arrival_ts"]).total_seconds() * 1e3
        lines.append(json.dumps({
            "metadata": {"session_num": r["index"], "x_request_id": r["request_id"].removeprefix("chatcmpl-"),
                         "turn_index": 0, "request_start_ns": start, "request_end_ns": start + int(e2e_ms * 1e6),
                         "benchmark_phase": "profiling", "was_cancelled": False, "cancellation_time_ns": None},
            "metrics": {"input_sequence_length": {"value": r["prompt_tokens"], "unit": "tokens"},
                        "time_to_first_token": {"value": ttft_ms, "unit": "ms"},
                        "request_latency": {"value": e2e_ms, "unit": "ms"},
                        "output_sequence_length": {"value": r["output_tokens"], "unit": "tokens"}},
            "error": None,
        }))
    path = out / "profile_export.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return _old(path)


def _guidellm_file(out: Path, truth: pl.DataFrame) -> Path:
    """GuideLLM's report (v0.4+ request schema): the server's id as `response_id`, epoch
    start and first-token times, computed latencies in the units GuideLLM writes."""
    reqs = []
    for r in truth.filter(pl.col("status") == "ok").iter_rows(named=True):
        start, first, end = (r[k].timestamp() for k in ("arrival_ts", "first_token_ts", "finish_ts"))
        reqs.append({
            "type_": "generative_request_stats", "request_id": f"g-{r['index']}", "response_id": r["request_id"],
            "info": {"status": "completed", "timings": {"request_start": start, "first_token_iteration": first,
                                                        "last_token_iteration": end, "request_end": end},
                     "error": None},
            "prompt_tokens": r["prompt_tokens"], "output_tokens": r["output_tokens"],
            # GuideLLM computes these from its epoch floats; taken from the truth's durations
            # here so the check is not about float rounding of epoch seconds
            "request_latency": r["e2e_s"], "time_to_first_token_ms": r["ttft_s"] * 1e3,
            "inter_token_latency_ms": None if r["output_tokens"] < 2 else (end - first) * 1e3 / (r["output_tokens"] - 1),
        })
    doc = {"metadata": {"guidellm_version": "0.4.0"}, "args": {"profile": "poisson"},
           "benchmarks": [{"type_": "generative_benchmark", "requests": {"successful": reqs, "incomplete": [], "errored": []}}]}
    path = out / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


@lru_cache(maxsize=None)
def _store(kind: str) -> tuple[Path, pl.DataFrame]:
    _, truth = _sim()
    work = Path(tempfile.mkdtemp(prefix=f"servelens-client-{kind}-"))  # this worker's own
    client = {"vllm-bench": _vllm_bench_file, "aiperf": _aiperf_file, "guidellm": _guidellm_file}[kind](work, truth)
    store = _with_log(work / "store")
    # the rollups refreshed at the end: the log's instance and the client's requests
    res = ingest([client], store, year=2026)
    assert {f.engine for f in res.files} == {"client"}
    return store, truth


@pytest.mark.parametrize("kind, match", [("vllm-bench", "index_time"), ("aiperf", "id"), ("guidellm", "id")])
def test_every_served_request_gets_the_clients_exact_figures(kind, match) -> None:
    store, truth = _store(kind)
    got = run(store, "select request_id, engine, status, ttft_s, e2e_s, ttft_log_s, latency_source, client_match, "
                     "client_ttft_s, client_e2e_s, client_itl_s, waiting_at_arrival, failure_reason from requests")
    ok = truth.filter(pl.col("status") == "ok").select(
        "request_id", pl.col("ttft_s").alias("true_ttft"), pl.col("e2e_s").alias("true_e2e"),
        pl.col("tpot_s").alias("true_tpot"))
    j = ok.join(got, on="request_id", how="left")
    assert j["client_match"].to_list() == [match] * ok.height
    assert (j["client_ttft_s"] - j["true_ttft"]).abs().max() < 1e-6
    assert (j["client_e2e_s"] - j["true_e2e"]).abs().max() < 1e-6
    assert j["waiting_at_arrival"].null_count() < ok.height * 0.05  # before the first stats line: none
    # the request's latency is the client's exact figure; the server's own estimate stays
    # beside it, within its 1 s resolution
    assert (j["ttft_s"] - j["true_ttft"]).abs().max() < 1e-6 and (j["e2e_s"] - j["true_e2e"]).abs().max() < 1e-6
    assert set(j["latency_source"]) == {"client"}
    assert (j["ttft_log_s"] - j["true_ttft"]).abs().max() <= 1.0 + truth["validation_s"].max()
    if kind == "vllm-bench":
        both = j.filter(pl.col("true_tpot").is_not_null())
        assert (both["client_itl_s"] - both["true_tpot"]).abs().max() < 1e-6
    # every client request is accounted for once: the failed ones (still running when the run
    # ended) arrived at the server too, so they are matched as well; none is a row of its own
    n_client = truth.height if kind == "vllm-bench" else ok.height
    assert got["client_match"].count() == n_client and got.filter(pl.col("engine") == "client").height == 0
    if kind == "vllm-bench":
        failed = got.filter(pl.col("client_match").is_not_null() & pl.col("client_ttft_s").is_null())
        # the client saw them fail (no answer by the end of the run): failed, with its error
        assert failed.height == truth.height - ok.height and failed["status"].unique().to_list() == ["failed"]
        assert failed["failure_reason"].str.starts_with("client: ").all()


def _baselines_within_a_second(log: Path, ok: pl.DataFrame) -> set[float]:
    """The median true TTFT of the requests whose last logged stats line before their arrival
    says `Waiting: 0 reqs`, for every placement of the arrivals within 1 s of the truth (in
    1 ms steps): the stats lines read here with a regex, the TTFTs from the truth file."""
    line = re.compile(r" (\d\d-\d\d \d\d:\d\d:\d\d) .*\bWaiting: (\d+) reqs")
    stats = pl.DataFrame([(dt.datetime.strptime("2026-" + m[1], "%Y-%m-%d %H:%M:%S"), int(m[2]))
                          for m in map(line.search, log.read_text().splitlines()) if m],
                         schema={"ts": pl.Datetime("ns"), "waiting": pl.Int64}, orient="row").sort("ts")
    arrivals = ok.select(pl.col("arrival_ts").dt.replace_time_zone(None).dt.cast_time_unit("ns"), "ttft_s")
    placed = arrivals.join(pl.DataFrame({"shift_ms": range(-1000, 1001)}), how="cross").with_columns(
        (pl.col("arrival_ts") - pl.duration(milliseconds="shift_ms")).dt.cast_time_unit("ns").alias("probe"))
    medians = (placed.sort("probe").join_asof(stats, left_on="probe", right_on="ts", strategy="backward")
               .filter(pl.col("waiting") == 0).group_by("shift_ms").agg(pl.col("ttft_s").quantile(0.5, "linear")))
    return set(medians["ttft_s"].to_list())


def test_tail_ttft_is_explained_by_queueing() -> None:
    store, truth = _store("vllm-bench")
    row = run(store, "select * from ttft_queueing where engine = 'vllm'").row(0, named=True)
    ok = truth.filter(pl.col("status") == "ok")
    assert row["ttft_source"] == "client" and row["n_requests"] == ok.height
    assert row["p99_ttft_s"] == pytest.approx(ok["ttft_s"].quantile(0.99, "linear"), rel=1e-6)
    # overloaded: almost all of the p99 is waiting, and the slow requests came into a long queue
    assert row["queueing_share_p99"] > 0.8
    assert row["slow_waiting_avg"] > 5 * max(row["all_waiting_avg"] / 10, 1)
    # the baseline is the true median TTFT of the requests the log shows arriving to an empty
    # queue, for the client's placement on the wall clock (`date` has whole seconds)
    baselines = _baselines_within_a_second(_sim()[0] / "vllm-a.log", ok)
    assert min(abs(b - row["baseline_ttft_s"]) for b in baselines) < 1e-9
    assert max(baselines) < row["p50_ttft_s"] / 50  # and it is no queue's: far below the median


def test_a_results_file_alone_is_a_request_source(tmp_path) -> None:
    obj = {"date": "20260512-080100", "endpoint_type": "openai-chat", "label": None, "model_id": "tiny",
           "tokenizer_id": "tiny", "num_prompts": 3, "duration": 60.0, "completed": 2,
           "input_lens": [10, 11, 12], "output_lens": [4, 0, 3], "ttfts": [0.5, 0.0, 2.25],
           "itls": [[0.1, 0.1, 0.2], [], [0.3, 0.3]], "start_times": [1000.0, 1001.5, 1030.0],
           "generated_texts": ["a", "", "b"], "errors": ["", "ServerDisconnectedError", ""]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(obj))
    _old(path)
    ingest([path], tmp_path / "store", rollups=False)
    # both queries on one connection (the views read by several computed once:
    # tests/sql/test_shared_views.py shows that answers the same as `run`)
    con = connect(tmp_path / "store", views={"requests", "metric_availability"}, shared=True)
    got = run_on(con, "select engine, status, arrival_ts, ttft_s, e2e_s, tpot_s, client_itl_s, client_error "
                      "from requests order by arrival_ts").rows()
    # `date` is when the last answer came (start 1030 + 2.25 + 0.3 + 0.3 s); `duration` also
    # holds the gap before the first request, so it does not place the first
    t0 = dt.datetime(2026, 5, 12, 8, 1, 0, tzinfo=dt.timezone.utc) - dt.timedelta(seconds=32.85)
    # the request the client saw fail (its `errors` entry) is failed, not aborted
    assert [r[:2] for r in got] == [("client", "finished"), ("client", "failed"), ("client", "finished")]
    assert [r[2] for r in got] == [t0, t0 + dt.timedelta(seconds=1.5), t0 + dt.timedelta(seconds=30)]
    assert [r[3] for r in got] == [0.5, None, 2.25]
    assert got[0][4] == pytest.approx(0.9) and got[0][5] == pytest.approx(0.4 / 3) and got[2][6] == pytest.approx(0.3)
    assert got[1][7] == "ServerDisconnectedError"
    avail = dict(run_on(con, "select metric, available from metric_availability where engine = 'client'").rows())
    con.close()
    assert avail == {"e2e_s": True, "ttft_s": True, "tpot_s": True}


def test_index_match_keeps_to_the_runs_own_id_prefix(tmp_path) -> None:
    """Seen on a real vLLM 0.32 recording: the API server, busy, logged the run's first two
    requests a second late, while another client's `chatcmpl-disc-0` and `-1` were logged in
    the second the run sent its requests 0 and 1. Matched by index and time alone, the run's
    requests 0 and 1 took the other client's ones."""
    out, truth = _sim()
    text = (out / "vllm-a.log").read_text()
    lines = text.splitlines(keepends=True)
    first_two = [i for i, l in enumerate(lines) if re.search(r"Received request chatcmpl-bench-\w+-[01]: ", l)]
    assert len(first_two) == 2
    for i in reversed(first_two):
        own = lines[i]
        stamp = re.search(r"\d\d-\d\d \d\d:\d\d:(\d\d)", own)
        decoy = re.sub(r"chatcmpl-bench-\w+-([01]):", r"chatcmpl-disc-\1:", own)
        late = own[:stamp.start(1)] + f"{int(stamp.group(1)) + 1:02d}" + own[stamp.end(1):]
        assert stamp.group(1) != "59" and late != own
        lines[i:i + 1] = [decoy, late]
    work = tmp_path / "run"
    work.mkdir()
    log = work / "vllm-a.log"
    log.write_text("".join(lines))
    _old(log)
    client = _vllm_bench_file(work, truth)
    ingest([log, client], tmp_path / "store", year=2026, rollups=False)
    got = run(tmp_path / "store", "select request_id, client_index from requests where client_match = 'index_time'")
    by_index = dict(zip(got["client_index"], got["request_id"]))
    assert by_index[0].startswith("chatcmpl-bench-") and by_index[0].endswith("-0")
    assert by_index[1].startswith("chatcmpl-bench-") and by_index[1].endswith("-1")
    assert not any(r.startswith("chatcmpl-disc-") for r in got["request_id"])
    assert got.height == truth.height


def test_a_results_file_is_never_an_instance(tmp_path):
    """A real vLLM 0.32 server's log beside two `vllm bench serve --save-detailed` results
    files: the files' requests join the server's, but only the server (named after its log
    file) gets windows, signals, calibration rows, exported series and a report section."""
    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app, build_app

    build_app()
    rec = Path(__file__).parents[2] / "sample_logs" / "vllm" / "real-0.32-b"
    servers = {p.name.split(".")[0] for p in rec.glob("*.log*")}  # the server logs, by name
    assert servers == {"vllm-cpu"} and len(list(rec.glob("bench-*.json.gz"))) == 2
    store = tmp_path / "store"
    ingest([rec], store, rollups=False)
    from servelens.pipeline.query.connect import connect, run_on

    # the views derived from the events (no rollup), on one connection: the views read by
    # several computed once (tests/sql/test_shared_views.py: the same answers); the events
    # are read on it too
    views = ("windows", "window_metrics", "scaling_signals", "metric_series", "metric_snapshot", "calibration",
             "incident_summary")
    con = connect(store, rollups=False, shared=True, views=set(views))  # bound: these and what they read
    try:
        assert {r["instance"] for r in run_on(con, "select distinct instance from events where engine = 'client'").to_dicts()} == {
            "bench-low", "bench-over"}
        for view in views:
            got = {r["instance"] for r in run_on(con, f"select distinct instance from {view}").to_dicts()}
            assert got <= servers, view
    finally:
        con.close()
    from servelens.dashboards import data

    assert set(data.catalog(data.Settings(store=str(store)))["instance"].to_list()) == servers
    report = CliRunner().invoke(app, ["report", "--store", str(store), "--format", "json"])
    assert report.exit_code == 0, report.output
    assert "bench-low" not in report.stdout and "bench-over" not in report.stdout


CLIENT_OS_ERROR = ("Traceback (most recent call last):\n"
                   "  File \"/venv/lib/python3.12/site-packages/vllm/benchmarks/lib/endpoint_request_func.py\", "
                   "line 490, in async_request_openai_chat_completions\n"
                   "    async with session.post(url=api_url, json=payload, headers=headers) as response:\n"
                   "aiohttp.client_exceptions.ClientOSError: [Errno 104] Connection reset by peer\n")


def test_requests_the_client_saw_fail_are_failures_in_every_count(tmp_path) -> None:
    """A load beyond what the API server accepts: the bench's last requests fail with
    `ClientOSError` before the server logs them. They are failed requests of the server
    the run tested, the client's error the reason, in the requests view, the incident
    summary, the report's Impact and the dashboard's tile alike; the counts are the bench
    file's own."""
    from typer.testing import CliRunner

    from servelens.dashboards import data, sidebar
    from servelens.pipeline.cli.app import app, build_app

    out, truth = _sim()
    work = tmp_path / "run"
    work.mkdir()
    path = _vllm_bench_file(work, truth)
    obj = json.loads(path.read_text())
    # 7 more requests sent after the rest, each reset by the server before it was logged
    extra = 7
    last = max(obj["start_times"])
    obj["num_prompts"] += extra
    for k in range(extra):
        obj["input_lens"].append(32)
        obj["output_lens"].append(0)
        obj["ttfts"].append(0.0)
        obj["itls"].append([])
        obj["start_times"].append(last + 0.05 * (k + 1))
        obj["generated_texts"].append("")
        obj["errors"].append(CLIENT_OS_ERROR)
    path.write_text(json.dumps(obj))
    store = _with_log(tmp_path / "store")
    ingest([path], store, year=2026, rollups=False)

    # the truth, from the bench file alone
    bench = json.loads(path.read_text())
    n_failed = sum(1 for e in bench["errors"] if e)
    n_reset = sum(1 for e in bench["errors"] if "ClientOSError" in e)
    assert n_reset == extra and n_failed > n_reset  # and the ones the run's end cut off

    con = connect(store, views={"requests", "incident_summary"}, shared=True)  # the three queries on one connection
    got = run_on(con, "select engine, instance, status, failure_reason, client_match from requests where status = 'failed'")
    assert got.height == n_failed and set(got["engine"]) == {"vllm"} and set(got["instance"]) == {"vllm-a"}
    reset = got.filter(pl.col("client_match").is_null())
    assert reset.height == n_reset
    assert set(reset["failure_reason"]) == {
        f"client: aiohttp.client_exceptions.ClientOSError: [Errno 104] Connection reset by peer [{path}]"}
    assert run_on(con, "select count(*) as n from requests where status = 'aborted'")["n"][0] == 0

    summary = run_on(con, "select engine, instance, failed, aborted from incident_summary").rows()
    con.close()
    assert summary == [("vllm", "vllm-a", n_failed, 0)]
    build_app()
    res = CliRunner().invoke(app, ["report", "--store", str(store), "--format", "json", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["summary"]["impact"]["failed"] == n_failed and rep["summary"]["impact"]["aborted"] == 0
    assert f"Impact: {n_failed:,} requests failed, 0 aborted" in rep["summary"]["headline"]
    cfg = data.Settings(store=str(store))
    spec = sidebar.Spec(live=False, live_span_s=0, refresh_s=0, start=None, end=None, engines=(), instances=(),
                        models=(), window_s=60.0)
    tile = data.peaks(cfg, sidebar.resolve(spec, data.catalog(cfg)))
    assert tile["failed"] == n_failed and tile["aborted"] == 0


def test_a_request_the_client_cancelled_is_aborted_not_failed(tmp_path) -> None:
    """AIPerf marks a request it cancelled itself (`was_cancelled`, a 499
    RequestCancellationError): an abort, as a client hanging up is, not a failure."""
    src = Path(__file__).resolve().parents[2] / "sample_logs" / "client" / "profile_export.jsonl"
    recs = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    n_cancelled = sum(1 for r in recs if r["metadata"]["was_cancelled"])
    n_failed = sum(1 for r in recs if r["error"] is not None and not r["metadata"]["was_cancelled"])
    n_ok = sum(1 for r in recs if r["error"] is None)
    assert n_cancelled >= 1
    path = tmp_path / "profile_export.jsonl"
    path.write_text(src.read_text())
    _old(path)
    ingest([path], tmp_path / "store", rollups=False)
    con = connect(tmp_path / "store", views={"requests"}, shared=True)  # both queries on one connection
    got = dict(run_on(con, "select status, count(*) as n from requests group by status").rows())
    assert got == {k: v for k, v in {"finished": n_ok, "aborted": n_cancelled, "failed": n_failed}.items() if v}
    reasons = run_on(con, "select failure_reason from requests where status = 'aborted'")["failure_reason"]
    con.close()
    assert reasons.null_count() == reasons.len()


def test_a_container_wrappers_times_are_the_wrapper_source(tmp_path) -> None:
    """The same real vLLM 0.32 log as a CRI container copy: each line carries the runtime's
    nanosecond time, so a request's latency derived from its lines is the wrapper's, not
    the header's whole seconds (latency_source 'wrapper'); the truth is the times the copy
    was given, by line."""
    import gzip

    from tests.helpers.wrapping import STEP_NS, split_lines, to_cri, wrapper_time_ns

    src = Path(__file__).resolve().parents[2] / "sample_logs" / "vllm" / "real-0.32" / "vllm-cpu.log.gz"
    lines = split_lines(gzip.decompress(src.read_bytes()).decode())
    # a whole-second base at the log's own day, so the engine's header and the wrapper agree
    base = dt.datetime(2026, 12, 1, 23, 36, 0, tzinfo=dt.timezone.utc)
    times = [wrapper_time_ns(i, base) for i in range(len(lines))]
    log = tmp_path / "vllm-cpu.log"
    log.write_text(to_cri(lines, times=times))
    _old(log)
    ingest([log], tmp_path / "store", year=2026, rollups=False)
    idx = {k: next(i for i, l in enumerate(lines) if k in l) for k in (
        "Received request chatcmpl-nostream-0:", "Generated response chatcmpl-nostream-0:")}
    want = (idx["Generated response chatcmpl-nostream-0:"] - idx["Received request chatcmpl-nostream-0:"]) * STEP_NS / 1e9
    row = run(tmp_path / "store", "select e2e_s, e2e_log_s, latency_source, latency_resolution_s, e2e_estimated "
                                  "from requests where request_id = 'chatcmpl-nostream-0'").row(0, named=True)
    assert row["latency_source"] == "wrapper" and row["e2e_estimated"] and row["latency_resolution_s"] < 1
    assert row["e2e_s"] == row["e2e_log_s"] == pytest.approx(want, abs=1e-6)


N_OSERROR = 20


@lru_cache(maxsize=None)
def _lagged() -> tuple[Path, pl.DataFrame, list[float]]:
    """The simulator's overloaded run seen by a client whose requests reached the server late:
    the client sent each request up to 20 s before the server logged it (the lag grows from 0
    to 20 s over the run, as a CPU-starved API server falls behind), and 20 more requests
    failed at the client (ClientOSError) without reaching the server."""
    out, truth = _sim()
    work = Path(tempfile.mkdtemp(prefix="servelens-lagged-"))
    path = _vllm_bench_file(work, truth)
    obj = json.loads(path.read_text())
    n = truth.height
    # the client's own clock starts earlier by the lag, and its TTFT is longer by it
    lag = [20.0 * i / (n - 1) for i in range(n)]
    obj["start_times"] = [s - d for s, d in zip(obj["start_times"], lag)]
    obj["ttfts"] = [t + d if not e else t for t, d, e in zip(obj["ttfts"], lag, obj["errors"])]
    span = max(obj["start_times"]) - min(obj["start_times"])
    oserror = ("Traceback (most recent call last):\n  ...\n"
               "aiohttp.client_exceptions.ClientOSError: [Errno 99] Cannot assign requested address\n")
    for k in range(N_OSERROR):
        obj["input_lens"].append(100)
        obj["output_lens"].append(0)
        obj["ttfts"].append(0.0)
        obj["itls"].append([])
        obj["start_times"].append(min(obj["start_times"][:n]) + span * (k + 0.5) / N_OSERROR)
        obj["generated_texts"].append("")
        obj["errors"].append(oserror)
    obj["num_prompts"] = n + N_OSERROR
    path.write_text(json.dumps(obj))
    ingest([path], _with_log(work / "store"), year=2026, rollups=False)
    return work / "store", truth, lag


def test_an_overloaded_front_end_still_matches_every_request() -> None:
    """Under overload a CPU-starved API server logs `Received request` long after the client
    sent it (seen up to 19 s on a real vLLM 0.32 server): every request the server logged is
    matched to its own index, and the requests that failed at the client without reaching
    the server are failures of the server they were sent to, each saying why nothing matched."""
    store, truth, _ = _lagged()
    n = truth.height
    got = run(store, "select engine, instance, request_id, status, client_index, client_match, client_unmatched, "
                     "failure_reason from requests")
    served = truth.select("request_id", "index").join(got, on="request_id", how="left")
    # every request the server logged: matched, to the client request of its own index
    assert served["client_match"].to_list() == ["index_time"] * n
    assert served["client_index"].to_list() == served["index"].to_list()
    lost = got.filter(pl.col("client_index") >= n)
    assert lost.height == N_OSERROR
    assert set(lost["status"]) == {"failed"} and set(lost["engine"]) == {"vllm"} and set(lost["instance"]) == {"vllm-a"}
    assert lost["failure_reason"].str.starts_with(
        "client: aiohttp.client_exceptions.ClientOSError: [Errno 99] Cannot assign requested address").all()
    assert lost["client_unmatched"].str.contains("may never have reached the server").all()
    assert got["client_unmatched"].count() == N_OSERROR and got.height == n + N_OSERROR


# the client's run is placed on the wall clock to the second (vllm bench's `date`), the
# server's arrival to the second (vLLM's header): a front-end delay is that coarse
FRONTEND_RES_S = 2.0


def test_the_front_end_delay_is_the_clients_lag_per_request_window_and_tail() -> None:
    """The time between the client sending a request and the server logging it is the lag
    the client saw, per request, per window (the `frontend_delay` finding fires where it is
    long and not where it is short) and in the tail-latency explanation."""
    from servelens.pipeline.report.queueing import explain

    store, truth, lag = _lagged()
    truth = truth.with_columns(pl.Series("lag", lag))
    # one connection at the default settings, one at 20 s windows (frontend_p90_s is read by
    # scaling_signals alone)
    con = connect(store, views={"requests", "ttft_queueing"}, shared=True)
    got = run_on(con, "select request_id, frontend_delay_s from requests where client_match is not null")
    j = truth.join(got, on="request_id")
    assert j.height == truth.height
    assert (j["frontend_delay_s"] - j["lag"]).abs().max() <= FRONTEND_RES_S

    # per window of the server's arrival: the p90 of the lags the client saw
    w = 20
    win = (truth.with_columns((pl.col("arrival_ts").dt.epoch("s") // w * w).alias("ws"))
           .group_by("ws").agg(pl.col("lag").quantile(0.9, "linear").alias("p90"), pl.len().alias("n")))
    con20 = connect(store, variables={"window_s": w, "frontend_p90_s": 5.0}, views={"window_metrics", "scaling_signals"},
                    shared=True)
    wm = run_on(con20, "select epoch(window_start)::bigint as ws, n_frontend, frontend_delay_p90_s from window_metrics "
                       "where n_frontend > 0")
    both = win.join(wm, on="ws")
    assert both.height == win.height and (both["n"] == both["n_frontend"]).all()
    assert (both["frontend_delay_p90_s"] - both["p90"]).abs().max() <= FRONTEND_RES_S
    episodes = run_on(con20, "select epoch(window_start)::bigint as a, epoch(window_end)::bigint as b from scaling_signals "
                             "where signal = 'frontend_delay'").rows()
    con20.close()
    fired = {ws for ws in both["ws"] if any(a <= ws < b for a, b in episodes)}
    long = set(both.filter(pl.col("p90") > 5.0 + FRONTEND_RES_S)["ws"])
    short = set(both.filter(pl.col("p90") < 5.0 - FRONTEND_RES_S)["ws"])
    assert long and short and long <= fired and not (short & fired)

    # the tail: the slow requests (the client's TTFT at or above its p99) reached the server
    # that much later than the ones that found no queue (the first of the run: no lag)
    row = run_on(con, "select * from ttft_queueing where engine = 'vllm'").row(0, named=True)
    con.close()
    ok = j.filter(pl.col("status") == "ok").with_columns((pl.col("ttft_s") + pl.col("lag")).alias("client_ttft"))
    p99 = ok["client_ttft"].quantile(0.99, "linear")
    assert row["p99_ttft_s"] == pytest.approx(p99, rel=1e-6)
    slow_lag = ok.filter(pl.col("client_ttft") >= p99)["lag"].mean()
    assert slow_lag > 15 and abs(row["frontend_at_p99_s"] - slow_lag) <= FRONTEND_RES_S
    assert row["queueing_at_p99_s"] <= p99 - slow_lag + FRONTEND_RES_S
    assert f"{row['frontend_at_p99_s']:.3g} s of it passed before the server logged the slow requests" in explain(row)


def _all_failed_results(path: Path, model: str, n: int = 10) -> Path:
    """A `vllm bench serve` results file of a run none of whose requests reached a server
    (each one a ClientOSError), sent in the real vLLM 0.32 recording's time."""
    obj = {"date": "20261201-234000", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
           "model_id": model, "tokenizer_id": model, "num_prompts": n, "duration": 10.0, "completed": 0,
           "input_lens": [50] * n, "output_lens": [0] * n, "ttfts": [0.0] * n, "itls": [[] for _ in range(n)],
           "start_times": [100.0 + i for i in range(n)], "generated_texts": [""] * n,
           "errors": ["Traceback (most recent call last):\n  ...\naiohttp.client_exceptions.ClientOSError: "
                      "[Errno 99] Cannot assign requested address\n"] * n}
    path.write_text(json.dumps(obj))
    return _old(path)


def test_a_results_file_belongs_to_the_server_it_names_or_says_it_cannot_tell(tmp_path) -> None:
    """Three servers (copies of the real vLLM 0.32 log; two serve tiny-llama, one
    other-model) and results files none of whose requests matched: a file asking for
    other-model is that server's, one ingested with --instance is the named server's, and
    one asking for tiny-llama, which two servers serve, is nobody's, in one line."""
    import gzip

    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app, build_app

    from tests.helpers.common import SAMPLE_LOGS

    text = gzip.decompress((SAMPLE_LOGS / "vllm" / "real-0.32" / "vllm-cpu.log.gz").read_bytes()).decode()
    assert "'served_model_name': ['tiny-llama']" in text
    logs = tmp_path / "logs"
    logs.mkdir()
    # (the same bytes twice would be one file moved: a second copy starts with a line of its own)
    for name, body in (("gpu-1", text), ("gpu-2", "copy of gpu-1\n" + text),
                       ("gpu-3", text.replace("tiny-llama", "other-model"))):
        (logs / f"{name}.log").write_text(body)
        _old(logs / f"{name}.log")
    files = tmp_path / "results"
    files.mkdir()
    store = tmp_path / "store"
    ingest(sorted(logs.iterdir()), store, year=2026, rollups=False)
    ingest([_all_failed_results(files / "over-other.json", "other-model")], store, year=2026, rollups=False)
    ingest([_all_failed_results(files / "over-named.json", "tiny-llama")], store, year=2026, instance="gpu-2", rollups=False)
    ingest([_all_failed_results(files / "over-twice.json", "tiny-llama", n=12)], store, year=2026, rollups=False)
    got = run(store, "select split_part(client_source, '/', -1) as file, engine, instance, status, client_unmatched, "
                     "count(*) as n from requests where client_source like '%over-%' group by all order by file")
    rows = {r["file"]: r for r in got.iter_rows(named=True)}
    assert got.height == 3 and [r["n"] for r in got.iter_rows(named=True)] == [10, 10, 12]
    assert {r["status"] for r in rows.values()} == {"failed"}
    assert (rows["over-other.json"]["engine"], rows["over-other.json"]["instance"]) == ("vllm", "gpu-3")
    assert (rows["over-named.json"]["engine"], rows["over-named.json"]["instance"]) == ("vllm", "gpu-2")
    assert (rows["over-twice.json"]["engine"], rows["over-twice.json"]["instance"]) == ("client", "over-twice")
    why = rows["over-twice.json"]["client_unmatched"]
    assert "names none of the 3 servers" in why and "tiny-llama" in why and "--instance" in why

    build_app()
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["report", "--store", str(store), "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    summary = json.loads(out.read_text())["summary"]
    failed = {r["instance"]: r["failed"] for r in summary["impact"]["by_instance"]}
    # the client's failures counted in the Impact of the server they were sent to
    assert failed == {"gpu-1": 0, "gpu-2": 10, "gpu-3": 10}
    assert [(f["requests"], f["source"].rsplit("/", 1)[-1]) for f in summary["unassigned_clients"]] == [(12, "over-twice.json")]
    md = CliRunner().invoke(app, ["report", "--store", str(store)])
    assert md.exit_code == 0 and md.output.count("over-twice.json are counted under no server") == 1


def _queue_within_one_period(store: Path, truth: pl.DataFrame, lag: list[float], engines: int) -> tuple[int, int]:
    """(requests whose queue at arrival lies within the truth's waiting over the stats period
    before the client sent them, requests with a queue at arrival)."""
    import bisect

    out, _ = _sim()
    state = pl.read_parquet(out / "truth_state.parquet").sort("ts")
    us, waiting = state["ts"].dt.epoch("us").to_list(), state["waiting"].to_list()
    sent = truth.with_columns(pl.Series("lag", lag)).with_columns(
        (pl.col("arrival_ts").dt.epoch("us") - (pl.col("lag") * 1e6).cast(pl.Int64)).alias("sent_us"))
    got = sent.join(run(store, "select request_id, waiting_at_arrival from requests where client_match is not null"),
                    on="request_id")
    ok = n = 0
    for s, w in zip(got["sent_us"], got["waiting_at_arrival"]):
        if w is None:
            continue  # sent before the server's first stats line
        # the simulator's vLLM prints its stats every 10 s, to the second
        seg = waiting[bisect.bisect_left(us, s - 11_000_000):bisect.bisect_right(us, s + 1_000_000)]
        n += 1
        ok += bool(seg) and engines * min(seg) <= w <= engines * max(seg)
    return ok, n


def test_the_queue_at_arrival_is_the_one_the_client_sent_into_summed_over_engines(tmp_path) -> None:
    """The queue a request found is the server's when the client sent it, not when the
    server, tens of seconds behind, logged it; with data-parallel engines (`Engine 000:` and
    `Engine 001:` lines each period) it is their sum."""
    store, truth, lag = _lagged()
    ok, n = _queue_within_one_period(store, truth, lag, engines=1)
    assert n >= truth.height * 0.95 and ok == n

    # the same server as two data-parallel engines, each printing the same queue: twice it
    out, _ = _sim()
    text = (out / "vllm-a.log").read_text()
    dp = re.sub(r"^(.*\] )Engine 000: (.*)$", r"\1Engine 000: \2\n\1Engine 001: \2", text, flags=re.M)
    assert dp.count("Engine 001:") == text.count("Engine 000:") > 10
    work = tmp_path / "dp"
    work.mkdir()
    (work / "vllm-a.log").write_text(dp)
    _old(work / "vllm-a.log")
    lagged_dir = Path(store).parent
    client = next(p for p in lagged_dir.iterdir() if p.name == "vllm-bench-results.json")
    ingest([work / "vllm-a.log", client], tmp_path / "store", year=2026, rollups=False)
    ok, n = _queue_within_one_period(tmp_path / "store", truth, lag, engines=2)
    assert n >= truth.height * 0.95 and ok == n
