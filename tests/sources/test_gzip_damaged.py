"""A damaged or padded .gz keeps every complete line, and says in one line what was lost:
zero padding (which `gzip -t` accepts), trailing bytes that are not gzip, a second member,
a stream cut short. The truth: the lines of the original log, counted here."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.sources import fingerprint as fp
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run

build_app()
runner = CliRunner()
LOG = (Path(__file__).resolve().parents[2] / "sample_logs" / "incident" / "vllm" / "vllm-a.log").read_bytes()
GZ = gzip.compress(LOG)
HALF = LOG.index(b"\n", len(LOG) // 2) + 1


def complete_lines(data: bytes) -> int:
    return data.count(b"\n")


CASES = {
    "padded": (GZ + b"\0" * 4096, None),
    "garbage": (GZ + b"\0\0not gzip at all\n", "bytes after the end of the gzip stream are not gzip data"),
    "two-members": (gzip.compress(LOG[:HALF]) + gzip.compress(LOG[HALF:]), None),
    "cut": (GZ[: len(GZ) * 2 // 3], "the gzip stream is cut short"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_complete_line_is_kept(tmp_path, name):
    data, problem = CASES[name]
    path = tmp_path / f"vllm-{name}.log.gz"
    path.write_bytes(data)
    # what can be decompressed at all, by zlib directly (the reference `gzip -dc` gives too)
    if name == "cut":
        expected = complete_lines(zlib.decompressobj(31).decompress(data))
    else:
        expected = complete_lines(LOG)
    r = runner.invoke(app, ["ingest", str(path), "--store", str(tmp_path / "store"), "--json"])
    assert r.exit_code == 0, r.output
    assert run(tmp_path / "store", "select max(line) as n from events")["n"][0] == expected
    (entry,) = json.loads(r.stdout)["files"]
    if problem:
        assert problem in entry["reason"] and "\n" not in entry["reason"]
    else:
        assert entry["reason"] is None
    # the people's form says it on the file's line
    text = runner.invoke(app, ["ingest", str(path), "--store", str(tmp_path / "again")]).stderr
    said = [line for line in text.splitlines() if path.name in line]
    assert len(said) == 1 and (problem in said[0] if problem else "gzip" not in said[0]), text


def test_the_stream_seeks_and_a_strict_reader_still_raises_at_a_cut(tmp_path):
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(CASES["cut"][0])
    with fp.open_stream(cut) as f:
        f.seek(1000)
        assert f.read(100) == LOG[1000:1100]
        f.seek(10)
        assert f.read(10) == LOG[10:20]
    with pytest.raises(EOFError), fp.open_stream(cut, cut_ok=False) as f:
        f.read()
