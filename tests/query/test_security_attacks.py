"""Attacks of the second security pass run for real, as a user runs them (the `servelens`
command in a process of its own): a result polars cannot print, DuckDB running out of memory
while the result is read, an --output that is another name of a store's manifest, thresholds
too large for DuckDB's types, and a log file named to forge lines or drive the terminal. Each
checks the damage did not happen: the exit code and the exact line, stderr without a panic or
a traceback, the manifest's bytes, no control byte in what reaches a terminal or a report."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SERVELENS = Path(sys.executable).parent / "servelens"
LOG = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm" / "vllm-a.log"
ESC = "\x1b"
# a file name that closes a Prometheus label, starts a new line of output and recolours the terminal
EVIL = 'vllm-a"} evil 1\n# x\\' + ESC + "[31mRED" + ESC + "[0m"


def servelens(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(SERVELENS), *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from servelens.pipeline.ingest import ingest

    # built in this process (the store is not what is attacked), as `servelens ingest`
    # builds it: rollups left to the first query that reads them
    s = tmp_path_factory.mktemp("attacks") / "store"
    ingest([LOG], s, rollups="defer")
    return s


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 1 and r.stdout == "", (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("servelens: error: "), r.stderr
    assert "Traceback" not in r.stderr and "panicked" not in r.stderr
    return r.stderr[len("servelens: error: "):].rstrip("\n")


VALUES = [
    # (SQL, the value as text in every format)
    ("'infinity'::timestamp", "infinity"),
    ("'-infinity'::timestamp_s", "-infinity"),
    ("'294247-01-10'::timestamp", "294247-01-10 00:00:00"),
    ("'infinity'::date", "infinity"),
    ("'5000000-01-01'::date", "5000000-01-01"),
    ("'infinity'::timestamptz", "infinity"),
    ("map{1: 2}", '{"1":2}'),
    ("map{[1]: {'a': 1}}", '{"[1]":{"a":1}}'),
]


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_values_polars_cannot_hold_render_in_every_format(store, fmt):
    cols = ", ".join(f"{sql} as c{i}" for i, (sql, _) in enumerate(VALUES))
    r = servelens("sql", f"select {cols}, [{VALUES[0][0]}] as nested", "--store", str(store), "-f", fmt)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    want = [text for _, text in VALUES]
    if fmt == "json":
        row = json.loads(r.stdout)[0]
        # a nested value stays nested (DuckDB writes the JSON): a list holding DuckDB's text
        assert [row[f"c{i}"] for i in range(len(VALUES))] == want and row["nested"] == ["infinity"]
    elif fmt == "csv":
        import csv
        import io

        rows = list(csv.reader(io.StringIO(r.stdout)))
        assert rows[1] == [*want[:1], "'-infinity", *want[2:], '["infinity"]']  # '-...: not a formula
    else:
        cells = [c.strip() for c in r.stdout.splitlines()[2].strip("|").split("|")]
        assert cells == [*want, '["infinity"]']


def test_a_rust_panic_leaves_only_its_one_line(tmp_path):
    """The safety net under any panic left: polars printing a value it cannot hold."""
    script = tmp_path / "panic.py"
    script.write_text(textwrap.dedent("""
        import sys
        import polars as pl, pyarrow as pa
        from servelens.pipeline.query.quiet import is_panic, panics_hidden
        # a date no calendar holds (polars 2.2 prints the largest timestamp, not this)
        df = pl.from_arrow(pa.table({"d": pa.array([2**31 - 1], pa.date32())}))
        guarded = sys.argv[1] == "guarded"
        try:
            if guarded:
                with panics_hidden():
                    print("servelens: note: kept", file=sys.stderr)
                    str(df)
            else:
                str(df)
        except BaseException as e:
            print("servelens: error: cannot show it" if is_panic(e) else repr(e), file=sys.stderr)
    """))
    bare = subprocess.run([sys.executable, str(script), "bare"], capture_output=True, text=True, timeout=60)
    assert "panicked at" in bare.stderr  # the attack is real: polars prints its panic itself
    guarded = subprocess.run([sys.executable, str(script), "guarded"], capture_output=True, text=True, timeout=60)
    assert guarded.stderr == "servelens: note: kept\nservelens: error: cannot show it\n"


def test_running_out_of_memory_while_the_result_is_read_is_one_line(store):
    # DuckDB's error arrives through Arrow's batch reader as an OSError, not as DuckDB's own
    line = one_error_line(servelens(
        "sql", "with recursive t(s) as (select 'x' union all select s || s from t) select length(s) from t limit 40",
        "--store", str(store), "--memory-limit", "200MB", "--timeout", "30"))
    assert line == ("the query needs more than its 200 MB memory limit; raise it with --memory-limit SIZE or "
                    "$SERVELENS_QUERY_MEMORY, or add filters or a LIMIT")


def test_output_onto_a_hard_link_of_the_manifest_is_refused(store, tmp_path):
    manifest = store / "manifest.json"
    before = hashlib.sha256(manifest.read_bytes()).hexdigest()
    alias = tmp_path / "result.csv"
    os.link(manifest, alias)  # outside the store: no path check can see where it leads
    for cmd in (["sql", "select 1 as n", "-f", "csv"], ["report"], ["export"]):
        line = one_error_line(servelens(*cmd, "--store", str(store), "-o", str(alias), "--force"))
        assert line == (f"--output {alias} is a file with 1 other hard link(s), which writing would change too "
                        "(one may be in a store); remove it or write somewhere else")
    assert hashlib.sha256(manifest.read_bytes()).hexdigest() == before
    r = servelens("sql", "select count(*) as n from events", "--store", str(store), "-f", "csv")
    assert r.returncode == 0 and int(r.stdout.split()[1]) > 0
    plain = tmp_path / "plain.csv"
    plain.write_text("old\n")
    r = servelens("sql", "select 7 as n", "--store", str(store), "-f", "csv", "-o", str(plain), "--force")
    assert r.returncode == 0 and plain.read_text() == "n\n7\n"


@pytest.mark.parametrize("setting, words", [
    ("window_s = 1e300", "window_s in {f} must be at most 1,000,000,000 (about 31 years), not 1e+300"),
    ("window_s = 99999999999999999999", "window_s in {f} must be at most 1,000,000,000 (about 31 years), not 99999999999999999999"),
    ("swing_lookback_windows = 99999999999999999999", "swing_lookback_windows in {f} must be at most 1,000,000,000 (a count), not 99999999999999999999"),
])
def test_thresholds_too_large_for_duckdb_name_the_key(store, tmp_path, setting, words):
    f = tmp_path / "th.toml"
    f.write_text(setting + "\n")
    for cmd in (["sql", "select count(*) from scaling_signals"], ["report", "-o", str(tmp_path / "r.md")]):
        line = one_error_line(servelens(*cmd, "--store", str(store), "--thresholds", str(f)))
        assert line == "threshold " + words.format(f=f)


def test_a_file_name_cannot_forge_lines_or_drive_the_terminal(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / f"{EVIL}.log").write_bytes(LOG.read_bytes())
    store = tmp_path / "store"
    ingested = servelens("ingest", str(logs), "--store", str(store))
    assert ingested.returncode == 0, ingested.stderr
    assert ESC not in ingested.stderr
    shown = 'vllm-a"} evil 1\\n# x\\\\x1b[31mRED\\x1b[0m'
    named = [ln for ln in ingested.stderr.splitlines() if "evil" in ln]
    assert named and all(shown in ln for ln in named) and not any(ln.startswith("# x") for ln in ingested.stderr.splitlines())
    table = servelens("sql", "select distinct instance from events", "--store", str(store))
    assert table.returncode == 0 and ESC not in table.stdout
    assert table.stdout.splitlines()[2].strip("| ") == shown and table.stdout.endswith("(1 row)\n")
    # the value itself is kept as it was
    data = json.loads(servelens("sql", "select distinct instance from events", "--store", str(store), "-f", "json").stdout)
    assert data == [{"instance": EVIL}]
    for cmd in (["info"], ["top", "--once"]):
        r = servelens(*cmd, "--store", str(store))
        assert r.returncode == 0 and ESC not in r.stdout, (cmd, r.stderr)
        assert any(shown in ln for ln in r.stdout.splitlines()), cmd
        assert not any(ln.startswith("# x") for ln in r.stdout.splitlines()), cmd
    report = tmp_path / "r.md"
    assert servelens("report", "--store", str(store), "-o", str(report)).returncode == 0
    text = report.read_text()
    assert ESC not in text and "evil" in text
    assert not any(ln.startswith("# x") for ln in text.splitlines())


def test_a_query_text_of_megabytes_is_refused_before_parsing(store):
    from servelens.pipeline.query.connect import QueryError, run

    with pytest.raises(QueryError) as e:
        run(store, "select 1 -- " + "x" * 1_000_000)
    assert str(e.value) == "the query text is 1,000,012 characters; at most 1,000,000 are read"
    assert run(store, "select 1 as n -- " + "x" * 900_000)["n"].to_list() == [1]
