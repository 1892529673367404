"""`servelens show`: a request's story read back from the log files by the stored offsets.

Truth: the lines of the sample logs that name the request (read by the test with plain
Python), the simulator's truth file for its times, the stats lines around it as the file
orders them, and the benchmark client's own JSON for its row."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs"
UTC = dt.timezone.utc
STATS = "Avg prompt throughput"


# for a store shown several times: the rollups refreshed by the ingest (not left to a later
# command) give each `show` the queue and batch state from them rather than from the events,
# the same rows (tests/store/test_rollups.py), computed once
REFRESHED = ("--refresh-rollups",)


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def ingest(logs: Path, store: Path, *extra) -> None:
    r = invoke("ingest", logs, "--store", store, "-q", *extra)
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    """Copies of the incident's vLLM logs (so that tests can move them) and their store."""
    d = tmp_path_factory.mktemp("show")
    logs = d / "logs"
    shutil.copytree(SAMPLE / "incident" / "vllm", logs)
    ingest(logs, d / "store", *REFRESHED)
    return logs, d / "store"


@pytest.fixture(scope="module")
def mid_json(incident) -> dict:
    """`show REQUEST --format json --full` of the middle request on the shared store, read by
    several tests (each checks its own part of it against its own truth)."""
    _, store = incident
    r = invoke("show", mid_request()["request_id"], "--store", store, "--format", "json", "--full")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def mid_request(instance: str = "vllm-b") -> dict:
    """A finished request of the middle of the run (stats lines before and after it)."""
    truth = pl.read_parquet(SAMPLE / "incident" / "vllm" / "truth_requests.parquet")
    ok = truth.filter((pl.col("instance") == instance) & (pl.col("status") == "ok")).sort("arrival_ts")
    return ok.row(ok.height // 2, named=True)


def lines_naming(path: Path, rid: str) -> list[tuple[int, str]]:
    return [(n, ln) for n, ln in enumerate(path.read_text().splitlines(), 1) if rid in ln]


def shown_lines(text: str) -> list[str]:
    return [ln[4:] for ln in text.splitlines() if ln.startswith("    ") and not ln.startswith("    [")]


def test_show_reads_back_every_line_that_names_the_request(incident):
    logs, store = incident
    req = mid_request()
    rid = req["request_id"]
    want = lines_naming(logs / "vllm-b.log", rid)
    assert len(want) >= 3  # received, added, finished
    r = invoke("show", rid, "--store", store, "--full")
    assert r.exit_code == 0, r.output
    story = r.stdout.split("queue and batch state around it:")[0]
    assert shown_lines(story) == [ln for _, ln in want]
    for n, _ in want:
        assert f"vllm-b.log:{n}\n" in story
    assert f"request {rid} on vllm-b (vllm" in r.stdout
    assert "lines read back by offset (fingerprint matches)" in r.stdout


def test_show_json_has_the_truths_times_and_lines(incident, mid_json):
    logs, store = incident
    req = mid_request()
    doc = mid_json
    (row,) = doc["requests"]
    # the log stamps the `Received request` line when the request is queued (docker ns times)
    arrival = dt.datetime.fromisoformat(row["arrival_ts"])
    assert abs((arrival - req["queue_start"]).total_seconds()) < 1e-6
    assert abs((dt.datetime.fromisoformat(row["finish_ts"]) - req["finish_ts"]).total_seconds()) < 1e-6
    want = [ln for _, ln in lines_naming(logs / "vllm-b.log", req["request_id"])]
    assert [t for e in doc["events"] for t in e["text"]] == want
    assert all(e["origin"] == "source" for e in doc["events"])


def test_the_state_around_arrival_is_the_stats_line_before_it(incident, mid_json):
    logs, store = incident
    req = mid_request()
    rows = (logs / "vllm-b.log").read_text().splitlines()
    arrival_line = lines_naming(logs / "vllm-b.log", req["request_id"])[0][0]
    before = max(n for n, ln in enumerate(rows[:arrival_line], 1) if STATS in ln)
    after = min(n for n, ln in enumerate(rows, 1) if n > arrival_line and STATS in ln)
    pending = int(re.search(r"Pending: (\d+) reqs", rows[before - 1]).group(1))
    running = int(re.search(r"Running: (\d+) reqs", rows[before - 1]).group(1))
    doc = mid_json
    at = next(s for s in doc["state"] if s["at"] == "arrival")
    assert (at["waiting"], at["running"]) == (pending, running)
    assert [e["line"] for e in at["lines"]] == [before, after]
    assert [e["text"] for e in at["lines"]] == [[rows[before - 1]], [rows[after - 1]]]


def test_a_rotated_and_gzipped_file_is_found_by_its_fingerprint(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(SAMPLE / "incident" / "vllm", logs)
    ingest(logs, tmp_path / "store", *REFRESHED)
    req = mid_request()
    want = [ln for _, ln in lines_naming(logs / "vllm-b.log", req["request_id"])]
    # rotation: the file is renamed and compressed, a new file takes its name
    with open(logs / "vllm-b.log", "rb") as src, gzip.open(logs / "vllm-b.log.1.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    (logs / "vllm-b.log").write_text("2026-05-13T00:00:00.000000000Z INFO 05-13 00:00:00 api_server.py:1] a new run\n")
    doc = json.loads(invoke("show", req["request_id"], "--store", tmp_path / "store", "--format", "json", "--full").stdout)
    assert [t for e in doc["events"] for t in e["text"]] == want
    src = next(s for s in doc["sources"] if s["source"].endswith("vllm-b.log"))
    assert src["status"] == "moved" and src["read_from"] == str(logs / "vllm-b.log.1.gz")
    # moved to a directory of its own: found there with --logs
    elsewhere = tmp_path / "archive"
    elsewhere.mkdir()
    shutil.move(logs / "vllm-b.log.1.gz", elsewhere / "b.gz")
    r = invoke("show", req["request_id"], "--store", tmp_path / "store", "--full")
    assert "now holds other content" in r.stdout and shown_lines(r.stdout.split("queue and")[0]) == []
    r = invoke("show", req["request_id"], "--store", tmp_path / "store", "--full", "--logs", elsewhere)
    assert shown_lines(r.stdout.split("queue and")[0]) == want


def test_without_the_file_the_parsed_columns_and_with_keep_lines_the_kept_text(tmp_path):
    req = mid_request()
    for keep in (False, True):
        logs = tmp_path / f"logs-{keep}"
        shutil.copytree(SAMPLE / "incident" / "vllm", logs)
        want = [ln for _, ln in lines_naming(logs / "vllm-b.log", req["request_id"])]
        store = tmp_path / f"store-{keep}"
        ingest(logs, store, *REFRESHED, *(["--keep-lines"] if keep else []))
        (logs / "vllm-b.log").unlink()
        r = invoke("show", req["request_id"], "--store", store, "--full")
        assert r.exit_code == 0
        assert "vllm-b.log is gone and was not found by its fingerprint" in r.stdout
        doc = json.loads(invoke("show", req["request_id"], "--store", store, "--format", "json", "--full").stdout)
        if keep:
            texts = [e["text"] for e in doc["events"]]
            assert all(e["origin"] == "stored" for e in doc["events"])
            # the kept text is the line without its docker time and vLLM header
            assert len(texts) == len(want) and all(t[0] in w for t, w in zip(texts, want))
        else:
            assert all(e["text"] is None for e in doc["events"])
            assert "[parsed] level=INFO" in r.stdout
            assert "ingested without --keep-lines" in r.stdout


def test_the_client_row_is_part_of_the_story(tmp_path):
    real = SAMPLE / "vllm" / "real-0.32"
    ingest(real, tmp_path / "store")
    bench = json.loads(gzip.open(real / "bench-low.json.gz").read())
    r = invoke("sql", "select request_id, client_index from requests where client_source like '%bench-low%' "
                      "order by client_index limit 1 offset 3", "--store", tmp_path / "store", "--format", "json")
    row = json.loads(r.stdout)[0]
    doc = json.loads(invoke("show", row["request_id"], "--store", tmp_path / "store", "--format", "json").stdout)
    (client,) = [e for e in doc["events"] if e["event"] == "client_request"]
    assert client["ttft_s"] == pytest.approx(bench["ttfts"][row["client_index"]])
    assert client["e2e_s"] == pytest.approx(bench["latencies"][row["client_index"]])
    text = invoke("show", row["request_id"], "--store", tmp_path / "store").stdout
    (line,) = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("client (")]
    i = row["client_index"]
    assert f"bench-low.json.gz #{i}, matched by index_time): ttft {bench['ttfts'][i]:.3f} s, e2e {bench['latencies'][i]:.3f} s" in line
    # the server's own lines of it, from the gzipped log
    log = gzip.open(real / "vllm-cpu.log.gz", "rt").read().splitlines()
    named = [ln for ln in log if re.search(rf"{re.escape(row['request_id'])}\b", ln)]
    shown = [t for e in doc["events"] if e["event"] != "client_request" for t in e["text"]]
    assert shown == named


def test_around_a_time_shows_every_line_of_that_span(incident):
    logs, store = incident
    rows = (logs / "vllm-b.log").read_text().splitlines()
    t = dt.datetime(2026, 5, 12, 8, 2, 30, tzinfo=UTC)
    stamps = [dt.datetime.fromisoformat(ln.split(" ", 1)[0].replace("Z", "")[:26]).replace(tzinfo=UTC) for ln in rows]
    want = [n for n, s in enumerate(stamps, 1) if abs((s - t).total_seconds()) <= 1.0]
    assert want
    doc = json.loads(invoke("show", "--around", "2026-05-12T08:02:30Z", "--span", "1s", "--instance", "vllm-b",
                            "--store", store, "--format", "json", "--full").stdout)
    assert [e["line"] for e in doc["events"]] == want
    assert [e["text"][0] for e in doc["events"]] == [rows[n - 1] for n in want]


def test_an_unknown_request_is_one_line(incident):
    _, store = incident
    r = invoke("show", "no-such-request", "--store", store)
    assert r.exit_code == 1
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("servelens: error: no request 'no-such-request' among the ")
    r = invoke("show", "--store", store)
    assert r.exit_code == 1 and "give a request id, or --around TIME" in r.stderr


def test_a_unique_part_of_the_id_is_enough(incident):
    logs, store = incident
    rid = mid_request()["request_id"]
    whole = json.loads(invoke("show", rid, "--store", store, "--format", "json").stdout)
    part = json.loads(invoke("show", rid[-12:], "--store", store, "--format", "json").stdout)
    assert part["request_id"] == rid and part["events"] == whole["events"]
    r = invoke("show", "chatcmpl-", "--store", store)
    assert r.exit_code == 1 and "is part of several request ids" in r.stderr


def test_lines_are_read_back_from_another_working_directory(tmp_path, monkeypatch):
    """`source` is relative to where ingest ran; show run elsewhere still finds the file."""
    logs = tmp_path / "work" / "logs"
    shutil.copytree(SAMPLE / "incident" / "vllm", logs)
    monkeypatch.chdir(tmp_path / "work")
    ingest(Path("logs"), tmp_path / "store")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    rid = mid_request()["request_id"]
    want = lines_naming(logs / "vllm-b.log", rid)
    r = invoke("show", rid, "--store", tmp_path / "store", "--full")
    assert r.exit_code == 0, r.output
    story = r.stdout.split("queue and batch state around it:")[0]
    assert shown_lines(story) == [ln for _, ln in want]
    assert "is gone" not in r.stdout
