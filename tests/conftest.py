"""Suite-wide fixtures and CI rules (tests import shared helpers from tests.helpers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests check values, never speed (that is bench/'s job): no per-example deadline, so
# a loaded 2-core machine cannot fail one on time (Hypothesis' default is 200 ms).
settings.register_profile("servelens", deadline=None)
settings.load_profile("servelens")

# Under CI a skip is a failure: a tool that did not install (Chromium, Prometheus, Java,
# PySpark), a module that does not import or a missing privilege must not turn into a green
# run with fewer tests. The only skips allowed are properties of committed data, not of the
# machine, each named here with why.
ALLOWED_CI_SKIPS = (
    # a recording made without CPU pinning has no client/server clock pair to compare
    "recorded without --pin",
)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_skip_in_ci(report) -> None:
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if any(allowed in reason for allowed in ALLOWED_CI_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true, which must run every test: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip_in_ci(outcome.get_result())


@pytest.fixture(scope="session", autouse=True)
def _run_tmp(tmp_path_factory):
    """This run's tmp_path_factory for tests/helpers/run_store.run_tmp()."""
    from tests.helpers.run_store import remember_run_tmp

    remember_run_tmp(tmp_path_factory)
    yield


@pytest.fixture
def fake_engine(monkeypatch):
    """Register the test-only `fake` engine (tests/helpers/fake_engine.py) for detection and parsing."""
    import servelens.parsers as parsers

    monkeypatch.setitem(parsers.ENGINES, "fake", "tests.helpers.fake_engine")
    return "fake"




@pytest.fixture(scope="session")
def incident_store(tmp_path_factory) -> Iterator[Path]:
    """The bundled incident (`sample_logs/incident/`) ingested once per test run, as
    `servelens ingest` does, for the tests that only read it: one ingest instead of one per
    module (tests/helpers/run_store.py). A test that changes a store makes its own; the
    teardown fails if one changed this."""
    from servelens.pipeline.ingest import ingest
    from tests.helpers.dashboard_store import INCIDENT
    from tests.helpers.run_store import built_once, read_only

    yield from read_only(built_once(tmp_path_factory, "incident-shared", lambda store: ingest([INCIDENT], store)),
                         "incident store")
