"""A --store that is not a store is one line saying what was found instead, exit 1, for every
command that reads one; a view name typed wrong is answered with the store's own views."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli import _register_commands, app

_register_commands()
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
