"""Results of any type render in every output format of `servelens sql`: nested values
(list, struct, map, fixed array), binary as hex, exact numbers (DECIMAL, the HUGEINT of
`sum()` over BIGINT) as JSON numbers, and the types polars cannot hold (INTERVAL, UNION,
BIT, TIME WITH TIME ZONE) as DuckDB's text. Never a traceback."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner
from tests.helpers.dashboard_store import INCIDENT, build_store
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run

build_app()
runner = CliRunner()

QUERY = r"""
select sum(line) as total, count(*) as n, [1, 2] as lst, {'a': 1, 'b': 'x'} as st, map {'k': 1} as mp,
       '\xAA\x00ab'::blob as bin, 1.25::decimal(10, 2) as dec,
       170141183460469231731687303715884105727::hugeint as big, interval 3 day as iv,
       union_value(num := 2)::union(num int, s varchar) as un, '0101'::bit as bits,
       '12:00:00+02'::timetz as tz, [1, 2, 3]::int[3] as arr, [{'a': ['\x01'::blob]}] as deep,
       1 as dup, 2 as dup
from events
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return build_store(tmp_path_factory.mktemp("types"), [INCIDENT / "tgi" / "tgi-b.log"])


def sql(store, fmt):
    r = runner.invoke(app, ["sql", QUERY, "--store", str(store), "--format", fmt])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    return r.stdout


def truth(store):
    return run(store, "select sum(line) as total, count(*) as n from events").row(0)


def test_json_keeps_numbers_numbers_and_nests(store):
    (row,) = json.loads(sql(store, "json"))
    total, n = truth(store)
    assert row["total"] == total and isinstance(row["total"], int)  # HUGEINT from sum(): a number
    assert row["n"] == n
    assert row["big"] == 170141183460469231731687303715884105727
    assert row["dec"] == 1.25
    assert row["lst"] == [1, 2] and row["st"] == {"a": 1, "b": "x"} and row["mp"] == {"k": 1}
    assert row["arr"] == [1, 2, 3]
    assert row["bin"] == "aa006162"
    assert row["iv"] == "3 days" and row["bits"] == "0101" and row["tz"] == "12:00:00+02" and row["un"] == "2"
    assert json.loads(row["deep"]) == [{"a": ["\\x01"]}]  # a nested BLOB: the value as JSON text
    assert row["dup"] == 1 and row["dup_1"] == 2  # a repeated column name is made unique


def test_csv_has_json_for_nested_and_hex_for_binary(store):
    rows = list(csv.DictReader(io.StringIO(sql(store, "csv"))))
    assert len(rows) == 1
    row = rows[0]
    assert int(row["total"]) == truth(store)[0]
    assert json.loads(row["lst"]) == [1, 2] and json.loads(row["st"]) == {"a": 1, "b": "x"}
    assert json.loads(row["mp"]) == {"k": 1} and json.loads(row["arr"]) == [1, 2, 3]
    assert row["bin"] == "aa006162" and row["iv"] == "3 days" and row["dec"] == "1.25"


def test_table_shows_every_column(store):
    text = sql(store, "table")
    header = text.splitlines()[0]
    for name in ("total", "lst", "st", "mp", "bin", "iv", "un", "bits", "tz", "arr", "deep", "dup_1"):
        assert f" {name} " in header
    assert "3 days" in text and "(1 row)" in text


def test_an_empty_and_a_null_nested_result(store):
    r = runner.invoke(app, ["sql", "select [1] as l, null::int[] as e from events where false", "--store", str(store), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout) == []
    r = runner.invoke(app, ["sql", "select null::int[] as e, [null]::int[] as f", "--store", str(store), "--format", "csv"])
    assert r.exit_code == 0 and r.stdout.splitlines() == ["e,f", ",[null]"]
