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
    from servelens.pipeline.query import run

    return run(store, "select * from events order by source, line")
