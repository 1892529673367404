"""The committed sample logs are exactly what the simulator produces from their recorded
command and seed, so they never drift from the code."""

from __future__ import annotations

import json
import shlex

import polars as pl
import pytest
from tests.helpers.common import SAMPLE_LOGS
from typer.testing import CliRunner

from servelens.pipeline.simulate.samples import MANIFEST, command_line, regenerate

ROOT = SAMPLE_LOGS / "incident"


def runs():
    return json.loads((ROOT / MANIFEST).read_text())["runs"]


def test_samples_regenerate_byte_identical(tmp_path):
    for d in regenerate(ROOT / MANIFEST, tmp_path):
        committed = ROOT / d.name
        assert sorted(p.name for p in d.iterdir()) == sorted(p.name for p in committed.iterdir())
        for f in d.iterdir():
            if f.suffix == ".parquet":  # compare content: Parquet bytes embed the writer's version
                assert pl.read_parquet(f).equals(pl.read_parquet(committed / f.name)), f.name
            else:
                assert f.read_bytes() == (committed / f.name).read_bytes(), f"{d.name}/{f.name} drifted"


def test_samples_are_small_and_show_the_incident():
    total = sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file())
    assert total < 5_000_000
    for run in runs():
        d = ROOT / run["out"]
        logs = sorted(d.glob("*.log"))
        assert [p.stem for p in logs] == [f"{run['engine']}-{c}" for c in "ab"]
        truth = pl.read_parquet(d / "truth_requests.parquet")
        assert set(truth["instance"]) == {p.stem for p in logs}
        errors = truth.filter(pl.col("status") == "error")
        assert errors.height > 0 and set(errors["instance"]) == {f"{run['engine']}-a"}
        assert "out of memory" in (d / f"{run['engine']}-a.log").read_text(encoding="utf-8")


def test_readme_records_the_exact_commands():
    readme = (SAMPLE_LOGS / "README.md").read_text()
    for run in runs():
        assert command_line(run, f"sample_logs/incident/{run['out']}") in readme
        assert f"--seed {run['seed']}" in readme


@pytest.mark.parametrize("run", [r for r in runs() if r["engine"] == "trtllm"], ids=lambda r: r["out"])
def test_the_recorded_cli_command_reproduces_the_sample(tmp_path, run):
    from servelens.pipeline.cli.app import app, build_app

    build_app()
    args = shlex.split(command_line(run, str(tmp_path)))[1:]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    for f in (ROOT / run["out"]).glob("*.log"):
        assert (tmp_path / f.name).read_bytes() == f.read_bytes()
