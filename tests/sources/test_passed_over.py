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


def test_a_gcloud_yaml_download_is_read_and_a_config_yaml_passed_over(tmp_path):
    # `gcloud logging read ... > incident.yaml`: YAML by its name, a log platform's export by
    # its content; a Kubernetes manifest beside it stays passed over
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "gcloud_yaml" / "tgi_launcher_traceback.yaml"
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(fixture, logs / "incident.yaml")
    (logs / "deploy.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: tgi\n---\n"
                                      "apiVersion: v1\nkind: Service\nmetadata:\n  name: tgi\n")
    r = runner.invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "store"), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert [f["source"].split("/")[-1] for f in got["files"]] == ["incident.yaml"]
    # the download holds the lines of this TGI log: the same events as the log itself
    plain = Path(__file__).resolve().parents[2] / "sample_logs" / "tgi" / "real" / "launcher_traceback.log"
    r2 = runner.invoke(app, ["ingest", str(plain), "--store", str(tmp_path / "plain"), "--json"])
    want = json.loads(r2.stdout)
    assert got["files"][0]["engine"] == "tgi"
    assert (got["events"], got["events_by_kind"]) == (want["events"], want["events_by_kind"])
    assert {Path(p["source"]).name: p["reason"] for p in got["passed_over"]} == {"deploy.yaml": "not a log by its name (.yaml)"}
