"""The dashboard's SQL page under attack (Streamlit's AppTest): refused statements show one
line and change nothing another visitor sees, a runaway query is cut off by the dashboard's
time limit without holding other visitors, the access token gates every page, the SQL page
can be switched off, and `servelens dashboard` refuses to serve other machines unguarded."""

from __future__ import annotations

import hashlib
import sys
import threading
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner
from tests.helpers.dashboard_store import INCIDENT, build_store, components_scanned_once
from servelens.pipeline.report.mdsafe import md_text
from servelens.pipeline.query.connect import run

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
SECRET = "DASHSECRET-51c2"
# a cross product under a predicate no join can use: it never finishes on its own
RUNAWAY = "select count(*) from events a, events b, events c, events d where a.line + b.line + c.line + d.line > 0"


@pytest.fixture(scope="module", autouse=True)
def _components_scanned_once():
    yield from components_scanned_once()


@pytest.fixture(autouse=True)
def _restore_main():
    """AppTest leaves the last script it ran as sys.modules['__main__']; a later test that
    spawns processes (multiprocessing re-runs __main__ in the child) must not run a page."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("dash-sandbox")
    store = build_store(base, [INCIDENT / "vllm" / "vllm-a.log", INCIDENT / "vllm" / "vllm-b.log"])
    victim = base / "victim"
    victim.mkdir()
    (victim / "secret.txt").write_text(SECRET + "\n")
    return store, victim


@pytest.fixture
def env(world, monkeypatch):
    store, _ = world
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    for name in ("SERVELENS_DASHBOARD_TOKEN", "SERVELENS_DASHBOARD_SQL", "SERVELENS_DASHBOARD_QUERY_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def sql_page() -> AppTest:
    """The app opened at /sql (the SQL page's url_path is its file's name)."""
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.switch_page("pages/sql.py").run()
    assert not at.exception and at.title[0].value == "SQL"
    return at


def submit(at: AppTest, sql: str) -> AppTest:
    at.text_area(key="sql_query").input(sql)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def verdict_headers(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("#### ")]


def test_attacks_on_the_sql_page_fail_in_one_line_and_change_nothing(world, env):
    store, victim = world
    overview = AppTest.from_file(str(APP), default_timeout=90)
    overview.run()
    headers = verdict_headers(overview)
    assert headers  # the verdict another visitor sees
    before_store, before_victim = tree(store), tree(victim)
    signals = run(store, "select instance, signal, severity, window_start from scaling_signals order by all").rows()
    at = sql_page()
    for attack in (
        f"explain analyze copy (select 42) to '{victim}/x.csv'",
        f"copy (select 1 as a) to '{store}/manifest.json'",
        "create temp table scaling_signals as select 'nothing' as signal",
        "create or replace temp view events as select 1 as n",
        "set variable queue_depth_warning = 1000000",
        f"select * from read_text('{victim}/secret.txt')",
        f"select * from read_csv('{victim}/secret.txt')",
        f"select * from glob('{victim}/*')",
        f"attach '{victim}/db.duckdb' as x",
        "install httpfs",
        "select 1; set threads = 1",
    ):
        submit(at, attack)
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "\n" not in errors[0], (attack, errors)
        # no result table: the only table on the page is the list of views and their columns
        assert [list(d.value.columns) for d in at.dataframe] in ([], [["view", "columns"]]), attack
        assert all(SECRET not in e for e in errors)
    # the same visitor, a later query: the views are untouched
    submit(at, "select instance, signal, severity, window_start from scaling_signals order by all")
    assert [tuple(r) for r in at.dataframe[0].value.itertuples(index=False)] == [tuple(r) for r in signals]
    assert tree(store) == before_store and tree(victim) == before_victim
    assert not (victim / "x.csv").exists()
    # another visitor opening the dashboard now sees the same verdicts
    other = AppTest.from_file(str(APP), default_timeout=90)
    other.run()
    assert verdict_headers(other) == headers


def test_a_runaway_query_is_cut_off_and_others_are_not_held(world, env):
    store, _ = world
    env.setenv("SERVELENS_DASHBOARD_QUERY_TIMEOUT", "3")
    from servelens.dashboards import data

    cfg = data.Settings(store=str(store))
    outcome: dict[str, str] = {}

    def slow() -> None:
        try:
            data.run_user_sql(cfg, RUNAWAY)
        except data.QueryError as e:
            outcome["slow"] = str(e)

    t = threading.Thread(target=slow)
    t.start()
    # a second visitor's query while the runaway runs: answered before the runaway is stopped
    n = data.run_user_sql(cfg, "select count(*) as n from events")["n"][0]
    assert n > 0 and t.is_alive()
    t.join(timeout=60)
    assert outcome["slow"] == (
        "the query ran past its 3 s time limit and was stopped; raise it with servelens dashboard "
        "--query-timeout SECONDS (or $SERVELENS_DASHBOARD_QUERY_TIMEOUT)"
    )
    # and through the page
    at = sql_page()
    submit(at, RUNAWAY)
    assert [e.value for e in at.error] == [md_text(outcome["slow"])]  # shown as text, not Markdown


def test_the_access_token_gates_every_page(world, env):
    env.setenv("SERVELENS_DASHBOARD_TOKEN", "correct-horse-battery-staple")
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.run()
    assert not at.exception
    assert verdict_headers(at) == [] and not at.dataframe  # nothing of the store before the token
    at.text_input(key="servelens_access_token").input("wrong-token-wrong-token")
    at.button[0].click().run()
    assert [e.value for e in at.error] == ["wrong access token"] and verdict_headers(at) == []
    at.text_input(key="servelens_access_token").input("correct-horse-battery-staple")
    at.button[0].click().run()
    assert not at.exception
    assert verdict_headers(at)  # the Overview draws
    at.switch_page("pages/sql.py").run()
    assert at.text_area(key="sql_query") is not None


def test_the_sql_page_can_be_switched_off(world, env):
    env.setenv("SERVELENS_DASHBOARD_SQL", "off")
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.run()
    assert not at.exception and verdict_headers(at)
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("pages/sql.py")  # not in the navigation at all
    # and the page itself refuses, should it be run some other way
    page = AppTest.from_file(str(APP.parent / "pages" / "sql.py"), default_timeout=90)
    page.run()
    assert not page.exception
    assert "switched off" in page.info[0].value and not page.text_area


# --- the command -----------------------------------------------------------------------------


@pytest.fixture
def launched(monkeypatch):
    """`servelens dashboard` with the exec into Streamlit caught: (argv, env) it would run."""
    from servelens.pipeline.cli import dashboard as cli_dashboard
    from servelens.pipeline.cli.app import app, build_app

    build_app()
    calls = []
    monkeypatch.setattr(cli_dashboard.os, "execve", lambda path, argv, env: calls.append((argv, env)))
    monkeypatch.setattr(cli_dashboard, "_port_free", lambda host, port: True)
    monkeypatch.delenv("SERVELENS_DASHBOARD_TOKEN", raising=False)
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None):
        calls.clear()
        return runner.invoke(app, ["dashboard", *args], env=env), list(calls)

    return invoke


def test_dashboard_serves_other_machines_only_when_told_and_guarded(world, launched):
    store, _ = world
    r, calls = launched("--store", str(store), "--host", "0.0.0.0")
    assert r.exit_code == 1 and calls == []
    assert "serves other machines: add --allow-remote" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r, calls = launched("--store", str(store), "--host", "0.0.0.0", "--allow-remote")
    assert r.exit_code == 1 and calls == [] and "needs an access token" in r.stderr
    r, calls = launched("--store", str(store), "--host", "0.0.0.0", "--allow-remote", "--token", "short")
    assert r.exit_code == 1 and calls == [] and "too short" in r.stderr

    token = "0123456789abcdef0123"
    r, calls = launched("--store", str(store), "--host", "0.0.0.0", "--allow-remote", env={"SERVELENS_DASHBOARD_TOKEN": token})
    assert r.exit_code == 0, r.output
    (argv, child_env), = calls
    assert argv[argv.index("--server.address") + 1] == "0.0.0.0"
    assert child_env["SERVELENS_DASHBOARD_TOKEN"] == token and token not in " ".join(argv)
    assert child_env["SERVELENS_DASHBOARD_SQL"] == "on"

    r, calls = launched("--store", str(store), "--host", "0.0.0.0", "--allow-remote", "--no-sql", "--query-timeout", "5")
    assert r.exit_code == 0, r.output
    (argv, child_env), = calls
    assert child_env["SERVELENS_DASHBOARD_SQL"] == "off" and "SERVELENS_DASHBOARD_TOKEN" not in child_env
    assert child_env["SERVELENS_DASHBOARD_QUERY_TIMEOUT"] == "5"

    # localhost needs nothing more, as before
    r, calls = launched("--store", str(store))
    assert r.exit_code == 0 and calls[0][0][calls[0][0].index("--server.address") + 1] == "127.0.0.1"
    r, calls = launched("--store", str(store), "--query-memory", "lots")
    assert r.exit_code == 1 and calls == [] and "--query-memory" in r.stderr


def test_clearing_the_shared_caches_needs_the_token(monkeypatch):
    """Streamlit's "Clear caches" (a websocket message any session may send) clears what every
    visitor shares; with a token set, a session that did not give it is ignored."""
    import streamlit as st
    from streamlit.runtime.app_session import AppSession

    from servelens.dashboards import access

    monkeypatch.setattr(AppSession, "_handle_clear_cache_request", AppSession._handle_clear_cache_request)
    access.guard_cache_clearing()
    calls: list[int] = []

    @st.cache_data(show_spinner=False)
    def shared(x: int) -> int:
        calls.append(x)
        return x

    class Session:
        def __init__(self, state: dict):
            self._session_state = state

    shared(1)
    monkeypatch.setenv(access.TOKEN_ENV, "s3cret")
    AppSession._handle_clear_cache_request(Session({}))  # a stranger's websocket
    AppSession._handle_clear_cache_request(Session({access._STATE_KEY: hashlib.sha256(b"wrong").hexdigest()}))
    shared(1)
    assert calls == [1]  # still cached: nothing was cleared
    AppSession._handle_clear_cache_request(Session({access._STATE_KEY: hashlib.sha256(b"s3cret").hexdigest()}))
    shared(1)
    assert calls == [1, 1]  # the session that gave the token cleared it
    monkeypatch.delenv(access.TOKEN_ENV)
    AppSession._handle_clear_cache_request(Session({}))  # no token: the dashboard is open to all
    shared(1)
    assert calls == [1, 1, 1]
