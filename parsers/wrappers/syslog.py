"""Syslog-shaped prefixes: rsyslog/syslog-ng files, `journalctl -o short-iso`,
`-o short-iso-precise`, `-o short`, `-o short-precise`, RFC 5424.

    2026-06-10T14:23:45.123456+00:00 gpu-1 vllm[4242]: INFO 06-10 14:23:45 ...   (ISO)
    Jun 10 14:23:45.123456 gpu-1 vllm[4242]: INFO 06-10 14:23:45 ...             (BSD)
    <14>1 2026-06-10T14:23:45.123Z gpu-1 vllm 4242 - - INFO 06-10 ...             (RFC 5424)

host, program and pid become labels. An ISO / RFC 5424 time becomes the wrapper time; a
BSD time has no year, so it is left to the engine's own time."""

from __future__ import annotations

import re

import polars as pl

from ._frame import peel

NAME = "syslog"
DOC = "syslog / rsyslog / `journalctl -o short-iso`, `short-precise`, RFC 5424: `<time> <host> <app>[<pid>]: <line>`"
JOINS = False

_ISO = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2})"
_BSD = r"[A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
# the program name starts with a letter and its `:` is followed by a space (or ends the
# line): `I0512 07:59:30.000 1 x.cc:1]` after a time is glog, not a host and program
_TAIL = r" (?P<_lab_host>[^\s:]+) (?P<_lab_app>[A-Za-z_][^\s\[:]*)(?:\[(?P<_lab_pid>[0-9]+)\])?:(?: |$)"
ISO_PATTERN = rf"(?:<[0-9]{{1,3}}>)?(?P<_t>{_ISO})" + _TAIL
BSD_PATTERN = rf"(?:<[0-9]{{1,3}}>)?{_BSD}" + _TAIL
RFC5424_PATTERN = (
    rf"<[0-9]{{1,3}}>1 (?P<_t>{_ISO}) (?P<_lab_host>\S+) (?P<_lab_app>\S+) (?P<_lab_pid>\S+) \S+ "
    r"(?:-|(?:\[[^\]]*\])+) ?"
)
_ANY = re.sub(r"\(\?P<\w+>", "(?:", f"^(?:{ISO_PATTERN}|{BSD_PATTERN}|{RFC5424_PATTERN})")


# an engine header of a time, a level word and a target (TGI's `2025-06-10T14:23:45.123Z INFO
# generate: ...`): the level is not a host, the line is not syslog
_ENGINE = rf"^{_ISO} +(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR) "


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    return float((s.str.contains(_ANY) & ~s.str.contains(_ENGINE)).mean())


def decode(df: pl.DataFrame) -> pl.DataFrame:
    keep = df.select(pl.col("text").str.contains(_ENGINE).alias("_eng"))["_eng"]
    if keep.any():
        own = df.filter(keep)
        return pl.concat([own, _decode(df.filter(~keep))], how="diagonal_relaxed").sort("line")
    return _decode(df)


def _decode(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    which = df.select(
        t.str.contains(f"^{RFC5424_PATTERN}").any().alias("rfc5424"),
        t.str.contains(f"^{ISO_PATTERN}").any().alias("iso"),
        t.str.contains(f"^{BSD_PATTERN}").any().alias("bsd"),
    ).row(0, named=True)
    labels = {"_lab_host": "_lab_host", "_lab_app": "_lab_app", "_lab_pid": "_lab_pid"}
    for name, pattern, timed in (
        ("rfc5424", RFC5424_PATTERN, True), ("iso", ISO_PATTERN, True), ("bsd", BSD_PATTERN, False),
    ):
        if which[name]:
            fields = dict(labels, **({"_t": "_wts"} if timed else {}))
            prior = {c: df[c] for c in labels if c in df.columns}
            df = peel(df, pattern, fields)
            # a second form fills only the lines the first left
            df = df.with_columns(pl.coalesce(prior[c], pl.col(c)).alias(c) for c in prior)
    return df
