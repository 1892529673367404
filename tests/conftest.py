from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest
from hypothesis import settings

# Property tests check values, never speed (that is bench/'s job): no per-example deadline, so
# a loaded 2-core machine cannot fail one on time (Hypothesis' default is 200 ms).
settings.register_profile("servelens", deadline=None)
settings.load_profile("servelens")

REPO = Path(__file__).resolve().parent.parent
SAMPLE_LOGS = REPO / "sample_logs"

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


@pytest.fixture
def fake_engine(monkeypatch):
    """Register the test-only `fake` engine (tests/fake_engine.py) for detection and parsing."""
    import servelens.parsers as parsers

    monkeypatch.setitem(parsers.ENGINES, "fake", "fake_engine")
    return "fake"


def write(path: Path, text: str | bytes, *, age_s: float = 3600.0, mtime: float | None = None) -> Path:
    """Write a log file whose mtime is `age_s` in the past (an old, finished file), or
    exactly `mtime` (epoch seconds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    t = mtime if mtime is not None else path.stat().st_mtime - age_s
    os.utime(path, (t, t))
    return path


def events(store: Path) -> pl.DataFrame:
    from servelens.pipeline.query.connect import run

    return run(store, "select * from events order by source, line")


def ingested(directory: Path, name: str, text: str) -> Path:
    """A store (directory/store) holding one log `name` with `text`, ingested by the CLI."""
    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app, build_app

    build_app()
    (directory / name).write_text(text)
    r = CliRunner().invoke(app, ["ingest", str(directory / name), "--store", str(directory / "store"), "-q"])
    assert r.exit_code == 0, r.output
    return directory / "store"


def forget_content_record(part: Path) -> None:
    """Make the manifest describe `part` as a servelens before part checksums did (no size,
    time or checksum): what a test that rewrites a part in an older format must also do,
    else reads rightly refuse the rewritten part as damaged."""
    import json

    store = next(p for p in part.parents if (p / "manifest.json").is_file())
    m = json.loads((store / "manifest.json").read_text())
    rel = str(part.relative_to(store))
    for k in ("size", "mtime_ns", "crc32"):
        m["part_info"][rel].pop(k, None)
    (store / "manifest.json").write_text(json.dumps(m))
