"""`aws logs tail` (AWS CLI v2) saved to a file: each event as the CLI prints it by default
(`--format detailed`), its time in UTC to the microsecond, its log stream, then the line.

    2026-06-10T14:23:45.123000+00:00 vllm/server/0f2b6c1e9a8d4b7c INFO 06-10 14:23:45 ...

The streams of a log group come interleaved by time; each stream names its server (an ECS
task's `<prefix>/<container>/<task id>`, an EC2 instance's `i-...`), so the lines of several
are parsed apart. `--format short` (`2026-06-10T14:23:45 <line>`, no stream) is read by
docker_ts. A message holding newlines continues on lines of its own, without the prefix."""

from __future__ import annotations

import polars as pl

from ._export import time_order
from ._frame import peel
from .cloudwatch import k8s_of_streams

NAME = "cloudwatch-tail"
DOC = "`aws logs tail` (`--format detailed`, the default): `<UTC time to the µs>+00:00 <log stream> <line>`; label `log_stream`, and `pod`, `namespace`, `container` from a Kubernetes stream name; several streams parsed apart"
JOINS = False
NEEDS = ('+00:00',)

# the CLI prints the time with `isoformat`: six digits of fraction (none where it prints
# without `timespec` and the fraction is zero) and the UTC offset written out
_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{6})?\+00:00"
# a stream name: no white space; it is no level word (a line behind a bare time would give
# one) and opens with a letter or digit (not a process prefix such as `(APIServer`)
_STREAM = r"[A-Za-z0-9][^\s]*"
# (the CLI strips each event's end: an empty message leaves no space after its stream)
PATTERN = rf"(?P<_t>{_TIME}) (?P<_lab_log_stream>{_STREAM})(?: |$)"
_LEVEL = r"^(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL|NOTICE)$"


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    got = s.str.extract_groups(f"^{PATTERN}").struct.field("_lab_log_stream").drop_nulls()
    if len(got) == 0 or got.str.contains(_LEVEL).any():
        return 0.0
    # a stream names many lines: a word that changes from line to line is the line's own
    if got.n_unique() > max(2, len(got) // 10):
        return 0.0
    return len(got) / len(s)


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = peel(df, PATTERN, {"_t": "_wts", "_lab_log_stream": "_lab_log_stream"})
    # a message's own further lines carry no prefix: they are the stream's of the line before
    df = df.with_columns(pl.col("_lab_log_stream").forward_fill())
    # (Container Insights / Fluent Bit name a container's stream after its pod)
    df = df.with_columns(k8s_of_streams(df, pl.col("_lab_log_stream")))
    return time_order(df, ["_lab_log_stream"])
