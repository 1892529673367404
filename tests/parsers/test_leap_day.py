"""A header without a year (vLLM's `INFO 02-29 00:00:08`) naming 29 February of a year that
has none (a wrong --year, or a year guessed from the file's mtime): the line is kept with
the time before it, marked inferred, and the rest of the file still reads; in a leap year the
day is exact."""

from __future__ import annotations

import datetime as dt

import pytest

from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import run
from tests.helpers.common import write

UTC = dt.timezone.utc
STATS = ("INFO {md} {hms} [loggers.py:236] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
         "throughput: 20.0 tokens/s, Running: {running} reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, "
         "Prefix cache hit rate: 0.0%")
LINES = [("02-28", "23:59:58", 1), ("02-29", "00:00:08", 2), ("03-01", "00:00:18", 3)]


@pytest.mark.parametrize("year, leap", [(2026, False), (2028, True), (2100, False)])
def test_29_february_is_kept_in_any_year(tmp_path, year, leap):
    log = write(tmp_path / "v.log", "".join(STATS.format(md=md, hms=hms, running=r) + "\n" for md, hms, r in LINES))
    summary = ingest([log], tmp_path / "store", year=year, rollups=False)
    assert [(f.failed, f.parse_failures, f.lines) for f in summary.files] == [(False, 0, 3)]
    got = run(tmp_path / "store", "select line, event, ts, ts_inferred, running from events order by line")
    assert got["line"].to_list() == [1, 2, 3] and set(got["event"]) == {"engine_stats"}
    assert got["running"].to_list() == [1, 2, 3]  # the line's content is read either way
    first, last = dt.datetime(year, 2, 28, 23, 59, 58, tzinfo=UTC), dt.datetime(year, 3, 1, 0, 0, 18, tzinfo=UTC)
    leap_day = dt.datetime(year, 2, 29, 0, 0, 8, tzinfo=UTC) if leap else first
    assert got["ts"].to_list() == [first, leap_day, last]
    assert got["ts_inferred"].to_list() == [False, not leap, False]
