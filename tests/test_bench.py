"""The benchmark (bench/run.py) runs end to end on tiny inputs, and servelens ingest beats the
Python-loop baseline a user would write (bench/baseline.py) on every engine's logs.

Only that it works and the speed ratio > 1: never a wall-clock threshold. Small inputs
(30 MB per engine, a few 8 MiB chunks per file so both parse threads work) are timed
in-process (`--in-process`), since at a few MB interpreter start-up would swamp both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("bench")
    out, raw = tmp_path / "RESULTS.md", tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--only", "ingest", "--no-memory",
         "--in-process", "--size-gb", "0.03", "--runs", "1", "--data-dir", str(tmp_path / "data"),
         "--out", str(out), "--json", str(raw)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(raw.read_text()), out.read_text()


def test_quick_benchmark_runs_end_to_end(quick):
    res, table = quick
    assert "| engine | input | lines | servelens ingest |" in table
    assert "## Targets of issue 20" in table and "llamacpp: ingest >= 5x the Python loop" in table
    assert [r["engine"] for r in res["ingest"]] == ["vllm", "tgi", "trtllm", "sglang", "llamacpp"]
    for r in res["ingest"]:
        assert r["lines"] > 1000, r["engine"]
        # every generated line became an event, none unparsed; the baseline wrote rows too
        assert r["ingest"]["unparsed"] == 0, r["engine"]
        assert r["ingest"]["events"] >= r["lines"], r["engine"]
        assert r["baseline"]["rows"] >= r["lines"], r["engine"]
        assert r["floor"]["py_s"] > 0 and r["floor"]["wc_s"] > 0
    # the gzipped copy of the TGI input gives the same events as the plain files
    tgi = next(r for r in res["ingest"] if r["engine"] == "tgi")
    assert res["gzip"]["ingest"]["events"] == tgi["ingest"]["events"]
    assert res["gzip"]["gz_bytes"] < res["gzip"]["bytes"] / 3
    assert "## Gzipped input" in table


def test_ingest_beats_the_python_loop(quick):
    res, _ = quick
    ratios = {r["engine"]: r["baseline"]["wall_s"] / r["ingest"]["wall_s"] for r in res["ingest"]}
    assert all(x > 1 for x in ratios.values()), f"ingest not faster than the Python loop: {ratios}"
