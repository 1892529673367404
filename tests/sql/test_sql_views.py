"""Given hand-built events, expect exact rows from each metric view."""

from __future__ import annotations


import numpy as np
import pytest

from tests.helpers.sql_helpers import at, connect_events, ev, events_frame, rows


def one(con, sql):
    out = rows(con, sql)
    assert len(out) == 1, out
    return out[0]


# --- requests ----------------------------------------------------------------------------


def test_requests_merges_vllm_lines_and_estimates_e2e():
    con = connect_events(events_frame([
        ev("request_arrived", 1, request_id="cmpl-a"),
        ev("request_arrived", 2, request_id="cmpl-a"),  # Received + Added: earliest wins
        ev("request_finished", 5, request_id="cmpl-a"),
        ev("request_arrived", 3, request_id="cmpl-b"),
        ev("request_aborted", 9, request_id="cmpl-b"),
        ev("request_arrived", 4, request_id="cmpl-c"),
    ]))
    got = {r["request_id"]: r for r in rows(con, "select * from requests")}
    a, b, c = got["cmpl-a"], got["cmpl-b"], got["cmpl-c"]
    assert (a["arrival_ts"], a["finish_ts"], a["status"]) == (at(1), at(5), "finished")
    assert a["e2e_s"] == 4.0 and a["e2e_estimated"] is True
    assert a["ttft_s"] is None and a["queue_s"] is None and a["tpot_s"] is None
    assert (b["status"], b["finish_ts"], b["e2e_s"], b["e2e_estimated"]) == ("aborted", at(9), None, False)
    assert (c["status"], c["finish_ts"], c["e2e_s"]) == ("unfinished", None, None)


def test_requests_merge_vllm_internal_ids_with_their_random_suffix():
    """vLLM >= 0.14: `Added request` shows the id `Received request` showed plus `-<8hex>`
    (vllm-project/vllm#27987). One request, not two; an id that only ends like that, or
    whose stripped form was never received, keeps its own row."""
    con = connect_events(events_frame([
        ev("request_arrived", 1, request_id="chatcmpl-0a1b2c3d4e5f6a7b", max_tokens=64),
        ev("request_arrived", 1, request_id="chatcmpl-0a1b2c3d4e5f6a7b-9f8e7d6c"),
        ev("request_aborted", 7, request_id="chatcmpl-0a1b2c3d4e5f6a7b-9f8e7d6c"),
        ev("request_arrived", 2, request_id="trace-deadbeef"),  # a caller's own id, older vLLM
        ev("request_arrived", 2, request_id="trace-deadbeef"),
        ev("request_arrived", 3, request_id="chatcmpl-ffffeeee00001111-12345678"),
        ev("request_arrived", 4, request_id="chatcmpl-0a1b2c3d4e5f6a7b", instance="i2"),
        ev("request_arrived", 4, request_id="chatcmpl-0a1b2c3d4e5f6a7b-00000000", instance="i3"),
    ]))
    got = rows(con, "select instance, request_id, status, max_tokens from requests order by instance, request_id")
    assert [(r["instance"], r["request_id"], r["status"], r["max_tokens"]) for r in got] == [
        ("i1", "chatcmpl-0a1b2c3d4e5f6a7b", "aborted", 64),
        ("i1", "chatcmpl-ffffeeee00001111-12345678", "unfinished", None),
        ("i1", "trace-deadbeef", "unfinished", None),
        ("i2", "chatcmpl-0a1b2c3d4e5f6a7b", "unfinished", None),
        ("i3", "chatcmpl-0a1b2c3d4e5f6a7b-00000000", "unfinished", None),
    ]


def test_requests_tgi_success_line_gives_exact_times():
    con = connect_events(events_frame([
        ev("request", 70.25, engine="tgi", instance="t1", e2e_s=2.5, queue_s=0.5,
           inference_s=1.9, tpot_s=0.1, attrs='{"validation_s": 0.1, "arrival_ts": "2026-05-12T08:01:07.750000000Z"}'),
    ]))
    r = one(con, "select * from requests")
    assert r["request_key"] == "t1.log:1" and r["request_id"] is None
    assert r["arrival_ts"] == at(67.75)
    assert r["finish_ts"] == at(70.25)
    assert r["status"] == "finished" and r["e2e_s"] == 2.5 and r["e2e_estimated"] is False
    assert r["validation_s"] == 0.1
    assert r["inference_start_ts"] == at(68.35)
    assert r["queue_start_ts"] == at(67.85)


def test_requests_tolerate_missing_and_broken_attrs():
    con = connect_events(events_frame([
        ev("request", 10, engine="tgi", e2e_s=1.0, attrs=None),
        ev("request", 11, engine="tgi", e2e_s=1.0, attrs="{not json"),
        ev("request", 12, engine="tgi", e2e_s=1.0, attrs='{"validation_s": "x"}'),
    ]))
    got = rows(con, "select validation_s, arrival_ts from requests order by finish_ts")
    assert [g["validation_s"] for g in got] == [None, None, None]
    assert [g["arrival_ts"] for g in got] == [at(9), at(10), at(11)]


# --- latency percentiles -------------------------------------------------------------------


def test_latency_percentiles_linear_interpolation_per_window():
    e2e = [1.0, 2.0, 3.0, 4.0, 10.0]
    evs = [ev("request", 5 + i, engine="tgi", e2e_s=v, queue_s=v / 10, tpot_s=0.01 * (i + 1))
           for i, v in enumerate(e2e)]
    evs.append(ev("request", 65, engine="tgi", e2e_s=7.0))  # next window
    con = connect_events(events_frame(evs))
    got = rows(con, "select * from latency_percentiles order by window_start")
    assert [g["window_start"] for g in got] == [at(0), at(60)]
    w = got[0]
    assert w["window_end"] == at(60) and w["n"] == 5 and w["n_e2e"] == 5 and w["n_ttft"] == 0
    for q in (50, 90, 95, 99):
        assert w[f"p{q}_e2e_s"] == pytest.approx(float(np.quantile(e2e, q / 100)), abs=1e-12)
    assert w["p99_e2e_s"] == pytest.approx(9.76)
    assert w["p50_queue_s"] == pytest.approx(0.3)
    assert w["p99_ttft_s"] is None  # TGI: not logged, null not 0
    assert w["max_e2e_s"] == 10.0 and w["e2e_estimated"] is False
    assert got[1]["n"] == 1 and got[1]["p50_e2e_s"] == 7.0 and got[1]["p50_queue_s"] is None


def test_latency_percentiles_window_variable():
    evs = [ev("request", t, engine="tgi", e2e_s=1.0) for t in (5, 35, 65)]
    con = connect_events(events_frame(evs), variables={"window_s": 30})
    got = rows(con, "select window_start, n from latency_percentiles order by 1")
    assert got == [{"window_start": at(0), "n": 1}, {"window_start": at(30), "n": 1},
                   {"window_start": at(60), "n": 1}]


# --- queue depth / request state -----------------------------------------------------------


def tgi_req(finish, e2e, queue, inference, **kw):
    return ev("request", finish, engine="tgi", instance=kw.pop("instance", "t1"),
              e2e_s=e2e, queue_s=queue, inference_s=inference, **kw)


def test_queue_depth_logged_for_vllm():
    con = connect_events(events_frame([
        ev("engine_stats", 10, running=4, waiting=0),
        ev("engine_stats", 20, running=8, waiting=12),
    ]))
    got = rows(con, "select ts, waiting, source, estimated from queue_depth order by ts")
    assert got == [
        {"ts": at(10), "waiting": 0, "source": "logged", "estimated": False},
        {"ts": at(20), "waiting": 12, "source": "logged", "estimated": False},
    ]


def test_queue_depth_reconstructed_for_tgi():
    # request A queued [1.5, 3.5), runs [3.5, 6.0); B queued [2.2, 4.2), runs [4.2, 5.0)
    con = connect_events(events_frame([
        tgi_req(6.0, e2e=4.6, queue=2.0, inference=2.5),
        tgi_req(5.0, e2e=2.9, queue=2.0, inference=0.8),
    ]))
    got = rows(con, "select ts, waiting, source, estimated from queue_depth order by ts")
    assert {g["source"] for g in got} == {"reconstructed"} and all(g["estimated"] for g in got)
    # samples every second from the first queue entry (floored) to the last event
    assert [(g["ts"], g["waiting"]) for g in got] == [
        (at(1), 0), (at(2), 1), (at(3), 2), (at(4), 1), (at(5), 0), (at(6), 0),
    ]
    running = rows(con, "select ts, running from batch_fill order by ts")
    assert [(g["ts"], g["running"]) for g in running] == [
        (at(1), 0), (at(2), 0), (at(3), 0), (at(4), 1), (at(5), 1), (at(6), 0),
    ]


def test_queue_depth_interval_counts_at_start_not_end():
    # queued exactly [2, 4), runs [4, 5)
    con = connect_events(events_frame([tgi_req(5.0, e2e=3.0, queue=2.0, inference=1.0)]))
    got = rows(con, "select ts, waiting from queue_depth order by ts")
    assert [(g["ts"], g["waiting"]) for g in got] == [(at(2), 1), (at(3), 1), (at(4), 0), (at(5), 0)]


def test_logged_queue_wins_over_reconstruction():
    con = connect_events(events_frame([
        ev("batch", 1, engine="tgi", instance="t1", waiting=3),
        tgi_req(5.0, e2e=3.0, queue=2.0, inference=1.0),
    ]))
    got = rows(con, "select ts, waiting, source from queue_depth")
    assert got == [{"ts": at(1), "waiting": 3, "source": "logged"}]


# --- capacity / batch fill -----------------------------------------------------------------


def test_capacity_latest_announcement_per_limit():
    con = connect_events(events_frame([
        ev("capacity", 0, max_num_seqs=128, kv_blocks_total=1000),
        ev("capacity", 1, max_batch_tokens=8192),
        ev("capacity", 100, max_num_seqs=256),  # restart with a new limit
    ]))
    assert one(con, "select * exclude (engine, instance) from capacity") == {
        "max_num_seqs": 256, "max_batch_tokens": 8192, "kv_blocks_total": 1000,
        "kv_capacity_tokens": None, "announced_ts": at(100),
    }


def test_batch_fill_uses_limit_in_force_at_the_time():
    con = connect_events(events_frame([
        ev("capacity", 0, max_num_seqs=128, max_batch_tokens=4096),
        ev("engine_stats", 10, running=32),
        ev("capacity", 100, max_num_seqs=256),
        ev("engine_stats", 110, running=32),
        ev("batch", 120, batch_size=8, batch_tokens=1024),
    ]))
    got = rows(con, "select ts, running, max_num_seqs, fill, token_fill, source from batch_fill order by ts")
    assert got == [
        {"ts": at(10), "running": 32, "max_num_seqs": 128, "fill": 0.25, "token_fill": None, "source": "logged"},
        {"ts": at(110), "running": 32, "max_num_seqs": 256, "fill": 0.125, "token_fill": None, "source": "logged"},
        {"ts": at(120), "running": 8, "max_num_seqs": 256, "fill": 8 / 256, "token_fill": 0.25, "source": "logged"},
    ]


def test_trtllm_triton_stats_scheduled_fill_and_derived_queue():
    # Triton stats: Active Request Count 12 (parser: running), Scheduled Requests 10
    # (batch_size), Max Request Count 64 (attrs), no queue field
    con = connect_events(events_frame([
        ev("engine_stats", 1, engine="trtllm", running=12, batch_size=10,
           attrs='{"max_request_count": 64}'),
    ]))
    r = one(con, "select running, active, max_num_seqs, fill from batch_fill")
    assert r == {"running": 10, "active": 12, "max_num_seqs": 64, "fill": 10 / 64}
    q = one(con, "select waiting, source, estimated from queue_depth")
    assert q == {"waiting": 2, "source": "derived", "estimated": True}
    w = one(con, "select available, estimated from metric_availability where metric = 'waiting'")
    assert w == {"available": True, "estimated": True}


def test_batch_fill_without_limit_is_null_not_zero():
    con = connect_events(events_frame([ev("engine_stats", 1, running=12)]))
    assert one(con, "select max_num_seqs, fill from batch_fill") == {"max_num_seqs": None, "fill": None}


# --- KV cache ------------------------------------------------------------------------------


def test_kv_cache_usage_blocks_and_preemptions():
    con = connect_events(events_frame([
        ev("engine_stats", 10, kv_usage=0.5),
        ev("preemption", 12),
        ev("preemption", 15),
        ev("engine_stats", 20, kv_usage=0.97, attrs='{"preemptions": 3}'),
        ev("engine_stats", 30, kv_usage=0.4),
        ev("engine_stats", 5, engine="trtllm", instance="t", kv_blocks_used=30, kv_blocks_total=120),
    ]))
    got = rows(con, "select engine, ts, kv_usage, preemptions, preemption_lines from kv_cache order by engine, ts")
    assert got == [
        {"engine": "trtllm", "ts": at(5), "kv_usage": 0.25, "preemptions": None, "preemption_lines": 0},
        {"engine": "vllm", "ts": at(10), "kv_usage": 0.5, "preemptions": None, "preemption_lines": 0},
        {"engine": "vllm", "ts": at(20), "kv_usage": 0.97, "preemptions": 3, "preemption_lines": 2},
        {"engine": "vllm", "ts": at(30), "kv_usage": 0.4, "preemptions": None, "preemption_lines": 0},
    ]


def test_tgi_has_no_kv_rows():
    con = connect_events(events_frame([tgi_req(5.0, e2e=3.0, queue=2.0, inference=1.0)]))
    assert rows(con, "select * from kv_cache") == []


# --- throughput / errors -------------------------------------------------------------------


def test_throughput_counts_and_nulls_for_unlogged():
    con = connect_events(events_frame([
        ev("request_arrived", 1, request_id="a"),
        ev("request_finished", 3, request_id="a"),
        ev("request_arrived", 50, request_id="b"),
        ev("request_finished", 70, request_id="b"),
        ev("engine_stats", 10, gen_tps=100.0, prompt_tps=50.0),
        ev("engine_stats", 20, gen_tps=300.0, prompt_tps=0.0),
        ev("engine_stats", 130, engine="trtllm", instance="x", running=1),
        ev("http_access", 131, engine="trtllm", instance="x", http_status=200),
        ev("http_access", 132, engine="trtllm", instance="x", http_status=503),
    ]))
    got = rows(con, """select engine, window_start, arrived, finished, requests_per_s, gen_tps_logged,
                       prompt_tps_logged, output_tokens_per_s, http_requests, http_errors
                       from throughput order by engine, window_start""")
    assert got == [
        {"engine": "trtllm", "window_start": at(120), "arrived": None, "finished": None, "requests_per_s": None,
         "gen_tps_logged": None, "prompt_tps_logged": None, "output_tokens_per_s": None,
         "http_requests": 2, "http_errors": 1},
        {"engine": "vllm", "window_start": at(0), "arrived": 2, "finished": 1, "requests_per_s": 1 / 60,
         "gen_tps_logged": 200.0, "prompt_tps_logged": 25.0, "output_tokens_per_s": None,
         "http_requests": None, "http_errors": None},
        {"engine": "vllm", "window_start": at(60), "arrived": 0, "finished": 1, "requests_per_s": 1 / 60,
         "gen_tps_logged": None, "prompt_tps_logged": None, "output_tokens_per_s": None,
         "http_requests": None, "http_errors": None},
    ]


def test_errors_by_kind_and_window():
    con = connect_events(events_frame([
        ev("error", 1, level="ERROR", message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ev("error", 2, level="ERROR", message="EngineCore encountered a fatal error."),
        ev("log", 3, level="ERROR", message="Failed to send event. Receiver dropped."),
        ev("error", 4, level="WARNING", message="no permits available"),
        ev("http_access", 5, http_status=429),
        ev("http_access", 6, http_status=500),
        ev("http_access", 7, http_status=200),
        ev("log", 8, level="WARNING", message="something odd"),
        ev("error", 70, level="ERROR", message="CUDA out of memory"),
    ]))
    got = rows(con, "select window_start, kind, n_errors, first_ts from errors order by window_start, kind")
    assert [(g["window_start"], g["kind"], g["n_errors"], g["first_ts"]) for g in got] == [
        (at(0), "client_disconnect", 1, at(3)),
        (at(0), "cuda_oom", 1, at(1)),
        (at(0), "engine_dead", 1, at(2)),
        (at(0), "http_5xx", 1, at(6)),
        (at(0), "overloaded", 2, at(4)),
        (at(60), "cuda_oom", 1, at(70)),
    ]
    first = one(con, "select first_message, first_line from errors where kind = 'cuda_oom' and window_start = "
                     "(select min(window_start) from errors)")
    assert first == {"first_message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                     "first_line": 1}


# --- metric availability -------------------------------------------------------------------


def test_metric_availability_explains_nulls():
    con = connect_events(events_frame([
        ev("engine_stats", 1, running=1, waiting=0, kv_usage=0.1),
        tgi_req(5.0, e2e=3.0, queue=2.0, inference=1.0),
    ]))
    got = {(r["engine"], r["metric"]): r for r in rows(con, "select * from metric_availability")}
    assert {e for e, _ in got} == {"vllm", "tgi"}
    assert got[("vllm", "ttft_s")]["available"] is False
    assert "vLLM logs no per-request time to first token" in got[("vllm", "ttft_s")]["reason"]
    assert got[("vllm", "kv_usage")]["available"] is True and got[("vllm", "kv_usage")]["n_values"] == 1
    assert got[("tgi", "kv_usage")]["available"] is False
    assert "TGI logs no KV-cache usage" in got[("tgi", "kv_usage")]["reason"]
    w = got[("tgi", "waiting")]
    assert w["available"] is True and w["estimated"] is True and "reconstructed" in w["reason"]
    assert got[("tgi", "e2e_s")]["available"] is True and got[("tgi", "e2e_s")]["estimated"] is False
    assert all(r["reason"] for r in got.values())


def test_metric_availability_reads_each_view_beneath_it_once():
    """DuckDB plans a view anew at every place a query names it: metric_availability counts
    over requests, queue_depth, batch_fill, kv_cache and latency_percentiles in many branches,
    each of which reads the view's one materialized copy, not the view again."""
    from collections import Counter

    import duckdb

    from servelens.pipeline.query.views import sql_files, view_dependencies, view_name, view_sql

    sql = view_sql(next(p for p in sql_files() if view_name(p) == "metric_availability"))
    tokens = duckdb.tokenize(sql)
    words = [sql[start:tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)].strip().strip('"').lower()
             for i, (start, _kind) in enumerate(tokens)]
    reads = Counter(w for prev, w in zip(words, words[1:]) if prev in ("from", "join"))
    deps = view_dependencies()["metric_availability"]
    assert {"requests", "queue_depth", "batch_fill", "kv_cache", "latency_percentiles"} <= deps
    assert {v: reads[v] for v in deps} == {v: 1 for v in deps}


def test_throughput_finishes_null_when_never_logged():
    # vLLM V1: `Added request` lines, no `Finished request` ever
    con = connect_events(events_frame([
        ev("request_arrived", 1, request_id="a"),
        ev("request_arrived", 2, request_id="b"),
    ]))
    assert one(con, "select arrived, finished, aborted, requests_per_s from throughput") == {
        "arrived": 2, "finished": None, "aborted": None, "requests_per_s": None,
    }


def test_every_view_answers_on_an_empty_store():
    from servelens.parsers.schema import empty_events
    from servelens.pipeline.query.views import sql_files, view_name

    con = connect_events(empty_events())
    for path in sql_files():
        assert rows(con, f"select * from {view_name(path)}") == [], path.name


def test_unknown_engine_lines_give_windows_and_errors_only():
    con = connect_events(events_frame([
        ev("unparsed", 1, engine="unknown", instance="x", level="ERROR", message="Traceback: boom"),
        ev("unparsed", 200, engine="unknown", instance="x", message="hello"),
    ]))
    assert rows(con, "select kind, n_errors from errors") == [{"kind": "other", "n_errors": 1}]
    assert rows(con, "select * from metric_availability") == []
    assert len(rows(con, "select * from windows")) == 4
    assert {r["idle"] for r in rows(con, "select idle from window_metrics")} == {None}


def test_throughput_failed_requests_only_do_not_make_zero_finishes():
    # TensorRT-LLM: "Encountered error for requestId N" lines, no other request lines
    con = connect_events(events_frame([
        ev("request_aborted", 1, engine="trtllm", request_id="7605", level="ERROR"),
        ev("engine_stats", 70, engine="trtllm", running=1),
    ]))
    got = rows(con, "select arrived, finished, aborted, requests_per_s, failed from throughput order by window_start")
    assert got == [
        {"arrived": None, "finished": None, "aborted": 0, "requests_per_s": None, "failed": 1},
        {"arrived": None, "finished": None, "aborted": 0, "requests_per_s": None, "failed": 0},
    ]


def test_trtllm_executor_queue_is_queued_plus_active_not_scheduled():
    # executor stats: numQueuedRequests 5 (waiting), numActiveRequests 12 (running),
    # numScheduledRequests 10 (batch_size)
    con = connect_events(events_frame([
        ev("engine_stats", 1, engine="trtllm", running=12, batch_size=10, waiting=5),
    ]))
    assert one(con, "select waiting, source, estimated from queue_depth") == {
        "waiting": 7, "source": "logged", "estimated": False,
    }


def test_logs_stitched_from_far_apart_times_stay_a_small_grid():
    # real excerpts pasted from bug reports a year apart, in one file: the grids cover the
    # activity (plus at most a day of empty windows), not the year between
    year = 365 * 86400
    con = connect_events(events_frame([
        tgi_req(6.0, e2e=4.6, queue=2.0, inference=2.5),
        ev("engine_stats", 30, engine="tgi", instance="t1"),
        tgi_req(year + 6.0, e2e=2.0, queue=1.0, inference=1.0),
    ]))
    samples = rows(con, "select ts, waiting from queue_depth order by ts")
    assert len(samples) == 6 + 3  # [1, 6] and [year + 4, year + 6], one a second
    assert samples[-3:] == [
        {"ts": at(year + 4), "waiting": 1}, {"ts": at(year + 5), "waiting": 0}, {"ts": at(year + 6), "waiting": 0},
    ]
    windows = rows(con, "select window_start from windows order by window_start")
    assert len(windows) == 1 + 1440 + 1  # the first window, a day of silence, the last
    assert windows[-1]["window_start"] == at(year)
