"""`kubectl logs --prefix` (with `-l`, `--all-containers`, or a deployment): each line opens
with its source, `[pod/NAME/CONTAINER] `, before the engine's line or before the time that
`--timestamps` adds (then read by docker_ts).

    [pod/vllm-7d9f8-abcde/server] INFO:     10.0.0.7:51234 - "POST /v1/completions HTTP/1.1" 200 OK

The pod and container become labels, so the lines of several pods in one file are parsed
apart, one run per pod (as kubectl interleaves them); lines without the prefix stay as they are."""

from __future__ import annotations

import polars as pl

from ._export import time_order
from ._frame import any_line, peel_labels

NAME = "kubectl-prefix"
DOC = "`kubectl logs --prefix`: `[pod/NAME/CONTAINER] <line>` (labels `pod`, `container`); several pods' lines parsed apart"
JOINS = False
NEEDS = ('[pod/',)

PATTERN = r"\[pod/(?P<_lab_pod>[a-z0-9][-a-z0-9.]*)/(?P<_lab_container>[a-z0-9][-a-z0-9]*)\] "


def sniff(texts: list[str]) -> float:
    return any_line(texts, f"^{PATTERN}")


def decode(df: pl.DataFrame) -> pl.DataFrame:
    return time_order(peel_labels(df, PATTERN, ("_lab_pod", "_lab_container")), ["_lab_pod", "_lab_container"])
