"""The metric views against the simulator's ground truth: simulated logs go through the real
parsers and the store, and what the SQL says must be what happened.

Skipped, with the reason, when the simulator or an engine's parser is not present."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
from tests.helpers.sql_helpers import CANDIDATE_TRUTH_STATES, announced

pytestmark = pytest.mark.slow

DURATION_S = 1200  # 20 min: the spike's surge (30%..55% of the run) lasts 5 min
SHORT = {"steady": 600}  # healthy traffic needs no long run to show it stays quiet
SEED = 7
T0 = "2026-05-12T08:00:00Z"
# signals that mean "act": none may fire on healthy traffic
ACTION_SIGNALS = ("queue_backlog", "kv_pressure", "scheduler_limit", "latency_slo_e2e", "latency_slo_ttft", "errors",
                  "fleet_imbalance")


VIEWS = {"latency_percentiles", "requests", "queue_depth", "batch_fill", "kv_cache", "scaling_signals",
         "metric_availability", "capacity"}


@lru_cache(maxsize=None)
def _run(engine: str, scenario: str, variant: str | None = None) -> Path:
    """Simulate, ingest into a store, return the directory (logs, truth, store/): once per
    run, read by every pytest-xdist worker whose tests need it (tests/helpers/run_store.py;
    the tests only read it)."""
    from servelens.pipeline.ingest import ingest
    from servelens.pipeline.simulate import simulate
    from tests.helpers.run_store import built_once, run_tmp

    def build(store: Path) -> None:
        out = store.parent
        simulate(engine, scenario, SHORT.get(scenario, DURATION_S), seed=SEED, out_dir=out, start=T0,
                 variant=variant)
        # no rollups: the views are checked against the truth as the events give them (what
        # a rollup stores is checked equal to that in tests/store/test_rollups.py)
        ingest(sorted(out.glob("*.log")), store, year=2026, rollups=False)

    return built_once(run_tmp(), f"truth-{engine}-{scenario}-{variant}", build).parent


def connect_truth(engine: str, scenario: str, variant: str | None = None):
    return _connect(engine, scenario, variant)


@lru_cache(maxsize=None)
def _connect(engine: str, scenario: str, variant: str | None):
    from servelens.pipeline.query.connect import connect

    d = _run(engine, scenario, variant)
    # the truth tables are files the sandboxed connection must be told it may read
    # bound: the views the tests below read, and those beneath them
    con = connect(d / "store", readable=(d / "truth_requests.parquet", d / "truth_state.parquet"), shared=True,
                  views=VIEWS)
    con.execute(f"create view truth_requests as select * from read_parquet('{d / 'truth_requests.parquet'}')")
    con.execute(f"create view truth_state as select * from read_parquet('{d / 'truth_state.parquet'}')")
    return con


def one(con, sql):
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    (row,) = cur.fetchall()  # fetch all: this DuckDB refuses new work while a result is open
    return dict(zip(cols, row))


def at_fraction(f: float) -> float:
    """Epoch seconds of the moment `f` of the way through the run."""
    import datetime as dt

    start = dt.datetime.fromisoformat(T0.replace("Z", "+00:00")).timestamp()
    return start + f * DURATION_S


# --- latency: exact where the log carries exact durations -------------------------------


@pytest.mark.parametrize("scenario", ["spike", "kv-pressure"])
def test_tgi_latency_percentiles_equal_truth(scenario):
    con = connect_truth("tgi", scenario)
    got = one(con, """
        with truth as (
            select instance, floor(epoch(finish_ts) / 60) * 60 as w, count(*) as n,
                   quantile_cont(e2e_s, 0.50) as p50_e2e, quantile_cont(e2e_s, 0.99) as p99_e2e,
                   quantile_cont(queue_s, 0.90) as p90_queue, quantile_cont(queue_s, 0.99) as p99_queue
            from truth_requests where status = 'ok' group by all
        ),
        views as (
            select instance, epoch(window_start) as w, n, p50_e2e_s, p99_e2e_s, p90_queue_s, p99_queue_s
            from latency_percentiles
        )
        select count(*) as windows,
               count(*) filter (where truth.n is distinct from views.n) as n_differ,
               max(abs(p50_e2e - p50_e2e_s)) as d50, max(abs(p99_e2e - p99_e2e_s)) as d99,
               max(abs(p90_queue - p90_queue_s)) as dq90, max(abs(p99_queue - p99_queue_s)) as dq99
        from truth full join views using (instance, w)
    """)
    assert got["windows"] >= DURATION_S // 60
    assert got["n_differ"] == 0
    for k in ("d50", "d99", "dq90", "dq99"):
        assert got[k] < 1e-9, (k, got[k])


def test_vllm_e2e_is_estimated_within_the_log_resolution():
    con = connect_truth("vllm", "steady")
    got = one(con, """
        select count(*) as n, max(abs(r.e2e_s - t.e2e_s)) as maxd, bool_and(r.e2e_estimated) as est
        from requests r join truth_requests t using (instance, request_id)
        where r.status = 'finished' and t.status = 'ok'
    """)
    assert got["n"] > 500 and got["est"] is True
    assert got["maxd"] <= 1.0  # two timestamps at 1 s resolution


# --- queue depth, batch fill, KV --------------------------------------------------------


def test_tgi_reconstructed_queue_matches_truth():
    con = connect_truth("tgi", "spike")
    exact = one(con, """
        with q as (select ts, instance, waiting from queue_depth where source = 'reconstructed'),
        iv as (select instance, queue_start, start_ts from truth_requests where status = 'ok')
        select count(*) as n,
               count(*) filter (where q.waiting <> (
                   select count(*) from iv
                   where iv.instance = q.instance and iv.queue_start <= q.ts and iv.start_ts > q.ts
               )) as differ
        from q
    """)
    # one sample a second over the busy periods: under this load, nearly the whole run
    assert exact["n"] >= 0.95 * DURATION_S and exact["differ"] == 0
    # against the engine's own state (taken at iteration starts, so arrivals inside an
    # iteration show up one iteration later there): close, and the peak agrees
    near = one(con, """
        select avg(abs(q.waiting - t.waiting)) as mae, max(q.waiting) as peak, max(t.waiting) as truth_peak
        from queue_depth q asof join truth_state t on q.instance = t.instance and q.ts >= t.ts
    """)
    assert near["mae"] < 0.2
    assert abs(near["peak"] - near["truth_peak"]) <= 0.02 * near["truth_peak"]


@pytest.mark.parametrize(
    "engine, variant", [("vllm", "v0"), ("vllm", "v1"), ("trtllm", "triton"), ("trtllm", "executor")]
)
def test_logged_state_matches_truth(engine, variant):
    """Every logged snapshot (running / waiting / KV) is a state the engine was in during
    the second its timestamp names."""
    con = connect_truth(engine, "spike", variant if variant not in ("v0", "triton") else None)
    got = one(con, f"""
        with s as (
            select b.ts, b.instance, b.running, b.max_num_seqs, q.waiting, q.source, k.kv_usage
            from batch_fill b
            join queue_depth q using (ts, instance)
            join kv_cache k using (ts, instance)
        ),
{CANDIDATE_TRUTH_STATES},
        m as (
            select ts, instance,
                   -- Triton stats see only the queue inside the active set (a lower bound):
                   -- at most Max Request Count - running
                   bool_or(running = tr
                           and waiting = case when source = 'derived' then least(tw, max_num_seqs - tr) else tw end
                           -- the log prints one decimal of a percent: +-0.05 % (plus float noise)
                           and abs(kv_usage - tk) <= 0.0005 + 1e-9) as ok
            from cand group by all
        )
        select (select count(*) from s) as n, count(*) filter (where ok) as matched from m
    """)
    assert got["n"] >= 100 and got["matched"] == got["n"]


def test_batch_fill_uses_the_announced_limit():
    con = connect_truth("vllm", "spike")
    got = one(con, "select min(max_num_seqs) as lo, max(max_num_seqs) as hi, max(fill) as fill from batch_fill")
    limit = announced(_run("vllm", "spike"), r"max_num_seqs=(\d+)")
    assert len(limit) == 1 and got["lo"] == got["hi"] == limit.pop()
    assert 0 < got["fill"] <= 1


# --- signals ----------------------------------------------------------------------------


def signals(con):
    return con.sql("""select instance, signal, severity, epoch(window_start) as s, epoch(window_end) as e
                      from scaling_signals order by s""").fetchall()


@pytest.mark.parametrize("engine", ["vllm", "tgi", "trtllm"])
def test_steady_fires_no_action_signal(engine):
    got = [s for s in signals(connect_truth(engine, "steady")) if s[1] in ACTION_SIGNALS]
    assert got == []


@pytest.mark.parametrize("engine", ["vllm", "tgi", "trtllm"])
def test_spike_fires_queue_backlog_during_the_surge(engine):
    got = signals(connect_truth(engine, "spike"))
    backlog = [s for s in got if s[1] == "queue_backlog"]
    assert len(backlog) == 1
    _, _, severity, s, e = backlog[0]
    assert severity == "critical"
    assert at_fraction(0.30) - 60 <= s <= at_fraction(0.30) + 120  # starts with the surge
    assert at_fraction(0.55) <= e <= at_fraction(0.55) + 300  # lasts past it, then drains
    # nothing calls for action before the surge
    assert [x for x in got if x[1] in ACTION_SIGNALS and x[3] < at_fraction(0.30) - 60] == []
    # the throughput follows the traffic and the backlog: not a swing to investigate
    assert [x for x in got if x[1] == "throughput_swing"] == []


def test_kv_pressure_fires_in_the_long_prompt_phase_vllm():
    got = signals(connect_truth("vllm", "kv-pressure"))
    kv = [s for s in got if s[1] == "kv_pressure"]
    assert kv and all(s[2] == "critical" for s in kv)  # vLLM V0 logs its preemptions
    assert all(at_fraction(0.25) <= s[3] and s[4] <= at_fraction(0.75) + 120 for s in kv)


def test_kv_pressure_without_kv_logs_tgi_shows_the_latency_tail():
    con = connect_truth("tgi", "kv-pressure")
    got = signals(con)
    assert [s for s in got if s[1] == "kv_pressure"] == []  # TGI logs no KV usage ...
    reason = one(con, "select available, reason from metric_availability where engine = 'tgi' and metric = 'kv_usage'")
    assert reason["available"] is False and "TGI logs no KV-cache usage" in reason["reason"]
    tail = [s for s in got if s[1] == "latency_slo_e2e"]  # ... but the latency tail shows
    assert tail and all(at_fraction(0.25) <= s[3] <= at_fraction(0.75) + 120 for s in tail)


@pytest.mark.parametrize("engine", ["vllm", "tgi", "trtllm"])
def test_incident_crash_then_survivors_overloaded(engine):
    got = signals(connect_truth(engine, "incident"))
    crash = at_fraction(0.60)
    errs = [s for s in got if s[1] == "errors"]
    assert [(s[0], s[2]) for s in errs] == [(f"{engine}-a", "critical")]
    assert crash - 60 <= errs[0][3] <= crash
    # the survivors take the crashed instance's traffic: each one shows overload after it
    for inst in (f"{engine}-b", f"{engine}-c"):
        after = [s for s in got if s[0] == inst and s[1] in ACTION_SIGNALS and s[3] >= crash - 60]
        assert after, inst
        assert [s for s in got if s[0] == inst and s[1] in ACTION_SIGNALS and s[3] < at_fraction(0.35)] == []


def test_kv_pressure_trtllm_shows_as_a_scheduler_limit():
    """GUARANTEED_NO_EVICT reserves each sequence's whole KV up front: used KV stays low while
    requests wait, which the views can only see as a batch held below its limit."""
    got = signals(connect_truth("trtllm", "kv-pressure"))
    assert [s for s in got if s[1] == "kv_pressure"] == []
    limit = [s for s in got if s[1] == "scheduler_limit"]
    assert limit and all(at_fraction(0.25) - 60 <= s[3] <= at_fraction(0.75) + 120 for s in limit)


# --- llama.cpp: exact per-request timings from the timing block ----------------------------


@pytest.mark.parametrize("scenario", ["spike", "kv-pressure"])
def test_llamacpp_latency_percentiles_and_tpot_equal_truth(scenario):
    """llama.cpp's total time runs from the start of prompt processing (the wait for a free
    slot is not logged), so its e2e is the truth's finish - start; values are printed to
    0.01 ms, the relative times to the microsecond."""
    con = connect_truth("llamacpp", scenario)
    got = one(con, """
        with truth as (
            select instance, floor(epoch(finish_ts) / 60) * 60 as w, count(*) as n,
                   quantile_cont(inference_s, 0.50) as p50_e2e, quantile_cont(inference_s, 0.99) as p99_e2e,
                   quantile_cont(tpot_s, 0.50) as p50_tpot, quantile_cont(tpot_s, 0.99) as p99_tpot
            from truth_requests where status = 'ok' group by all
        ),
        views as (
            select instance, epoch(window_start) as w, n, p50_e2e_s, p99_e2e_s, p50_tpot_s, p99_tpot_s
            from latency_percentiles
        )
        select count(*) as windows,
               count(*) filter (where truth.n is distinct from views.n) as n_differ,
               max(abs(p50_e2e - p50_e2e_s)) as d50, max(abs(p99_e2e - p99_e2e_s)) as d99,
               max(abs(p50_tpot - p50_tpot_s)) as dt50, max(abs(p99_tpot - p99_tpot_s)) as dt99
        from truth full join views using (instance, w)
    """)
    assert got["windows"] >= DURATION_S // 60
    assert got["n_differ"] == 0
    for k in ("d50", "d99"):
        assert got[k] <= 5e-6 + 1e-9, (k, got[k])
    for k in ("dt50", "dt99"):
        assert got[k] <= 5e-6, (k, got[k])
    cap = one(con, "select min(max_num_seqs) as lo, max(max_num_seqs) as hi from capacity where engine = 'llamacpp'")
    slots = announced(_run("llamacpp", scenario), r"n_slots = (\d+)")
    assert len(slots) == 1 and (cap["lo"], cap["hi"]) == (min(slots), max(slots))  # n_slots, as announced
    avail = one(con, """
        select bool_and(available) filter (where metric in ('e2e_s', 'tpot_s')) as timed,
               bool_or(available) filter (where metric in ('ttft_s', 'queue_s', 'waiting', 'kv_usage')) as untimed
        from metric_availability where engine = 'llamacpp'
    """)
    assert avail == {"timed": True, "untimed": False}


def test_llamacpp_busy_slots_are_reconstructed_exactly_and_waiting_stays_unknown():
    """Slots busy = requests between slot launch (start) and finish, from the timing blocks;
    fill is against the announced n_slots. llama.cpp logs no queue: waiting is null, not 0."""
    con = connect_truth("llamacpp", "spike")
    exact = one(con, """
        with b as (select ts, instance, running, fill, max_num_seqs from batch_fill where engine = 'llamacpp'),
        iv as (select instance, start_ts, finish_ts from truth_requests where status = 'ok')
        select count(*) as n, max(running) as peak, max(fill) as max_fill, min(max_num_seqs) as lim,
               count(*) filter (where b.running <> (
                   select count(*) from iv
                   where iv.instance = b.instance and iv.start_ts <= b.ts and iv.finish_ts > b.ts
               )) as differ
        from b
    """)
    assert exact["n"] >= 0.9 * DURATION_S and exact["differ"] == 0
    (slots,) = announced(_run("llamacpp", "spike"), r"n_slots = (\d+)")
    assert exact["lim"] == slots and exact["peak"] == slots and exact["max_fill"] == 1.0  # the surge fills every slot
    q = one(con, "select count(*) as n, count(waiting) as known from queue_depth where engine = 'llamacpp'")
    assert q["n"] > 0 and q["known"] == 0
