"""Fixtures shared by the parser tests of several modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ingested(tmp_path_factory):
    """The plain logs' and each export variant's events of tests/parsers/test_wrappers_exports_unseen.py,
    each ingested once per test run (the hosts tests compare with the same plain files)."""
    from tests.parsers.test_wrappers_exports_unseen import Ingested

    got = Ingested(tmp_path_factory)
    yield got
    got.unchanged()
