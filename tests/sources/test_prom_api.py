"""`servelens ingest --prometheus` against a real Prometheus on loopback: the recorded real
vLLM 0.32 scrapes are backfilled into a TSDB with `promtool tsdb create-blocks-from
openmetrics` (with the `instance` / `job` labels Prometheus gives a scraped target), the
server is started on it, and what comes out of its HTTP API over the range must equal what
`servelens ingest` stores from the file of the same scrapes. Under CI=true a missing
prometheus / promtool fails (tests/conftest.py); elsewhere the tests skip."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run as run_query

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool missing: run tests/e2e/install_prometheus.sh (make test does)")

build_app()
VLLM = Path(__file__).parents[1] / "fixtures" / "vllm" / "scraped"
TARGET = "127.0.0.1:8432"  # the port the recorded server's log announces
WAIT_S = 120.0


def scrapes() -> list[tuple[str, str]]:
    """(time as written, body) of each recorded scrape."""
    text = gzip.open(VLLM / "metrics.prom.gz", "rt").read()
    out = []
    for block in re.split(r"(?m)^(?=# scrape at )", text):
        if block.startswith("# scrape at "):
            head, body = block.split("\n", 1)
            out.append((head.split()[-1], body))
    return out


def openmetrics(path: Path) -> int:
    """The scrapes as OpenMetrics with timestamps and the target labels a scrape gets
    (what `promtool tsdb create-blocks-from openmetrics` reads). Returns the samples written."""
    lines = []
    for at, body in scrapes():
        for ln in body.splitlines():
            if not ln or ln.startswith("#"):
                continue
            m = re.match(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$", ln)
            assert m, ln
            labels = ",".join(x for x in (m[2], f'instance="{TARGET}",job="vllm"') if x)
            lines.append(f"{m[1]}{{{labels}}} {m[3]} {at}")
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return len(lines)


def series() -> set[str]:
    """The distinct series (name and labels) of the recorded scrapes, read with a plain regex."""
    return {ln.rsplit(" ", 1)[0] for _, body in scrapes() for ln in body.splitlines() if ln and not ln.startswith("#")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom-api")
    n = openmetrics(tmp / "vllm.om")
    data = tmp / "tsdb"
    res = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp / "vllm.om"), str(data)],
                         capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode()
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1h}\n")
    port = free_port()
    # the recording's samples must stay inside the retention whenever this runs
    proc = subprocess.Popen(["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
                            stdout=subprocess.DEVNULL, stderr=open(tmp / "prometheus.log", "wb"))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"prometheus did not become ready: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield base, n
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def samples(store: Path) -> set[tuple]:
    rows = run_query(store, "select name, labels, le, quantile, epoch_us(ts) as t, value, instance from samples")
    return {(r["name"], r["labels"], r["le"], r["quantile"], r["t"], repr(r["value"]), r["instance"])
            for r in rows.to_dicts()}


RANGE = ["--since", "2026-12-05T07:44:00Z", "--until", "2026-12-05T07:46:00Z"]


def test_prometheus_over_the_range_equals_the_scrapes_from_the_file(prometheus, tmp_path):
    base, n = prometheus
    from_file = tmp_path / "file.store"
    prom = (tmp_path / "metrics.prom.gz")
    prom.write_bytes((VLLM / "metrics.prom.gz").read_bytes())
    r = invoke("ingest", prom, "--store", from_file, "--instance", "vllm-a", "-q")
    assert r.exit_code == 0, r.output
    from_prom = tmp_path / "prom.store"
    r = invoke("ingest", "--prometheus", base, *RANGE, "--match", '{__name__=~".+"}', "--instance", "vllm-a",
               "--store", from_prom)
    assert r.exit_code == 0, r.output
    got, want = samples(from_prom), samples(from_file)
    n_series, n_scrapes = len(series()), len(scrapes())
    assert len(want) == n == n_scrapes * n_series  # every sample line of every scrape, counted as written
    assert got == want
    assert f"{n:,} samples of {n_series} series in {n_scrapes} scrape(s), {n:,} new" in r.stdout
    # the same again adds nothing; nor do the file's scrapes into the store Prometheus filled
    r = invoke("ingest", "--prometheus", base, *RANGE, "--match", '{__name__=~".+"}', "--instance", "vllm-a",
               "--store", from_prom)
    assert r.exit_code == 0 and f"{n:,} samples of {n_series} series in {n_scrapes} scrape(s), 0 new" in r.stdout
    assert invoke("ingest", prom, "--store", from_prom, "--instance", "vllm-a", "-q").exit_code == 0
    assert run_query(from_prom, "select count(*) as n from samples")["n"][0] == n


def test_the_default_match_takes_the_engine_metrics_under_the_logs_instance(prometheus, tmp_path):
    base, _ = prometheus
    store = tmp_path / "store"
    log = tmp_path / "vllm-a.log.gz"
    log.write_bytes((VLLM / "server.log.gz").read_bytes())
    assert invoke("ingest", log, "--store", store, "-q").exit_code == 0
    r = invoke("ingest", "--prometheus", base, *RANGE, "--store", store)
    assert r.exit_code == 0, r.output
    assert "its log announced port 8432" in r.stdout
    rows = run_query(store, "select distinct instance, target from samples").to_dicts()
    assert rows == [{"instance": "vllm-a", "target": TARGET}]
    names = set(run_query(store, "select distinct name from samples")["name"].to_list())
    assert names and all(n.startswith("vllm:") for n in names)
    # the queue the server reported, scrape by scrape, read from the bodies
    waiting = [float(re.search(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)$", b, re.M)[1]) for _, b in scrapes()]
    view = run_query(store, "select value from scraped_gauges where meaning = 'waiting' order by ts")["value"].to_list()
    assert view == waiting and max(waiting) >= 10
    assert set(run_query(store, "select distinct instance from scraped_gauges")["instance"].to_list()) == {"vllm-a"}
    # one server, one instance: its log's events and its samples together
    both = run_query(store, "select count(distinct instance) as n from (select instance from events "
                            "union all select instance from samples)")["n"][0]
    assert both == 1


def test_step_reads_the_series_every_step(prometheus, tmp_path):
    base, _ = prometheus
    store = tmp_path / "store"
    since, until, step_s = "2026-12-05T07:44:40Z", "2026-12-05T07:45:40Z", 10
    r = invoke("ingest", "--prometheus", base, "--since", since, "--until", until,
               "--step", f"{step_s}s", "--match", "vllm:num_requests_waiting", "--store", store)
    assert r.exit_code == 0, r.output
    got = run_query(store, "select epoch(ts) as t, value from samples order by ts").to_dicts()
    t0, t1 = (dt.datetime.fromisoformat(t).timestamp() for t in (since, until))
    assert [g["t"] for g in got] == [t0 + step_s * i for i in range(int((t1 - t0) // step_s))]
    # each step holds the latest scrape at or before it (PromQL's lookback)
    truth = [(float(at), float(re.search(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)$", b, re.M)[1])) for at, b in scrapes()]
    for g in got:
        assert g["value"] == max((t, v) for t, v in truth if t <= g["t"])[1]


def test_errors_are_one_line(prometheus, tmp_path):
    base, _ = prometheus
    store = tmp_path / "store"
    dead = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["--prometheus", dead, *RANGE], f"cannot reach Prometheus at {dead}: connection refused"),
        (["--prometheus", base], "--prometheus needs --since"),
        (["--prometheus", base, "--since", "2026-12-05T08:00Z", "--until", "2026-12-05T07:00Z"], "must be before --until"),
        (["--prometheus", base, *RANGE, "--match", "rate(x[5m])"], f"Prometheus at {base} refused query (HTTP 400)"),
        (["--prometheus", base, *RANGE, "--step", "soon"], "--step: cannot read duration 'soon'"),
        (["--match", "x", *RANGE], "give --prometheus URL"),
    ]
    for args, message in cases:
        r = invoke("ingest", *args, "--store", store)
        assert r.exit_code == 1, args
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("servelens: error: ") and message in lines[0], (args, r.stderr)
    assert not (store / "manifest.json").exists() or json.loads((store / "manifest.json").read_text()).get("samples") is None


def promql(base: str, expr: str, at: float) -> list[dict]:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    with urllib.request.urlopen(f"{base}/api/v1/query?{q}", timeout=30) as r:
        data = json.load(r)
    assert data["status"] == "success", data
    return data["data"]["result"]


def test_scraped_latency_percentiles_match_promql_histogram_quantile(prometheus, tmp_path):
    """sql/staging/scraped_latency.sql against PromQL's own histogram_quantile over the same
    samples: per 60 s window, `increase` over exactly the samples the view's window sums
    (from the window's last scrape back to the scrape before the window), so PromQL does not
    extrapolate; the two must agree within one bucket."""
    base, _ = prometheus
    store = tmp_path / "store"
    assert invoke("ingest", "--prometheus", base, *RANGE, "--store", store, "--instance", "vllm-a").exit_code == 0
    rows = run_query(store, """
        select epoch(window_start) as w0, epoch(window_end) as w1, meaning, metric, n, p50_s, p90_s, p95_s, p99_s
        from scraped_latency order by w0, meaning""").to_dicts()
    times = sorted(run_query(store, "select distinct epoch_ms(ts) / 1000.0 as t from samples")["t"].to_list())
    assert {r["meaning"] for r in rows} >= {"ttft", "e2e", "queue", "tpot", "prefill", "decode"}
    assert len({r["w0"] for r in rows}) == 2
    checked = 0
    for r in rows:
        inside = [t for t in times if r["w0"] <= t < r["w1"]]
        before = [t for t in times if t < r["w0"]]
        last, first = inside[-1], (before[-1] if before else inside[0])
        rng = round((last - first) * 1000)
        bounds = sorted({float(s["metric"]["le"]) for s in promql(base, f'{r["metric"]}_bucket', last)})
        for q in (0.5, 0.9, 0.95, 0.99):
            (res,) = promql(base, f'histogram_quantile({q}, sum by (le) (increase({r["metric"]}_bucket[{rng}ms])))', last)
            want = float(res["value"][1])
            got = r[f"p{round(q * 100)}_s"]
            # the bucket PromQL's answer lies in, and so its width
            upper = next(b for b in bounds if b >= want)
            lower = max([b for b in bounds if b < upper], default=0.0)
            assert abs(got - want) <= upper - lower + 1e-9, (r["meaning"], r["w0"], q, got, want)
            checked += 1
        # the observations in the window are the +Inf bucket's increase
        (inf,) = promql(base, f'sum(increase({r["metric"]}_bucket{{le="+Inf"}}[{rng}ms]))', last)
        assert float(inf["value"][1]) == pytest.approx(r["n"])
    assert checked >= 2 * 6 * 4
