"""The command line as a user meets it: help with examples, bad input gets one clear line
and a non-zero exit (never a traceback), and the store is never damaged."""

from __future__ import annotations

import re

import polars as pl

import json
import os

import pytest
from tests.helpers.common import events, write
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def assert_clean_failure(result, *needles: str) -> None:
    assert result.exit_code != 0
    err = result.stderr.strip()
    assert "Traceback" not in result.output and "Traceback" not in err
    lines = err.splitlines()
    assert lines and lines[-1].startswith("servelens: error: ")
    for needle in needles:
        assert needle in err


def fake_log(n: int = 3, start: int = 0) -> str:
    return "".join(f"FAKE 06-10 14:00:{i:02d} INFO m{i}\n" for i in range(start, start + n))


@pytest.fixture
def store(tmp_path, fake_engine):
    """A store that already holds three events, to check nothing damages it."""
    s = tmp_path / "store"
    r = invoke("ingest", write(tmp_path / "good.log", fake_log()), "--store", s)
    assert r.exit_code == 0, r.output
    return s


def test_every_command_has_help_with_an_example():
    import typer.main

    commands = typer.main.get_command(app).commands
    assert {"ingest", "sql"} <= set(commands)
    for name in commands:
        r = invoke(name, "--help")
        assert r.exit_code == 0
        assert "Example" in r.output, f"{name} --help has no example"
        assert f"servelens {name}" in r.output


def test_ingest_prints_a_summary(tmp_path, fake_engine):
    log = write(tmp_path / "logs" / "a.log", fake_log(5) + "garbage line\n")
    r = invoke("ingest", log.parent, "--store", tmp_path / "s")
    assert r.exit_code == 0
    assert "files: 1 (1 ingested, 0 unchanged, 0 skipped)" in r.stderr
    assert "lines: 6    events: 6    unparsed: 1" in r.stderr
    assert "events by kind: log 5, unparsed 1" in r.stderr


def test_missing_path(store):
    r = invoke("ingest", "/no/such/dir", "--store", store)
    assert_clean_failure(r, "path not found: /no/such/dir")
    assert events(store).height == 3


def test_directory_with_no_logs(tmp_path, store):
    (tmp_path / "empty_dir").mkdir()
    r = invoke("ingest", tmp_path / "empty_dir", "--store", store)
    assert_clean_failure(r, "no log files found")
    assert events(store).height == 3


def test_binary_file_is_skipped_with_a_reason(tmp_path, store):
    binary = write(tmp_path / "model.bin", bytes(range(256)) * 100)
    r = invoke("ingest", binary, "--store", store)
    assert_clean_failure(r, "binary file", "nothing was ingested")
    assert events(store).height == 3


def test_binary_file_beside_logs_does_not_stop_the_others(tmp_path, store):
    write(tmp_path / "mixed" / "core.dump", b"\x7fELF\x00\x00\x01" * 50)
    write(tmp_path / "mixed" / "b.log", fake_log(2, start=10))
    r = invoke("ingest", tmp_path / "mixed", "--store", store)
    assert r.exit_code == 0
    assert re.search(r"^\s*skipped\s+\S*core\.dump: binary file", r.stderr, re.M), r.stderr
    assert events(store).height == 5


def test_invalid_utf8_is_replaced_and_kept(tmp_path, store):
    log = write(tmp_path / "bad.log", b"FAKE 06-10 14:00:00 INFO caf\xe9 \xff\xfe ok\nFAKE 06-10 14:00:01 INFO next\n")
    r = invoke("ingest", log, "--store", store)
    assert r.exit_code == 0
    assert "invalid UTF-8 replaced" in r.stderr
    df = events(store).filter(events(store)["source"].str.ends_with("bad.log"))
    assert df["message"].to_list() == ["caf\ufffd \ufffd\ufffd ok", "next"]


def test_ten_megabyte_single_line(tmp_path, store):
    big = "FAKE 06-10 14:00:00 INFO " + "x" * (10 * 1024 * 1024) + "\n" + fake_log(1, start=1)
    log = write(tmp_path / "big.log", big)
    r = invoke("ingest", log, "--store", store)
    assert r.exit_code == 0
    df = events(store).filter(events(store)["source"].str.ends_with("big.log"))
    assert df.height == 2
    assert len(df["message"][0]) == 10 * 1024 * 1024


def test_empty_file(tmp_path, store):
    log = write(tmp_path / "empty.log", b"")
    r = invoke("ingest", log, "--store", store)
    assert r.exit_code == 0
    assert "empty file" in r.stderr
    assert events(store).height == 3


def test_unreadable_file(tmp_path, store):
    if os.geteuid() == 0:
        # root may read any file; /proc/self/mem opens but fails on read, even for root
        r = invoke("ingest", "/proc/self/mem", "--engine", "fake", "--store", store)
        assert_clean_failure(r, "cannot read it (Input/output error)", "nothing was ingested")
    else:
        log = write(tmp_path / "secret.log", fake_log())
        log.chmod(0)
        r = invoke("ingest", log, "--store", store)
        assert_clean_failure(r, "permission denied")
    assert events(store).height == 3


def test_store_that_cannot_be_written(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", fake_log())
    # /proc refuses new directories even to root
    r = invoke("ingest", log, "--store", "/proc/servelens-store")
    assert_clean_failure(r, "cannot write to store /proc/servelens-store")


def test_store_path_that_is_a_file(tmp_path, fake_engine):
    log = write(tmp_path / "a.log", fake_log())
    (tmp_path / "notadir").write_text("x")
    r = invoke("ingest", log, "--store", tmp_path / "notadir")
    assert_clean_failure(r, "is not a directory")


def test_unknown_engine(tmp_path, store):
    r = invoke("ingest", write(tmp_path / "a.log", fake_log()), "--engine", "ollama", "--store", store)
    assert_clean_failure(r, "unknown engine 'ollama'", "vllm")


def test_locked_store_is_refused(tmp_path, store):
    from servelens.pipeline.store.commit import Store

    with Store.open(store, purpose="tail"):
        r = invoke("ingest", write(tmp_path / "b.log", fake_log(1, start=9)), "--store", store)
    assert_clean_failure(r, "is in use by servelens tail")
    assert events(store).height == 3


def test_sql_formats(store, tmp_path):
    r = invoke("sql", "select line, message from events order by line", "--store", store, "--format", "csv")
    assert r.exit_code == 0
    assert r.stdout == "line,message\n1,m0\n2,m1\n3,m2\n"
    r = invoke("sql", "select line, message from events order by line limit 2", "--store", store, "--format", "json")
    assert json.loads(r.stdout) == [{"line": 1, "message": "m0"}, {"line": 2, "message": "m1"}]
    r = invoke("sql", "select count(*) as n, 'x' as label from events", "--store", store)
    assert r.stdout == "| n | label |\n|---|-------|\n| 3 | x     |\n(1 row)\n"
    out = tmp_path / "out.csv"
    r = invoke("sql", "select message from events order by line", "--store", store, "-f", "csv", "-o", out)
    assert r.exit_code == 0 and out.read_text() == "message\nm0\nm1\nm2\n"


@pytest.mark.parametrize(
    "query,needle",
    [
        ("selec 1", "syntax error"),
        ("select * from no_such_table", "no table or view named no_such_table; the views are listed by"),
        ("copy (select * from events) to 'x.csv'", "read-only"),
        ("drop view events", "read-only"),
        ("select 1; create table t as select 1", "read-only"),
        ("attach 'other.db'", "read-only"),
    ],
)
def test_sql_errors_are_one_line_and_change_nothing(store, query, needle):
    before = sorted(p.name for p in store.rglob("*"))
    r = invoke("sql", query, "--store", store)
    assert_clean_failure(r, needle)
    assert len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in store.rglob("*")) == before
    assert events(store).height == 3


def test_sql_on_a_missing_store(tmp_path):
    r = invoke("sql", "select 1", "--store", tmp_path / "nope")
    assert_clean_failure(r, "does not exist", "servelens ingest")


def test_sql_bad_format(store):
    assert_clean_failure(invoke("sql", "select 1", "--store", store, "--format", "xml"), "unknown --format")


def test_a_parser_bug_is_reported_in_one_line_and_the_rest_is_kept(tmp_path, store, monkeypatch):
    from tests.helpers import fake_engine
    real_parse = fake_engine.parse

    def flaky(lines, ctx):
        if lines["text"].str.contains("boom").any():
            raise ValueError("cannot handle\nthis")
        return real_parse(lines, ctx)

    monkeypatch.setattr(fake_engine, "parse", flaky)
    write(tmp_path / "logs" / "a.log", fake_log(2, start=20) + "FAKE 06-10 14:00:30 INFO boom\n")
    write(tmp_path / "logs" / "b.log", fake_log(2, start=40))
    r = invoke("ingest", tmp_path / "logs", "--store", store)
    # the failure costs only the record it fails on: kept as unparsed with the error, the
    # rest of the file and the other file are read (issue 15)
    assert r.exit_code == 0
    assert "1 record(s) the fake parser failed on kept as unparsed" in r.output
    assert "Traceback" not in r.output
    ev = events(store)
    assert ev.height == 3 + 3 + 2  # the store's 3, a.log's 3 (one unparsed), b.log's 2
    bad = ev.filter(pl.col("event") == "unparsed")
    assert bad["message"].to_list() == ["FAKE 06-10 14:00:30 INFO boom"]
    assert "ValueError: cannot handle this" in bad["attrs"][0]


def test_sql_window_and_thresholds_options(store, tmp_path):
    r = invoke("sql", "select getvariable('window_s') as w, getvariable('slo_p99_e2e_s') as slo", "--store", store, "-f", "csv")
    assert r.stdout == "w,slo\n60,30.0\n"
    mine = tmp_path / "slo.toml"
    mine.write_text("[slo]\np99_e2e_s = 2.5\n")
    r = invoke("sql", "select getvariable('window_s') as w, getvariable('slo_p99_e2e_s') as slo", "--store", store,
               "-f", "csv", "--window", "5m", "--thresholds", mine)
    assert r.stdout == "w,slo\n300.0,2.5\n"
    mine.write_text("[slo]\np99_e2e = 2.5\n")
    assert_clean_failure(invoke("sql", "select 1", "--store", store, "--thresholds", mine), "unknown threshold(s)", "slo_p99_e2e")
    assert_clean_failure(invoke("sql", "select 1", "--store", store, "--window", "soon"), "cannot read duration 'soon'")
