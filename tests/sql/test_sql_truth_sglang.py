"""The metric views on SGLang against the simulator's ground truth: simulated SGLang logs (and
the per-request metrics files written beside them) go through the parser and the store, and
what the SQL says must be what happened. Like tests/sql/test_sql_truth.py, for SGLang."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
from tests.helpers.sql_helpers import CANDIDATE_TRUTH_STATES, announced

pytestmark = pytest.mark.slow

DURATION_S = 1200
SHORT = {"steady": 600}
SEED = 7
T0 = "2026-05-12T08:00:00Z"
ACTION_SIGNALS = ("queue_backlog", "kv_pressure", "scheduler_limit", "latency_slo_e2e", "latency_slo_ttft", "errors")
VIEWS = {"batch_fill", "capacity", "engine_stats", "latency_percentiles", "metric_availability", "queue_depth",
         "requests", "scaling_signals", "window_metrics"}


@lru_cache(maxsize=None)
def _out(scenario: str, variant: str = "v0_5") -> Path:
    """The run's directory: the simulated logs, the truth and the store."""
    from servelens.pipeline.ingest import ingest
    from servelens.pipeline.simulate import simulate
    from tests.helpers.run_store import built_once, run_tmp

    def build(store: Path) -> None:
        out = store.parent
        simulate("sglang", scenario, SHORT.get(scenario, DURATION_S), seed=SEED, out_dir=out, start=T0, variant=variant)
        # the server logs and each instance's per-request metrics files (<instance>/...)
        # (no rollups: the views are checked against the truth as the events give them; what
        # a rollup stores is checked equal to that in tests/store/test_rollups.py)
        ingest(sorted(out.rglob("*.log")), store, year=2026, rollups=False)

    # built once per run, read by every pytest-xdist worker whose tests need it
    # (tests/helpers/run_store.py; the tests only read it)
    return built_once(run_tmp(), f"truth-sglang-{scenario}-{variant}", build).parent


@lru_cache(maxsize=None)
def connect(scenario: str, variant: str = "v0_5"):
    from servelens.pipeline.query.connect import connect as connect_store

    out = _out(scenario, variant)
    # the sandboxed connection opens the store's parts and the files named here, nothing else
    # (bound: the views the tests below read, and those beneath them)
    con = connect_store(out / "store", readable=(out / "truth_requests.parquet", out / "truth_state.parquet"), shared=True,
                        views=VIEWS)
    con.execute(f"create view truth_requests as select * from read_parquet('{out / 'truth_requests.parquet'}')")
    con.execute(f"create view truth_state as select * from read_parquet('{out / 'truth_state.parquet'}')")
    return con


def one(con, sql):
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    (row,) = cur.fetchall()
    return dict(zip(cols, row))


def at_fraction(f: float) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(T0.replace("Z", "+00:00")).timestamp() + f * DURATION_S


def test_exported_request_latency_percentiles_equal_truth():
    con = connect("spike")
    got = one(con, """
        with truth as (
            select instance, floor(epoch(finish_ts) / 60) * 60 as w, count(*) as n,
                   quantile_cont(e2e_s, 0.50) as p50_e2e, quantile_cont(e2e_s, 0.99) as p99_e2e,
                   quantile_cont(ttft_s, 0.50) as p50_ttft, quantile_cont(ttft_s, 0.99) as p99_ttft,
                   quantile_cont(tpot_s, 0.99) as p99_tpot, quantile_cont(queue_s, 0.99) as p99_queue
            from truth_requests where status = 'ok' group by all
        ),
        views as (
            select instance, epoch(window_start) as w, n, p50_e2e_s, p99_e2e_s, p50_ttft_s, p99_ttft_s,
                   p99_tpot_s, p99_queue_s, e2e_estimated
            from latency_percentiles
        )
        select count(*) as windows,
               count(*) filter (where truth.n is distinct from views.n) as n_differ,
               bool_or(e2e_estimated) as estimated,
               max(abs(p50_e2e - p50_e2e_s)) as d50, max(abs(p99_e2e - p99_e2e_s)) as d99,
               max(abs(p50_ttft - p50_ttft_s)) as dt50, max(abs(p99_ttft - p99_ttft_s)) as dt99,
               max(abs(p99_tpot - p99_tpot_s)) as dtpot, max(abs(p99_queue - p99_queue_s)) as dq99
        from truth full join views using (instance, w)
    """)
    assert got["windows"] >= DURATION_S // 60
    assert got["n_differ"] == 0 and got["estimated"] is False
    # JSON floats of Unix times: ~1e-7 s; durations as printed: exact to float noise
    for k in ("d50", "d99", "dq99", "dtpot"):
        assert got[k] < 1e-9, (k, got[k])
    for k in ("dt50", "dt99"):
        assert got[k] < 1e-6, (k, got[k])


def test_requests_join_the_scheduler_lines_of_the_same_server():
    con = connect("spike")
    got = one(con, """
        select count(distinct r.instance) as n_inst,
               count(*) filter (where s.instance is null) as orphans, count(*) as n
        from requests r left join (select distinct instance from engine_stats) s using (instance)
        where r.status = 'finished'
    """)
    assert got["n"] > 1000 and got["orphans"] == 0 and got["n_inst"] == 1


@pytest.mark.parametrize("variant", ["v0_5", "v0_4"])
def test_logged_state_matches_truth(variant):
    """Every Decode batch line's running / waiting / KV, and every Prefill batch line's
    waiting and running + new requests, is a state the engine was in during its second."""
    con = connect("spike", variant)
    got = one(con, f"""
        with s as (
            select ts, line, instance, event, running, waiting, kv_usage,
                   coalesce(try_cast(json_extract_string(attrs, '$.new_seq') as bigint), 0) as new_seq
            from events where event in ('engine_stats', 'batch') and engine = 'sglang'
        ),
{CANDIDATE_TRUTH_STATES},
        m as (
            select line, instance, event,
                   -- a prefill line's #running-req is the batch before the new requests join
                   bool_or(running + case when event = 'batch' then new_seq else 0 end = tr
                           and waiting = tw
                           and abs(kv_usage - tk) <= 0.005 + 1e-9) as ok
            from cand group by all
        )
        select (select count(*) from s) as n, (select count(*) from s where event = 'batch') as n_prefill,
               count(*) filter (where ok) as matched from m
    """)
    assert got["n"] >= 1000 and got["n_prefill"] >= 300
    assert got["matched"] == got["n"]


def test_capacity_and_batch_fill_use_the_announced_limits():
    con = connect("spike")
    cap = one(con, "select max_num_seqs, max_batch_tokens, kv_capacity_tokens from capacity where instance = 'sglang-a'")
    (seqs,) = announced(_out("spike"), r"max_running_requests=(\d+)")
    (chunk,) = announced(_out("spike"), r"chunked_prefill_size=(\d+)")
    (tokens,) = announced(_out("spike"), r"max_total_num_tokens=(\d+)")
    assert cap == {"max_num_seqs": seqs, "max_batch_tokens": chunk, "kv_capacity_tokens": tokens}
    fill = one(con, "select min(max_num_seqs) as lo, max(fill) as fill, max(token_fill) as tf from batch_fill")
    assert fill["lo"] == seqs and 0 < fill["fill"] <= 1 and 0 < fill["tf"] <= 1


def test_pd_views_keep_the_prefill_and_the_decode_worker_apart():
    con = connect("spike", "pd")
    inst = [r[0] for r in con.sql("select distinct instance from queue_depth order by 1").fetchall()]
    assert inst == ["sglang-a:decode", "sglang-a:prefill"]
    # the prefill worker's queue is the model's waiting queue; the decode worker's is empty
    got = one(con, """
        select max(waiting) filter (where instance = 'sglang-a:prefill') as pre_max,
               max(waiting) filter (where instance = 'sglang-a:decode') as dec_max
        from queue_depth
    """)
    truth = one(con, "select max(waiting) as m from truth_state where ts >= timestamp '2026-05-12 08:00:00'")
    assert got["dec_max"] == 0 and 0 < got["pre_max"] <= truth["m"]
    # window metrics: the surge's backlog is the prefill worker's, undiluted by the decode's zeros
    w = one(con, """
        select max(waiting_max) filter (where instance = 'sglang-a:prefill') as pre,
               max(waiting_max) filter (where instance = 'sglang-a:decode') as dec,
               count(*) filter (where instance = 'sglang-a') as base_rows_with_queue
        from window_metrics where waiting_max is not null
    """)
    assert w["pre"] == got["pre_max"] and w["dec"] == 0 and w["base_rows_with_queue"] == 0


def test_retractions_count_once_across_tp_ranks():
    con = connect("kv-pressure")
    got = one(con, """
        select count(*) filter (where event = 'preemption') as pre,
               count(*) filter (where event = 'log' and attrs like '%rank_copy%') as copies
        from events where message like 'KV cache pool is full%'
    """)
    truth = one(con, """
        select count(*) filter (where rise > 0) as steps
        from (select preemptions_cum - lag(preemptions_cum, 1, 0) over (partition by instance order by ts) as rise
              from truth_state)
    """)
    assert got["pre"] > 0 and got["copies"] == got["pre"]  # --tp 2: one copy each
    assert got["pre"] == truth["steps"]


def signals(con):
    return con.sql("""select instance, signal, severity, epoch(window_start) as s, epoch(window_end) as e
                      from scaling_signals order by s""").fetchall()


def test_steady_fires_no_action_signal():
    assert [s for s in signals(connect("steady")) if s[1] in ACTION_SIGNALS] == []


def test_spike_fires_queue_backlog_during_the_surge():
    got = signals(connect("spike"))
    backlog = [s for s in got if s[1] == "queue_backlog"]
    assert len(backlog) == 1
    _, _, severity, s, e = backlog[0]
    assert severity == "critical"
    assert at_fraction(0.30) - 60 <= s <= at_fraction(0.30) + 120
    assert at_fraction(0.55) <= e <= at_fraction(0.55) + 300
    assert [x for x in got if x[1] in ACTION_SIGNALS and x[3] < at_fraction(0.30) - 60] == []


def test_incident_crash_then_survivors_overloaded():
    got = signals(connect("incident"))
    crash = at_fraction(0.60)
    errs = [s for s in got if s[1] == "errors"]
    assert [(s[0], s[2]) for s in errs] == [("sglang-a", "critical")]
    assert crash - 60 <= errs[0][3] <= crash
    for inst in ("sglang-b", "sglang-c"):
        after = [s for s in got if s[0] == inst and s[1] in ACTION_SIGNALS and s[3] >= crash - 60]
        assert after, inst


def test_metric_availability_says_what_sglang_gives():
    con = connect("spike")
    rows = dict(
        (m, (a, r)) for m, a, r in con.sql(
            "select metric, available, reason from metric_availability where engine = 'sglang'"
        ).fetchall()
    )
    assert {m for m, (a, _) in rows.items() if a} == {
        "e2e_s", "ttft_s", "tpot_s", "queue_s", "waiting", "running", "fill", "kv_usage", "gen_tps", "preemptions"
    }
    assert "counted once across TP ranks" in rows["preemptions"][1]
    steady = dict(
        (m, (a, r)) for m, a, r in connect("steady").sql(
            "select metric, available, reason from metric_availability where engine = 'sglang'"
        ).fetchall()
    )
    assert steady["preemptions"][0] is False and "no retractions" in steady["preemptions"][1]


def test_kv_pressure_fires_in_the_long_prompt_phase():
    got = signals(connect("kv-pressure"))
    kv = [s for s in got if s[1] == "kv_pressure"]
    assert kv  # SGLang logs its KV usage and every retraction
    assert all(at_fraction(0.25) - 60 <= s[3] and s[4] <= at_fraction(0.75) + 120 for s in kv)
