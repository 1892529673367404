"""End-to-end: the SQL page of a real `servelens dashboard`, behind its access token, attacked
from headless Chromium (Playwright), as tests/dashboards/test_dashboard_browser.py drives it. A write
and a read outside the store are refused in one line without echoing the file; a runaway
query is stopped by the dashboard's time limit while a second visitor still gets answers;
the store's bytes are unchanged; and SIGTERM still stops the app while a query runs."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from tests.helpers.dashboard_store import INCIDENT, build_store
from servelens.pipeline.query.connect import run
from tests.dashboards.test_dashboard_browser import CONTEXT, ARTIFACTS, _free_port, _servelens, _settle, browser  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKEN = "browser-token-3141592653"
SECRET = "BROWSERSECRET-9d1e"
# a 4-way cross product under a predicate no join can use: it never finishes on its own (an
# equality like a.line * b.line % 7 = c.line % 5 becomes a hash join that a quiet machine ends
# within the limit)
RUNAWAY = "select count(*) from events a, events b, events c, events d where a.line + b.line + c.line + d.line > 0"
LIMIT_S = 6


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("sandbox-browser")
    # the test is about the SQL page's sandbox: the views are derived from the events
    store = build_store(base, [INCIDENT / "tgi" / "tgi-a.log", INCIDENT / "tgi" / "tgi-b.log"], rollups=False)
    victim = base / "victim"
    victim.mkdir()
    (victim / "secret.txt").write_text(SECRET + "\n")
    port = _free_port()
    log = base / "dashboard.log"
    env = dict(os.environ, SERVELENS_DASHBOARD_TOKEN=TOKEN, SERVELENS_DASHBOARD_QUERY_TIMEOUT=str(LIMIT_S))
    with open(log, "wb") as out:
        proc = subprocess.Popen([_servelens(), "dashboard", "--store", str(store), "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"servelens dashboard exited with {proc.returncode}: {log.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"servelens dashboard did not answer within 60 s: {log.read_text()}")
            time.sleep(0.1)
        yield url, store, victim, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def open_sql_page(browser, url):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1440, "height": 2000}, **CONTEXT)
    page = ctx.new_page()
    page.goto(url + "/sql")
    page.get_by_label("Access token").wait_for(timeout=60_000)
    assert page.locator("textarea").count() == 0  # nothing but the prompt before the token
    page.get_by_label("Access token").fill(TOKEN)
    page.get_by_role("button", name="Open").click()
    # in, the visitor lands on the Overview; the SQL page is one click away (same session)
    page.get_by_text("Scaling verdict").wait_for(timeout=60_000)
    page.locator('[data-testid="stSidebarNav"]').get_by_text("SQL").click()
    page.locator("textarea").first.wait_for(timeout=60_000)
    _settle(page)
    return ctx, page


def query_running(pid: int) -> bool:
    """A visitor's query runs in a worker process of the dashboard `pid`: a worker that has
    its query and has loaded DuckDB to run it (pipeline/query/worker.py)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:  # a thread that has just ended
            continue
        for child in children:
            try:
                if (b"pipeline.query.worker" in Path(f"/proc/{child}/cmdline").read_bytes()
                        and "duckdb" in Path(f"/proc/{child}/maps").read_text()):
                    return True
            except OSError:  # a worker that has just ended
                pass
    return False


def submit(page, sql: str) -> None:
    page.locator("textarea").first.fill(sql)
    page.get_by_role("button", name="Run").click()


def test_sql_page_attacks_runaway_and_sigterm(browser, served):  # noqa: F811
    url, store, victim, proc = served
    ARTIFACTS.mkdir(exist_ok=True)
    before_store, before_victim = tree(store), tree(victim)
    ctx, page = open_sql_page(browser, url)
    try:
        submit(page, f"explain analyze copy (select 42) to '{victim}/browser.csv'")
        page.locator('[data-testid="stAlert"]').filter(has_text="read-only").wait_for(timeout=30_000)
        submit(page, f"select * from read_text('{victim}/secret.txt')")
        alert = page.locator('[data-testid="stAlert"]').filter(has_text="reads only the store")
        alert.wait_for(timeout=30_000)
        _settle(page)
        assert "\n" not in alert.inner_text().strip()
        assert SECRET not in page.content()
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(ARTIFACTS / "sandbox-refused.png"))

        # a runaway query; meanwhile another visitor is answered
        submit(page, RUNAWAY)
        ctx2, other = open_sql_page(browser, url)
        query = "select instance, count(*) as n from events group by all order by all"
        submit(other, query)
        other.get_by_text(f"{run(store, query).height:,} rows").wait_for(timeout=60_000)
        ctx2.close()
        # the four-way join runs for hours unbounded: its alert appearing at all is the stop
        page.locator('[data-testid="stAlert"]').filter(has_text=f"{LIMIT_S} s time limit").wait_for(timeout=60_000)
        assert "--query-timeout" in page.locator('[data-testid="stAlert"]').first.inner_text()
        page.screenshot(path=str(ARTIFACTS / "sandbox-timeout.png"))
        assert tree(store) == before_store and tree(victim) == before_victim

        # SIGTERM while a query runs: the app still stops
        submit(page, RUNAWAY)
        deadline = time.monotonic() + 60
        while not query_running(proc.pid):
            assert time.monotonic() < deadline, "the runaway query never started"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        ctx.close()
    assert tree(store) == before_store
