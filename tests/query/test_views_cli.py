"""`servelens views`: the views of sql/ printed for Spark, Trino or DuckDB (pipeline/query/dialects.py).

These run without Spark: the CLI's output and errors, and DuckDB's check that the structural
rewrites (stars spelled out, ASOF joins as a union and a window) keep each view's answers on
the sample incident store. tests/query/test_spark_views.py runs the Spark SQL itself.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from pathlib import Path

import pytest
import sqlglot
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.dialects import portable_duckdb, views
from servelens.pipeline.query.views import resolve_variables, sql_files, view_name

build_app()
REPO = Path(__file__).resolve().parents[2]




@functools.lru_cache(maxsize=None)
def translated(dialect: str) -> dict[str, str]:
    """Every view translated to `dialect` (in load order): once per run, read by every
    pytest-xdist worker whose tests need it (tests/helpers/run_store.py)."""
    import json

    from tests.helpers.run_store import built_once, run_tmp

    def build(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(views(dialect)))

    return dict(json.loads(built_once(run_tmp(), f"views-{dialect}", build).read_text()))


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_unknown_dialect_and_view_are_one_line_errors() -> None:
    r = invoke("views", "--dialect", "oracle")
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == ["servelens: error: unknown dialect 'oracle'; choose one of: spark, trino, duckdb"]
    r = invoke("views", "--dialect", "spark", "--view", "latency_percentile")
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("servelens: error: unknown view 'latency_percentile'; choose one of: ")
    assert set(lines[0].split("choose one of: ")[1].split(", ")) == {view_name(p) for p in sql_files()}


def test_list_names_a_view_after_what_it_reads() -> None:
    r = invoke("views", "--list", "--view", "queue_depth")
    assert r.exit_code == 0, r.output
    listed = r.output.split()
    # queue_depth reads engine_stats, scraped_gauges and request_state, which reads requests
    # (made of the staging views beneath it): each after what it reads
    assert sorted(listed) == ["client_requests", "engine_stats", "instance_deaths", "queue_depth", "request_events",
                              "request_state", "requests", "scraped_gauges", "server_requests_by_id",
                              "server_requests_by_line", "vllm_request_ids"]
    assert listed[-1] == "queue_depth" and listed.index("requests") < listed.index("request_state")
    r = invoke("views", "--list")
    assert r.output.split() == [view_name(p) for p in sql_files()]


def test_duckdb_dialect_prints_the_views_as_written() -> None:
    r = invoke("views", "--dialect", "duckdb", "--view", "windows")
    assert r.exit_code == 0, r.output
    assert r.output == (REPO / "sql" / "staging/windows.sql").read_text().rstrip() + ";\n"


@pytest.mark.parametrize("dialect", ["spark", "trino"])
def test_every_view_translates_without_duckdb_only_constructs(dialect) -> None:
    script = "\n".join(translated(dialect).values())
    body = "\n".join(line for line in script.splitlines() if not line.startswith("--"))
    for construct in ("ASOF JOIN", "ASOF LEFT JOIN", "GETVARIABLE", "QUANTILE_CONT", "PERCENTILE_CONT", "EPOCH_US", "MAKE_TIMESTAMPTZ",
                      "EXCLUDE", "REPLACE (", "GROUP BY ALL", "{:", "UNNEST(RANGE", "MATERIALIZED"):
        assert construct not in body.upper(), construct
    # what the target engine reads back is a statement per view (Trino has no PIVOT: the
    # views built on one are named as not translated)
    untranslated = [n for n, sql in translated(dialect).items() if sql.startswith(f"-- {n}: not translated")]
    assert untranslated == ([] if dialect == "spark" else ["metric_series"])
    parsed = [s for s in sqlglot.parse(script, read=dialect) if s is not None]
    assert len(parsed) == len(sql_files()) - len(untranslated)


@pytest.mark.parametrize("dialect", ["spark", "trino"])
def test_views_named_translate_as_among_every_view(dialect) -> None:
    """Named views (`--view`) are translated with only them and the views they read bound
    for reading columns: each comes out as it does when every view is translated (batch_fill
    reads requests, whose stars and ASOF joins are rewritten from the columns read)."""
    some = dict(views(dialect, ["batch_fill"]))
    assert {"requests", "request_state", "batch_fill"} <= set(some) < set(translated(dialect))
    assert some == {name: translated(dialect)[name] for name in some}


def test_parameters_are_bound_as_literals() -> None:
    default = translated("spark")["windows"]
    five = CliRunner().invoke(app, ["views", "--dialect", "spark", "--view", "windows", "--window", "5m"]).output
    assert re.search(r"COALESCE\(TRY_CAST\(60(\.0)? AS DOUBLE\), 60\.0\) AS window_s", default)
    assert "COALESCE(TRY_CAST(300.0 AS DOUBLE), 60.0) AS window_s" in five
    assert "GETVARIABLE" not in five.upper()


def test_exact_percentiles_interpolate() -> None:
    spark = translated("spark")["latency_percentiles"]
    assert "PERCENTILE(e2e_s, ARRAY(0.50, 0.90, 0.95, 0.99))" in spark
    assert "PERCENTILE_APPROX" not in spark.upper()
    trino = translated("trino")["latency_percentiles"]
    assert "ARRAY_SORT" in trino and "APPROX_PERCENTILE" not in trino.upper()


def test_trino_percentile_form_equals_quantile_cont() -> None:
    """The interpolation written for Trino (1-based arrays), carried to DuckDB by sqlglot and
    evaluated over sorted values, gives quantile_cont's answers."""
    import duckdb
    from sqlglot import exp

    from servelens.pipeline.query.dialects import _interpolated_quantile

    assert "ARRAY_SORT" in translated("trino")["latency_percentiles"].upper()
    values = [3.0, 1.0, 7.5, 2.25, 10.0, 4.0]
    con = duckdb.connect()
    for n in (1, 2, 6):
        sample = sorted(values[:n])
        # doubles, as the latency columns are (DuckDB keeps a decimal's scale in its quantile)
        array = exp.Array(expressions=[exp.cast(exp.Literal.number(v), "double") for v in sample])
        literal = "[" + ", ".join(f"{v}::double" for v in sample) + "]"
        for level in (0.0, 0.5, 0.9, 0.95, 0.99, 1.0):
            form = _interpolated_quantile(array, exp.Literal.number(level)).sql("duckdb")
            got = con.execute(f"select {form}").fetchone()[0]
            want = con.execute(f"select quantile_cont(x, {level}) from unnest({literal}) t(x)").fetchone()[0]
            assert got == pytest.approx(want, rel=1e-12), (n, level)


REWRITTEN = ("requests", "batch_fill", "window_metrics")


@pytest.fixture(scope="module")
def incident_con(incident_store):
    from servelens.pipeline.query.connect import connect

    # every view bound: a rewritten view reads the views beneath it, which a view bound over
    # its rollup would leave out
    con = connect(incident_store, shared=True)
    yield con
    con.close()


@functools.lru_cache(maxsize=None)
def _probe():
    """One column probe (every view bound over no events) for the rewrites compared."""
    from servelens.pipeline.query.dialects import _Probe

    return _Probe(resolve_variables())


@pytest.mark.parametrize("view", REWRITTEN)
def test_asof_and_star_rewrites_keep_the_answers(incident_con, view) -> None:
    """Each view with an ASOF join or a `* exclude / replace`, rewritten the portable way and
    run by DuckDB itself, gives the same rows as the view as written."""
    path = next(p for p in sql_files() if view_name(p) == view)
    rewritten = portable_duckdb(path, resolve_variables(), _probe())
    assert "ASOF JOIN" not in rewritten.upper() and "ASOF LEFT JOIN" not in rewritten.upper()
    select = rewritten.split(" AS ", 1)[1] if rewritten.upper().startswith("CREATE") else rewritten
    n = incident_con.execute(f"select count(*) from {view}").fetchone()[0]
    assert n > 0
    assert incident_con.execute(f"select count(*) from ({select})").fetchone()[0] == n
    for a, b in ((f"select * from {view}", select), (select, f"select * from {view}")):
        missing = incident_con.execute(f"select count(*) from (({a}) except all ({b}))").fetchone()[0]
        assert missing == 0, view



def _spark_epoch_in_duckdb(arg: str) -> str:
    """Spark's translation of `epoch(<arg>)` in DuckDB's terms: unix_micros is epoch_us, and
    unix_millis truncates to the millisecond (DuckDB's epoch_ms rounds: floor-divide instead)."""
    from servelens.pipeline.query.dialects import _time_function

    form = _time_function(sqlglot.parse_one(f"epoch({arg})", read="duckdb"), "spark").sql("spark")
    assert f"UNIX_MILLIS({arg})" in form and f"UNIX_MICROS({arg})" in form
    return form.replace(f"UNIX_MILLIS({arg})", f"(epoch_us({arg}) // 1000)").replace("UNIX_MICROS", "epoch_us")


def test_spark_epoch_form_rounds_like_duckdb_epoch() -> None:
    """Spark's `epoch(ts)` (whole milliseconds / 1e3 + the microseconds left / 1e6), evaluated
    with DuckDB's equivalents of its functions, equals DuckDB's epoch() of a timestamptz to the
    bit, where micros / 1e6 is one ulp off for many instants."""
    import duckdb

    con = duckdb.connect()
    differ, plain_differs, n = con.execute(
        f"""select count(*) filter (where {_spark_epoch_in_duckdb('ts')} is distinct from epoch(ts)),
                   count(*) filter (where epoch_us(ts) / 1e6 <> epoch(ts)),
                   count(*)
            from (select make_timestamptz(1778572800000000 + i * 8021983) as ts from range(4000) t(i))"""
    ).fetchone()
    assert n == 4000
    assert differ == 0
    assert plain_differs > 100  # the rounding the form exists for is really there
    # the form stands in for one value: `epoch(ts) / 60` divides the whole of it
    at = "2026-05-12 08:01:00+00:00"
    minute = con.execute(f"select {_spark_epoch_in_duckdb('ts')} / 60 from (select timestamptz '{at}' as ts)").fetchone()[0]
    assert minute == dt.datetime.fromisoformat(at).timestamp() / 60


def test_spark_time_functions_keep_their_argument_whole() -> None:
    """`to_timestamp(window_start_s + window_s)` is `(window_start_s + window_s) * 1e6`, not
    `window_start_s + window_s * 1e6` (every window_end was a year off before)."""
    tree = sqlglot.parse_one(translated("spark")["latency_percentiles"].rstrip().rstrip(";"), read="spark")
    end = next(a for a in tree.find_all(sqlglot.exp.Alias) if a.alias == "window_end")
    mul = end.find(sqlglot.exp.Mul)
    assert isinstance(mul.this, sqlglot.exp.Paren) and isinstance(mul.this.this, sqlglot.exp.Add)
    assert {c.name for c in mul.this.find_all(sqlglot.exp.Column)} == {"window_start_s", "window_s"}
