"""docker compose's service prefix: `docker compose logs` / `docker compose up` output.

    vllm-1  | INFO 06-10 14:23:45 ...
    [vllm]  | INFO 06-10 14:23:45 ...     (podman-compose)

The service name (padded to the longest one) becomes the label `service`; exactly one space
after the `|` belongs to the prefix, so a traceback's indentation survives."""

from __future__ import annotations

import polars as pl

from ._frame import peel, share

NAME = "compose"
DOC = "docker compose service prefix: `svc-1  | <line>`, podman-compose `[svc]  | <line>` (label `service`)"
JOINS = False

# podman-compose writes the name in brackets: `[ocr]        | <line>`
PATTERN = r"\[?(?P<_lab_service>[A-Za-z0-9][\w.-]*)\]? +\| ?"


def sniff(texts: list[str]) -> float:
    # decoded line by line (lines without the prefix are left as they are): one line in
    # the sample is enough, so a file where only some lines carry it is read too
    return 1.0 if share(texts, f"^{PATTERN}") > 0 else 0.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    prior = df["_lab_service"] if "_lab_service" in df.columns else None
    df = peel(df, PATTERN, {"_lab_service": "_lab_service"})
    if prior is not None:
        df = df.with_columns(pl.coalesce(prior, pl.col("_lab_service")).alias("_lab_service"))
    return df
