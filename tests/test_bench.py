"""The benchmark (bench/run.py) runs end to end on tiny inputs: every engine's generated
lines become events, none unparsed, and the tables it writes have their sections.

Only that it works: how fast servelens is against the Python-loop baseline is a figure of
`make bench` (bench/RESULTS.md), never an assertion here, since timings on a shared machine
prove nothing either way.
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
         "--in-process", "--size-gb", "0.003", "--runs", "1", "--data-dir", str(tmp_path / "data"),
         "--out", str(out), "--json", str(raw)],
        capture_output=True, text=True, timeout=900,  # five engines; minutes on a loaded machine
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


def test_quick_stats_access_mix(tmp_path):
    """The stats / access mix (bench/real_mixed.py) is built from a recorded server's real lines,
    and every line of both kinds it wrote is stored as its event: the builder's own counts,
    not the store's, are the truth."""
    out, raw = tmp_path / "RESULTS.md", tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--only", "mixed", "--in-process",
         "--mixed-lines", "4000", "--runs", "1", "--data-dir", str(tmp_path / "data"), "--out", str(out),
         "--json", str(raw)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    mx = json.loads(raw.read_text())["mixed"]
    log = tmp_path / "data" / "vllm-mixed-4000" / "log" / "vllm-mixed.log"
    text = log.read_text().splitlines()
    assert len(text) == mx["lines"] == 4000
    stats = sum(1 for t in text if "] Engine 000: Avg prompt throughput: " in t)
    access = sum(1 for t in text if t.startswith("INFO: ") and ' HTTP/1.1" ' in t)
    assert stats == mx["stats_lines"] == 2000 and access == mx["access_lines"] == 2000
    assert (mx["stored_stats"], mx["stored_access"]) == (stats, access)
    assert mx["ingest"]["unparsed"] == 0 and mx["baseline"]["rows"] >= 4000
    assert "## A vLLM log of half stats lines, half access lines" in out.read_text()
    assert "vllm stats/access mix: ingest >= 5x the Python loop" in out.read_text()


def _res(requests: int, signals_s: float, parts: int, count_s: float) -> dict:
    cli = lambda s, rows=1: {"wall_s": s, "walls": [s], "cpu_s": s / 2, "peak_rss": 1, "rows": rows}  # noqa: E731
    return {
        "machine": {}, "args": {"quick": False, "size_gb": 0.5, "big_gb": 2.0, "requests": requests, "runs": 3,
                                "only": ["query"], "parts": parts},
        "started": "now", "total_s": 60.0, "ingest": [],
        "query": {"requests": requests, "instances": 2, "bytes": 1, "parts": 5, "base_requests": 1, "ingest_s": 1.0,
                  "peak_rss": 1, "copies": 0, "copy_s": 0.0,
                  "views": {"scaling_signals": {"shipped": {"first_s": 1.0, "median_s": 1.0, "rows": 0},
                                                "cli": cli(signals_s), "cli_raw": {"timeout_s": 240.0}}},
                  "range": {"since": "a", "until": "b", "hour": cli(0.4, 10), "whole": cli(3.0, 20)}},
        "parts": {"events": 9000, "parts": parts, "count": cli(count_s), "compact_s": 1.0, "compacted_parts": 3,
                  "compacted": cli(0.3), "count_after": 9000},
    }


def test_issue_20_targets_table():
    """Each target beside its figure and same-run baseline; met only when the figure is under
    the target on a store of the target's size, n/a when a smaller store meets it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)

    rows = {t[0].split(" <")[0]: t for t in report.targets(_res(10_500_000, 0.8, 3000, 1.4))}
    sig = rows["`scaling_signals`"]
    assert sig[1].startswith("0.80 s") and "did not finish in 240 s" in sig[2] and sig[3] is True
    hour = next(t for k, t in rows.items() if "1-hour" in k)
    assert hour[3] is True and "whole store, no range: 3.00 s" in hour[2]
    count = next(t for k, t in rows.items() if "count(*)" in k)
    assert count[3] is False and "3 parts: 0.30 s" in count[2]
    # on a small store a figure under the target proves nothing; over it, it is missed anyway
    small = {t[0].split(" <")[0]: t for t in report.targets(_res(200_000, 0.8, 300, 0.5))}
    assert small["`scaling_signals`"][3] is None
    assert next(t for k, t in small.items() if "count(*)" in k)[3] is None
    assert report.targets(_res(200_000, 1.5, 300, 0.5))[0][3] is False
    text = report.render(_res(10_500_000, 0.8, 3000, 1.4))
    assert "## Targets of issue 20" in text and "| target | figure | same-run baseline | met |" in text


def test_every_servelens_name_the_bench_scripts_import_exists():
    """The bench scripts import servelens's modules by name, some inside code they run in a
    child process (a string): a module moved or renamed breaks them only when `make bench`
    reaches that step, long after. Each such import, read from the scripts' text, resolves."""
    import importlib
    import re

    found = set()
    for script in sorted((ROOT / "bench").glob("*.py")):
        text = script.read_text()
        for module, names in re.findall(r"from (servelens(?:\.\w+)*) import ([\w, ]+?)(?: as \w+)?(?=\\n|\n|$|;)", text):
            for name in (n.strip() for n in names.split(",")):
                found.add((script.name, module, name.split(" as ")[0]))
        for module in re.findall(r"^\s*import (servelens(?:\.\w+)+)", text, re.M):
            found.add((script.name, module, None))
    assert len({m for _, m, _ in found}) >= 10  # the scripts' imports were found at all
    broken = []
    for script, module, name in sorted(found, key=str):
        try:
            mod = importlib.import_module(module)
            if name is not None and not hasattr(mod, name):
                importlib.import_module(f"{module}.{name}")
        except ImportError as e:
            broken.append(f"{script}: from {module} import {name} ({e})")
    assert not broken, "\n".join(broken)
