"""What happened in the bundled incident (`sample_logs/incident/`), read here and never by
servelens: the simulator's truth files beside the sample logs, and the log files themselves
scanned with plain regular expressions (none of servelens's parsers). Tests hold the figures
servelens shows to these."""

from __future__ import annotations

import datetime as dt
import functools
import re
from pathlib import Path

import polars as pl

from tests.helpers.common import REPO, SAMPLE_LOGS

INCIDENT = SAMPLE_LOGS / "incident"
LOGS = sorted(p for p in INCIDENT.rglob("*.log") if not p.name.startswith("_"))

# a timestamp at the start of a line: ISO 8601 (docker --timestamps, TGI's router) or glog's
# `I0512 08:02:59.000000` (Triton, no year)
_ISO = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6})\d*)?Z")
_GLOG = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6})\d*)?")
# an error line: the level word as each engine writes it (`ERROR`, `[TensorRT-LLM][ERROR]`)
_ERROR = re.compile(r"\bERROR\b")


@functools.cache
def truth_requests() -> pl.DataFrame:
    """Every engine's truth_requests.parquet, read once."""
    return pl.concat([pl.read_parquet(p) for p in sorted(INCIDENT.glob("*/truth_requests.parquet"))])


@functools.cache
def failed_by_instance() -> dict[str, int]:
    """Requests the simulator failed (status `error`: in the server when its engine died), per
    instance, sorted by instance: the instances that crashed."""
    t = truth_requests()
    return dict(t.filter(pl.col("status") == "error").group_by("instance").len().sort("instance").iter_rows())


def survivors() -> list[str]:
    """The instances of the truth that failed no request, sorted."""
    return sorted(set(truth_requests()["instance"]) - set(failed_by_instance()))


def surge_start() -> dt.datetime:
    """When the traffic surge began, from the truth's arrivals: the first 15 s with at least
    twice the arrivals of a typical 15 s of the first minute (the surge is several times the
    base rate)."""
    bins = (truth_requests().group_by(pl.col("arrival_ts").dt.truncate("15s")).len().sort("arrival_ts"))
    first = bins["arrival_ts"][0]
    base = bins.filter(pl.col("arrival_ts") < first + dt.timedelta(minutes=1))["len"].median()
    return bins.filter(pl.col("len") >= 2 * base)["arrival_ts"][0]


def _stamp(line: str, year: int) -> dt.datetime | None:
    m = _ISO.match(line)
    if m:
        y, mo, d, h, mi, s, frac = m.groups()
    else:
        m = _GLOG.match(line)
        if not m:
            return None
        (mo, d, h, mi, s, frac), y = m.groups(), year
    return dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), int((frac or "0").ljust(6, "0")),
                       tzinfo=dt.timezone.utc)


@functools.cache
def _year() -> int:
    """The incident's year, for glog stamps that print none (asked at every line)."""
    return truth_requests()["arrival_ts"].min().year


@functools.cache
def first_line(log: Path, pattern: re.Pattern = _ERROR) -> tuple[int, dt.datetime]:
    """(1-based line number, time) of the log's first line matching `pattern` (default: its
    first error line); a line without a timestamp of its own (TensorRT-LLM's) has the time of
    the last stamped line before it."""
    last = None
    for n, line in enumerate(log.read_text().splitlines(), 1):
        last = _stamp(line, _year()) or last
        if pattern.search(line):
            return n, last
    raise AssertionError(f"{log} has no line matching {pattern.pattern!r}")


def first_error(log: Path) -> tuple[int, dt.datetime]:
    return first_line(log)


def dated_span() -> tuple[dt.datetime, dt.datetime]:
    """The first and last ISO 8601 timestamp at a line's start across the logs (Triton's glog
    stamps carry no year, and on its stats lines the write time, a second after the
    iteration's own time: left out)."""
    stamps = [t for log in LOGS for line in log.read_text().splitlines() if _ISO.match(line) and (t := _stamp(line, 0))]
    return min(stamps), max(stamps)


def first_failing_log() -> Path:
    """The log of a crashed instance whose first error came first."""
    return min(map(log_of, failed_by_instance()), key=lambda log: first_error(log)[1])


def window_start(t: dt.datetime) -> dt.datetime:
    """The start of the window (of the default thresholds' length) holding `t`."""
    from servelens.pipeline.query.views import resolve_variables

    w = resolve_variables()["window_s"]
    return dt.datetime.fromtimestamp(t.timestamp() // w * w, dt.timezone.utc)


def newest(log: Path) -> dt.datetime:
    """The newest timestamp at the start of a line of `log`."""
    return max(t for line in log.read_text().splitlines() if (t := _stamp(line, _year())) is not None)


def log_of(instance: str) -> Path:
    return next(p for p in LOGS if p.stem == instance)


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


def joined(items: list[str]) -> str:
    """`a, b and c`: how servelens's prose lists names (a format, not a figure)."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)
