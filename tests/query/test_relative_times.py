"""--since / --until / --before take what people type: ISO 8601, a time of day today in UTC,
a time ago, now / today / yesterday. Expected values are computed here from a fixed `now`."""

from __future__ import annotations

import datetime as dt

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.timerange import parse_time

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 12, 5, 14, 30, 15, 500000, tzinfo=UTC)
build_app()
runner = CliRunner()


@pytest.mark.parametrize("text,want", [
    ("2h", NOW - dt.timedelta(hours=2)),
    ("30m", NOW - dt.timedelta(minutes=30)),
    ("90s ago", NOW - dt.timedelta(seconds=90)),
    ("7d", NOW - dt.timedelta(days=7)),
    ("1w", NOW - dt.timedelta(days=7)),
    ("1.5h", NOW - dt.timedelta(minutes=90)),
    ("now", NOW),
    ("today", dt.datetime(2026, 12, 5, tzinfo=UTC)),
    ("yesterday", dt.datetime(2026, 12, 4, tzinfo=UTC)),
    ("08:00", dt.datetime(2026, 12, 5, 8, 0, tzinfo=UTC)),
    ("23:59:59", dt.datetime(2026, 12, 5, 23, 59, 59, tzinfo=UTC)),
    ("2026-05-12T08:00Z", dt.datetime(2026, 5, 12, 8, tzinfo=UTC)),
    ("2026-05-12 10:00+02:00", dt.datetime(2026, 5, 12, 8, tzinfo=UTC)),
])
def test_what_people_type(text, want):
    assert parse_time(text, now=NOW) == want


@pytest.mark.parametrize("text", ["noon", "25:00", "08:61", "2 fortnights", "last tuesday", "-2h"])
def test_the_rest_is_one_line(text):
    with pytest.raises(ValueError, match=r"cannot read time") as e:
        parse_time(text, now=NOW)
    assert "\n" not in str(e.value)


def test_the_cli_takes_a_relative_range(tmp_path):
    log = tmp_path / "vllm.log"
    now = dt.datetime.now(UTC)
    stamp = (now - dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S.000000000Z")
    log.write_text(f"{stamp} INFO 12-05 08:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
                   "Avg generation throughput: 3.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
                   "GPU KV cache usage: 3.0%, Prefix cache hit rate: 0.0%\n")
    store = tmp_path / "store"
    assert runner.invoke(app, ["ingest", str(log), "--store", str(store), "-q"]).exit_code == 0
    got = runner.invoke(app, ["sql", "select count(*) as n from events", "--store", str(store), "--since", "1h", "-f", "csv"])
    assert got.exit_code == 0 and got.stdout.splitlines()[-1] == "1", got.output
    none = runner.invoke(app, ["sql", "select count(*) as n from events", "--store", str(store), "--since", "5m", "-f", "csv"])
    assert none.exit_code == 0 and none.stdout.splitlines()[-1] == "0", none.output
