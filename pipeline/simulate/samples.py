"""The bundled sample logs (`sample_logs/incident/`) are simulator output recorded in a
manifest (`generate.json`): this module regenerates them, and the tests use it to prove that
the committed files are exactly what the code produces.

    python -m servelens.pipeline.simulate.samples sample_logs/incident
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from . import simulate

MANIFEST = "_generate.json"  # leading _: ingest skips it
OPTION_KEYS = ("variant", "instances", "rate", "docker_timestamps", "max_log_len", "state_grid", "start")


def command_line(run: dict, out: str) -> str:
    """The `servelens simulate` command equivalent to one manifest entry."""
    args = ["servelens", "simulate", "--engine", run["engine"], "--scenario", run["scenario"],
            "--duration", str(run["duration"]), "--seed", str(run["seed"])]
    for key in OPTION_KEYS:
        if key not in run:
            continue
        flag = "--" + key.replace("_", "-")
        if run[key] is True:
            args.append(flag)
        else:
            args += [flag, str(run[key])]
    return shlex.join(args + ["--out", out])


def regenerate(manifest: Path, out_root: Path) -> list[Path]:
    """Run every entry of the manifest into out_root/<entry out>; returns the directories."""
    spec = json.loads(manifest.read_text())
    dirs = []
    for run in spec["runs"]:
        opts = {k: run[k] for k in OPTION_KEYS if k in run}
        out = out_root / run["out"]
        simulate(run["engine"], run["scenario"], run["duration"], run["seed"], out, **opts)
        dirs.append(out)
    return dirs


def main(argv: list[str]) -> None:
    root = Path(argv[0] if argv else "sample_logs/incident")
    for d in regenerate(root / MANIFEST, root):
        print(d)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
