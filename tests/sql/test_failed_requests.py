"""Failed requests, counted for every engine: a request an error line is about, or one still
in the server when its engine died, is `failed` with the reason, apart from client aborts.
Checked on hand-built events and against the simulator's truth for the incident sample."""

from __future__ import annotations


import polars as pl

from tests.helpers.sql_helpers import at, connect_events, ev, events_frame, rows
from tests.helpers.dashboard_store import INCIDENT


def test_engine_death_fails_the_requests_in_flight_but_not_a_healthy_logs_tail():
    con = connect_events(events_frame([
        ev("request_arrived", 1, request_id="done"),
        ev("request_finished", 3, request_id="done"),
        ev("request_arrived", 2, request_id="cut"),
        ev("request_arrived", 4, request_id="gone"),
        ev("request_aborted", 5, request_id="gone", level="INFO"),  # the client left: aborted
        ev("error", 6, level="ERROR", message="EngineCore encountered a fatal error.\nTraceback ..."),
        # a healthy instance whose log simply ends with a request in flight
        ev("request_arrived", 1, instance="ok", request_id="x"),
        ev("request_finished", 2, instance="ok", request_id="x"),
        ev("request_arrived", 3, instance="ok", request_id="y"),
    ]))
    got = {(r["instance"], r["request_id"]): r for r in rows(con, "select * from requests")}
    assert got[("i1", "done")]["status"] == "finished" and got[("i1", "done")]["failure_reason"] is None
    assert got[("i1", "gone")]["status"] == "aborted" and got[("i1", "gone")]["failure_reason"] is None
    cut = got[("i1", "cut")]
    assert cut["status"] == "failed" and cut["finish_ts"] == at(6)
    assert cut["failure_reason"] == "engine died: EngineCore encountered a fatal error. [i1.log:6]"
    assert got[("ok", "y")]["status"] == "unfinished"
    t = rows(con, "select instance, sum(failed) as failed, sum(aborted) as aborted from throughput group by all order by 1")
    assert t == [{"instance": "i1", "failed": 1, "aborted": 1}, {"instance": "ok", "failed": 0, "aborted": 0}]


def test_error_lines_about_a_request_make_it_failed():
    con = connect_events(events_frame([
        # TensorRT-LLM: an abort logged as an ERROR names the request
        ev("request_aborted", 1, engine="trtllm", instance="t", request_id="7",
           level="ERROR", message="Encountered error for requestId 7: out of memory"),
        # TGI: one error line per failed request, no id
        ev("error", 2, engine="tgi", instance="g", level="ERROR",
           message="Request failed during generation: Server error: CUDA out of memory.",
           attrs='{"error_kind": "generation"}'),
        ev("error", 2, engine="tgi", instance="g", level="ERROR", message="Shard 0 crashed"),
        ev("request", 1, engine="tgi", instance="g", e2e_s=0.5, inference_s=0.4, queue_s=0.1),
    ]))
    got = rows(con, "select engine, status, failure_reason from requests order by engine, status")
    assert got == [
        {"engine": "tgi", "status": "failed",
         "failure_reason": "Request failed during generation: Server error: CUDA out of memory. [g.log:2]"},
        {"engine": "tgi", "status": "finished", "failure_reason": None},
        {"engine": "trtllm", "status": "failed", "failure_reason": "Encountered error for requestId 7: out of memory [t.log:1]"},
    ]


def test_incident_failed_requests_match_the_truth(incident_store):
    from servelens.pipeline.query.connect import run

    got = run(incident_store, "select instance, status, count(*) as n, count(failure_reason) as with_reason "
                              "from requests where status in ('failed', 'aborted', 'unfinished') group by all")
    truth = pl.concat([pl.read_parquet(p).select("instance", "status") for p in INCIDENT.glob("*/truth_requests.parquet")])
    for engine in ("vllm", "tgi", "trtllm"):
        inst = f"{engine}-a"
        n_true = truth.filter((pl.col("instance") == inst) & (pl.col("status") == "error")).height
        mine = got.filter((pl.col("instance") == inst) & (pl.col("status") == "failed"))
        assert n_true == 18 and mine["n"].to_list() == [n_true] and mine["with_reason"].to_list() == [n_true], inst
        # the survivor's requests in flight at the end of its log are not failures
        assert got.filter((pl.col("instance") == f"{engine}-b") & (pl.col("status") == "failed")).is_empty()
    assert got.filter(pl.col("status") == "aborted").is_empty()
    unfinished = truth.filter(pl.col("status") == "unfinished").group_by("instance").len()
    assert dict(got.filter(pl.col("status") == "unfinished").select("instance", "n").rows()) == {
        "vllm-b": unfinished.filter(pl.col("instance") == "vllm-b")["len"][0]}
