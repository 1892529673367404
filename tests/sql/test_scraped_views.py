"""The ordinary views take what the log lacks from the server's own /metrics.

A real vLLM 0.32 server with default logging (V1: no per-request line, never a
`Preemptions:` field) recorded with its /metrics scraped: its log and its scrapes are
ingested together, and queue_depth, kv_cache, latency_percentiles, window_metrics,
scaling_signals and metric_availability must give what the scrape bodies say, read here with a
plain regex, with the percentiles computed here the way PromQL's histogram_quantile computes
them (written from the Prometheus documentation, not from servelens's SQL)."""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import connect, run_on, run as run_query

build_app()
VLLM = Path(__file__).parents[1] / "fixtures" / "vllm" / "scraped"
WINDOW_S = 60
LINE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrapes() -> list[tuple[float, dict[tuple, float]]]:
    """(time, {(name, labels without le, le): value}) per recorded scrape."""
    out: list[tuple[float, dict[tuple, float]]] = []
    for line in gzip.open(VLLM / "metrics.prom.gz", "rt").read().splitlines():
        if m := re.match(r"# scrape at ([\d.]+)$", line):
            out.append((float(m[1]), {}))
        elif line and not line.startswith("#"):
            m = LINE_RE.match(line)
            labels = dict(LABEL_RE.findall(m[2] or ""))
            le = labels.pop("le", None)
            out[-1][1][(m[1], tuple(sorted(labels.items())), None if le is None else float(le))] = float(m[3])
    return out


def gauge(name: str) -> list[tuple[float, float]]:
    return [(t, sum(v for (n, _, _), v in body.items() if n == name)) for t, body in scrapes()]


def window_increases(name: str) -> dict[int, float]:
    """Per window (index of its start), the increase of the series of `name` between each
    scrape in the window and the scrape before it, summed (a reset: the new value)."""
    rows = scrapes()
    out: dict[int, float] = {}
    for (_, prev), (t, cur) in zip(rows, rows[1:]):
        w = int(t // WINDOW_S)
        for key, v in cur.items():
            if key[0] == name and key in prev:
                out[w] = out.get(w, 0.0) + (v - prev[key] if v >= prev[key] else v)
    return out


def bucket_increases(family: str) -> dict[int, dict[float, float]]:
    """Per window, each bucket's increase (le -> count), summed over the label sets."""
    rows = scrapes()
    out: dict[int, dict[float, float]] = {}
    for (_, prev), (t, cur) in zip(rows, rows[1:]):
        w = int(t // WINDOW_S)
        for key, v in cur.items():
            if key[0] == family + "_bucket" and key in prev:
                b = out.setdefault(w, {})
                b[key[2]] = b.get(key[2], 0.0) + (v - prev[key] if v >= prev[key] else v)
    return out


def scraped_count(family: str) -> int:
    """The observations of a histogram family over the recording: its buckets' +Inf increases."""
    return int(sum(b[math.inf] for b in bucket_increases(family).values()))


def stats_lines() -> int:
    """The log's periodic stats lines, counted with a plain substring."""
    return sum("Avg prompt throughput" in ln for ln in gzip.decompress((VLLM / "server.log.gz").read_bytes()).decode().splitlines())


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """PromQL's histogram_quantile over one set of cumulative buckets (le -> count)."""
    les = sorted(buckets)
    counts = [buckets[le] for le in les]
    for i in range(1, len(counts)):  # PromQL makes the buckets monotonic
        counts[i] = max(counts[i], counts[i - 1])
    assert math.isinf(les[-1])
    rank = q * counts[-1]
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if i == len(les) - 1:
        return les[-2]
    start = 0.0 if i == 0 else les[i - 1]
    below = 0.0 if i == 0 else counts[i - 1]
    return start + (les[i] - start) * (rank - below) / (counts[i] - below)


def bucket_width(value: float, buckets: dict[float, float]) -> float:
    les = sorted(le for le in buckets if not math.isinf(le))
    upper = next(le for le in les if le >= value)
    return upper - max([le for le in les if le < upper], default=0.0)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def rows(store: Path, sql: str, **variables) -> list[dict]:
    return run_query(store, sql, variables=variables or None).to_dicts()


def _rows_on(con, sql: str) -> list[dict]:
    return run_on(con, sql).to_dicts()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """The server's log (as written) and its scrapes, ingested together."""
    d = tmp_path_factory.mktemp("vllm-scraped")
    (d / "in").mkdir()
    (d / "in" / "vllm-a.log.gz").write_bytes((VLLM / "server.log.gz").read_bytes())
    (d / "in" / "metrics.prom.gz").write_bytes((VLLM / "metrics.prom.gz").read_bytes())
    r = invoke("ingest", d / "in", "--store", d / "store", "-q")
    assert r.exit_code == 0, r.output
    return d / "store"


@pytest.fixture(scope="module")
def statless_store(tmp_path_factory) -> Path:
    """The same server's log without its periodic stats lines (as with --disable-log-stats),
    beside the same scrapes."""
    d = tmp_path_factory.mktemp("vllm-statless")
    (d / "in").mkdir()
    text = gzip.decompress((VLLM / "server.log.gz").read_bytes()).decode()
    kept = [ln for ln in text.splitlines(keepends=True) if "Avg prompt throughput" not in ln]
    assert len(kept) == len(text.splitlines()) - 80  # the 80 stats lines the log has, counted
    (d / "in" / "vllm-a.log").write_text("".join(kept))
    (d / "in" / "metrics.prom.gz").write_bytes((VLLM / "metrics.prom.gz").read_bytes())
    r = invoke("ingest", d / "in", "--store", d / "store", "-q")
    assert r.exit_code == 0, r.output
    return d / "store"


def test_the_log_has_no_latency_the_views_have_the_histograms(store):
    log = gzip.decompress((VLLM / "server.log.gz").read_bytes()).decode()
    assert not re.search(r"Finished request|Generated response|Received request|Added request", log)
    assert rows(store, "select count(*) as n from requests")[0]["n"] == 0
    got = {int(r["w"]) // WINDOW_S: r for r in rows(store, """
        select epoch(window_start) as w, * from latency_percentiles where instance = 'vllm-a'""")}
    checked = 0
    for meaning, family in (("ttft", "vllm:time_to_first_token_seconds"),
                            ("tpot", "vllm:request_time_per_output_token_seconds"),
                            ("e2e", "vllm:e2e_request_latency_seconds"),
                            ("queue", "vllm:request_queue_time_seconds")):
        windows = {w: b for w, b in bucket_increases(family).items() if b[math.inf] > 0}
        assert set(windows) == set(got), meaning
        for w, buckets in windows.items():
            r = got[w]
            assert r[f"n_{meaning}"] == buckets[math.inf]
            assert r[f"{meaning}_source"] == "scrape" and r["latency_source"] == "scrape" and r["bucket_estimate"]
            for q in (0.5, 0.9, 0.95, 0.99):
                want = histogram_quantile(q, buckets)
                value = r[f"p{round(q * 100)}_{meaning}_s"]
                assert abs(value - want) <= bucket_width(want, buckets), (meaning, w, q)
                assert value == pytest.approx(want, rel=1e-9)
                checked += 1
    assert checked == 4 * 4 * 2
    # the requests the server finished in each window: the e2e histogram's count
    e2e = bucket_increases("vllm:e2e_request_latency_seconds")
    assert {w: r["n"] for w, r in got.items()} == {w: b[math.inf] for w, b in e2e.items() if b[math.inf] > 0}
    count = gauge("vllm:e2e_request_latency_seconds_count")
    assert sum(r["n"] for r in got.values()) == count[-1][1] - count[0][1] == 407
    assert {r["model"] for r in got.values()} == {"tiny-llama"}


def test_window_metrics_and_signals_read_the_scraped_latency_and_preemptions(store):
    wm = {int(r["w"]) // WINDOW_S: r for r in rows(store, """
        select epoch(window_start) as w, * from window_metrics where instance = 'vllm-a'""")}
    e2e = bucket_increases("vllm:e2e_request_latency_seconds")
    ttft = bucket_increases("vllm:time_to_first_token_seconds")
    for w, r in wm.items():
        if w in e2e and e2e[w][math.inf] > 0:
            assert r["p99_e2e_s"] == pytest.approx(histogram_quantile(0.99, e2e[w]), rel=1e-9)
            assert r["p99_ttft_s"] == pytest.approx(histogram_quantile(0.99, ttft[w]), rel=1e-9)
            assert r["n_latency"] == e2e[w][math.inf] and r["latency_source"] == "scrape"
            assert r["e2e_source"] == r["ttft_source"] == "scrape" and not r["e2e_estimated"]
        else:
            assert r["p99_e2e_s"] is None and r["n_latency"] == 0
            assert r["e2e_source"] is None
    # vLLM 0.32 never prints its preemptions: the counter gives them, 0 in each window
    # (not null, "no data"); the counter's total over the windows is what the bodies say
    preempt = window_increases("vllm:num_preemptions_total")
    assert preempt and all(r["preemptions"] == int(preempt.get(w, 0)) for w, r in wm.items())
    assert sum(r["preemptions"] for r in wm.values()) == gauge("vllm:num_preemptions_total")[-1][1] - gauge("vllm:num_preemptions_total")[0][1]
    # an SLO the overload broke: the signal fires from the scraped percentile
    slo = histogram_quantile(0.99, e2e[max(e2e)]) - 1
    sig = rows(store, "select * from scaling_signals where signal = 'latency_slo_e2e'", slo_p99_e2e_s=slo)
    assert [s["value"] for s in sig] == [pytest.approx(slo + 1, rel=1e-9)]
    # ... and says the figure is a bucket estimate, not an exact or a log-timestamp one
    assert sig[0]["estimated"] and sig[0]["unit"] == "s (p99 end-to-end, /metrics buckets)"
    assert "bucket estimate of the server's /metrics histogram" in sig[0]["recommendation"]
    assert "1 s log timestamps" not in sig[0]["recommendation"]
    slo = histogram_quantile(0.99, ttft[max(ttft)]) / 2
    sig = rows(store, "select * from scaling_signals where signal = 'latency_slo_ttft'", slo_p99_ttft_s=slo)
    assert sig and all(s["estimated"] and "/metrics buckets" in s["unit"] for s in sig)
    assert all("bucket estimate" in s["recommendation"] for s in sig)


def test_availability_names_the_scrape(store):
    got = {r["metric"]: r for r in rows(store, "select * from metric_availability where engine = 'vllm'")}
    n_ttft = sum(b[math.inf] for b in bucket_increases("vllm:time_to_first_token_seconds").values())
    assert got["ttft_s"]["available"] and got["ttft_s"]["n_values"] == n_ttft
    assert got["ttft_s"]["sources"] == f"scrape {int(n_ttft)}"
    assert "vllm:time_to_first_token_seconds" in got["ttft_s"]["reason"] and "bucket estimates" in got["ttft_s"]["reason"]
    assert got["e2e_s"]["sources"] == f"scrape {scraped_count('vllm:e2e_request_latency_seconds')}"
    assert got["e2e_s"]["estimated"]
    # the preemption counter's increase: one value per scrape after the first
    increases = len(gauge("vllm:num_preemptions_total")) - 1
    assert got["preemptions"]["available"] and got["preemptions"]["sources"] == f"scrape {increases}"
    assert "vllm:num_preemptions" in got["preemptions"]["reason"]
    # what the log gives stays the log's
    assert got["waiting"]["sources"] is None and got["waiting"]["n_values"] == stats_lines()
    assert got["kv_usage"]["reason"].startswith("logged by the periodic stats line")


def test_report_says_where_each_figure_comes_from(store, tmp_path):
    out = tmp_path / "r.md"
    r = invoke("report", "--store", store, "-o", out)
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "bucket estimate from the server's /metrics histogram" in text
    assert "preemptions (the server's /metrics): 0" in text
    assert f"values by source: scrape {scraped_count('vllm:e2e_request_latency_seconds')}" in text


def test_without_stats_lines_queue_running_and_kv_are_the_scrapes(statless_store):
    s = statless_store
    # the queries at the default settings on one shared connection (test_shared_views.py:
    # the same answers as `run`)
    con = connect(s, views={"queue_depth", "batch_fill", "kv_cache", "window_metrics", "metric_availability"}, shared=True)
    try:
        _statless_checks(s, con)
    finally:
        con.close()


def _statless_checks(s: Path, con) -> None:
    queue = _rows_on(con, "select epoch_ms(ts) / 1000.0 as t, waiting, source, estimated from queue_depth order by ts")
    assert [(round(q["t"], 3), q["waiting"]) for q in queue] == [(round(t, 3), v) for t, v in gauge("vllm:num_requests_waiting")]
    assert {(q["source"], q["estimated"]) for q in queue} == {("scraped", False)}
    run_rows = _rows_on(con, "select running, max_num_seqs, fill, source from batch_fill order by ts")
    assert [x["running"] for x in run_rows] == [v for _, v in gauge("vllm:num_requests_running")]
    assert {x["source"] for x in run_rows} == {"scraped"}
    # max_num_seqs 4 from the log's args: the fill of the scraped running count
    assert all(x["max_num_seqs"] == 4 and x["fill"] == x["running"] / 4 for x in run_rows)
    kv = _rows_on(con, "select kv_usage from kv_cache where kv_usage is not null order by ts")
    assert [x["kv_usage"] for x in kv] == [v for _, v in gauge("vllm:kv_cache_usage_perc")]
    # the queue signal from the scraped queue: window averages of the gauge, counted here
    by_window: dict[int, list[float]] = {}
    for t, v in gauge("vllm:num_requests_waiting"):
        by_window.setdefault(int(t // WINDOW_S), []).append(v)
    wm = {int(r["w"]) // WINDOW_S: r["waiting_avg"] for r in _rows_on(con, "select epoch(window_start) as w, waiting_avg from window_metrics")}
    assert {w: wm[w] for w in by_window} == {w: pytest.approx(sum(v) / len(v)) for w, v in by_window.items()}
    peak = max(sum(v) / len(v) for v in by_window.values())
    sig = rows(s, "select value, estimated from scaling_signals where signal = 'queue_backlog'",
               queue_waiting=10, queue_sustain_s=WINDOW_S)
    assert sig == [{"value": pytest.approx(peak), "estimated": False}]
    avail = {r["metric"]: r for r in _rows_on(con, "select * from metric_availability where engine = 'vllm'")}
    assert avail["waiting"]["sources"] == f"scrape {len(queue)}"
    assert "vllm:num_requests_waiting" in avail["waiting"]["reason"]



def test_dashboard_names_the_scrape_beside_its_charts(store, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("SERVELENS_STORE", str(store))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "dashboards" / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    captions = [c.value for c in at.caption if c.value.startswith("Values by source")]
    n_e2e = scraped_count("vllm:e2e_request_latency_seconds")
    assert any(f"vllm: scrape {n_e2e}" in c for c in captions), captions  # the e2e latency chart
    n_ttft = scraped_count("vllm:time_to_first_token_seconds")
    assert any(f"vllm: scrape {n_ttft}" in c for c in captions), captions
