"""Ingest speed of log-platform exports: one simulated log verbatim and as Cloud Logging and
CloudWatch hand it back (tests/wrapping_exports.py), each ingested into a fresh store.

    .venv/bin/python bench/exports.py                      # ~11 MB vLLM log, 2 runs
    .venv/bin/python bench/exports.py --duration 30m --runs 1

Prints wall and CPU seconds (the fastest run), lines per second of the server's own lines,
and the ratio to the verbatim log: the decode stage's cost for the same lines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import wrapping  # noqa: E402
import wrapping_exports as wx  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="vllm")
    p.add_argument("--duration", default="10m", help="simulated time (10m of vLLM at 6 req/s is ~11 MB)")
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args(argv)
    from typer.testing import CliRunner

    from servelens.pipeline.cli import _register_commands, app
    from servelens.pipeline.ingest import ingest

    work = Path(tempfile.mkdtemp(prefix="servelens-bench-exports-"))
    try:
        _register_commands()
        CliRunner().invoke(app, ["simulate", "--engine", args.engine, "--scenario", "steady", "--duration", args.duration,
                                 "--rate", "6", "--instances", "1", "--seed", "1", "--workers", "0", "--out", str(work / "sim")])
        plain = next((work / "sim").glob("*.log"))
        lines = wrapping.split_lines(plain.read_text())
        times = [wrapping.wrapper_time_ns(i) for i in range(len(lines))]
        forms = {"verbatim": plain}
        for name, fn in (("gcloud-json", wx.gcp_array), ("gcp-ndjson", wx.gcp_ndjson),
                         ("cw-filter", wx.cw_filter_log_events), ("cw-insights", wx.cw_insights)):
            forms[name] = work / f"{name}.json"
            forms[name].write_text(fn(lines, times))
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {len(lines):,} lines")
        print(f"{'form':<12} {'MB':>7} {'wall s':>8} {'cpu s':>8} {'lines/s':>9} {'x verbatim':>10} {'events':>9}")
        first = None
        for name, path in forms.items():
            best = None
            for _ in range(args.runs):
                store = work / f"store-{name}"
                shutil.rmtree(store, ignore_errors=True)
                t, c = time.perf_counter(), time.process_time()
                s = ingest([path], store, year=2026)
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                best = (wall, cpu, s.events) if best is None or wall < best[0] else best
            first = first or best[0]
            mb = path.stat().st_size / 1e6
            print(f"{name:<12} {mb:7.1f} {best[0]:8.2f} {best[1]:8.2f} {len(lines) / best[0]:9,.0f} {best[0] / first:10.2f} {best[2]:9,}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
