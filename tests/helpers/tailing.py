"""Helpers for tests that step a Tailer by hand."""

from __future__ import annotations


def events_only(tailer):
    """The tailer without its rollup refreshes (after commits and at close), for a test that
    reads only the events it committed: the refresh is an optimisation of later queries
    (readers compute those views from the events while the rollups are stale), and the
    tailer's refreshes are the subject of tests/store/test_rollups.py. Returns the tailer."""
    tailer._refresh_rollups = lambda wait=False: None
    return tailer
