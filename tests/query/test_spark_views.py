"""The views on Spark: `servelens views --dialect spark` run on PySpark local[2] over the
Parquet parts of the sample incident store give DuckDB's answers.

One Spark session for the module (a cold start is ~25 s); each view is materialised as it is
created (written to Parquet and read back in its place), as docs/spark.md advises, so
each is computed once and planned over its inputs' rows, not over their definitions. Needs
the `spark` extra and a Java runtime (tests/e2e/install_spark.sh, run by `make test`);
skipped without pyspark or Java.
Spark binds to loopback and downloads nothing: no packages are asked for, and its ivy
directory (where it would put them) stays empty.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.dialects import views
from servelens.pipeline.store.manifest import committed_parts

pyspark = pytest.importorskip("pyspark", reason="the `spark` extra is not installed (tests/e2e/install_spark.sh)")
if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
    pytest.skip("no Java runtime for Spark (tests/e2e/install_spark.sh installs one as root)", allow_module_level=True)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
build_app()

REPO = Path(__file__).resolve().parents[2]
COMPARED = ("latency_percentiles", "queue_depth", "scaling_signals")


@functools.lru_cache(maxsize=None)
def statements() -> tuple[tuple[str, str], ...]:
    """(name, Spark SQL) of the compared views and those they read: translated once for the
    module (a translation binds the views to read the columns of their stars)."""
    return tuple(views("spark", list(COMPARED)))


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    ivy = tmp_path_factory.mktemp("ivy")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("servelens-test-views")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # (set before the JVM starts: the builder passes it to spark-submit)
        .config("spark.driver.memory", "2g")
        # a JVM living a minute on a few shared cores: the quick JIT tier alone and one GC
        # thread cost less CPU than optimising compiles and parallel collection save (the
        # answers are the same); that tier alone gets the small code cache of a JVM without
        # tiers, which Spark's generated classes fill, so the tiered size is asked for
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.jars.ivy", str(ivy))
        # wrapper_ts is a nanosecond timestamp, which Spark cannot read as one (no view uses it)
        .config("spark.sql.legacy.parquet.nanosAsLong", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    assert not any(ivy.iterdir()), "Spark fetched packages"


@pytest.fixture(scope="module")
def spark_views(spark, incident_store, tmp_path_factory):
    """The views of `servelens views --dialect spark` created on Spark over the store's parts."""
    parts = [str(p) for p in committed_parts(incident_store)]
    spark.read.option("basePath", str(incident_store / "events")).parquet(*parts).createOrReplaceTempView("events")
    # the scraped /metrics samples the views also read: none in this store, so an empty table
    # of their schema, as DuckDB binds one
    import pyarrow.parquet as pq

    from servelens.pipeline.sources.samples import SAMPLE_SCHEMA

    # (a folder of its own: the incident store and its folder are shared by the test run)
    work = tmp_path_factory.mktemp("spark-views")
    empty = work / "no-samples.parquet"
    pq.write_table(SAMPLE_SCHEMA.empty_table(), empty)
    spark.read.parquet(str(empty)).createOrReplaceTempView("samples")
    rows = work / "rows"
    for name, sql in statements():
        spark.sql(sql.rstrip().rstrip(";"))
        # materialised, and the view replaced by its rows: Spark expands a view's definition
        # into every query that reads it while analysing it, before any cache is consulted.
        # Written and read back, as docs/spark.md says: a localCheckpoint's rows, joined to
        # themselves (requests matches client rows twice), fail Spark's analysis
        spark.table(name).write.parquet(str(rows / name))
        spark.read.parquet(str(rows / name)).createOrReplaceTempView(name)
    return [name for name, _ in statements()]


def test_cli_prints_the_same_script(spark_views) -> None:
    result = CliRunner().invoke(app, ["views", "--dialect", "spark", *[a for v in COMPARED for a in ("--view", v)]])
    assert result.exit_code == 0, result.output
    assert result.output == "\n".join(sql for _, sql in statements())
    # every view the three read came along, each created after what it reads
    assert spark_views.index("requests") < spark_views.index("request_state") < spark_views.index("queue_depth")
    assert spark_views[-1] == "scaling_signals"


@pytest.fixture(scope="module")
def duck_con(incident_store):
    """One DuckDB connection for the three views compared (the views they read computed
    once: tests/sql/test_shared_views.py shows that answers the same)."""
    from servelens.pipeline.query.connect import connect

    con = connect(incident_store, views=set(COMPARED), shared=True)
    yield con
    con.close()


def _duckdb_rows(con, view: str) -> tuple[list[str], list[tuple]]:
    cur = con.execute(f"select * from {view}")
    names = [d[0] for d in cur.description]
    return names, [tuple(r) for r in cur.fetchall()]


def _spark_rows(spark, view: str) -> tuple[list[str], list[tuple]]:
    df = spark.table(view)
    return df.columns, [tuple(r) for r in df.collect()]


def _normal(value):
    """Comparable across engines: instants as UTC epoch microseconds (Spark gives naive
    datetimes in the session's zone, UTC here), floats kept for a tolerant comparison."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return round(value.timestamp() * 1e6)
    return value


def _sort_key(row: tuple):
    return tuple((v is None, "" if v is None else (round(v, 6) if isinstance(v, float) else v)) for v in row)


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


@pytest.mark.parametrize("view", COMPARED)
def test_spark_answers_equal_duckdb(spark, spark_views, duck_con, view) -> None:
    duck_names, duck = _duckdb_rows(duck_con, view)
    spark_names, sparked = _spark_rows(spark, view)
    assert spark_names == duck_names
    duck = sorted((tuple(_normal(v) for v in r) for r in duck), key=_sort_key)
    sparked = sorted((tuple(_normal(v) for v in r) for r in sparked), key=_sort_key)
    assert len(duck) > 0
    assert len(sparked) == len(duck)
    for d, s in zip(duck, sparked):
        diffs = [(n, dv, sv) for n, dv, sv in zip(duck_names, d, s) if not _same(dv, sv)]
        assert not diffs, f"{view}: {diffs} in DuckDB row {d}"


def test_incident_signals_and_percentiles_are_there(spark, spark_views) -> None:
    """The comparison is over real answers: the incident's KV pressure on vllm-b, the crashes
    (CUDA OOM) of tgi-a and trtllm-a, and its TGI percentiles."""
    signals = {(r["instance"], r["signal"], r["severity"]) for r in spark.table("scaling_signals").collect()}
    assert ("vllm-b", "kv_pressure", "critical") in signals
    assert {("tgi-a", "errors", "critical"), ("trtllm-a", "errors", "critical")} <= signals
    p99 = spark.sql("select max(p99_e2e_s) as m from latency_percentiles where engine = 'tgi'").collect()[0]["m"]
    assert p99 is not None and p99 > 0
