"""The dashboard's SQL page bounded from outside DuckDB: each visitor's query runs in a worker
process of its own (pipeline/query/worker.py) that the dashboard watches and kills, so one
huge value, one long call or one huge result ends in one line for that visitor while the
dashboard process stays small and answers the next query. Truth: the kernel's accounting
(getrusage of this process and of its reaped children), the exact lines of the limits, and
rows counted from the log independently."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from tests.helpers.common import returns
from tests.helpers.dashboard_store import INCIDENT, build_store, components_scanned_once

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
MB = 10**6
MEMORY_LINE = ("the query went past its memory limit of 200.0 MB (one value or its result took ")
RAISE_MEMORY = "raise it with servelens dashboard --query-memory SIZE (or $SERVELENS_DASHBOARD_QUERY_MEMORY)"


@pytest.fixture(scope="module", autouse=True)
def _components_scanned_once():
    yield from components_scanned_once()


@pytest.fixture(autouse=True)
def _restore_main():
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # the tests are about the worker's limits: the views are derived from the events
    return build_store(tmp_path_factory.mktemp("dash-bounded"), [INCIDENT / "vllm" / "vllm-a.log"], rollups=False)


@pytest.fixture
def cfg(store, monkeypatch):
    monkeypatch.setenv("SERVELENS_STORE", str(store))
    monkeypatch.setenv("SERVELENS_DASHBOARD_QUERY_MEMORY", "200MB")
    monkeypatch.setenv("SERVELENS_DASHBOARD_QUERY_TIMEOUT", "30")  # the memory attacks meet memory first
    for name in ("SERVELENS_DASHBOARD_TOKEN", "SERVELENS_DASHBOARD_SQL", "SERVELENS_DASHBOARD_QUERY_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    from servelens.dashboards import data

    return data.Settings(store=str(store))


def finished_requests() -> int:
    return (INCIDENT / "vllm" / "vllm-a.log").read_text().count("Finished request")


def worker_peak() -> int:
    """The last query worker's largest resident set, as the kernel counted it (wait4)."""
    from servelens.pipeline.query import worker as query_worker

    return query_worker.last_peak_bytes


def peak(who: int) -> int:
    return resource.getrusage(who).ru_maxrss * 1024


@pytest.mark.parametrize("value", [
    "length(lpad('x', 500000000, 'y'))",
    "len(list_resize([1], 200000000))",
    "len(string_split(repeat('a,', 50000000), ','))",
    "len(range(100000000))",
])
def test_one_huge_value_stops_in_its_worker_and_the_dashboard_goes_on(cfg, value):
    from servelens.dashboards import data

    before = peak(resource.RUSAGE_SELF)
    with pytest.raises(data.QueryError) as e:
        data.run_user_sql(cfg, f"select {value} as n")
    line = str(e.value)
    assert line.startswith(MEMORY_LINE) and line.endswith(RAISE_MEMORY) and "\n" not in line
    # the value was built (and stopped) in the worker: this process never held it; the worker
    # at most the limit, the margin for a result, the interpreter's own size and what one
    # allocation adds before a poll on a loaded machine sees it
    assert peak(resource.RUSAGE_SELF) - before < 150 * MB
    assert 200 * MB < worker_peak() < 200 * MB + 256 * 2**20 + 600 * MB
    # the next query of any visitor is answered
    n = data.run_user_sql(cfg, "select count(*) as n from events where event = 'request_finished'")["n"][0]
    assert n == finished_requests() > 0


def test_one_long_call_is_killed_at_the_time_limit(cfg, monkeypatch):
    from servelens.dashboards import data

    monkeypatch.setenv("SERVELENS_DASHBOARD_QUERY_TIMEOUT", "1")
    # one call that checks no interrupt: it runs for hours unbounded, so returning at all is the kill
    query = "select levenshtein(repeat('ab', 1000000), repeat('ba', 1000000)) as d"

    def stopped() -> str:
        with pytest.raises(data.QueryError) as e:
            data.run_user_sql(cfg, query)
        return str(e.value)

    assert returns(stopped, what="one long call with a 1 s limit") == (
        "the query ran past its 1 s time limit and was stopped; raise it with servelens "
        "dashboard --query-timeout SECONDS (or $SERVELENS_DASHBOARD_QUERY_TIMEOUT)")


def test_a_huge_result_is_cut_while_it_is_read(cfg):
    from servelens.dashboards import data

    before = peak(resource.RUSAGE_SELF)
    with pytest.raises(data.QueryError) as e:
        data.run_user_sql(cfg, "select repeat('x', 1000) as s from range(10000000)")  # 10 GB
    # which limit meets it first is the machine's timing: the answer read past the limit, or
    # the worker's memory while it writes faster than it is read; either stops it in one line
    line = str(e.value)
    assert (line.startswith("the result is larger than the memory limit (200 MB)") or line.startswith(MEMORY_LINE))
    assert line.endswith("servelens dashboard --query-memory SIZE (or $SERVELENS_DASHBOARD_QUERY_MEMORY)")
    assert "\n" not in line
    assert peak(resource.RUSAGE_SELF) - before < 150 * MB
    assert 200 * MB < worker_peak() < 200 * MB + 256 * 2**20 + 600 * MB


def test_any_type_comes_back_from_the_worker(cfg):
    from servelens.dashboards import data

    df = data.run_user_sql(cfg, "select 'infinity'::timestamp as t, '5000000-01-01'::date as d, map{1: 2} as m, "
                                "[1::hugeint] as h, interval 1 day as i")
    assert df.rows() == [("infinity", "5000000-01-01", '{"1":2}', '[1]', "1 day")]


def test_the_page_shows_one_line_and_stays_up(cfg):
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.switch_page("pages/sql.py").run()  # opened at /sql (the page's url_path is its file's name)
    assert not at.exception and at.title[0].value == "SQL"
    at.text_area(key="sql_query").input("select length(repeat('abcd', 150000000)) as n")
    at.button[0].click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(MEMORY_LINE), errors
    at.text_area(key="sql_query").input("select count(*) as n from events where event = 'request_finished'")
    at.button[0].click().run()
    assert not at.error and at.dataframe[0].value["n"][0] == finished_requests()


def test_busy_workers_make_a_later_query_wait_then_say_so(cfg, monkeypatch):
    from servelens.dashboards import data
    from servelens.pipeline.query import worker as query_worker

    monkeypatch.setenv("SERVELENS_DASHBOARD_QUERY_WORKERS", "1")
    monkeypatch.setenv("SERVELENS_DASHBOARD_QUERY_TIMEOUT", "0.5")
    outcome: dict[str, str] = {}

    def long_one() -> None:
        try:
            data.run_user_sql(cfg, "select jaro_winkler_similarity(repeat('ab', 2000000), repeat('ba', 2000000)) as s")
        except data.QueryError as e:
            outcome["long"] = str(e)

    t = threading.Thread(target=long_one)
    t.start()
    # wait until the first holds the only worker (it is killed at 0.5 s + the grace)
    slot = query_worker._slot(1)
    for _ in range(3000):
        if not slot.acquire(blocking=False):
            break
        slot.release()
        time.sleep(0.01)
    else:
        pytest.fail("the long query never took the worker")
    with pytest.raises(data.QueryError) as e:
        data.run_user_sql(cfg, "select 1 as n")
    t.join(60)
    assert str(e.value) == "1 other queries were running for the whole 0.5 s time limit; try again in a moment"
    assert outcome["long"].startswith("the query ran past its 0.5 s time limit")


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended: only its parent has not reaped it


def test_the_worker_dies_with_the_dashboard(store, tmp_path):
    """Killing the dashboard (SIGKILL: nothing of it runs) kills a visitor's query with it."""
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(f"""
        import threading
        from servelens.pipeline.query import worker as query_worker
        from servelens.pipeline.query.sandbox import Limits
        threading.Thread(target=lambda: None).start()
        query_worker.run({str(store)!r}, "select jaro_winkler_similarity(repeat('ab', 2000000), repeat('ba', 2000000))",
                         limits=Limits(timeout_s=600))
    """))
    host = subprocess.Popen([sys.executable, str(script)])
    try:
        worker = None
        for _ in range(1500):
            kids = Path(f"/proc/{host.pid}/task/{host.pid}/children").read_text().split()
            if kids:
                worker = int(kids[0])
                break
            time.sleep(0.02)
        assert worker is not None
        # past the worker's start: it sets the death signal before it imports DuckDB (its
        # command line first: until the exec, the child shows the host's command and libraries)
        for _ in range(3000):
            try:
                if (b"pipeline.query.worker" in Path(f"/proc/{worker}/cmdline").read_bytes()
                        and "duckdb" in Path(f"/proc/{worker}/maps").read_text()):
                    break
            except OSError:
                pass
            time.sleep(0.02)
        else:
            pytest.fail("the worker never loaded DuckDB")
        host.send_signal(signal.SIGKILL)
        host.wait(30)
        for _ in range(500):
            if not running(worker):
                break
            time.sleep(0.02)
        else:
            os.kill(worker, signal.SIGKILL)
            pytest.fail("the worker ran on after the dashboard was killed")
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def test_git_information_is_never_sent_to_a_browser(monkeypatch, tmp_path):
    """Any websocket session may ask for the git repository the app's script lies in (remote,
    branch, uncommitted and untracked file names): servelens never answers."""
    import shutil

    from streamlit.runtime.app_session import AppSession

    from servelens.dashboards import access

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "checkout"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", "https://example.com/secret-org/secret-repo.git"], check=True)
    (repo / "app.py").write_text("")
    (repo / "untracked-secret.txt").write_text("x")

    class Session:
        def __init__(self):
            self.sent = []
            self._script_data = type("D", (), {"main_script_path": str(repo / "app.py")})()

        def _enqueue_forward_msg(self, msg):
            self.sent.append(msg)

    monkeypatch.setattr(AppSession, "_handle_git_information_request", AppSession._handle_git_information_request)
    access.guard_git_info()
    guarded = Session()
    AppSession._handle_git_information_request(guarded)
    # (unguarded, Streamlit answers with the remote, branch and file names where GitPython is
    # installed; this environment may lack it, so only the guarded answer is asserted)
    assert guarded.sent == []
