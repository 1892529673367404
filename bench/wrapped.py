"""Ingest speed of wrapped logs: one simulated log verbatim and wrapped the way container
runtimes store it (CRI, docker json-file), each ingested into a fresh store.

    .venv/bin/python bench/wrapped.py                       # ~100 MB vLLM log, 2 runs
    .venv/bin/python bench/wrapped.py --duration 10m --runs 1
    .venv/bin/python bench/wrapped.py --exports --duration 10m --runs 3   # log-platform exports
    .venv/bin/python bench/wrapped.py --exports --paired --forms gcloud-json,gcloud-yaml --runs 5
    .venv/bin/python bench/wrapped.py --exports --paired --inputs /tmp/forms   # written once, read again by later runs

Prints wall and CPU seconds (the fastest run) and MB/s per form; the decode stage's cost is
the difference between a wrapped form and the verbatim one. `--paired` ingests the verbatim
log and each form alternately (`--runs` pairs) and gives the median CPU ratio of the pairs,
so that a shared machine's changing load falls on both sides of each ratio. Each ingest leaves
the rollup refresh to the first query, as `servelens ingest` does: the figures are the read,
decode, parse and commit alone. The wrapped copies are written
with the runtimes' splitting rules (tests/helpers/wrapping.py); with `--exports`, as Cloud Logging,
CloudWatch, Datadog, Elastic / Kibana and Grafana hand the lines back (tests/helpers/wrapping_exports.py).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import wrapping, wrapping_exports  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", default="vllm")
    p.add_argument("--duration", default="90m", help="simulated time (90m of vLLM at 6 req/s is ~100 MB)")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--exports", action="store_true", help="log-platform export forms instead of the runtimes'")
    p.add_argument("--forms", default="", help="comma-separated forms to run (default: all)")
    p.add_argument("--paired", action="store_true", help="verbatim and form alternately; median CPU ratio of the pairs")
    p.add_argument("--inputs", default="", help="folder of the simulated log and its forms: written there if missing, else "
                   "read as they are (two checkouts measured on the same files, e.g. before and after a change)")
    args = p.parse_args(argv)
    from servelens.pipeline.ingest import ingest

    work = Path(tempfile.mkdtemp(prefix="servelens-bench-wrapped-"))
    try:
        from typer.testing import CliRunner

        from servelens.pipeline.cli.app import app, build_app

        build_app()
        inputs = Path(args.inputs) if args.inputs else work
        inputs.mkdir(parents=True, exist_ok=True)
        if not list((inputs / "sim").glob("*.log")):
            CliRunner().invoke(app, ["simulate", "--engine", args.engine, "--scenario", "steady", "--duration", args.duration,
                                     "--rate", "6", "--instances", "1", "--seed", "1", "--workers", "0", "--out", str(inputs / "sim")])
        plain = next((inputs / "sim").glob("*.log"))
        lines = wrapping.split_lines(plain.read_text())
        forms = {"verbatim": plain}
        if args.exports:
            times = [wrapping.wrapper_time_ns(i) for i in range(len(lines))]
            wx = wrapping_exports
            writers = {"gcloud-json": wx.gcp_array, "gcp-ndjson": wx.gcp_ndjson,
                       "cw-filter": wx.cw_filter_log_events, "cw-insights": wx.cw_insights,
                       "cw-ins-csv": wx.cw_insights_csv, "kibana-csv": wx.kibana_csv, "datadog-csv": wx.datadog_csv,
                       "datadog-json": wx.datadog_json, "elastic": wx.elastic_ndjson, "grafana-txt": wx.grafana_txt,
                       "grafana-json": wx.grafana_json}
            try:  # `gcloud logging read`'s default YAML (the emitter is a dev tool, not a dependency)
                from tests.helpers.gen_gcloud_yaml import gcloud_yaml

                writers["gcloud-yaml"] = gcloud_yaml
            except ImportError:
                pass
            makers = {k: functools.partial(fn, times=times) for k, fn in writers.items()}
        else:
            makers = {"cri": wrapping.to_cri, "docker-json": wrapping.to_docker_json}
        if args.forms:
            keep = set(args.forms.split(","))
            makers = {k: v for k, v in makers.items() if k in keep}
        for name, fn in makers.items():
            forms[name] = inputs / f"{name}.log"
            if not forms[name].exists():
                forms[name].write_text(fn(lines))
        import os

        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if args.paired:
            _paired(forms, work, args.runs, ingest)
            return
        print(f"{'form':<12} {'MB':>7} {'wall s':>8} {'cpu s':>8} {'MB/s':>7} {'cpu x verbatim':>14} {'events':>9}")
        first = None
        for name, path in forms.items():
            best = None
            for _ in range(args.runs):
                run = _one(path, work / f"store-{name}", ingest)
                best = run if best is None or run[0] < best[0] else best
            first = first or best[1]
            mb = path.stat().st_size / 1e6
            print(f"{name:<12} {mb:7.1f} {best[0]:8.2f} {best[1]:8.2f} {mb / best[0]:7.1f} {best[1] / first:14.2f} {best[2]:9,}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _one(path: Path, store: Path, ingest) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and events of one ingest of `path` into a new `store`."""
    shutil.rmtree(store, ignore_errors=True)
    t, c = time.perf_counter(), time.process_time()
    s = ingest([path], store, year=2026, rollups="defer")
    return time.perf_counter() - t, time.process_time() - c, s.events


def _paired(forms: dict[str, Path], work: Path, runs: int, ingest) -> None:
    import statistics

    plain = forms["verbatim"]
    print(f"{'form':<12} {'MB':>7} {'cpu s':>7} {'verb cpu':>8} {'wall s':>7} {'verb wall':>9} {'cpu x (median)':>14} {'wall x':>7} {'events':>8}")
    for name, path in forms.items():
        if name == "verbatim":
            continue
        pairs = []
        for _ in range(runs):
            v = _one(plain, work / "store-v", ingest)
            w = _one(path, work / f"store-{name}", ingest)
            pairs.append((v, w))
        cpu_x = statistics.median(w[1] / v[1] for v, w in pairs)
        wall_x = statistics.median(w[0] / v[0] for v, w in pairs)
        med = lambda k, side: statistics.median(p[side][k] for p in pairs)  # noqa: E731
        # (a form whose events differ from the verbatim log's is marked: its figure means nothing)
        same = "" if pairs[0][1][2] == pairs[0][0][2] else f" != {pairs[0][0][2]:,}"
        print(f"{name:<12} {path.stat().st_size / 1e6:7.1f} {med(1, 1):7.2f} {med(1, 0):8.2f} {med(0, 1):7.2f} "
              f"{med(0, 0):9.2f} {cpu_x:14.2f} {wall_x:7.2f} {pairs[0][1][2]:8,}{same}")


if __name__ == "__main__":
    main()
