"""`servelens sql` is run by scripts once per question, so its start-up is most of a small
query's time: the command's process loads what the query needs (duckdb, polars, pyarrow) and
not the other commands' modules nor the dashboard's or the tailer's libraries. Each test runs
the real entry point (`cli.main`, as the console script does) in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

from servelens.pipeline.cli.app import COMMAND_MODULES

CHILD = r"""
import json, sys
store, args = sys.argv[1], sys.argv[2:]
sys.argv = ["servelens", *[store if a == "STORE" else a for a in args]]
from servelens.pipeline.cli.app import main
code = 0
try:
    main()
except SystemExit as e:
    code = e.code or 0
sys.stdout.flush()
print("\nMODULES " + json.dumps(sorted(sys.modules)) + " EXIT " + str(code))
"""


def run_main(store, *args: str) -> tuple[str, set[str], int]:
    r = subprocess.run([sys.executable, "-c", CHILD, str(store), *args], capture_output=True, text=True, timeout=120)
    out, _, tail = r.stdout.rpartition("\nMODULES ")
    modules, _, code = tail.rpartition(" EXIT ")
    assert r.stderr == "" or int(code) != 0, r.stderr
    return out, set(json.loads(modules)), int(code)


def test_sql_loads_only_what_a_query_needs(tmp_path):
    out, modules, code = run_main(tmp_path, "sql", "select 42 as n", "--store", "STORE", "--format", "csv")
    assert code == 0
    assert out.strip() == "n\n42"
    # what the query does need is there (the check below is not passing on an empty list)
    assert {"duckdb", "polars", "servelens.pipeline.query.connect"} <= modules
    others = {f"servelens.pipeline.cli.{m}" for m in COMMAND_MODULES}
    heavy = {"streamlit", "watchdog", "altair", "vl_convert", "sqlglot", "servelens.pipeline.ingest",
             "servelens.pipeline.tail.tailer", "servelens.dashboards"}
    assert not (modules & (others | heavy)), sorted(modules & (others | heavy))


def test_help_through_main_still_lists_every_command(tmp_path):
    out, modules, code = run_main(tmp_path, "--help")
    assert code == 0
    for name in ("ingest", "sql", "report", "dashboard", "tail", "check", "views"):
        assert f" {name} " in out, f"{name} missing from --help"
    assert {f"servelens.pipeline.cli.{m}" for m in COMMAND_MODULES} <= modules


def test_a_registered_command_still_runs_through_main(tmp_path):
    out, _modules, code = run_main(tmp_path, "views", "--help")
    assert code == 0
    assert "servelens views" in out
