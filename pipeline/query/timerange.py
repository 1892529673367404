"""A time range that reaches the Parquet scans: `--since/--until` on `servelens sql`, `report`
and `dashboard`.

A question about one hour of a month should cost about an hour of data. Three cuts get it
there, each cheaper than the next step:

1. parts of days wholly outside the range are not listed at all (the store partitions by
   `day`, UTC; parts of the default partition (`__HIVE_DEFAULT_PARTITION__`, `day=unknown` in older stores) hold
   the events without a time and are always read);
2. the range is a filter on `ts` inside the scan, so DuckDB skips the row groups whose
   min/max statistics on `ts` miss it and decodes the rest only where `ts` matches;
3. the views are computed over the range widened by a margin (`RANGE_MARGIN_S`, at least two
   windows): a request that finished in the range but arrived before it keeps its arrival, a
   window cut by an edge is whole. Each view then shows only its rows in the range:
   per-window views the windows that overlap it, `requests` those that ended in it (or
   arrived in it, when no end is logged), point views the points in it. A view whose rows
   carry no time (a summary per instance) summarises the rows in the range.

So an answer over a range equals the whole store's answer restricted to that range, as long
as no request lasted longer than the margin. What needs more history than the margin (a
signal episode that began before it shows its in-margin start; an engine death judged on
requests finishing after it) is bounded by the margin; widen it with the variable
`range_margin_s`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TypeVar

if TYPE_CHECKING:  # parsing --since / --until (every command's options) needs no DuckDB
    import duckdb

UTC = dt.timezone.utc
# How far past each edge the views read: 10 minutes covers the requests of an LLM server
# (generations of several minutes are rare), at a sixth of an hour's cost on each side.
RANGE_MARGIN_S = 600.0


_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)(?:\s+ago)?$", re.I)
_UNIT_S = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
TIME_HELP = ("ISO 8601 (2026-05-12T08:00Z; UTC unless a zone is given), a time of day today in UTC "
             "(08:00), a time ago (30m, 2h, 7d) or now / today / yesterday")


def parse_time(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """A point in time, aware and in UTC, from what a person types: ISO 8601
    (`2026-05-12T08:00:00Z`, `2026-05-12 08:00`, a date; no zone means UTC), a time of day
    today in UTC (`08:00`, `08:00:30`), a time ago (`30m`, `2h`, `7d`, `90s`, `1w`, with or
    without `ago`), or `now`, `today`, `yesterday` (midnight UTC)."""
    t = text.strip()
    now = (now or dt.datetime.now(UTC)).astimezone(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    word = t.lower()
    if word == "now":
        return now
    if word in ("today", "yesterday"):
        return midnight - dt.timedelta(days=1 if word == "yesterday" else 0)
    ago = _AGO.match(t)
    if ago:
        return now - dt.timedelta(seconds=float(ago.group(1)) * _UNIT_S[ago.group(2).lower()])
    clock = _CLOCK.match(t)
    if clock:
        h, m, sec = int(clock.group(1)), int(clock.group(2)), int(clock.group(3) or 0)
        if h > 23 or m > 59 or sec > 59:
            raise ValueError(f"cannot read time {text!r}: not a time of day")
        return midnight.replace(hour=h, minute=m, second=sec)
    try:
        parsed = dt.datetime.fromisoformat(t.replace(" ", "T", 1) if "T" not in t else t)
    except ValueError:
        raise ValueError(f"cannot read time {text!r}; write it as {TIME_HELP}") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


@dataclass(frozen=True)
class TimeRange:
    """[since, until): either side may be open (None). Datetimes are aware, UTC."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None

    def __post_init__(self) -> None:
        for t in (self.since, self.until):
            if t is not None and (not isinstance(t, dt.datetime) or t.tzinfo is None):
                raise ValueError(f"a time range needs timezone-aware datetimes, not {t!r}")
        if self.since is not None and self.until is not None and self.until <= self.since:
            raise ValueError("--until must be after --since")

    @classmethod
    def parse(cls, since: str | None, until: str | None) -> "TimeRange | None":
        """From the CLI's `--since` / `--until` text; None when neither is given. Raises
        ValueError with a one-line message naming the bad value."""
        if not since and not until:
            return None
        return cls(parse_time(since) if since else None, parse_time(until) if until else None)

    def widened(self, variables: Mapping[str, Any] | None = None) -> "TimeRange":
        """The range the views read: RANGE_MARGIN_S (or the variable `range_margin_s`), and
        at least two windows, past each edge."""
        v = variables or {}
        margin = max(float(v.get("range_margin_s", RANGE_MARGIN_S)), 2 * float(v.get("window_s", 60.0)))
        pad = dt.timedelta(seconds=margin)
        return TimeRange(self.since - pad if self.since else None, self.until + pad if self.until else None)

    def _bounds(self, col: str) -> list[str]:
        # literals written from datetimes (never from user text): a constant DuckDB can push
        # into the scan and compare with row-group statistics
        out = []
        if self.since is not None:
            out.append(f"{col} >= timestamptz '{self.since.astimezone(UTC).isoformat()}'")
        if self.until is not None:
            out.append(f"{col} < timestamptz '{self.until.astimezone(UTC).isoformat()}'")
        return out

    def predicate(self, col: str) -> str:
        """`col` in the range, or null (events without a time are in every range)."""
        return f"({col} is null or ({' and '.join(self._bounds(col))}))"

    def overlaps(self, start: str, end: str) -> str:
        """[start, end) overlaps the range."""
        out = []
        if self.since is not None:
            out.append(f"{end} > timestamptz '{self.since.astimezone(UTC).isoformat()}'")
        if self.until is not None:
            out.append(f"{start} < timestamptz '{self.until.astimezone(UTC).isoformat()}'")
        return "(" + " and ".join(out) + ")"

    def days(self) -> tuple[dt.date | None, dt.date | None]:
        return (self.since.astimezone(UTC).date() if self.since else None,
                (self.until - dt.timedelta(microseconds=1)).astimezone(UTC).date() if self.until else None)


def part_day(path: Path | str) -> dt.date | None:
    """The `day=YYYY-MM-DD` partition a part lies in; None for the default partition or none."""
    if "day=" not in str(path):
        return None
    # the directory names split from the string: a Path per part costs more than the rest of
    # choosing the parts of a range (a big store has thousands)
    text = (str(path) if os.sep == "/" else str(Path(path)).replace(os.sep, "/")).rstrip("/")
    for piece in reversed(text.split("/")[:-1]):
        if piece.startswith("day="):
            try:
                return dt.date.fromisoformat(piece[4:])
            except ValueError:
                return None
    return None


P = TypeVar("P", str, Path)


def parts_in(parts: Iterable[P], scan: TimeRange) -> list[P]:
    """The parts that can hold events of `scan`: those of its days, and those without a day."""
    first, last = scan.days()
    out = []
    for p in parts:
        day = part_day(p)
        if day is None or ((first is None or day >= first) and (last is None or day <= last)):
            out.append(p)
    return out


# Events a server logs once, at start, that views need whatever the range: the capacity
# banner (max_num_seqs, KV blocks) behind batch_fill's fill and the capacity view.
STANDING_EVENTS = ("capacity",)


# Views of that standing state: shown as computed over the widened range and the standing
# events (the latest announcement), not summarised over the range.
STANDING_VIEWS = ("capacity",)


def standing_events_sql(select_events: str, scan: TimeRange) -> str:
    """The standing events logged before `scan` (a second scan, over the few columns the
    views read of them); `select_events` reads the parts (layout.read_parquet_sql)."""
    kinds = ", ".join(f"'{k}'" for k in STANDING_EVENTS)
    return f"{select_events} where event in ({kinds}) and not {scan.predicate('ts')}"


def row_filter(columns: Iterable[str], rng: TimeRange) -> str | None:
    """The predicate keeping a view's rows in `rng`, by the columns it has; None when its rows
    carry no time of their own (a summary per instance or per engine)."""
    cols = set(columns)
    if {"window_start", "window_end"} <= cols:
        return rng.overlaps("window_start", "window_end")
    if {"start_ts", "end_ts"} <= cols:
        return rng.overlaps("start_ts", "end_ts")
    if {"arrival_ts", "finish_ts"} <= cols:
        return rng.predicate("coalesce(finish_ts, arrival_ts)")
    if "ts" in cols:
        return rng.predicate("ts")
    return None


def bind_range_views(
    con: duckdb.DuckDBPyConnection, names: Iterable[str], rng: TimeRange, define: Callable[[str], None],
    after: Callable[[str], None] | None = None,
) -> None:
    """In the current schema (main), a view per view of schema `scan` (`names` in load order)
    keeping its rows in `rng`. A view whose rows carry no time (a summary over the whole
    range) is defined again by `define(name)` in main, so that it summarises the rows in the
    range, not the margin. Columns come from the catalog (recorded when a view was bound).
    `after(name)`: called once each is created, before the views that read it."""
    names = list(names)
    cols: dict[str, list[str]] = {}
    for view, col in con.execute(
        "select table_name, column_name from duckdb_columns() where schema_name = 'scan' order by column_index"
    ).fetchall():
        cols.setdefault(view, []).append(col)
    for name in names:
        where = row_filter(cols.get(name, ()), rng)
        if where is None and name not in ("events", *STANDING_VIEWS):
            define(name)
        else:
            con.execute(f"create view {name} as select * from scan.{name}" + (f" where {where}" if where else ""))
        if after is not None:
            after(name)


