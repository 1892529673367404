"""CPU seconds of a file's format and engine detection (pipeline/sources/detect_memo.py
`detect`, no memo): over the sample logs, the test fixtures, and every export the test
writers make of real logs (tests/helpers/wrapping_exports.py).

    .venv/bin/python bench/detectcost.py                    # fastest of 3 per file
    .venv/bin/python bench/detectcost.py --runs 1 --out detected.json

Prints the files and CPU milliseconds per file of each group; `--out` writes every file's
layers, engine and score, so that two versions' detections can be compared whole.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the writers of tests/helpers/wrapping_exports.py, each over the real logs below
EXPORTS = ("gcp_array", "gcp_ndjson", "cw_filter_log_events", "cw_get_log_events", "cw_insights", "loki_jsonl", "loki_default",
           "otlp_file", "grafana_txt", "grafana_json", "elastic_ndjson", "elastic_hits", "datadog_json", "datadog_ndjson",
           "cw_console_csv", "cw_insights_csv", "datadog_csv", "gcp_csv", "kibana_csv")


def heads() -> dict[str, dict[str, bytes]]:
    from servelens.parsers import wrappers as W
    from tests.helpers import wrapping_exports as X
    from tests.parsers.test_wrappers_exports import SAMPLES, truth

    def files(top: Path) -> dict[str, bytes]:
        return {str(p.relative_to(ROOT)): p.open("rb").read(W.SAMPLE_BYTES)
                for p in sorted(top.rglob("*")) if p.is_file() and p.suffix not in (".md", ".toml")}

    exports = {}
    for name in EXPORTS:
        for engine, rel in SAMPLES:
            lines, times, _ = truth(rel, engine)
            exports[f"{name}/{rel}"] = getattr(X, name)(lines, times).encode()[: W.SAMPLE_BYTES]
    return {"sample_logs": files(ROOT / "sample_logs"), "fixtures": files(ROOT / "tests" / "fixtures"), "exports": exports}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="detections of each file; its fastest counts")
    ap.add_argument("--out", type=Path, help="write each file's detection (JSON)")
    args = ap.parse_args()
    from servelens.pipeline.sources.detect_memo import detect

    groups = heads()
    for head in list(groups["sample_logs"].values())[:10]:  # imports and first calls
        detect(head)
    found = {}
    for group, by_name in groups.items():
        total = 0.0
        for name, head in by_name.items():
            best = float("inf")
            for _ in range(args.runs):
                t = time.process_time()
                layers, (engine, score) = detect(head)
                best = min(best, time.process_time() - t)
            total += best
            found[name] = [list(layers), engine, score]
        print(f"{group}: {len(by_name)} files, {total:.2f} CPU-s, {1000 * total / len(by_name):.1f} CPU-ms per file")
    if args.out:
        args.out.write_text(json.dumps(found, indent=0, sort_keys=True))


if __name__ == "__main__":
    main()
