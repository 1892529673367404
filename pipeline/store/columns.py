"""The store's tables as DuckDB sees them: each column's name and the DuckDB type its Parquet
column reads as, in the schema's order.

The Arrow schemas (parsers/schema.py EVENT_SCHEMA, pipeline/sources/samples.py SAMPLE_SCHEMA)
are the definition; these are what the SQL built over the store needs of them, kept here so
that a query (`servelens sql`) binds `events` and `samples` without importing pyarrow or
polars. tests/query/test_lean_sql.py checks that both agree with the Arrow schemas
(pipeline/store/layout.py `duckdb_type`): a column added there must be added here.
"""

from __future__ import annotations

EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ts", "TIMESTAMPTZ"), ("ts_inferred", "BOOLEAN"), ("engine", "VARCHAR"), ("instance", "VARCHAR"),
    ("source", "VARCHAR"), ("line", "BIGINT"), ("n_lines", "INTEGER"), ("level", "VARCHAR"),
    ("event", "VARCHAR"), ("request_id", "VARCHAR"), ("model", "VARCHAR"), ("prompt_tokens", "BIGINT"),
    ("output_tokens", "BIGINT"), ("max_tokens", "BIGINT"), ("e2e_s", "DOUBLE"), ("queue_s", "DOUBLE"),
    ("ttft_s", "DOUBLE"), ("tpot_s", "DOUBLE"), ("inference_s", "DOUBLE"), ("running", "BIGINT"),
    ("waiting", "BIGINT"), ("swapped", "BIGINT"), ("batch_size", "BIGINT"), ("batch_tokens", "BIGINT"),
    ("kv_usage", "DOUBLE"), ("kv_blocks_used", "BIGINT"), ("kv_blocks_total", "BIGINT"),
    ("prompt_tps", "DOUBLE"), ("gen_tps", "DOUBLE"), ("max_num_seqs", "BIGINT"), ("max_batch_tokens", "BIGINT"),
    ("kv_capacity_tokens", "BIGINT"), ("http_status", "INTEGER"), ("message", "VARCHAR"), ("attrs", "VARCHAR"),
    ("wrapper_ts", "TIMESTAMPTZ_NS"), ("stream", "VARCHAR"), ("labels", "VARCHAR"), ("sampling_params", "VARCHAR"),
    ("byte_offset", "BIGINT"),
)

SAMPLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ts", "TIMESTAMPTZ"), ("instance", "VARCHAR"), ("engine", "VARCHAR"), ("name", "VARCHAR"),
    ("family", "VARCHAR"), ("type", "VARCHAR"), ("labels", "VARCHAR"), ("le", "DOUBLE"), ("quantile", "DOUBLE"),
    ("value", "DOUBLE"), ("meaning", "VARCHAR"), ("target", "VARCHAR"), ("source", "VARCHAR"),
)

# The columns that live in a part's path, not in its file (Hive's rule: pipeline/store/layout.py).
PARTITION_COLUMNS = ("engine",)


def typed_nulls(columns: tuple[tuple[str, str], ...]) -> str:
    """A query of no rows with these columns, typed."""
    cols = ", ".join(f'cast(null as {t}) as "{n}"' for n, t in columns)
    return f"select {cols} where false"
