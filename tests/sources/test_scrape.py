"""`servelens scrape` against a loopback HTTP server answering with the /metrics bodies real
servers gave (vLLM 0.32, llama-server), one after another. What is stored is checked against
the bodies read here with a plain regex, not with servelens's parser."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run as run_query

build_app()
FIX = Path(__file__).parents[1] / "fixtures"
VLLM = FIX / "vllm" / "scraped"
LLAMA = FIX / "llamacpp" / "scraped"
LINE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (\S+))?$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def bodies(path: Path) -> list[str]:
    """The recorded scrapes, each as the server answered it (the `# scrape at` line is the
    recorder's, not the server's)."""
    text = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    return [b.split("\n", 1)[1] for b in re.split(r"(?m)^(?=# scrape at )", text) if b.startswith("# scrape at")]


def truth(body: str) -> set[tuple]:
    """Every sample line of a body: (name, labels without le, le, value)."""
    out = set()
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE_RE.match(line)
        assert m, line
        labels = dict(LABEL_RE.findall(m[2] or ""))
        le = labels.pop("le", None)
        out.add((m[1], tuple(sorted(labels.items())), None if le is None else float(le), float(m[3])))
    return out


class Metrics:
    """A loopback server answering GET /metrics with the next body (the last one again at
    the end)."""

    def __init__(self, answers: list[str], on_serve=None):
        self.answers, self.served, self.on_serve = answers, 0, on_serve
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = outer.answers[min(outer.served, len(outer.answers) - 1)].encode()
                outer.served += 1
                if outer.on_serve is not None:
                    outer.on_serve(outer.served)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def stored(store: Path) -> dict[float, set[tuple]]:
    """The store's samples per scrape time (s), in the shape of `truth`."""
    rows = run_query(store, "select epoch_us(ts) as t, name, labels, le, value from samples").to_dicts()
    out: dict[float, set[tuple]] = {}
    for r in rows:
        labels = tuple(sorted(json.loads(r["labels"]).items()))
        out.setdefault(r["t"] / 1e6, set()).add((r["name"], labels, r["le"], r["value"]))
    return out


def test_scraping_a_real_vllm_stores_every_sample_each_body_said(tmp_path):
    answers = bodies(VLLM / "metrics.prom.gz")
    assert len(answers) == 14
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", len(answers), "--interval", "20ms")
    assert r.exit_code == 0, r.output
    got = stored(store)
    assert len(got) == len(answers)  # one scrape time per body
    for t, body in zip(sorted(got), answers):
        assert got[t] == truth(body)
    n = sum(len(truth(b)) for b in answers)
    assert f": {n:,} new samples committed in {len(answers)} commit(s)" in r.stdout
    # what the views make of it: the server's own waiting gauge and preemption / token counters
    waiting = [float(re.search(r"^vllm:num_requests_waiting\{[^}]*\} (\S+)$", b, re.M)[1]) for b in answers]
    view = run_query(store, "select value from scraped_gauges where meaning = 'waiting' order by ts")["value"].to_list()
    assert view == waiting and max(waiting) >= 10
    tokens = [float(re.search(r"^vllm:prompt_tokens_total\{[^}]*\} (\S+)$", b, re.M)[1]) for b in answers]
    inc = run_query(store, "select sum(increase) as n from scraped_counters where meaning = 'prompt_tokens'")["n"][0]
    assert inc == tokens[-1] - tokens[0] > 0


def test_a_scrape_is_stored_under_the_instance_of_the_same_servers_log(tmp_path):
    log = tmp_path / "vllm-a.log.gz"
    log.write_bytes((VLLM / "server.log.gz").read_bytes())
    store = tmp_path / "store"
    assert invoke("ingest", log, "--store", store, "-q").exit_code == 0
    answers = bodies(VLLM / "metrics.prom.gz")[:3]
    with Metrics(answers) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", 3, "--interval", "20ms")
    assert r.exit_code == 0, r.output
    assert "-> vllm-a)" in r.stdout
    inst = run_query(store, "select distinct instance from samples")["instance"].to_list()
    assert inst == ["vllm-a"]
    events = set(run_query(store, "select distinct instance from events")["instance"].to_list())
    assert events == {"vllm-a"}
    # --instance names it whatever the store holds
    with Metrics(answers) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", 1, "--instance", "gpu-7")
    assert r.exit_code == 0, r.output
    assert set(run_query(store, "select distinct instance from samples")["instance"].to_list()) == {"vllm-a", "gpu-7"}


def test_without_a_log_the_instance_is_the_target(tmp_path):
    answers = bodies(LLAMA / "scrapes.prom")
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", len(answers), "--interval", "20ms")
        target = srv.url.split("/")[2]
    assert r.exit_code == 0, r.output
    assert run_query(store, "select distinct instance from samples")["instance"].to_list() == [target]
    deferred = [float(re.search(r"^llamacpp:requests_deferred (\S+)$", b, re.M)[1]) for b in answers]
    processing = [float(re.search(r"^llamacpp:requests_processing (\S+)$", b, re.M)[1]) for b in answers]
    rows = run_query(store, "select meaning, value from scraped_gauges order by ts").to_dicts()
    assert [x["value"] for x in rows if x["meaning"] == "waiting"] == deferred
    assert [x["value"] for x in rows if x["meaning"] == "running"] == processing
    assert max(processing) >= 1


def test_samples_stored_before_add_nothing(tmp_path):
    """Samples carrying their own time (a federation endpoint, an exporter replaying) are
    the same samples when scraped again: stored once."""
    body = bodies(LLAMA / "scrapes.prom")[3]
    stamp_ms = 1796470295419
    stamped = "".join(f"{ln} {stamp_ms}\n" if ln and not ln.startswith("#") else f"{ln}\n"
                      for ln in body.splitlines())
    n = len(truth(body))
    store = tmp_path / "store"
    with Metrics([stamped]) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", 3, "--interval", "20ms")
        assert r.exit_code == 0, r.output
        assert f": {n:,} new samples committed in 1 commit(s) ({3 * n:,} read in 3 scrape(s)" in r.stdout
        r = invoke("scrape", srv.url, "--store", store, "--count", 1, "--instance", srv.url.split("/")[2])
        assert r.exit_code == 0 and ": 0 new samples committed in 0 commit(s)" in r.stdout
    assert run_query(store, "select count(*) as n from samples")["n"][0] == n
    assert run_query(store, "select epoch_ms(max(ts)) as t from samples")["t"][0] == stamp_ms


def test_an_unreachable_url_is_named_once_and_the_others_go_on(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    answers = bodies(LLAMA / "scrapes.prom")
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        r = invoke("scrape", dead, srv.url, "--store", store, "--count", 4, "--interval", "50ms")
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.stderr.splitlines() if dead in ln]
    assert said == [f"servelens: cannot scrape {dead}: connection refused (is the server running, on that port?); "
                    "trying again every 0.05s"]
    assert "4 failed" in r.stdout
    assert len(stored(store)) == 4


def test_a_long_scrape_leaves_few_parts_and_every_sample(tmp_path):
    """A part per round would leave thousands a day: the small ones are merged as it goes."""
    from servelens.pipeline.store.sample_compact import MIN_PARTS

    answers = bodies(LLAMA / "scrapes.prom")
    rounds = MIN_PARTS + 8
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", rounds, "--interval", "20ms")
    assert r.exit_code == 0, r.output
    manifest = json.loads((store / "manifest.json").read_text())
    parts = manifest["samples"]["parts"]
    assert len(parts) == 1 + rounds - MIN_PARTS
    served = (answers + [answers[-1]] * rounds)[:rounds]  # the server repeats its last answer
    assert sum(manifest["samples"]["info"][p]["rows"] for p in parts) == sum(len(truth(b)) for b in served)
    got = stored(store)
    assert len(got) == rounds
    for t, body in zip(sorted(got), served):
        assert got[t] == truth(body)
    # the merged-away parts left the samples folder at once (to the garbage, for readers mid-query)
    on_disk = sorted(str(p.relative_to(store)) for p in (store / "samples").rglob("*.parquet"))
    assert on_disk == sorted(parts)


def test_a_store_in_use_holds_the_rounds_until_it_is_free(tmp_path):
    from servelens.pipeline.store.commit import Store

    answers = bodies(LLAMA / "scrapes.prom")
    store = tmp_path / "store"
    holder = Store.open(store, purpose="test")  # another writer, such as a tail
    # it lets go when the server answers the third scrape: rounds 1 and 2 wait for it
    release = lambda n: holder.close() if n == 3 else None  # noqa: E731
    with Metrics(answers, on_serve=release) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", 4, "--interval", "50ms")
    assert r.exit_code == 0, r.output
    said = r.stderr.splitlines()
    assert sum("is in use by servelens test" in ln and "holding the samples" in ln for ln in said) == 1
    assert "servelens: the store is free again; the held samples are committed" in said
    got = stored(store)
    assert len(got) == 4
    for t, body in zip(sorted(got), answers):
        assert got[t] == truth(body)
    assert f": {sum(len(truth(b)) for b in answers[:4]):,} new samples committed in 2 commit(s)" in r.stdout


def test_user_errors_are_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("x\n")
    dead = f"127.0.0.1:{free_port()}"
    cases = [
        (["scrape", dead, "--store", tmp_path], f"{tmp_path} is not a servelens store (no manifest.json; it holds notes.txt)"),
        (["scrape", dead, "--store", tmp_path / "notes.txt"], "is a file, not a store directory"),
        (["scrape", dead, "--interval", "soon", "--store", tmp_path / "s"], "--interval: cannot read duration 'soon'"),
        (["scrape", dead, "--interval", "0", "--store", tmp_path / "s"], "--interval: duration '0' must be positive"),
        (["scrape", "ftp://x/metrics", "--store", tmp_path / "s"], "cannot scrape 'ftp://x/metrics': give an http(s) URL"),
        (["scrape", dead, "--count", 1, "--store", tmp_path / "s"], "nothing was scraped"),
        (["scrape", dead, dead, "--instance", "a", "--store", tmp_path / "s"], "a URL is given twice"),
    ]
    for args, message in cases:
        r = invoke(*args)
        assert r.exit_code == 1, args
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("servelens: error: ") and message in last, (args, r.stderr)
        assert "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "s"]


def test_help_has_examples():
    r = invoke("scrape", "--help")
    assert r.exit_code == 0
    assert "servelens scrape http://127.0.0.1:8000/metrics --store live.store" in r.stdout
    for opt in ("--interval", "--instance", "--count", "--duration", "--store"):
        assert opt in r.stdout


CHILD = "import sys; sys.argv[0] = 'servelens'; from servelens.pipeline.cli.app import main; main()"


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child process")
def test_ctrl_c_ends_cleanly_saying_what_was_committed(tmp_path):
    answers = bodies(LLAMA / "scrapes.prom")
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, "scrape", srv.url, "--store", str(store),
                                 "--interval", "0.05"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # wait for three commits, however long the machine takes
            for _ in range(3000):
                m = store / "manifest.json"
                if m.exists() and len(json.loads(m.read_text()).get("samples", {}).get("parts", [])) >= 3:
                    break
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and all(ln.startswith("servelens: ") for ln in lines)
    assert "stored as instance" in lines[0]  # no log in the store: named by its target, and said
    n = run_query(store, "select count(*) as n from samples")["n"][0]
    scrapes = run_query(store, "select count(distinct ts) as n from samples")["n"][0]
    assert scrapes >= 3
    assert lines[-1].startswith(f"servelens: stopped; {n:,} new samples committed in {scrapes} commit(s)")
    assert n == sum(len(truth(b)) for b in (answers + [answers[-1]] * scrapes)[:scrapes])


def test_samples_scraped_before_the_log_take_its_instance_when_the_log_comes(tmp_path):
    answers = bodies(VLLM / "metrics.prom.gz")[:3]
    store = tmp_path / "store"
    with Metrics(answers) as srv:
        r = invoke("scrape", srv.url, "--store", store, "--count", 3, "--interval", "20ms")
        target = srv.url.split("/")[2]
    assert r.exit_code == 0, r.output
    assert run_query(store, "select distinct instance from samples")["instance"].to_list() == [target]
    n = run_query(store, "select count(*) as n from samples")["n"][0]
    # the same server's log, as if it had listened on the test server's port
    text = gzip.decompress((VLLM / "server.log.gz").read_bytes()).decode()
    assert "http://127.0.0.1:8432" in text
    log = tmp_path / "vllm-a.log"
    log.write_text(text.replace(":8432", ":" + target.split(":")[1]))
    r = invoke("ingest", log, "--store", store)
    assert r.exit_code == 0, r.output
    assert f"{target} -> vllm-a" in r.output
    assert run_query(store, "select distinct instance from samples")["instance"].to_list() == ["vllm-a"]
    assert run_query(store, "select count(*) as n from samples")["n"][0] == n  # every sample, once
    assert set(run_query(store, "select distinct instance from events")["instance"].to_list()) == {"vllm-a"}
    # ingesting the log again renames nothing and adds nothing
    r = invoke("ingest", log, "--store", store)
    assert r.exit_code == 0 and "samples scraped before their log" not in r.output
    assert run_query(store, "select count(*) as n from samples")["n"][0] == n
