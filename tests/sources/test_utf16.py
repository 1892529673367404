"""Files in UTF-16: what Windows PowerShell 5 writes for `kubectl logs POD > vllm.log` or `aws
logs filter-log-events ... > export.json` (little-endian with a byte order mark, CRLF line ends).
They are read as their text, like the same file in UTF-8: same events, an ingest again finds
nothing new, and lines are read back by their stored offsets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "sample_logs" / "vllm" / "real" / "v0_4.log"
OLD = (1_781_100_000, 1_781_100_000)  # 2026-06-10: not live


def _summary(path: Path, store: Path, *extra: str) -> dict:
    os.utime(path, OLD)
    r = runner.invoke(app, ["ingest", str(path), "--store", str(store), "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _cloudwatch(text: str) -> str:
    lines = text.split("\n")[:-1]
    ev = [{"logStreamName": "vllm/server/0f2b6c1e", "timestamp": 1_781_100_000_000 + i * 1000, "message": m,
           "ingestionTime": 1_781_100_000_500 + i * 1000, "eventId": f"3{i:055d}"} for i, m in enumerate(lines)]
    return json.dumps({"events": ev, "searchedLogStreams": []}, indent=4) + "\n"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("form", ["plain", "cloudwatch"])
def test_a_utf16_file_gives_the_events_of_its_utf8_text(tmp_path, codec, form):
    text = LOG.read_text()
    if form == "cloudwatch":
        text = _cloudwatch(text)
    utf8 = tmp_path / "utf8" / "export.log"
    utf16 = tmp_path / "utf16" / "export.log"
    for p in (utf8, utf16):
        p.parent.mkdir()
    utf8.write_text(text)
    utf16.write_bytes("\ufeff".encode(codec) + text.replace("\n", "\r\n").encode(codec))
    want = _summary(utf8, tmp_path / "a")
    got = _summary(utf16, tmp_path / "b")
    f = got["files"][0]
    assert (f["engine"], f["lines"], f["invalid_utf8"]) == ("vllm", text.count("\n"), False)
    assert (got["events"], got["events_by_kind"]) == (want["events"], want["events_by_kind"])
    # the lines of the plain log are its own: all 27, 4 of them (a launcher's) unparsed
    if form == "plain":
        assert got["lines"] == LOG.read_bytes().count(b"\n") and got["unparsed"] == 4
    again = _summary(utf16, tmp_path / "b")
    assert again["files"][0]["status"] == "unchanged"


def test_a_utf16_logs_lines_are_read_back_by_offset(tmp_path):
    text = LOG.read_text()
    log = tmp_path / "logs" / "vllm.log"
    log.parent.mkdir()
    log.write_bytes("\ufeff".encode("utf-16-le") + text.replace("\n", "\r\n").encode("utf-16-le"))
    _summary(log, tmp_path / "s", "--year", "2026")
    r = runner.invoke(app, ["show", "--store", str(tmp_path / "s"), "--around", "2026-08-17T23:29:22Z", "--span", "1s"])
    assert r.exit_code == 0, r.output
    # the log's own lines of that second, as the file holds them
    want = [ln for ln in text.split("\n") if "08-17 23:29:22" in ln]
    assert want and all(ln in r.stdout for ln in want)
    assert "fingerprint matches" in r.stdout
