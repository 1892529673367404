"""What `servelens sql` knows of the store without pyarrow agrees with the Arrow schemas the
store is written in: the columns and DuckDB types of `events` and `samples`
(pipeline/store/columns.py), and the check of a part's columns DuckDB makes instead of
reading its footer with pyarrow (parts.is_current against parts.mixed_schemas)."""

from __future__ import annotations

import duckdb
import pyarrow.parquet as pq
from tests.helpers.common import SAMPLE_LOGS, ingested

from servelens.parsers.schema import EVENT_SCHEMA
from servelens.pipeline.query.parts import is_current, mixed_schemas
from servelens.pipeline.sources.samples import SAMPLE_SCHEMA
from servelens.pipeline.store.columns import EVENT_COLUMNS, SAMPLE_COLUMNS
from servelens.pipeline.store.layout import duckdb_type, no_events_sql


def test_the_columns_are_the_arrow_schemas():
    assert EVENT_COLUMNS == tuple((f.name, duckdb_type(f.type)) for f in EVENT_SCHEMA)
    assert SAMPLE_COLUMNS == tuple((f.name, duckdb_type(f.type)) for f in SAMPLE_SCHEMA)


def test_an_empty_events_has_the_types_a_part_reads_as(tmp_path):
    store = ingested(tmp_path, "vllm.log", (SAMPLE_LOGS / "incident" / "vllm" / "vllm-a.log").read_text()[:20000])
    part = sorted(store.rglob("events/**/*.parquet"))[0]
    con = duckdb.connect()
    read = con.execute(f"describe select * from read_parquet('{part}', hive_partitioning = true, "
                       "hive_types = {'engine': varchar, 'day': varchar})").fetchall()
    empty = con.execute(f"describe {no_events_sql()}").fetchall()
    assert {r[0]: r[1] for r in empty} == {r[0]: r[1] for r in read if r[0] != "day"}


def test_duckdb_and_pyarrow_agree_on_whether_a_part_is_current(tmp_path):
    store = ingested(tmp_path, "vllm.log", (SAMPLE_LOGS / "incident" / "vllm" / "vllm-a.log").read_text()[:20000])
    part = sorted(store.rglob("events/**/*.parquet"))[0]
    old = tmp_path / "old.parquet"  # a part written before the last column existed
    table = pq.read_table(part)
    pq.write_table(table.drop_columns([table.column_names[-1]]), old)
    con = duckdb.connect()
    assert is_current(con, part) and not mixed_schemas([part], True)
    assert not is_current(con, old) and mixed_schemas([old], True)
    assert not is_current(con, tmp_path / "vanished.parquet")
