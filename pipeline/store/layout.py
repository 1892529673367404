"""The store's table layout, as other engines see it: Hive-partitioned Parquet that DuckDB
(`read_parquet(..., hive_partitioning = true)`), polars (`scan_parquet(..., hive_partitioning
= True)`), pyarrow.dataset (`partitioning="hive"`), Spark and Trino read right by themselves.

    events/engine=<engine>/day=<YYYY-MM-DD>/part-<txid>-<n>.parquet
    events/engine=<engine>/day=__HIVE_DEFAULT_PARTITION__/...     events without a time

- The partition columns live in the directory names only (Hive's rule): a part holds every
  column of the schema but `engine` (`day` is not a column of `events`: readers drop it or
  keep it as a DATE, as they like).
- An event without a time goes under Hive's default partition name, which every engine reads
  as NULL (a `day=unknown` made type inference fail in engines that infer `day` as a date).
- Nothing but committed parts is ever under `events/`: staged parts are in `_staging/`, and
  compacted-away parts leave `events/` in the commit that drops them (store.Store.commit).

Stores written before this layout (parts that repeat `engine`, `day=unknown` directories) are
read the same: the partition value of the path is the one that counts, and compaction rewrites
such parts in this layout (compact.plan picks them up).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from .columns import EVENT_COLUMNS, PARTITION_COLUMNS, typed_nulls

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow (and the Arrow schema, which imports polars) only where a part is written or its
# footer read: a query builds its SQL from .columns and imports neither

# Hive-style partition keys, outermost first; only `engine` is also a column of `events`.
PARTITION_KEYS = ("engine", "day")
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
LEGACY_UNKNOWN_DAY = "unknown"


def __getattr__(name: str) -> Any:
    if name == "FILE_SCHEMA":  # what a part file holds: the schema without the partition columns
        import pyarrow as pa

        from servelens.parsers.schema import EVENT_SCHEMA

        schema = pa.schema([f for f in EVENT_SCHEMA if f.name not in PARTITION_COLUMNS])
        globals()["FILE_SCHEMA"] = schema
        return schema
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def part_dir(engine: str | None, day: str | None) -> str:
    """`events/engine=<e>/day=<d>` (a missing value: Hive's default partition)."""
    return f"events/engine={engine or DEFAULT_PARTITION}/day={day or DEFAULT_PARTITION}"


def partition_values(rel: str | Path) -> dict[str, str | None]:
    """The `key=value` directory segments of a part's path (default partition: None)."""
    out: dict[str, str | None] = {}
    for seg in PurePosixPath(str(rel)).parent.parts:
        key, sep, value = seg.partition("=")
        if sep and key in PARTITION_KEYS:
            out[key] = None if value == DEFAULT_PARTITION else value
    return out


def is_legacy(rel: str | Path, schema: pa.Schema | None) -> bool:
    """True for a part written in the layout before this one: it repeats a partition column,
    or sits under `day=unknown`."""
    if partition_values(rel).get("day") == LEGACY_UNKNOWN_DAY:
        return True
    return schema is not None and any(schema.get_field_index(c) >= 0 for c in PARTITION_COLUMNS)


def file_table(table: pa.Table) -> pa.Table:
    """A table of `events` (EVENT_SCHEMA) as a part stores it: partition columns dropped."""
    return table.drop_columns([c for c in PARTITION_COLUMNS if c in table.column_names]).cast(__getattr__("FILE_SCHEMA"))


def with_partition_columns(table: pa.Table, rel: str | Path) -> pa.Table:
    """A part's rows with the partition columns its path gives (replacing copies a legacy
    part holds), in EVENT_SCHEMA's column order; columns appended to the schema after the
    part was written come back null."""
    import pyarrow as pa

    from servelens.parsers.schema import EVENT_SCHEMA

    values = partition_values(rel)
    n = table.num_rows
    cols = []
    for f in EVENT_SCHEMA:
        if f.name in PARTITION_COLUMNS:
            cols.append(pa.array([values.get(f.name)] * n, f.type))
        elif f.name in table.column_names:
            cols.append(table[f.name].cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=EVENT_SCHEMA)


def events_select(source: str) -> str:
    """The `events` columns, in the schema's order, over a DuckDB table function reading parts
    with `hive_partitioning` (its partition columns come last, and `day` is not a column)."""
    cols = ", ".join('"' + n + '"' for n, _ in EVENT_COLUMNS)
    return f"select {cols} from {source}"


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB type a Parquet column of this Arrow type is read as."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ_NS" if t.unit == "ns" else "TIMESTAMPTZ"
    return {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.int32(): "INTEGER",
            pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN"}[t]


def no_events_sql() -> str:
    """A query of no rows with every `events` column, typed."""
    return typed_nulls(EVENT_COLUMNS)


def read_parquet_sql(files: list[str], union_by_name: bool) -> str:
    """DuckDB's read_parquet over these part files, partition values from their paths.

    With `union_by_name` (parts of a store older than a schema change), a column that no part
    has (every part written before it existed) reads as NULL: union_by_name makes only the
    columns some part has."""
    quoted = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    source = (
        f"read_parquet([{quoted}], hive_partitioning = true, "
        f"hive_types = {{'engine': varchar, 'day': varchar}}, "
        f"union_by_name = {'true' if union_by_name else 'false'})"
    )
    if union_by_name:
        source = f"(select * from {source} union all by name {no_events_sql()})"
    return events_select(source)

def instances_predicate(instances: list[tuple[str, str]]) -> str:
    """`events` rows of these (engine, instance) pairs (names from the manifest, quoted)."""
    if not instances:
        return "false"
    def lit(v: str | None) -> str:
        return "null" if v is None else "'" + str(v).replace("'", "''") + "'"
    pairs = ", ".join(f"({lit(e)}, {lit(i)})" for e, i in instances)
    return f"(engine, instance) in (select * from (values {pairs}))"
