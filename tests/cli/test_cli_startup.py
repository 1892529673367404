"""`servelens sql` is run by scripts once per question, so its start-up is most of a small
query's time: the command's process loads what the query needs (duckdb, the manifest, the
views) and not polars, pyarrow or numpy, the other commands' modules nor the dashboard's or the
tailer's libraries. Each test runs the real entry point (`cli.main`, as the console script
does) in a fresh interpreter; facts about imports, not timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelens.pipeline.cli.app import COMMAND_MODULES

SERVELENS = Path(sys.executable).parent / "servelens"
INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm"
# what `servelens sql` must not load: the DataFrame and Arrow libraries (and what they pull in)
DATAFRAME_LIBS = {"polars", "pyarrow", "numpy", "pandas"}

CHILD = r"""
import json, sys, threading
in_process = sys.argv[1] == "IN_PROCESS"
store, args = sys.argv[2], sys.argv[3:]
sys.argv = ["servelens", *[store if a == "STORE" else a for a in args]]
if in_process:
    # a second thread keeps the query in this process (pipeline/query/bounded.py forks only
    # from a single-threaded one), so that what the query itself imports is seen here too
    threading.Thread(target=threading.Event().wait, daemon=True).start()
from servelens.pipeline.cli.app import main
code = 0
try:
    main()
except SystemExit as e:
    code = e.code or 0
sys.stdout.flush()
print("\nMODULES " + json.dumps(sorted(sys.modules)) + " EXIT " + str(code))
"""


def run_main(store, *args: str, in_process: bool = False) -> tuple[str, set[str], int]:
    r = subprocess.run([sys.executable, "-c", CHILD, "IN_PROCESS" if in_process else "FORK", str(store), *args],
                       capture_output=True, text=True, timeout=120)
    out, _, tail = r.stdout.rpartition("\nMODULES ")
    modules, _, code = tail.rpartition(" EXIT ")
    assert r.stderr == "" or int(code) != 0, r.stderr
    return out, set(json.loads(modules)), int(code)


def test_sql_loads_only_what_a_query_needs(tmp_path):
    out, modules, code = run_main(tmp_path, "sql", "select 42 as n", "--store", "STORE", "--format", "csv")
    assert code == 0
    assert out.strip() == "n\n42"
    # what the query does need is there (the check below is not passing on an empty list)
    assert {"duckdb", "servelens.pipeline.query.connect"} <= modules
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
    # the help of every command needs no query engine nor DataFrame library
    assert not {m for m in modules if m.split(".")[0] in DATAFRAME_LIBS | {"duckdb"}}


def test_a_registered_command_still_runs_through_main(tmp_path):
    out, _modules, code = run_main(tmp_path, "views", "--help")
    assert code == 0
    assert "servelens views" in out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Rollups refreshed by the ingest: a view's query reads its stored rollup."""
    s = tmp_path_factory.mktemp("lean") / "store"
    subprocess.run([str(SERVELENS), "ingest", str(INCIDENT), "--store", str(s), "-q", "--refresh-rollups"],
                   check=True, capture_output=True)
    return s


@pytest.fixture(scope="module")
def deferred_store(tmp_path_factory):
    """As an ingest leaves it by default: the rollups left to the first query that reads them."""
    s = tmp_path_factory.mktemp("deferred") / "store"
    subprocess.run([str(SERVELENS), "ingest", str(INCIDENT), "--store", str(s), "-q"], check=True, capture_output=True)
    assert json.loads((s / "manifest.json").read_text()).get("rollups_deferred")
    return s


@pytest.mark.parametrize("query", ["select 1", "select count(*) as n from events where event = 'request_finished'"])
def test_a_query_of_no_stored_view_on_a_deferred_store_imports_no_dataframe_library(deferred_store, query):
    """The deferred refresh is only for a query that reads a rollup: this one leaves the mark
    and pays for nothing of the refresh, not even its imports."""
    out, modules, code = run_main(deferred_store, "sql", query, "--store", "STORE", "-f", "csv", in_process=True)
    assert code == 0 and out.strip().splitlines()[-1] == ("1" if query == "select 1" else str(finished_requests()))
    assert "servelens.pipeline.query.rollups" not in modules
    assert not {m for m in modules if m.split(".")[0] in DATAFRAME_LIBS}
    assert json.loads((deferred_store / "manifest.json").read_text()).get("rollups_deferred")


def finished_requests() -> int:
    return sum(p.read_text().count("Finished request") for p in INCIDENT.glob("*.log"))


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_sql_imports_no_dataframe_library(store, fmt):
    """The whole query in this process (the store opened, its first part's columns checked,
    the views bound, the result written): DuckDB writes the text, no DataFrame is made."""
    query = "select count(*) as n from events where event = 'request_finished'"
    out, modules, code = run_main(store, "sql", query, "--store", "STORE", "-f", fmt, in_process=True)
    assert code == 0
    n = finished_requests()
    assert n > 0
    w = len(str(n))
    table = f"| {'n'.ljust(w)} |\n|{'-' * (w + 2)}|\n| {n} |\n(1 row)"
    assert {"table": table, "csv": f"n\n{n}", "json": f'[{{"n":{n}}}]'}[fmt] == out.strip()
    assert "servelens.pipeline.query.sandbox" in modules and "servelens.pipeline.store.sample_parts" in modules
    assert not {m for m in modules if m.split(".")[0] in DATAFRAME_LIBS}, sorted(m for m in modules if m.split(".")[0] in DATAFRAME_LIBS)[:5]


def test_sql_over_views_and_a_time_range_imports_no_dataframe_library(store):
    """A view over a stored rollup within --since/--until (the rollup's columns read for the
    range filter) and the note when the range holds nothing: still no DataFrame library."""
    out, modules, code = run_main(store, "sql", "select count(*) as n from requests where finish_ts is not null",
                                  "--store", "STORE", "-f", "csv", "--since", "2020-01-01T00:00Z", in_process=True)
    assert code == 0
    import polars as pl  # the simulator's truth, read here in the test's own process

    truth = pl.read_parquet(INCIDENT / "truth_requests.parquet")
    assert out.strip() == f"n\n{truth['finish_ts'].is_not_null().sum()}"
    out, modules2, code = run_main(store, "sql", "select count(*) as n from window_metrics", "--store", "STORE",
                                   "-f", "csv", "--since", "2001-01-01T00:00Z", "--until", "2001-01-02T00:00Z", in_process=True)
    assert code == 0 and out.strip() == "n\n0"
    assert "servelens.pipeline.query.stored" in modules | modules2
    assert not {m for m in modules | modules2 if m.split(".")[0] in DATAFRAME_LIBS}


def test_info_imports_no_dataframe_library(store):
    out, modules, code = run_main(store, "info", "--store", "STORE", "--json", in_process=True)
    assert code == 0
    data = json.loads(out)
    assert sorted(i["instance"] for i in data["instances"]) == sorted(p.stem for p in INCIDENT.glob("*.log"))
    assert data["first_ts"].startswith("2026-05-12T") and data["first_ts"].endswith("+00:00")
    assert not {m for m in modules if m.split(".")[0] in DATAFRAME_LIBS}
