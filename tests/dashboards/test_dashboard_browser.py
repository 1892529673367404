"""End-to-end: `servelens dashboard` on a free local port, driven by Playwright in Debian's
headless Chromium (/usr/bin/chromium; tests/e2e/install_browser.sh installs it). Checks that
the page has no exception, shows the incident's signals and that the SQL page answers.
Screenshots go to test-artifacts/. Skips without Chromium or Playwright, except under CI
(env CI set), where a missing browser is a failure."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import polars as pl
import pytest
from servelens.pipeline.query.connect import connect, run_on
from servelens.pipeline.query.views import resolve_variables
from tests.helpers import incident_truth

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
# SERVELENS_CHROMIUM points the test at another Chromium binary
CHROMIUM = os.environ.get("SERVELENS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# the pages as a visitor who asked for reduced motion sees them: the same elements and charts,
# without the loading animations that keep the compositor drawing frames nobody reads
CONTEXT = {"reduced_motion": "reduce"}


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the browser test must run; see tests/e2e/install_browser.sh)")
    pytest.skip(f"{reason}; run tests/e2e/install_browser.sh as root to enable the browser test")


@pytest.fixture(scope="module")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        _unavailable(f"Chromium not found at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the python package playwright is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _servelens() -> str:
    exe = Path(sys.executable).parent / "servelens"
    return str(exe) if exe.exists() else (shutil.which("servelens") or "servelens")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory, incident_store):
    store = incident_store  # the session's incident store: the dashboard only reads it
    port = _free_port()
    log = tmp_path_factory.mktemp("browser-log") / "dashboard.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([_servelens(), "dashboard", "--store", str(store), "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
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
        yield url, store
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def truth(incident_store):
    """The SQL answers the pages are checked against: one connection with every view bound
    once (`shared=True`, whose answers tests/sql/test_shared_views.py shows equal `run`'s)."""
    con = connect(incident_store, shared=True)
    yield lambda sql: run_on(con, sql)
    con.close()


@pytest.fixture
def page(browser):
    ARTIFACTS.mkdir(exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1440, "height": 3400}, **CONTEXT)
    pg = ctx.new_page()
    yield pg
    ctx.close()


@pytest.fixture
def screen(browser):
    """An on-call laptop's screen: 1400x1000, and every request the page makes."""
    ARTIFACTS.mkdir(exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, **CONTEXT)
    pg = ctx.new_page()
    pg.requested = []
    pg.on("request", lambda r: pg.requested.append(r.url))
    yield pg
    ctx.close()


_VISIBLE_TEXT = """() => {
    const h = window.innerHeight, out = [];
    const walk = document.createTreeWalker(document.querySelector('[data-testid="stMain"]'), NodeFilter.SHOW_TEXT);
    while (walk.nextNode()) {
        const r = walk.currentNode.parentElement.getBoundingClientRect();
        if (r.bottom > 0 && r.top < h && r.width > 0) out.push(walk.currentNode.textContent);
    }
    return out.join(' ');
}"""


def _visible_text(pg) -> str:
    """The text of the main area that lies inside the viewport (the first screen)."""
    return pg.evaluate(_VISIBLE_TEXT)


def _until_visible(pg, texts: list[str], timeout_ms: int = 30_000) -> None:
    """Wait until the first screen shows each of `texts` (a rerun of the script on a loaded
    machine can draw them again after the status widget has gone); at the timeout, return
    and leave the caller's assertion to fail."""
    try:
        pg.wait_for_function(f"want => {{ const t = ({_VISIBLE_TEXT})(); return want.every(w => t.includes(w)); }}",
                             arg=texts, timeout=timeout_ms)
    except Exception as e:  # playwright's TimeoutError
        if type(e).__name__ != "TimeoutError":
            raise


def test_a_deep_link_on_a_fresh_server_and_the_first_screen(screen, dashboard, truth):
    """Runs first, on the fresh server: /overview straight away. Proper page names, the wide
    layout, and the first screen says who crashed, how many requests failed and what to do."""
    url, store = dashboard
    screen.goto(url + "/overview")
    screen.get_by_text("Fleet summary").wait_for(timeout=90_000)
    screen.get_by_text("Slowest requests").wait_for(timeout=90_000)
    _settle(screen)
    _painted(screen)
    screen.screenshot(path=str(ARTIFACTS / "dashboard-first-screen.png"))
    assert screen.get_by_text("Page not found").count() == 0  # /overview is a page of its own
    nav = screen.locator('[data-testid="stSidebarNav"]').inner_text()
    assert "Overview" in nav and "SQL" in nav and "app" not in nav.split()
    main = screen.locator('[data-testid="stMainBlockContainer"]').bounding_box()
    assert main["width"] > 900  # the wide layout (the centered one is 736 px)
    _until_visible(screen, ["Failed requests", "Crashed instances"])
    first = " ".join(_visible_text(screen).split())
    crashed = truth("select instance from incident_summary where died order by 1")["instance"].to_list()
    failed = truth("select count(*) as n from requests where status = 'failed'")["n"][0]
    # the simulator's truth: the requests that ended in an error, and the instances they died on
    errors = incident_truth.failed_by_instance()
    assert crashed == list(errors) == ["tgi-a", "trtllm-a", "vllm-a"]
    assert failed == sum(errors.values()) > 0
    assert f"{incident_truth.joined(crashed)} died of CUDA out-of-memory" in first
    assert f"failing {failed} requests" in first and "scale out the survivors" in first
    assert "Failed requests" in first and "Crashed instances" in first
    # nothing fetched from anywhere but the dashboard itself (no font CDN page icon)
    external = sorted({u for u in screen.requested if not u.startswith(url)})
    assert external == [], external


def test_cards_charts_and_tables_read_at_1400(screen, dashboard):
    url, store = dashboard
    screen.goto(url + "/")
    screen.get_by_text("Slowest requests").wait_for(timeout=90_000)
    # the charts' captions may paint after the tables on a loaded machine: wait for the one
    # this test reads (a timeout fails the test as the assertion would)
    defaults = resolve_variables()  # sql/thresholds.toml
    below = f"BELOW threshold {defaults['scheduler_fill']:.0%} (fires under it)"
    screen.get_by_text(below).first.wait_for(timeout=90_000)
    _settle(screen)
    body = " ".join(screen.locator("[data-testid='stMain']").first.inner_text().split())
    assert below in body  # trtllm-b's scheduler_limit
    assert f"threshold {defaults['errors_count']:g} errors/window, or 1 crash/OOM (critical)" in body
    assert "None" not in body
    shots = {"dashboard-verdicts.png": "Scaling verdict", "dashboard-queue.png": "Queue depth",
             "dashboard-latency.png": "Latency percentiles", "dashboard-errors.png": "Errors",
             "dashboard-slowest.png": "Slowest requests"}
    for name, heading in shots.items():
        h = screen.get_by_role("heading", name=heading, exact=True).first
        h.scroll_into_view_if_needed()
        _painted(screen)  # Vega paints after scrolling into view
        screen.screenshot(path=str(ARTIFACTS / name))
    # every chart is drawn inside its frame: no legend or axis title clipped at the right edge
    charts = screen.locator('[data-testid="stVegaLiteChart"]')
    assert charts.count() >= 5
    main = screen.locator('[data-testid="stMainBlockContainer"]').bounding_box()
    for k in range(charts.count()):
        box = charts.nth(k).bounding_box()
        assert box is None or box["x"] + box["width"] <= main["x"] + main["width"] + 1
    assert not [u for u in screen.requested if not u.startswith(url)]


def _settle(pg) -> None:
    """Wait until Streamlit has finished running the script and the page has drawn what it
    sent (two animation frames: the one that applies the last changes, and the next)."""
    pg.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=60_000)
    _frames(pg)


def _frames(pg) -> None:
    pg.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def _painted(pg) -> None:
    """Wait until every chart inside the viewport has drawn (a sized canvas or svg in its
    frame), checked at each animation frame, instead of a fixed pause."""
    pg.wait_for_function("""() => [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
        .filter(e => { const r = e.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight; })
        .every(e => [...e.querySelectorAll('canvas, svg')].some(c => c.getBoundingClientRect().width > 0
                                                                      && c.getBoundingClientRect().height > 0))""",
                         timeout=30_000)
    _frames(pg)  # the frame after the last one drawn


def test_overview_shows_the_incident_signals_without_exception(page, dashboard, truth):
    url, store = dashboard
    page.goto(url + "/")
    page.get_by_text("Scaling verdict").wait_for(timeout=60_000)
    page.get_by_text("Slowest requests").wait_for(timeout=60_000)
    _settle(page)
    # charts paint after the script has finished (Vega renders in the browser)
    page.locator('[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg').first.wait_for(
        timeout=30_000)
    _painted(page)
    page.screenshot(path=str(ARTIFACTS / "dashboard-overview.png"))
    assert page.locator('[data-testid="stException"]').count() == 0
    sig = truth("select instance, signal, severity from scaling_signals")
    body = page.locator("[data-testid='stMain']").first.inner_text()
    # every signal of the incident is on the page, under its instance's verdict
    for instance, signal, _ in sig.rows():
        assert instance in body and f"{signal}" in body, (instance, signal)
    crashed = sig.filter((pl.col("signal") == "errors") & (pl.col("severity") == "critical"))["instance"].to_list()
    assert crashed
    flat = " ".join(body.split())
    # the badge's Material icon renders as its ligature name (e.g. "search") in the text
    for instance in crashed:
        assert re.search(rf"{instance} (\w+ )?INVESTIGATE", flat), instance
    assert re.search(r"vllm-b (\w+ )?SCALE OUT", flat)
    assert "KV-cache pressure" in body and "out-of-memory" in body
    assert page.locator('[data-testid="stVegaLiteChart"]').count() >= 5


def test_sql_page_answers_a_query(page, dashboard, truth):
    url, store = dashboard
    page.goto(url + "/sql")
    page.locator("textarea").first.wait_for(timeout=60_000)
    _settle(page)
    query = "select engine, instance, count(*) as n from events group by all order by all"
    page.locator("textarea").first.fill(query)
    page.get_by_role("button", name="Run").click()
    n = truth(query).height
    page.get_by_text(f"{n:,} rows").wait_for(timeout=30_000)
    _settle(page)
    assert page.locator('[data-testid="stDataFrame"]').count() >= 1
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(ARTIFACTS / "dashboard-sql.png"))

    page.locator("textarea").first.fill("select nonsense from nowhere")
    page.get_by_role("button", name="Run").click()
    alert = page.locator('[data-testid="stAlert"]').filter(has_text="no table or view named nowhere")
    alert.wait_for(timeout=30_000)
    _settle(page)
    assert "nowhere" in alert.inner_text()
    assert "\n" not in alert.inner_text().strip()
    page.screenshot(path=str(ARTIFACTS / "dashboard-sql-error.png"))
