"""AWS CLI `--output text` of CloudWatch Logs events (what a CLI configured with `output =
text` prints): one `EVENTS` row per event, its members tab-separated in the order of their
names, the paging tokens and searched streams on rows of their own.

    EVENTS	<eventId>	<ingestionTime>	vllm/server/0f2b6c1e	INFO 06-10 14:23:45 ...	1781101425123
    SEARCHEDLOGSTREAMS	vllm/server/0f2b6c1e	True

`filter-log-events` rows carry the log stream (the instance, as for the JSON); `get-log-events`
rows (`EVENTS	<ingestionTime>	<message>	<timestamp>`) do not. The time is the last member,
in milliseconds. A message holding a newline goes on over the lines after its row."""

from __future__ import annotations

import polars as pl

from ._export import message_lines, time_order
from ._frame import WTS, join_fragments, set_time, share
from .cloudwatch import k8s_of_streams

NAME = "cloudwatch-text"
DOC = "AWS CLI `--output text` of `aws logs filter-log-events` / `get-log-events`: `EVENTS<TAB>…<TAB><message><TAB><ms>` rows; label `log_stream` (and `pod`… from a Kubernetes stream name)"
JOINS = True

_FILTER = r"^EVENTS\t[0-9]+\t[0-9]{10,16}\t(?P<s>[^\t]*)\t(?P<m>(?s:.*))\t(?P<t>[0-9]{10,16})$"
_GET = r"^EVENTS\t[0-9]{10,16}\t(?P<m>(?s:.*))\t(?P<t>[0-9]{10,16})$"
# the CLI's other rows: paging tokens, the streams searched
_ENVELOPE = r"^(?:SEARCHEDLOGSTREAMS|NEXTTOKEN|NEXTFORWARDTOKEN|NEXTBACKWARDTOKEN)\t"


def sniff(texts: list[str]) -> float:
    rows = [t for t in texts if t.startswith("EVENTS\t")]
    if not rows:
        return 0.0
    # every row opens with its numbers; some end with the time (a message holding newlines
    # ends on a later line, the lines between being the message's: no row of their own)
    opens = share(rows, r"^EVENTS\t[0-9]{10,}\t") >= 0.9
    whole = share(rows, _FILTER) + share(rows, _GET) > 0
    return 1.0 if opens and whole else 0.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    text = pl.col("text")
    df = df.filter(~text.str.contains(_ENVELOPE) | pl.col("_open"))
    row = text.str.starts_with("EVENTS\t")
    # a row ends before the next row (its message's own lines joined to it)
    nxt = row.shift(-1).fill_null(True)
    df = df.with_columns(pl.when(nxt).then(text).otherwise(text + "\n").alias("text"))
    df = join_fragments(df, nxt)
    f = text.str.extract_groups(_FILTER)
    g = text.str.extract_groups(_GET)
    msg = pl.coalesce(f.struct.field("m"), g.struct.field("m"))
    ms = pl.coalesce(f.struct.field("t"), g.struct.field("t")).cast(pl.Int64, strict=False)
    df = df.with_columns(f.struct.field("s").alias("_lab_log_stream"), msg.alias("_m"), ms.alias("_ms"))
    df = df.with_columns(
        pl.when(pl.col("_m").is_not_null()).then(pl.col("_m")).otherwise(text).alias("text"),
        set_time(df, (pl.col("_ms") * 1_000_000).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC").cast(WTS)),
    ).drop("_m", "_ms")
    df = df.with_columns(k8s_of_streams(df, pl.col("_lab_log_stream")))
    return message_lines(time_order(df, ["_lab_log_stream"]))
