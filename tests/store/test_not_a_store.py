"""A --store that is not a store is one line saying what was found instead, exit 1, for every
command that reads one; a view name typed wrong is answered with the store's own views."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()
STATS = ("INFO 05-12 08:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
         "throughput: 3.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%, Prefix cache hit rate: 0.0%\n")
COMMANDS = [["sql", "select 1"], ["report"], ["export"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_of_other_things(tmp_path, command):
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "b.png").write_bytes(b"\x89PNG")
    r = runner.invoke(app, [*command, "--store", str(tmp_path)])
    assert r.exit_code == 1
    assert r.stderr.strip() == (f"servelens: error: {tmp_path} is not a servelens store (no manifest.json; it holds "
                                f"b.png, notes.txt); give --store the directory ingest wrote, or ingest logs into it "
                                f"first (servelens ingest PATH --store {tmp_path})")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_log_file_given_as_the_store(tmp_path, command):
    log = tmp_path / "vllm.log"
    log.write_text(STATS)
    r = runner.invoke(app, [*command, "--store", str(log)])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"servelens: error: --store {log} is a file, read as a list of stores")
    assert f"servelens ingest {log} --store DIR" in r.stderr
    assert "Engine 000" not in r.stderr[:60]  # not the log's first line presented as a store name


def test_a_mistyped_view_is_answered_with_the_store_views(tmp_path):
    (tmp_path / "vllm.log").write_text(STATS)
    store = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(tmp_path / "vllm.log"), "--store", str(store), "-q"]).exit_code == 0
    r = runner.invoke(app, ["sql", "select * from latency_percentile", "--store", str(store)])
    assert r.exit_code == 1
    assert "did you mean latency_percentiles?" in r.stderr and "sqlite" not in r.stderr
    listed = runner.invoke(app, ["sql", "select view_name from duckdb_views() where not internal", "--store", str(store),
                                 "-f", "csv"])
    assert listed.exit_code == 0 and "latency_percentiles" in listed.stdout.split()


def test_a_long_table_stops_at_the_limit_and_says_what_was_left(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(STATS * 1500)
    store = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(log), "--store", str(store), "-q"]).exit_code == 0
    n_lines = log.read_text().count("\n")
    r = runner.invoke(app, ["sql", "select line from events order by line", "--store", str(store)])
    assert r.exit_code == 0
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "line" not in line]
    assert len(rows) == 1000 and rows[-1].split("|")[1].strip() == "1000"
    assert r.stdout.rstrip().endswith(f"({n_lines:,} rows; the first 1,000 shown: --limit 0 shows all, "
                                      "--format csv or json writes them all)")
    every = runner.invoke(app, ["sql", "select line from events", "--store", str(store), "--limit", "0"])
    assert sum(1 for line in every.stdout.splitlines() if line.startswith("| ")) == n_lines + 1
    csv = runner.invoke(app, ["sql", "select line from events", "--store", str(store), "-f", "csv"])
    assert len(csv.stdout.splitlines()) == n_lines + 1


@pytest.mark.parametrize("command", [["repair"], ["repair", "--dry-run"], ["compact"], ["prune", "--before", "2100-01-01"],
                                     ["check"]])
@pytest.mark.parametrize("foreign_manifest", [False, True])
def test_store_changing_commands_leave_a_directory_of_other_things_alone(tmp_path, command, foreign_manifest):
    """Through a symlink too: nothing is written into a directory that is not a store, and
    another program's manifest.json is not set aside as a damaged store's."""
    other = tmp_path / "webapp"
    other.mkdir()
    (other / "notes.txt").write_text("hello\n")
    if foreign_manifest:
        (other / "manifest.json").write_text('{"name": "webapp", "icons": []}')
    link = tmp_path / "link"
    link.symlink_to(other)
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    r = runner.invoke(app, [*command, "--store", str(link)])
    assert r.exit_code == 1, r.output
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.output
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before


def test_no_follow_symlinks_passes_over_links_out_of_the_directory(tmp_path):
    import json

    logs, outside = tmp_path / "logs", tmp_path / "outside"
    logs.mkdir()
    outside.mkdir()
    (logs / "a.log").write_text(STATS)
    (outside / "secret.log").write_text(STATS.replace("Engine 000", "Engine 001"))
    (logs / "b.log").symlink_to(outside / "secret.log")
    (logs / "again.log").symlink_to(logs / "a.log")  # inside the directory: read (as a.log's content)
    r = runner.invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "s1"), "--json"])
    assert r.exit_code == 0, r.output
    read = {Path(f["source"]).name for f in json.loads(r.stdout)["files"] if f["status"] == "ingested"}
    assert read == {"a.log", "b.log"} or read == {"a.log", "secret.log"}
    r = runner.invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "s2"), "--json", "--no-follow-symlinks"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert {Path(f["source"]).name for f in out["files"] if f["status"] == "ingested"} == {"a.log"}
    assert [(Path(p["source"]).name, p["reason"]) for p in out["passed_over"]] == [
        ("b.log", f"a symlink out of {logs} (--no-follow-symlinks)")]
