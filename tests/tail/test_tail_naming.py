"""`servelens tail` names instances as `servelens ingest` does (pipeline/sources/naming.py): the same
file name in two directories is two instances, said in a note; `--instance-from` templates;
a later run keeps the names the store gave each directory."""

from __future__ import annotations

import os
import signal
import threading
import time

import polars as pl
from tests.helpers.common import SAMPLE_LOGS, write
from typer.testing import CliRunner

from tests.helpers import wrapping as wr
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.store.manifest import committed_parts

if not any((c.callback and c.callback.__name__ == "tail") for c in app.registered_commands):
    build_app()
runner = CliRunner()
LINES = wr.split_lines((SAMPLE_LOGS / "vllm/real/v1_0_11.log").read_text())  # one event per line


def committed(store) -> pl.DataFrame:
    for _ in range(5):  # a part may move (staging -> events/) while we read: try again
        try:
            parts = committed_parts(store)
            return pl.read_parquet(parts, columns=["instance", "line"]) if parts else pl.DataFrame()
        except (FileNotFoundError, OSError):
            continue
    return pl.DataFrame()


def tail_until(store, rows: int, *args):
    """Run `servelens tail ... -q` in this process and stop it with SIGINT (as Ctrl-C does)
    once the store holds `rows` events, or after 30 s."""

    def stop_when_done():
        end = time.monotonic() + 30
        while time.monotonic() < end and committed(store).height < rows:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=stop_when_done, daemon=True)
    watcher.start()
    r = runner.invoke(app, ["tail", *map(str, args), "--store", str(store), "-q"], catch_exceptions=False)
    watcher.join()
    return r


def counts(store) -> dict[str, int]:
    return dict(committed(store).group_by("instance").len().iter_rows())


def test_same_file_name_in_two_directories_is_two_instances_and_said(tmp_path):
    hosts, store = tmp_path / "hosts", tmp_path / "s"
    write(hosts / "gpu-node-1/vllm.log", "\n".join(LINES[:20]) + "\n")
    write(hosts / "gpu-node-2/vllm.log", "\n".join(LINES[20:]) + "\n")
    r = tail_until(store, len(LINES), hosts)
    assert r.exit_code == 0, r.output
    assert "note: files named 'vllm' in 2 directories are different instances: gpu-node-1/vllm, gpu-node-2/vllm" in r.stderr
    assert counts(store) == {"gpu-node-1/vllm": 20, "gpu-node-2/vllm": len(LINES) - 20}
    # a later run that follows one directory only keeps its name for a new file there
    write(hosts / "gpu-node-1/vllm.log.1", "\n".join(LINES[:5]) + "\n")
    r = tail_until(store, len(LINES) + 5, hosts / "gpu-node-1")
    assert r.exit_code == 0, r.output
    assert counts(store) == {"gpu-node-1/vllm": 25, "gpu-node-2/vllm": len(LINES) - 20}


def test_a_directory_the_store_does_not_know_is_told_apart_from_the_stored_one(tmp_path):
    hosts, store = tmp_path / "hosts", tmp_path / "s"
    write(hosts / "gpu-node-1/vllm.log", "\n".join(LINES[:20]) + "\n")
    write(hosts / "gpu-node-2/vllm.log", "\n".join(LINES[20:]) + "\n")
    assert runner.invoke(app, ["ingest", str(hosts / "gpu-node-1"), "--store", str(store)]).exit_code == 0
    r = tail_until(store, len(LINES), hosts / "gpu-node-2")
    assert r.exit_code == 0, r.output
    assert "note: the store already has instance 'vllm' from another directory" in r.stderr
    assert "the new files are named gpu-node-2/vllm" in r.stderr
    assert counts(store) == {"vllm": 20, "gpu-node-2/vllm": len(LINES) - 20}


def test_instance_from_template(tmp_path):
    write(tmp_path / "eu/a/server.log", "\n".join(LINES[:4]) + "\n")
    write(tmp_path / "eu/b/server.log", "\n".join(LINES[4:10]) + "\n")
    r = tail_until(tmp_path / "s", 10, tmp_path / "eu", "--instance-from", "{grandparent}-{parent}")
    assert r.exit_code == 0, r.output
    assert "note:" not in r.stderr  # the template names them apart
    assert counts(tmp_path / "s") == {"eu-a": 4, "eu-b": 6}
    bad = runner.invoke(app, ["tail", str(tmp_path / "eu"), "--store", str(tmp_path / "s2"), "--instance-from", "{host}"])
    assert bad.exit_code == 1
    assert bad.stderr.startswith("servelens: error: --instance-from '{host}' has unknown field {host}")
    assert bad.stderr.count("\n") == 1
    assert not (tmp_path / "s2").exists()  # refused before the store was created
