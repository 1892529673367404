"""Kubernetes CRI container logs (containerd, CRI-O): `/var/log/pods/...`, `/var/log/containers/...`.

    2026-06-10T14:23:45.123456789Z stdout F INFO 06-10 14:23:45 ...
    <RFC 3339 time, ns> <stdout|stderr> <tags> <content>

The first tag is `P` (partial) or `F` (full); more tags may follow after a `:`. The runtime
cuts a line longer than its maximum (containerd's `max_container_log_line_size`, 16 KiB by
default) into `P` records, each with the time it was written, and ends it with an `F` record:
the fragments join into one line, which keeps the first fragment's time."""

from __future__ import annotations

import polars as pl

from ._frame import join_fragments, peel, share

NAME = "cri"
DOC = "Kubernetes CRI (containerd, CRI-O): `<time> <stream> <P|F> <line>`, `P` fragments joined up to their `F`"
JOINS = True
NEEDS = (' stdout ', ' stderr ')

_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2})"
PATTERN = rf"(?P<_t>{_TIME}) (?P<_s>stdout|stderr) (?P<_tag>[PF])(?::[^ ]*)?(?: |$)"


def sniff(texts: list[str]) -> float:
    return share(texts, f"^{PATTERN}")


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = peel(df, PATTERN, {"_t": "_wts", "_s": "_stream", "_tag": "_tag"})
    df = join_fragments(df, pl.col("_tag") != "P")
    return df.drop("_tag") if "_tag" in df.columns else df
