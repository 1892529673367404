"""`servelens info` and `servelens compact` on a store holding scraped samples: info counts
them per instance, compact merges their small parts with every sample kept once. The truth
is the /metrics bodies a real llama-server gave, served back by a loopback server and read
with a plain regex (tests/sources/test_scrape.py)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run as run_query
from tests.sources.test_scrape import LLAMA, Metrics, bodies, stored, truth

build_app()


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_info_and_compact_know_the_sample_parts(tmp_path):
    answers = bodies(LLAMA / "scrapes.prom")
    rounds = len(answers)
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", rounds, "--interval", "50ms")
        target = srv.url.split("/")[2]
    assert r.exit_code == 0, r.output
    manifest = json.loads((store / "manifest.json").read_text())
    assert len(manifest["samples"]["parts"]) == rounds  # one part per round's commit
    want = [truth(b) for b in answers]
    n = sum(len(t) for t in want)

    r = invoke("info", "--store", store, "--json")
    assert r.exit_code == 0, r.output
    sm = json.loads(r.stdout)["samples"]
    assert (sm["samples"], sm["parts"]) == (n, rounds)
    series = {(name, labels, le) for t in want for name, labels, le, _ in t}
    assert [(i["instance"], i["engine"], i["samples"], i["series"], i["scrapes"]) for i in sm["instances"]] == [
        (target, "llamacpp", n, len(series), rounds)]
    r = invoke("info", "--store", store)
    assert f"samples (scraped /metrics): {n:,} in {rounds:,} parts" in r.stdout
    assert f"  {target} (llamacpp): {n:,} samples of {len(series):,} series in {rounds:,} scrapes" in r.stdout

    r = invoke("compact", "--store", store)
    assert r.exit_code == 0, r.output
    assert f"{rounds} sample parts merged; {rounds} -> 1 sample parts" in r.stdout
    manifest = json.loads((store / "manifest.json").read_text())
    (part,) = manifest["samples"]["parts"]
    assert manifest["samples"]["info"][part]["rows"] == n
    # every sample once, as each body said it
    got = stored(store)
    assert [got[t] for t in sorted(got)] == want
    assert run_query(store, "select count(*) as n from samples")["n"][0] == n
    # the merged-away parts left the samples folder (to the garbage, for readers mid-query)
    assert sorted(str(p.relative_to(store)) for p in (store / "samples").rglob("*.parquet")) == [part]
    r = invoke("compact", "--store", store)
    assert r.exit_code == 0 and "0 sample parts merged; 1 -> 1 sample parts" in r.stdout
    assert json.loads(invoke("info", "--store", store, "--json").stdout)["samples"]["samples"] == n
