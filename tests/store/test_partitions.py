"""A batch's parts (engine, day) as slices when its days are runs: the same parts, keys, rows
and row order as a group-by keeping the order (written here, not taken from the store)."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from servelens.pipeline.store.commit import partitions


def _by_group_by(events: pl.DataFrame) -> list:
    keyed = events.with_columns(pl.col("ts").dt.strftime("%Y-%m-%d").alias("_day"))
    return [(key, part.drop("_day")) for key, part in keyed.group_by(["engine", "_day"], maintain_order=True)]


def _batch(engines: list[str | None], times: list[dt.datetime | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {"ts": times, "engine": engines, "line": list(range(1, len(times) + 1))},
        schema={"ts": pl.Datetime("us", "UTC"), "engine": pl.String, "line": pl.Int64},
    )


UTC = dt.timezone.utc
T0 = dt.datetime(2026, 5, 12, 23, 59, 58, tzinfo=UTC)
SECOND = dt.timedelta(seconds=1)

CASES = {
    "one day": (["vllm"] * 3, [T0, T0, T0 + SECOND]),
    "across midnight": (["vllm"] * 4, [T0 + i * SECOND for i in range(4)]),
    "several days": (["tgi"] * 5, [T0 + i * dt.timedelta(hours=13) for i in range(5)]),
    "last microsecond of a day": (["tgi"] * 2, [dt.datetime(2026, 5, 12, 23, 59, 59, 999_999, tzinfo=UTC),
                                               dt.datetime(2026, 5, 13, tzinfo=UTC)]),
    "before 1970": (["tgi"] * 3, [dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
                                  dt.datetime(1970, 1, 1, tzinfo=UTC), dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)]),
    "a day going back": (["vllm"] * 4, [T0, T0 + 3 * SECOND, T0, T0 + 4 * SECOND]),
    "a null time": (["vllm"] * 3, [T0, None, T0 + 3 * SECOND]),
    "two engines": (["vllm", "tgi", "vllm"], [T0, T0 + 3 * SECOND, T0 + 4 * SECOND]),
    "a null engine": (["vllm", None], [T0, T0]),
    "one row": (["vllm"], [T0]),
}


@pytest.mark.parametrize("case", CASES)
def test_parts_are_the_group_by_s(case):
    events = _batch(*CASES[case])
    got, want = partitions(events), _by_group_by(events)
    assert [key for key, _ in got] == [key for key, _ in want]
    for (_, part), (_, expected) in zip(got, want):
        assert part.equals(expected)


def test_a_run_batch_of_several_chunks_is_sliced_whole():
    # (a flush is a concat of its chunks' frames)
    first = _batch(["vllm"] * 2, [T0, T0 + SECOND])
    second = _batch(["vllm"] * 3, [T0 + 2 * SECOND, T0 + 3 * SECOND, T0 + 4 * SECOND])
    events = pl.concat([first, second])
    got = partitions(events)
    assert [key for key, _ in got] == [("vllm", "2026-05-12"), ("vllm", "2026-05-13")]
    assert [part.height for _, part in got] == [2, 3]
    assert pl.concat([part for _, part in got]).equals(events)
