"""Engine parsers: one folder per engine in `engines/`, all producing the schema of `schema.py`.

Built-in engines register here exactly as an outside one would: a name and a module that
follows the contract in `base.py` (NAME, detect, record_starts, parse).
"""

from __future__ import annotations

import importlib
from types import ModuleType

# name -> module path: one line per engine (its folder, parsers/engines/<name>/, holds the
# rest; docs/architecture.md has the checklist). `unknown` is the fallback for files no
# parser recognises.
ENGINES: dict[str, str] = {
    "vllm": "servelens.parsers.engines.vllm.parser",
    "tgi": "servelens.parsers.engines.tgi.parser",
    "trtllm": "servelens.parsers.engines.trtllm.parser",
    "client": "servelens.parsers.client",
    "sglang": "servelens.parsers.engines.sglang.parser",
    "llamacpp": "servelens.parsers.engines.llamacpp.parser",
}
FALLBACK = "servelens.parsers.unknown"

# The inference servers among ENGINES, as their projects spell them (each engine folder's
# SERVER): the CLI's help, the package description and the README's engine table are checked
# against this (tests/test_docs.py).
def _servers() -> dict[str, str]:
    out = {}
    for name, module in ENGINES.items():
        package = module.rpartition(".")[0]
        server = getattr(importlib.import_module(package), "SERVER", None) if package else None
        if server:
            out[name] = server
    return out


SERVERS: dict[str, str] = _servers()

# A file is assigned to the engine with the highest detect() score, if at least this.
DETECT_THRESHOLD = 0.2


def get_parser(name: str) -> ModuleType:
    if name == "unknown":
        return importlib.import_module(FALLBACK)
    if name not in ENGINES:
        raise KeyError(name)
    return importlib.import_module(ENGINES[name])


def detect_engine(first_lines: list[str]) -> tuple[str, float]:
    """The engine whose parser is most confident about these first lines of a file,
    or ("unknown", best score) when none reaches DETECT_THRESHOLD."""
    best, best_score = "unknown", 0.0
    for name in ENGINES:
        score = float(get_parser(name).detect(first_lines))
        if score > best_score:
            best, best_score = name, score
    if best_score < DETECT_THRESHOLD:
        return "unknown", best_score
    return best, best_score
