"""One content under several names in one ingest is stored once: the log, a copy named as
rotated, its gzip, a backup copy in another directory, a symlink and an early partial copy
give the log's events once (the truth: its lines, counted here), and say which file was read."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run

build_app()
runner = CliRunner()
LOG = Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm" / "vllm-a.log"


def test_one_content_under_six_names_is_stored_once(tmp_path):
    d = tmp_path / "logs"
    (d / "backup").mkdir(parents=True)
    data = LOG.read_bytes()
    shutil.copy(LOG, d / "vllm.log")
    shutil.copy(LOG, d / "vllm.log.1")
    (d / "vllm.log.1.gz").write_bytes(gzip.compress(data))
    shutil.copy(LOG, d / "backup" / "vllm.log")
    (d / "link.log").symlink_to(d / "vllm.log")
    cut = data.index(b"\n", len(data) // 3) + 1
    (d / "early-copy.log").write_bytes(data[:cut])
    # a different log that shares the first bytes must still be read
    other = data[:cut] + b"2026-05-12T09:00:00.000000000Z INFO 05-12 09:00:00 metrics.py:467] a line only this file has\n"
    (d / "other.log").write_bytes(other)
    r = runner.invoke(app, ["ingest", str(d), "--store", str(tmp_path / "store"), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    by_name = {Path(f["source"]).name + ("@backup" if "backup" in f["source"] else ""): f for f in got["files"]}
    assert by_name["vllm.log"]["status"] == "ingested" and by_name["other.log"]["status"] == "ingested"
    for name in ("vllm.log.1", "vllm.log.1.gz", "vllm.log@backup", "link.log", "early-copy.log"):
        assert by_name[name]["status"] == "unchanged", name
        assert by_name[name]["reason"].endswith("vllm.log, which is read instead"), by_name[name]
    lines = run(tmp_path / "store", "select instance, max(line) as n from events group by all order by 1").rows()
    assert lines == [("other", other.count(b"\n")), ("vllm", data.count(b"\n"))]
    again = json.loads(runner.invoke(app, ["ingest", str(d), "--store", str(tmp_path / "store"), "--json"]).stdout)
    assert again["ingested"] == 0 and again["events"] == 0
