"""`docker logs --timestamps` / `kubectl logs --timestamps`: an RFC 3339 time with up to
nanoseconds and one space (or, from some log viewers and pastes, a tab) before each line.

    2026-06-10T14:23:45.123456789Z INFO 06-10 14:23:45 ...

`aws logs tail --format short` prints the time to the second without its zone (UTC):
`2026-06-10T14:23:45 <line>`, read here too.

A TGI text line opens with its own RFC 3339 time followed by the level and a target
(`2024-01-15T08:47:27.123Z  INFO text_generation_router: ...`): that time is the engine's
header, not a wrapper, and is left alone."""

from __future__ import annotations

import polars as pl

from ._frame import peel

NAME = "docker-ts"
DOC = "`docker logs --timestamps`, `kubectl logs --timestamps`, `aws logs tail --format short`: `<RFC 3339 time> <line>` (a time without its zone is UTC)"
JOINS = False

# (without a zone only to the second, as `aws logs tail --format short` prints it: a time
# with a fraction and no zone is another wrapper's, TorchServe's, read by the prefix layer)
_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:(?:[.,][0-9]{1,9})?(?:Z|[+-][0-9]{2}:?[0-9]{2}))?"
# a log viewer or a paste may put a tab where the runtimes put the space
# (`aws logs tail` strips each event's end: an empty line leaves its time alone)
PATTERN = rf"(?P<_t>{_TIME})(?:[ \t]|$)"
# an engine header made of a time and a level word followed by a target, not a wrapper
_ENGINE = rf"^{_TIME}\s+(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR)\s+[^0-9\s]"


def sniff(texts: list[str]) -> float:
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    # decoded line by line (lines without the time are left as they are): one line in the
    # sample is enough, so a file where only some lines carry the time is read too
    return 1.0 if (s.str.contains(f"^{PATTERN}") & ~s.str.contains(_ENGINE)).any() else 0.0


def decode(df: pl.DataFrame, again: bool = True) -> pl.DataFrame:
    engine = pl.col("text").str.contains(_ENGINE)
    keep = df.select(engine.alias("_eng"))["_eng"]
    if keep.any():
        own = df.filter(keep)
        rest = _second_time(peel(df.filter(~keep), PATTERN, {"_t": "_wts"}))
        df = pl.concat([own, rest], how="diagonal_relaxed").sort("line")
    else:
        df = _second_time(peel(df, PATTERN, {"_t": "_wts"}))
    # a log taken with --timestamps from a container that wrote one already carries two
    # times: the inner one goes too (the outer stays the wrapper time)
    if again and df.height and bool(df.select(pl.col("text").str.contains(f"^{PATTERN}").any()).item()):
        return decode(df, again=False)
    return df


def _second_time(df: pl.DataFrame) -> pl.DataFrame:
    """CloudWatch exports pad the time with several spaces before an engine line that has
    its own (`2024-04-18T18:44:03.144-04:00   2024-04-18T22:43:58.111453Z  INFO ...`): the
    padding goes with the wrapper (an indented traceback line keeps its indentation)."""
    padded = pl.col("text").str.contains(rf"^ +{_TIME}\s")
    return df.with_columns(pl.when(padded).then(pl.col("text").str.strip_chars_start(" ")).otherwise(pl.col("text")).alias("text"))
