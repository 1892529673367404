"""docker compose's service prefix: `docker compose logs` / `docker compose up` output.

    vllm-1  | INFO 06-10 14:23:45 ...
    [vllm]  | INFO 06-10 14:23:45 ...     (podman-compose)

The service name (padded to the longest one) becomes the label `service`; exactly one space
after the `|` belongs to the prefix, so a traceback's indentation survives."""

from __future__ import annotations

import polars as pl

from ._frame import any_line, peel_labels

NAME = "compose"
DOC = "docker compose service prefix: `svc-1  | <line>`, podman-compose `[svc]  | <line>` (label `service`)"
JOINS = False
NEEDS = (' |',)

# podman-compose writes the name in brackets: `[ocr]        | <line>`
PATTERN = r"\[?(?P<_lab_service>[A-Za-z0-9][\w.-]*)\]? +\| ?"


def sniff(texts: list[str]) -> float:
    return any_line(texts, f"^{PATTERN}")


def decode(df: pl.DataFrame) -> pl.DataFrame:
    return peel_labels(df, PATTERN, ("_lab_service",))
