"""The sandbox for user SQL, attacked through `servelens sql` (typer's CliRunner) the way a
user would: every statement form that writes, reads elsewhere, loads, changes a setting or
changes what later queries see must fail with one line, and afterwards no file outside the
store was written, no byte of the store changed, nothing secret was shown, and the same
queries give the same answers. Also the limits (time, memory, spill, result size) and the
statement check on its own."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from tests.helpers.common import returns
from tests.helpers.dashboard_store import INCIDENT, build_store
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import Limits, QueryError, run
from servelens.pipeline.query.sandbox import check_statement, parse_size, parse_timeout
from servelens.pipeline.store.manifest import committed_parts

build_app()
runner = CliRunner()
SECRET = "TOPSECRET-7f3a9c"
# a three-way cross join no join algorithm can shortcut: hours over a few thousand events
# a cross product under a predicate no join can use: it never finishes on its own
RUNAWAY = "select count(*) from events a, events b, events c, events d where a.line + b.line + c.line + d.line > 0"


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under `root` with a hash of its bytes (and its mode)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_file() and not p.is_symlink():
            out[rel] = f"{oct(p.stat().st_mode)}:{hashlib.sha256(p.read_bytes()).hexdigest()}"
        else:
            out[rel] = oct(p.lstat().st_mode)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store, and beside it a directory of things an attacker wants: a secret in text, CSV,
    JSON and Parquet, a DuckDB file, and an export whose schema.sql would write a file when
    imported."""
    base = tmp_path_factory.mktemp("sandbox")
    store = build_store(base, [INCIDENT / "vllm" / "vllm-b.log"])
    victim = base / "victim"
    victim.mkdir()
    (victim / "secret.txt").write_text(f"{SECRET}\n")
    (victim / "secret.csv").write_text(f"name,value\nkey,{SECRET}\n")
    (victim / "secret.json").write_text(f'{{"key": "{SECRET}"}}\n')
    pq.write_table(pa.table({"key": [SECRET]}), victim / "secret.parquet")
    imp = victim / "imp"
    imp.mkdir()
    (imp / "schema.sql").write_text(f"copy (select '{SECRET}') to '{victim}/imported.csv';\n")
    (imp / "load.sql").write_text("")
    return store, victim


def answers(store: Path) -> list:
    """What later queries see: counts, a view that reads the variables, the signals."""
    return [
        run(store, "select event, count(*) as n from events group by all order by all").rows(),
        run(store, "select count(*) as n, sum(waiting) as w from queue_depth").rows(),
        run(store, "select instance, signal, severity, window_start from scaling_signals order by all").rows(),
        run(store, "select current_setting('enable_external_access') as a, current_setting('lock_configuration') as l").rows(),
    ]


def attacks(store: Path, victim: Path) -> list[str]:
    part = str(committed_parts(store)[0])
    v = str(victim)
    return [
        # writing: COPY in every disguise
        f"copy (select 42) to '{v}/copy.csv'",
        f"explain analyze copy (select 42) to '{v}/explain.csv'",
        f"EXPLAIN ANALYZE COPY (SELECT 42) TO '{v}/upper.csv'",
        f"explain (analyze) copy (select 42) to '{v}/paren.csv'",
        f"explain analyze explain analyze copy (select 42) to '{v}/nested.csv'",
        f"explain copy (select 42) to '{v}/plain.csv'",
        f"/* select */ explain /* x */ analyze -- y\n copy (select 42) to '{v}/comment.csv'",
        f"explain analyze copy (select 1 as a) to '{part}' (format parquet, use_tmp_file false)",
        f"copy (select 1 as a) to '{part}' (format parquet, use_tmp_file false)",
        f"copy (select 1) to '{store}/manifest.json'",
        f"copy events to '{v}/dump.parquet'",
        "copy (select 42) to 'relative.csv'",
        f"select 1; copy (select 42) to '{v}/second.csv'",
        f"select 1 /* ; */; copy (select 42) to '{v}/third.csv'",
        f"export database '{v}/export'",
        f"explain analyze export database '{v}/export2'",
        f"import database '{v}/imp'",
        f"pragma import_database('{v}/imp')",
        f"attach '{v}/new.duckdb' as x",
        f"attach '{part}' as p",
        "attach ':memory:' as m",
        "detach memory",
        "checkpoint",
        "vacuum",
        # extensions and the network
        "install httpfs",
        "force install httpfs",
        "load httpfs",
        f"load '{v}/evil.duckdb_extension'",
        "select * from read_csv('http://127.0.0.1:9/x.csv')",
        "select * from read_parquet('s3://bucket/x.parquet')",
        f"select * from sqlite_scan('{v}/x.db', 't')",  # its extension is never loaded
        "select * from world",  # a name only the calling Python code has (replacement scans off)
        "update extensions",
        "copy from database memory to memory",
        # settings
        "set enable_external_access = true",
        "reset enable_external_access",
        "set lock_configuration = false",
        f"set allowed_directories = ['{v}']",
        "set memory_limit = '100GB'",
        "set threads = 1",
        "pragma memory_limit = '100GB'",
        "pragma enable_profiling",
        f"set profiling_output = '{v}/profile.json'",
        "set variable window_s = 1",
        "reset variable window_s",
        "use system",
        "call pragma_version()",
        # objects that would shadow a view or outlive the query
        "create temp table events as select 42 as n",
        "create temp view scaling_signals as select 1 as n",
        "create or replace view requests as select 1 as n",
        "create macro f(x) as x + 1",
        "create or replace temp macro read_text(x) as table select 1",
        "create table t as select 1",
        "create secret (type s3, key_id 'a', secret 'b')",
        "insert into events select * from events",
        "drop view requests",
        "begin transaction",
        "prepare p as select 1",
        "pivot events on engine using count(*)",
        READS,  # the rest must be refused by DuckDB's sandbox itself
        f"select * from read_text('{v}/secret.txt')",
        f"select * from read_blob('{v}/secret.txt')",
        f"select * from read_csv('{v}/secret.csv')",
        f"select * from read_csv_auto('{v}/secret.csv')",
        f"select * from sniff_csv('{v}/secret.csv')",
        f"select * from read_json('{v}/secret.json')",
        f"select * from read_json_objects('{v}/secret.json')",
        f"select * from read_parquet('{v}/secret.parquet')",
        f"select * from parquet_metadata('{v}/secret.parquet')",
        f"select * from parquet_schema('{v}/secret.parquet')",
        f"select * from '{v}/secret.csv'",
        f"select * from glob('{v}/*')",
        "select * from glob('/root/*')",
        "select * from read_text('/etc/passwd')",
        f"select * from glob('{store}/*')",
        f"select * from read_text('{store}/manifest.json')",
        f"select * from read_text('{part}/../../manifest.json')",
        f"select * from read_text('{v}/' || 'secret.txt')",
        "select * from read_text(chr(47) || 'etc' || chr(47) || 'passwd')",
        f"select * from read_text(['{part}', '{v}/secret.txt'])",
        f"select * from query('select * from read_text(''{v}/secret.txt'')')",
        f"describe select * from read_text('{v}/secret.txt')",
        f"summarize select * from read_csv('{v}/secret.csv')",
        f"with t as (select * from read_text('{v}/secret.txt')) select * from t",
        f"select (select content from read_text('{v}/secret.txt')) as c",
        f"explain analyze select * from read_text('{v}/secret.txt')",
        f"select * from read_text(E'{v}/secret\\x2etxt')",
        f"select * from read_parquet('{store}/events/**/*.parquet')",
    ]


READS = "-- reading or listing outside the store"
SANDBOX_REFUSAL = "reads only the store's committed data"


def _files_outside(roots: list[Path]) -> dict[str, dict[str, str]]:
    return {str(r): tree(r) for r in roots}


def test_every_attack_fails_with_one_line_and_changes_nothing(world, tmp_path, monkeypatch):
    store, victim = world
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)  # a relative COPY target would land here
    spill = tmp_path / "spill"
    monkeypatch.setenv("SERVELENS_SPILL_DIR", str(spill))
    before_store, before_outside = tree(store), _files_outside([victim, work])
    before = answers(store)
    assert before[3] == [(False, True)]  # the sandbox is on for every query
    passed, sandbox_layer = [], False
    for sql in attacks(store, victim):
        if sql == READS:
            sandbox_layer = True
            continue
        r = runner.invoke(app, ["sql", sql, "--store", str(store), "--format", "csv"])
        out = r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        if r.exit_code == 0 or len(lines) != 1 or not lines[0].startswith("servelens: error: ") or "Traceback" in out:
            passed.append((sql, r.exit_code, out[:300]))
        elif sandbox_layer and SANDBOX_REFUSAL not in lines[0]:
            passed.append((sql, "not refused by the sandbox", lines[0]))
        assert SECRET not in out, sql
    assert passed == []
    assert tree(store) == before_store
    assert _files_outside([victim, work]) == before_outside
    assert list(spill.iterdir()) == []  # every query's spill directory went with it
    assert answers(store) == before


def test_refusals_say_what_is_allowed(world):
    store, victim = world
    r = runner.invoke(app, ["sql", f"explain analyze copy (select 42) to '{victim}/x.csv'", "--store", str(store)])
    assert r.stderr.strip() == (
        "servelens: error: servelens sql is read-only: use SELECT (or WITH ... SELECT, FROM, DESCRIBE, "
        "SHOW, SUMMARIZE, EXPLAIN) (got COPY)"
    )
    r = runner.invoke(app, ["sql", f"select * from read_text('{victim}/secret.txt')", "--store", str(store)])
    assert r.exit_code == 1
    assert "reads only the store's committed data" in r.stderr and f"{victim}/secret.txt" in r.stderr


def test_reading_statements_still_work(world):
    store, _ = world
    n = run(store, "select count(*) as n from events").item()
    assert n > 100
    assert "ts" in run(store, "describe events")["column_name"].to_list()
    assert "scaling_signals" in run(store, "show tables")["name"].to_list()
    assert run(store, "summarize events").height == len(run(store, "describe events"))
    assert run(store, "from events select count(*)").item() == n
    assert run(store, "select 1 as a; select count(*) as n from events").item() == n  # last result
    assert run(store, "pragma table_info('events')").height == len(run(store, "describe events"))
    plan = run(store, "explain analyze select count(*) from events")
    assert plan.height == 1 and "Total Time" in plan["explain_value"][0]
    assert run(store, "pivot (select engine from events) on engine in ('vllm') using count(*)")["vllm"].item() == n
    # reading a committed part by name reads the store's own data: allowed
    part = committed_parts(store)[0]
    assert run(store, f"select count(*) from read_parquet('{part}')").item() == n
    assert run(store, "select count(*) from events where line > ?", [0]).item() == n


def test_statement_check_reads_through_comments_and_explain():
    for sql in ("select 1", "with a as (select 1) select * from a", "explain select 1", "EXPLAIN ANALYZE select 1",
                "explain (format json) select 1", "-- c\nselect 1", "/* copy */ select 1", "describe events",
                "show tables", "summarize events", "pragma show_tables", "values (1)"):
        assert check_statement(sql) >= 1, sql
    for sql in ("explain analyze copy (select 1) to 'x'", "select 1; set threads = 1", "pragma threads = 1",
                "pragma import_database('x')", "/* select */ copy (select 1) to 'x'", "explain", "", "  -- only a comment",
                "explain analyze create table t as select 1", "call checkpoint()"):
        with pytest.raises(QueryError) as e:
            check_statement(sql)
        assert "\n" not in str(e.value)


def test_a_runaway_query_is_stopped_by_the_time_limit(world):
    store, _ = world
    # unbounded, the four-way join runs for hours: returning at all is the stop
    r = returns(lambda: runner.invoke(app, ["sql", RUNAWAY, "--store", str(store), "--timeout", "1"]),
                what="a runaway query with a 1 s limit")
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        "servelens: error: the query ran past its 1 s time limit and was stopped; "
        "raise it with --timeout SECONDS or $SERVELENS_QUERY_TIMEOUT"
    )
    assert run(store, "select count(*) from events").item() > 0  # and the store still answers


def test_time_limit_from_the_environment(world, monkeypatch):
    store, _ = world
    monkeypatch.setenv("SERVELENS_QUERY_TIMEOUT", "0.5")
    r = runner.invoke(app, ["sql", RUNAWAY, "--store", str(store)])
    assert r.exit_code == 1 and "0.5 s time limit" in r.stderr


def test_memory_spill_and_result_limits_name_themselves(world, monkeypatch, tmp_path):
    store, _ = world
    monkeypatch.setenv("SERVELENS_SPILL_DIR", str(tmp_path / "spill"))
    r = runner.invoke(app, ["sql", "select length(list(range)) from range(50000000)", "--store", str(store), "--memory-limit", "100MB"])
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        "servelens: error: the query needs more than its 100 MB memory limit; raise it with "
        "--memory-limit SIZE or $SERVELENS_QUERY_MEMORY, or add filters or a LIMIT"
    )
    monkeypatch.setenv("SERVELENS_SPILL_SIZE", "1MB")
    r = runner.invoke(app, ["sql", "select count(*) from (select md5(range::varchar) s from range(2500000) order by s)",
                            "--store", str(store), "--memory-limit", "40MB"])
    assert r.exit_code == 1 and "spilled more than its 1 MB of temporary disk" in r.stderr
    monkeypatch.delenv("SERVELENS_SPILL_SIZE")
    r = runner.invoke(app, ["sql", "select repeat('x', 1000000) from range(100)", "--store", str(store), "--memory-limit", "50MB"])
    assert r.exit_code == 1 and "the result is larger than the memory limit (50 MB)" in r.stderr
    # within the limit, a sort spills to the private directory and gives the right answer
    r = runner.invoke(app, ["sql", "select count(*) as n, min(s) as m from (select md5(range::varchar) s from range(2500000) order by s)",
                            "--store", str(store), "--memory-limit", "60MB", "--format", "csv"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[1].startswith("2500000,")
    spill = tmp_path / "spill"
    assert oct(spill.stat().st_mode & 0o777) == "0o700" and list(spill.iterdir()) == []


def test_bad_limits_are_one_line(world):
    store, _ = world
    for opt, value in (("--timeout", "soon"), ("--memory-limit", "lots"), ("--memory-limit", "-1GB")):
        r = runner.invoke(app, ["sql", "select 1", "--store", str(store), opt, value])
        assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1 and opt in r.stderr
    assert parse_size("4GB") == 4 * 10**9 and parse_size("512MiB") == 512 * 2**20
    assert parse_timeout("0") is None and parse_timeout("2.5") == 2.5


def test_spill_directory_is_private(tmp_path, monkeypatch, world):
    store, _ = world
    spill = tmp_path / "spill"
    spill.mkdir(mode=0o755)
    os.chmod(spill, 0o755)
    monkeypatch.setenv("SERVELENS_SPILL_DIR", str(spill))
    run(store, "select 1", limits=Limits(timeout_s=5))
    assert oct(spill.stat().st_mode & 0o777) == "0o700"  # tightened
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("SERVELENS_SPILL_DIR", str(link))
    with pytest.raises(QueryError, match="not a plain directory"):
        run(store, "select 1")
