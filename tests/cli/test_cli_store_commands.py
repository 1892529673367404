"""`servelens --version`, `info`, `prune --before`, `ingest -` (standard input) and
`ingest --json`, driven through typer's CliRunner over the incident sample."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
from typer.testing import CliRunner
from tests.helpers import incident_truth
from tests.helpers.dashboard_store import INCIDENT
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run
from servelens.pipeline.store.manifest import committed_parts, read_manifest

build_app()
runner = CliRunner()


def _ingest(store: Path, *args: str, input: bytes | None = None):
    return runner.invoke(app, ["ingest", *args, "--store", str(store), "-q"], input=input)


def test_version():
    from importlib.metadata import version

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"servelens {version('servelens')}"


def test_info_tells_what_the_store_holds(tmp_path):
    store = tmp_path / "st"
    assert _ingest(store, str(INCIDENT)).exit_code == 0
    res = runner.invoke(app, ["info", "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    n = run(store, "select count(*) as n from events")["n"][0]
    assert got["events"] == n > 0
    assert got["engines"] == ["tgi", "trtllm", "vllm"]
    assert [i["instance"] for i in got["instances"]] == ["tgi-a", "tgi-b", "trtllm-a", "trtllm-b", "vllm-a", "vllm-b"]
    assert got["models"] == ["meta-llama/Llama-3.1-8B-Instruct"]
    assert got["parts"] == len(committed_parts(store)) and got["bytes"] == sum(p.stat().st_size for p in committed_parts(store))
    first, last = incident_truth.dated_span()  # read from the logs here
    assert got["first_ts"].startswith(f"{first:%Y-%m-%dT%H:%M:%S}") and got["last_ts"].startswith(f"{last:%Y-%m-%dT%H:%M:%S}")
    text = runner.invoke(app, ["info", "--store", str(store)]).output
    per_instance = run(store, "select instance, count(*) as n from events where instance = 'vllm-a' group by all")["n"][0]
    assert "instances: 6" in text and f"vllm-a (vllm): {per_instance:,} events" in text
    res = runner.invoke(app, ["info", "--store", str(tmp_path / "nope")])
    assert res.exit_code == 1 and "ingest logs first" in res.output


def test_prune_drops_old_events_in_one_consistent_commit(tmp_path):
    store = tmp_path / "st"
    assert _ingest(store, str(INCIDENT)).exit_code == 0
    cut = "2026-05-12T08:02:00Z"
    before = run(store, "select count(*) filter (where ts < '2026-05-12 08:02:00+00') as old, "
                        "count(*) filter (where ts >= '2026-05-12 08:02:00+00' or ts is null) as new from events").row(0, named=True)
    assert before["old"] > 0 and before["new"] > 0
    res = runner.invoke(app, ["prune", "--before", cut, "--store", str(store), "--dry-run"])
    assert res.exit_code == 0 and f"would drop {before['old']:,} events" in res.output
    assert run(store, "select count(*) as n from events")["n"][0] == before["old"] + before["new"]
    res = runner.invoke(app, ["prune", "--before", cut, "--store", str(store)])
    assert res.exit_code == 0, res.output
    assert f"dropped {before['old']:,} events" in res.output
    after = run(store, "select count(*) as n, min(ts) as t from events").row(0, named=True)
    assert after["n"] == before["new"] and after["t"].isoformat() >= "2026-05-12T08:02:00"
    m = read_manifest(store)
    assert m["pending"] == [] and all((store / p).exists() for p in m["parts"])
    # the ingest offsets stay: re-ingesting brings nothing back
    assert _ingest(store, str(INCIDENT)).exit_code == 0
    assert run(store, "select count(*) as n from events")["n"][0] == before["new"]
    res = runner.invoke(app, ["prune", "--before", "last tuesday", "--store", str(store)])
    assert res.exit_code == 1 and "cannot read time" in res.output


def test_ingest_reads_standard_input_and_dedupes_a_rerun(tmp_path):
    store = tmp_path / "st"
    data = (INCIDENT / "vllm" / "vllm-a.log").read_bytes()
    res = runner.invoke(app, ["ingest", "-", "--store", str(store), "--instance", "gpu-7", "--json"], input=data)
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["ingested"] == 1 and got["files"][0]["instance"] == "gpu-7" and got["files"][0]["engine"] == "vllm"
    n_lines = data.count(b"\n")
    assert got["lines"] == n_lines and got["events"] == run(store, "select count(*) as n from events")["n"][0]
    # each request of the truth arrives twice in a vLLM V0 log: `Received request` (API server)
    # and `Added request` (engine)
    arrivals = len(re.findall(rb"\] (?:Received|Added) request ", data))
    truth = pl.read_parquet(INCIDENT / "vllm" / "truth_requests.parquet").filter(pl.col("instance") == "vllm-a")
    assert got["events_by_kind"]["request_arrived"] == arrivals == 2 * truth.height
    again = json.loads(runner.invoke(app, ["ingest", "-", "--store", str(store), "--instance", "gpu-7", "--json"],
                                     input=data).stdout)
    assert again["unchanged"] == 1 and again["events"] == 0
    assert run(store, "select count(*) as n from events")["n"][0] == got["events"]
    res = runner.invoke(app, ["ingest", "-", "-", "--store", str(store)], input=b"")
    assert res.exit_code == 1 and "can be given once" in res.output
