"""A hostile or mistaken --thresholds file is one line naming the key and what it must be,
exit 1, in every command that reads thresholds; never a traceback, never a run that
makes millions of windows."""

from __future__ import annotations

import os

import pytest
from tests.helpers.common import ingested
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.views import resolve_variables

build_app()
runner = CliRunner()

LOG = ("INFO 05-12 08:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
       "Avg generation throughput: 3.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
       "GPU KV cache usage: 3.0%, Prefix cache hit rate: 0.0%\n")

CASES = [
    ("window_s = [1, 2]\n", "threshold window_s in {f} must be a number, not an array ([1, 2])"),
    ("window_s = 2026-01-01T00:00:00Z\n", "threshold window_s in {f} must be a number, not a datetime (2026-01-01 00:00:00+00:00)"),
    ("[queue]\nwaiting = true\n", "threshold queue_waiting in {f} must be a number, not a boolean (True)"),
    ("window_s = 0\n", "threshold window_s in {f} must be at least 1, not 0"),
    ("window_s = 0.000001\n", "threshold window_s in {f} must be at least 1, not 1e-06"),
    ("queue_sample_s = 0.001\n", "threshold queue_sample_s in {f} must be at least 0.1, not 0.001"),
    ("[idle]\nsustain_s = -5\n", "threshold idle_sustain_s in {f} must be at least 0, not -5"),
    ("window_s = nan\n", "threshold window_s in {f} must be a finite number, not nan"),
    ("[autoscaler]\ncombine = \"some\"\n", "threshold autoscaler_combine in {f} must be one of any, all, not 'some'"),
    ("[autoscaler]\npreset = 3\n", "threshold autoscaler_preset in {f} must be a string, not a number (3)"),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return ingested(tmp_path_factory.mktemp("thr"), "a.log", LOG)


@pytest.mark.parametrize("text,message", CASES)
@pytest.mark.parametrize("command", [["sql", "select 1"], ["report"]])
def test_a_bad_value_is_one_line_naming_the_key(tmp_path, store, command, text, message):
    f = tmp_path / "t.toml"
    f.write_text(text)
    r = runner.invoke(app, [*command, "--store", str(store), "--thresholds", str(f)])
    assert r.exit_code == 1
    assert r.stderr.strip() == "servelens: error: " + message.format(f=f)
    assert "Traceback" not in r.output


def test_a_directory_or_unreadable_file_is_one_line(tmp_path, store):
    r = runner.invoke(app, ["sql", "select 1", "--store", str(store), "--thresholds", str(tmp_path)])
    assert r.exit_code == 1 and r.stderr.strip() == f"servelens: error: cannot read thresholds file {tmp_path}: Is a directory"
    binary = tmp_path / "b.toml"
    binary.write_bytes(b"\xff\xfe\x00window_s")
    r = runner.invoke(app, ["sql", "select 1", "--store", str(store), "--thresholds", str(binary)])
    assert r.exit_code == 1 and r.stderr.strip() == f"servelens: error: cannot read thresholds file {binary}: not UTF-8 text"


def test_good_values_and_negative_autoscaler_thresholds_still_pass(tmp_path):
    f = tmp_path / "ok.toml"
    f.write_text("window_s = 30\n[autoscaler]\nwaiting = -1.0\ncombine = \"all\"\n[queue]\nwaiting = 2.5\n")
    v = resolve_variables(thresholds=f)
    assert (v["window_s"], v["autoscaler_waiting"], v["autoscaler_combine"], v["queue_waiting"]) == (30, -1.0, "all", 2.5)


def test_a_file_edited_between_two_reads_gives_its_new_values(tmp_path):
    """A long-running reader (the dashboard, the exporter) resolves the variables again per
    connection: a thresholds file changed in between is read again, whatever was read before."""
    f = tmp_path / "t.toml"
    f.write_text("window_s = 30\n")
    assert resolve_variables(thresholds=f)["window_s"] == 30
    first = resolve_variables(thresholds=f)
    first["window_s"] = 999  # what one caller does with its values is not seen by the next
    assert resolve_variables(thresholds=f)["window_s"] == 30
    f.write_text("window_s = 45\n")  # the same size: told apart by its modification time
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert resolve_variables(thresholds=f)["window_s"] == 45
    f.write_text("window_s = 120\n[queue]\nwaiting = 2.5\n")
    v = resolve_variables(thresholds=f)
    assert (v["window_s"], v["queue_waiting"]) == (120, 2.5)
    f.unlink()
    with pytest.raises(ValueError, match="thresholds file not found"):
        resolve_variables(thresholds=f)
