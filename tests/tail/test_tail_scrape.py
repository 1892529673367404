"""`servelens tail LOG --scrape URL`: the server's /metrics scraped beside its log, into the
same store, under the log's instance. A loopback server answers with the /metrics bodies a
real vLLM 0.32 gave (one after another); what is stored is checked against the bodies read
with a plain regex (tests/sources/test_scrape.py), every answer served once."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run as run_query
from tests.sources.test_scrape import VLLM, Metrics, bodies, stored, truth

build_app()
CHILD = "import sys; sys.argv[0] = 'servelens'; from servelens.pipeline.cli.app import main; main()"


def count(store, sql: str) -> int:
    return run_query(store, sql)["n"][0]


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child process")
def test_tail_scrape_stores_every_answer_once_under_the_logs_instance(tmp_path):
    answers = bodies(VLLM / "metrics.prom.gz")[:4]
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        port = srv.url.split("/")[2].split(":")[1]
        # the recorded server's log, as if it had listened on the loopback server's port
        text = gzip.decompress((VLLM / "server.log.gz").read_bytes()).decode()
        log = tmp_path / "vllm-a.log"
        log.write_text(text.replace(":8432", ":" + port))
        proc = subprocess.Popen([sys.executable, "-c", CHILD, "tail", str(log), "--store", str(store), "-q",
                                 "--scrape", srv.url, "--scrape-interval", "0.2", "--flush-interval", "0.2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # wait for three scrape commits, however long the machine takes
            for _ in range(1200):
                m = store / "manifest.json"
                if m.exists() and len(json.loads(m.read_text()).get("samples", {}).get("parts", [])) >= 3:
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        served = srv.served
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    got = stored(store)
    # every answer fetched is stored, once, at its own time, with every sample it held
    assert len(got) == served >= 3
    for t, body in zip(sorted(got), answers + [answers[-1]] * served):
        assert got[t] == truth(body)
    n = sum(len(truth(b)) for b in (answers + [answers[-1]] * served)[:served])
    assert count(store, "select count(*) as n from samples") == n
    assert f"scrapes: {n:,} new samples committed" in err.strip().splitlines()[-1]
    # one server, one instance: the log's
    assert run_query(store, "select distinct instance from samples")["instance"].to_list() == ["vllm-a"]
    assert set(run_query(store, "select distinct instance from events")["instance"].to_list()) == {"vllm-a"}
    lines = count(store, "select count(*) as n from events")
    assert lines > 800
    # the same log ingested again, and the same scrapes from a file, add nothing
    prom = tmp_path / "again.prom"
    prom.write_text("".join(f"# scrape at {t:.3f}\n{b}" for t, b in zip(sorted(got), answers + [answers[-1]] * served)))
    for path in (log, prom):
        r = CliRunner().invoke(app, ["ingest", str(path), "--store", str(store), "-q"])
        assert r.exit_code == 0, r.output
    assert count(store, "select count(*) as n from samples") == n
    assert count(store, "select count(*) as n from events") == lines
    assert count(store, "select count(distinct instance) as n from (select instance from events "
                        "union all select instance from samples)") == 1


def test_tail_scrape_errors_are_one_line(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("x\n")
    for args, message in (
        (["--scrape", "ftp://x/metrics"], "cannot scrape 'ftp://x/metrics': give an http(s) URL"),
        (["--scrape", "127.0.0.1:9", "--scrape-interval", "soon"], "--scrape-interval: cannot read duration 'soon'"),
    ):
        r = CliRunner().invoke(app, ["tail", str(log), "--store", str(tmp_path / "s"), *args])
        assert r.exit_code == 1, args
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("servelens: error: ") and message in last, (args, r.stderr)
        assert "Traceback" not in r.output
