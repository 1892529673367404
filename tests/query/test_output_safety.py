"""What a command writes cannot hurt the store or whoever opens it: `--output` refuses any
path inside a store (through symlinks too) and an existing file without --force, and CSV
cells a spreadsheet would run as formulas arrive as text unless --raw-csv."""

from __future__ import annotations

import csv
import hashlib
import io
import os

import pytest
from tests.helpers.common import ingested
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()

# a real vLLM V1 header around hostile text: the request id and the error message are log text
LINES = (
    "INFO 05-12 08:00:01 [logger.py:43] Received request =HYPERLINK(\"http://attacker.example/x\",\"click\"): "
    "prompt: 'hi', params: SamplingParams(n=1, temperature=0.7, max_tokens=8), prompt_token_ids: [1, 2].\n"
    "ERROR 05-12 08:00:02 [core.py:708] @SUM(1+1)*cmd|' /C calc'!A0 EngineCore failed\n"
    "ERROR 05-12 08:00:03 [core.py:708] -2+3 plain failure text\n"
)


def tree(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return ingested(tmp_path_factory.mktemp("out"), "vllm.log", LINES)


@pytest.mark.parametrize("command", [["sql", "select 1 as n"], ["report"], ["export"]])
def test_output_inside_the_store_is_refused_and_the_store_is_untouched(tmp_path, store, command):
    before = tree(store)
    part = next(p for p in sorted(store.rglob("*.parquet")))
    link = tmp_path / "innocent.txt"
    link.symlink_to(store / "manifest.json")
    linked_dir = tmp_path / "dir-link"
    linked_dir.symlink_to(store)
    for target in (store / "manifest.json", part, store / "new-file.csv", link, linked_dir / "x.md"):
        r = runner.invoke(app, [*command, "--store", str(store), "-o", str(target), "--force"])
        assert r.exit_code == 1, (target, r.output)
        assert r.stderr.startswith(f"servelens: error: --output {target} is inside the store {store.resolve()}")
        assert r.stderr.count("\n") == 1
    assert tree(store) == before
    assert runner.invoke(app, ["sql", "select count(*) from events", "--store", str(store)]).exit_code == 0


def test_an_existing_file_needs_force(tmp_path, store):
    out = tmp_path / "result.csv"
    out.write_text("keep me\n")
    r = runner.invoke(app, ["sql", "select 1 as n", "--store", str(store), "-f", "csv", "-o", str(out)])
    assert r.exit_code == 1 and r.stderr.strip() == f"servelens: error: --output {out} exists; add --force to overwrite it"
    assert out.read_text() == "keep me\n"
    r = runner.invoke(app, ["sql", "select 1 as n", "--store", str(store), "-f", "csv", "-o", str(out), "--force"])
    assert r.exit_code == 0 and out.read_text() == "n\n1\n"
    r = runner.invoke(app, ["report", "--store", str(store), "-o", str(tmp_path)])
    assert r.exit_code == 1 and "is a directory" in r.stderr


def test_csv_cells_that_would_run_as_formulas_are_text(tmp_path, store):
    query = "select request_id as v from events where request_id is not null union all " \
            "select message from events where level = 'ERROR' order by 1"
    r = runner.invoke(app, ["sql", query, "--store", str(store), "-f", "csv"])
    assert r.exit_code == 0, r.output
    cells = [row[0] for row in csv.reader(io.StringIO(r.stdout))][1:]
    hostile = [c for c in cells if c.lstrip("'")[:1] in ("=", "+", "-", "@")]
    assert len(hostile) >= 3 and all(c.startswith("'") for c in hostile), cells
    raw = runner.invoke(app, ["sql", query, "--store", str(store), "-f", "csv", "--raw-csv"])
    raw_cells = [row[0] for row in csv.reader(io.StringIO(raw.stdout))][1:]
    assert raw_cells == [c[1:] if c in hostile else c for c in cells]
    assert any(c.startswith("=HYPERLINK(") for c in raw_cells)
