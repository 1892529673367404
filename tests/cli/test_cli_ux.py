"""What a new user trips on, through the real command line: one --since/--until and one
time parser, an empty range that names the store's range, and the KV label of a CPU
server. Truth comes from the files and times the tests write, never from servelens."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
from pathlib import Path

import pytest
from tests.helpers.common import write
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_logs"
UTC = dt.timezone.utc


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def tgi_line(t: dt.datetime, n: int) -> str:
    """A TGI launcher line (the format of sample_logs/incident/tgi), at time `t`."""
    return f"{t.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}  INFO text_generation_launcher: note {n}\n"


# --- times and an empty range ------------------------------------------------------------------


@pytest.fixture
def recent_store(tmp_path):
    """A log whose lines are 5 h, 3 h, 90 min and 10 min old (and one of yesterday noon)."""
    now = dt.datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    times = [midnight - dt.timedelta(hours=12), now - dt.timedelta(hours=5), now - dt.timedelta(hours=3),
             now - dt.timedelta(minutes=90), now - dt.timedelta(minutes=10)]
    log = write(tmp_path / "tgi-a.log", "".join(tgi_line(t, i) for i, t in enumerate(sorted(times))))
    store = tmp_path / "store"
    assert invoke("ingest", log, "--store", store, "-q").exit_code == 0
    return store, sorted(times), now


def test_the_time_options_are_one_type_and_one_parser():
    """--since is declared once (pipeline/cli/options.py) and parse_time written once."""
    src = {p.relative_to(ROOT / "pipeline").as_posix(): p.read_text() for p in (ROOT / "pipeline").rglob("*.py")}
    assert sum(t.count("def parse_time(") for t in src.values()) == 1
    declared = [n for n, t in src.items() if re.search(r'typer\.Option\(\s*"--since"', t)]
    assert declared == ["cli/options.py"]
    for name in ("cli/app.py", "cli/report.py", "cli/dashboard.py", "cli/serve.py"):
        assert "since: SinceOpt = None" in src[name], name


def test_an_empty_range_says_the_stores_range(recent_store):
    store, times, _ = recent_store
    first, last = (t.strftime("%Y-%m-%d %H:%M:%S UTC") for t in (times[0], times[-1]))
    r = invoke("report", "--store", store, "--since", "2020-01-01", "--until", "2020-01-02")
    assert r.exit_code == 0
    assert f"the store holds events from {first} to {last}" in r.stderr
    assert f"No events in this range. (no events in 2020-01-01 00:00:00 UTC -> 2020-01-02 00:00:00 UTC; the store holds events from {first} to {last}" in r.stdout
    r = invoke("sql", "select * from events", "--store", store, "--since", "2020-01-01", "--until", "2020-01-02")
    assert r.exit_code == 0 and f"the store holds events from {first} to {last}" in r.stderr


# --- the KV label says the log's device ------------------------------------------------------------------


def test_the_kv_chart_of_a_cpu_server_says_cpu(tmp_path):
    from servelens.pipeline.report import chart_specs as charts
    from servelens.dashboards import data

    log = SAMPLE / "vllm" / "real-0.32" / "vllm-cpu.log.gz"
    text = gzip.open(log, "rt").read()
    assert "CPU KV cache size" in text and "GPU KV cache" not in text  # what the log says
    store = tmp_path / "s"
    assert invoke("ingest", log, "--store", store, "-q").exit_code == 0
    cfg = data.Settings(store=str(store))
    cat = data.catalog(cfg)
    first, last = cat["first_ts"].min(), cat["last_ts"].max()
    f = data.Filters(start=first, end=last + dt.timedelta(seconds=1), targets=data.resolve_targets(cat, (), (), ()))
    devices = data.kv_devices(cfg, f)
    assert devices == ["CPU"]
    chart = charts.kv_chart(data.kv_cache(cfg, f), 0.9, None, devices).to_dict()
    assert "CPU KV-cache usage" in json.dumps(chart) and "GPU" not in json.dumps(chart)
