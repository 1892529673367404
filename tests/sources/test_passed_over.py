"""Files of an ingested directory that are not read are named, with why, in the summary and
--json: an image, a config file, and another servelens store (whose manifest.json was read as a
log before)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()
LOG = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm" / "vllm-a.log"


def test_passed_over_files_and_a_nested_store_are_named(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(LOG, logs / "vllm-a.log")
    (logs / "pic.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (logs / "conf.toml").write_text("a = 1\n")
    old = logs / "old" / "store"
    assert runner.invoke(app, ["ingest", str(LOG), "--store", str(old), "-q"]).exit_code == 0
    r = runner.invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "store"), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert [f["source"].split("/")[-1] for f in got["files"]] == ["vllm-a.log"]
    assert got["lines"] == LOG.read_bytes().count(b"\n")
    over = {Path(p["source"]).name: p["reason"] for p in got["passed_over"]}
    assert over == {"conf.toml": "not a log by its name (.toml)", "pic.png": "not a log by its name (.png)",
                    "store": "a servelens store, not logs: its files are not read"}
    text = runner.invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "again")]).stderr
    line = next(x for x in text.splitlines() if x.startswith("passed over"))
    assert line.startswith("passed over 3 file(s) that are not logs:") and "pic.png" in line
