"""A user's query sees the thresholds as variables whenever it can read one: `run` leaves them
unset only on a connection where neither the query nor a view bound for it reads any."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from servelens.pipeline.query.connect import run
from servelens.pipeline.query.views import reads_variables

THRESHOLDS = Path(__file__).resolve().parents[2] / "sql" / "thresholds.toml"


def names(table: dict, section: str = "") -> set[str]:
    """The variables of the TOML as its header says: a top-level key by its name, a key of
    [section] as section_key."""
    out = set()
    for key, value in table.items():
        out |= names(value, f"{section}{key}_") if isinstance(value, dict) else {f"{section}{key}"}
    return out


def test_every_threshold_is_a_variable_of_a_query_that_lists_them(incident_store):
    toml = names(tomllib.loads(THRESHOLDS.read_text(encoding="utf-8")))
    got = run(incident_store, "select name from duckdb_variables()")
    assert set(got["name"].to_list()) == toml


@pytest.mark.parametrize("sql", ["select getvariable('window_s') as v", "SELECT GetVariable('window_s') AS v"])
def test_a_query_of_no_view_reads_the_variables_it_is_given(incident_store, sql):
    assert run(incident_store, sql, variables={"window_s": 300})["v"].to_list() == [300]


@pytest.mark.parametrize("sql, reads", [
    ("select 1", False),
    ("select count(*) from events", False),
    ("select getvariable('window_s')", True),
    ("select * from DUCKDB_VARIABLES()", True),
    ("select json_execute_serialized_sql(json_serialize_sql('select 1'))", True),
])
def test_reads_variables_looks_for_every_way_to_read_one(sql, reads):
    assert reads_variables(sql) is reads
