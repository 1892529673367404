"""Log-platform CSV downloads: a header row naming the columns, then one row per entry, a
message holding a newline (a traceback a log agent joined into one entry) quoted over
several physical lines:

    Google Cloud Logs Explorer   insertId,logName,...,resource.labels.pod_name,...,severity,textPayload,timestamp
    CloudWatch console           timestamp,message                      (ms since the epoch)
    CloudWatch Logs Insights     @timestamp,@message,@logStream,@log    (`2026-06-10 14:23:45.123`, UTC)
    Datadog Log Explorer         date,host,service,...,message          (ISO 8601, ms)
    Kibana Discover "CSV"        @timestamp,kubernetes.pod.name,...,message   (`Jun 10, 2026 @ 14:23:45.123`)
    OpenSearch Dashboards        @timestamp,kubernetes.container_name,json_payload  (`{"message": ...}` over several lines)

The columns are found by name (any order, any others), so the header is part of the layer
(`csv-export:<header row>`): a block read far from the file's head is decoded the same way.
A row is one record when its quotes balance; a row that opens with the time column starts a
record whatever came before it, so an unclosed quote spoils its own row only. Where the time
column comes last (Logs Explorer), a block read from the middle of the file may begin inside
a quoted message: the lines up to the first row end whose quotes do not balance are that
message's tail, and the records after it are read as the whole file reads them. The rows are
read by polars' CSV reader; a row that is no whole CSV record keeps its text and a label
`decode_error` saying why (the engine parser keeps it as `unparsed`). Each line of a message
is a line for the engine parser; entries are put back in time order per stream."""

from __future__ import annotations

import csv
import io
import re

import polars as pl
import pyarrow as pa

from ._export import message_lines, time_order
from .cloudwatch import k8s_of_streams
from ._frame import WTS, join_fragments, line_of, rfc3339_ns, rfc3339_ns_of, set_time

NAME = "csv-export"
DOC = "Log-platform CSV downloads with a header row (Cloud Logging Logs Explorer, CloudWatch console and Logs Insights, Datadog, Kibana / OpenSearch Dashboards, Grafana), comma or tab separated: message column (`textPayload`, `message`, `@message`, `content`, `log`), time column (RFC 3339, `2026-06-10 14:23:45.123`, `Jun 10, 2026 @ 14:23:45.123`, epoch s/ms/us/ns); labels `pod`, `container`, `namespace`, `node`, `host`, `service`, `log_stream`, `log_group`, `severity`; quoted multi-line messages; newest-first put back in time order per stream"
JOINS = True

# column names (lower case) that play each part, the first present wins
ROLES: dict[str, tuple[str, ...]] = {
    # (`gcloud logging read --format="csv(timestamp,textPayload)"` heads its columns in
    # snake case: `timestamp,text_payload`)
    "message": ("textpayload", "text_payload", "jsonpayload.message", "@message", "message", "content", "log", "line", "body",
                "json_payload", "jsonpayload", "_raw"),
    "time": ("timestamp", "@timestamp", "date", "time", "_time"),
    "pod": ("resource.labels.pod_name", "kubernetes.pod.name", "kubernetes.pod_name", "k8s.pod.name", "pod_name", "@kubernetes.pod_name", "pod"),
    "container": ("resource.labels.container_name", "kubernetes.container.name", "kubernetes.container_name", "k8s.container.name",
                  "kube_container_name", "container_name", "container"),
    "namespace": ("resource.labels.namespace_name", "kubernetes.namespace", "kubernetes.namespace_name", "k8s.namespace.name",
                  "kube_namespace", "namespace"),
    "node": ("resource.labels.node_name", "kubernetes.node.name", "kubernetes.host", "k8s.node.name", "node"),
    "host": ("host.name", "host.hostname", "host", "hostname"),
    "service": ("service", "service.name"),
    "log_stream": ("@logstream", "logstreamname", "log_stream"),
    "log_group": ("@log", "loggroupname", "log_group"),
    "severity": ("severity", "status", "log.level", "level"),
}
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_log_group", "_lab_log_stream", "_lab_host"]
# a time field (quoted or not), the first or the last of a row, in the forms the platforms
# print; the space-separated form needs its fraction so that a Python logging line (`... 14:23:45,123`)
# inside a message is never taken for a row
_TIME = (
    r'"?(?:[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?'
    r"|[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]+"
    r"|[A-Z][a-z]{2} [0-9]{1,2}, [0-9]{4} @ [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?"
    r'|[0-9]{10,19})"?'
)


def delimiter(header: str) -> str:
    """`,`, or a tab where the header row is tab-separated (Grafana's CSV for Excel: UTF-16
    with tabs)."""
    return "\t" if header.count("\t") > header.count(",") else ","


def _header(texts: list[str]) -> tuple[str, list[str]] | None:
    first = next((t for t in texts if t.strip()), None)
    if first is None:
        return None
    raw = first.removeprefix("\ufeff")
    if raw.lstrip().startswith(("{", "[")) or ("," not in raw and "\t" not in raw):
        return None
    try:
        cols = next(csv.reader([raw], delimiter=delimiter(raw)))
    except (csv.Error, StopIteration):
        return None
    return raw, [c.strip() for c in cols]


def roles(cols: list[str]) -> dict[str, int]:
    """Column index of each part the header names."""
    low = [c.lower() for c in cols]
    out = {}
    for role, names in ROLES.items():
        for name in names:
            if name in low and low.index(name) not in out.values():
                out[role] = low.index(name)
                break
    return out


def sniff(texts: list[str]) -> float:
    head = _header(texts)
    if head is None:
        return 0.0
    r = roles(head[1])
    return 1.0 if "message" in r and "time" in r and len(head[1]) >= 2 else 0.0


def layer(texts: list[str]) -> str:
    return f"{NAME}:{_header(texts)[0]}"


def decode(df: pl.DataFrame, header: str) -> pl.DataFrame:
    sep = delimiter(header)
    cols = next(csv.reader([header], delimiter=sep))
    role = roles([c.strip() for c in cols])
    text = pl.col("text")
    # (the header with or without a byte order mark, compared whole: no line is copied to
    # cut one off)
    is_header = (text == header) | (text == "\ufeff" + header)
    df = df.with_columns(text.str.count_matches('"', literal=True).alias("_q"))
    balanced = _one_record_a_line(df)
    if balanced:
        df = df.drop("_q")
    else:
        df = _join_records(df, is_header, role["time"], len(cols), sep)
    df = df.filter(~is_header | pl.col("_open"))
    if df.height == 0:
        return df.with_columns(pl.lit(None, pl.String).alias("_lab_decode_error"))
    # a record is whole when its quotes balance (join_fragments kept the first fragment's flag)
    even = pl.lit(True) if balanced else pl.col("text").str.count_matches('"', literal=True) % 2 == 0
    whole = even & ~pl.col("_open")
    df = df.with_columns(whole.alias("_whole"))
    if df["_whole"].all():
        # (the reader's columns come in pieces, one per thread: made whole once here, not
        # by every later pass over them)
        df = df.hstack(_read_rows(df["text"], len(cols), sep).rechunk())
    else:
        fields = _read_rows(df.filter(pl.col("_whole"))["text"], len(cols), sep)
        df = pl.concat([df.filter(pl.col("_whole")).hstack(fields), df.filter(~pl.col("_whole"))], how="diagonal_relaxed")
        df = df.sort("line")
    unread = None
    if "_unread" in df.columns:
        # a record no CSV reader takes (a stray quote joined rows into one with a bare line
        # break) keeps its text, as a row left open does
        unread = pl.col("_unread").fill_null(False)
        df = df.with_columns(pl.col("_whole") & ~unread)
    f = {r: pl.col(f"_c{i}") for r, i in role.items()}
    msg = f["message"]
    # a whole JSON payload in one column (GCP structured logs moved to OpenSearch): its message
    # (asked by a pattern, which copies no message, and the JSON read only when some is one)
    payload = msg.str.contains(r"^\s*\{")
    if df.select(payload.any()).item():
        msg = pl.when(payload).then(pl.coalesce(msg.str.json_path_match("$.message"), msg)).otherwise(msg)
    labels = [f[r].alias(f"_lab_{r}") for r in ROLES if r not in ("message", "time") and r in f]
    if "log_stream" in f and "pod" not in f:
        # Fluent Bit / Container Insights name a container's stream after its log file
        labels += k8s_of_streams(df, f["log_stream"])
    df = df.with_columns(
        pl.when(pl.col("_whole")).then(line_of(msg.fill_null(""))).otherwise(pl.col("text")).alias("text"),
        set_time(df, any_time_of(df, f["time"])),
        *labels,
        _decode_error(unread),
    ).drop([f"_c{i}" for i in range(len(cols))] + ["_whole"] + (["_unread"] if unread is not None else []))
    return message_lines(time_order(df, _KEYS))


def _decode_error(unread: pl.Expr | None) -> pl.Expr:
    """Why a row is left to the engine parser as it is written (null for a row read)."""
    open_ = pl.lit("a CSV row with an unclosed quote (cut short?)")
    if unread is None:
        return pl.when(~pl.col("_whole")).then(open_).alias("_lab_decode_error")
    return pl.when(unread).then(pl.lit("not a CSV record (a stray quote?)")).when(~pl.col("_whole")).then(open_).alias("_lab_decode_error")


def _one_record_a_line(df: pl.DataFrame) -> bool:
    """Does every line balance its quotes (`_q`: the quotes in each)? Then no message in the
    block holds a newline and each line is a record, as `_join_records` would find."""
    return bool(df.select((pl.col("_q") % 2 == 0).all()).item())


def _join_records(df: pl.DataFrame, is_header: pl.Expr, time_col: int, n_cols: int, sep: str) -> pl.DataFrame:
    """The physical lines (`_q`: the quotes in each) joined into records: a record ends where
    its quotes balance, counted from the last row that opens with its time (an unclosed quote
    cannot swallow the rows after it). Where the time is the last column, a block that begins
    inside a quoted message (read from the middle of the file) ends that message's tail at
    its first row end (`_head_tail`), so that the quotes after it are counted the right way."""
    text = pl.col("text")
    sep_re = "\t" if sep == "\t" else ","
    if time_col == 0:
        # (a byte order mark before the first row, as the file's first line may have)
        starts = text.str.contains("^\ufeff?" + _TIME + sep_re) & ~is_header
    else:
        starts = pl.lit(False)
    tail_end = _head_tail(df, text.str.contains(sep_re + _TIME + "$") & ~is_header) if time_col == n_cols - 1 else -1
    df = df.with_columns(starts.alias("_rs"))
    # (the quotes counted since the segment's start: the running count less its value
    # where the segment began, no grouping)
    total = pl.col("_q").cum_sum()
    if tail_end >= 0:
        total = total - pl.when(pl.int_range(pl.len()) > tail_end).then(pl.col("_q").head(tail_end + 1).sum()).otherwise(0)
    since = total - pl.when(pl.col("_rs")).then(total - pl.col("_q")).forward_fill().fill_null(0)
    df = df.with_columns(pl.col("_rs").cum_sum().alias("_seg"))
    odd = (since % 2) == 1
    ends = ~odd | pl.col("_rs").shift(-1).fill_null(False) | (pl.int_range(pl.len()) == tail_end)
    df = df.with_columns(ends.alias("_e"), odd.alias("_odd"))
    # the message's own newlines, put back between the physical lines joined
    df = df.with_columns(pl.when(pl.col("_e")).then(pl.col("text")).otherwise(pl.col("text") + "\n").alias("text"))
    return join_fragments(df.drop("_rs", "_q", "_seg", "_odd"), pl.col("_e")).drop("_e", strict=False)


def _head_tail(df: pl.DataFrame, row_end: pl.Expr) -> int:
    """The last line of the quoted message's tail a block begins with (-1 when it begins
    with a whole record): lines before the first that ends with the time column (`row_end`)
    whose quotes, counted from the block's start to it, do not balance. A record's own lines
    balance by its end; a message's tail leaves its opening quote out."""
    first = df.select(pl.int_range(pl.len()).filter(row_end).first(), pl.col("_q").cum_sum().filter(row_end).first()).row(0)
    return first[0] if first[0] is not None and first[1] % 2 == 1 else -1


def _read_rows(rows: pl.Series, n: int, sep: str = ",") -> pl.DataFrame:
    """The fields of whole CSV records as String columns `_c0`..: one read of them all by
    polars' CSV reader; the csv module where that disagrees with the row count."""
    names = [f"_c{i}" for i in range(n)]
    if len(rows) == 0:
        return pl.DataFrame(schema={c: pl.String for c in names})
    # (the joined text handed over as its Arrow buffer, not copied into a Python string)
    joined = rows.str.join("\n").to_arrow()
    offsets, data = joined.buffers()[1], joined.buffers()[2]
    width = 8 if pa.types.is_large_string(joined.type) else 4
    lo, hi = (int.from_bytes(offsets.to_pybytes()[i * width:(i + 1) * width], "little") for i in (0, 1))
    blob = memoryview(data)[lo:hi]
    try:
        out = pl.read_csv(io.BytesIO(blob), has_header=False, new_columns=names, schema={c: pl.String for c in names},
                          quote_char='"', truncate_ragged_lines=True, separator=sep)
        if out.height == len(rows):
            return out
    except pl.exceptions.PolarsError:
        pass
    parsed = [_fields(r, sep) if r else [] for r in rows.to_list()]
    out = pl.DataFrame([((p or []) + [None] * n)[:n] for p in parsed], schema={c: pl.String for c in names}, orient="row")
    if any(p is None for p in parsed):
        out = out.with_columns(pl.Series("_unread", [p is None for p in parsed], dtype=pl.Boolean))
    return out


def _fields(row: str, sep: str) -> list[str] | None:
    """One record's fields by the csv module; None where it is no CSV record."""
    try:
        return next(csv.reader([row], delimiter=sep), [])
    except csv.Error:
        return None


def any_time_of(df: pl.DataFrame, expr: pl.Expr) -> pl.Expr:
    """`any_time(expr)` over `df`, each form tried on the rows the forms before it left
    without a time, and none once every row has one (a file writes its times in one form:
    the forms after it, each a pass over the column, are not run)."""
    s = expr.str.strip_chars()
    if df.height == 0:
        return any_time(expr)
    one = _one_form_time(df, s)
    if one is not None:
        return pl.lit(one)
    forms = [
        lambda: pl.when(s.str.contains("T")).then(rfc3339_ns_of(df, s)) if df.select(s.str.contains("T").any()).item() else None,
        lambda: s.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False).dt.replace_time_zone("UTC"),
        lambda: s.str.to_datetime("%b %d, %Y @ %H:%M:%S%.f", time_unit="ns", strict=False).dt.replace_time_zone("UTC"),
        lambda: _epoch(s),
    ]
    out = pl.Series("_t", [None] * df.height, dtype=WTS)
    wanted = df.select(s.is_not_null().sum()).item()
    for form in forms:
        if out.count() == wanted:
            break
        e = form()
        if e is not None:
            out = out.fill_null(df.select(e.cast(WTS)).to_series())
    return pl.lit(out)


# the forms `any_time_of` tries, told apart by a value's shape: a value one of them reads has
# the shape of none of the others (a `T` only in RFC 3339, digits and `-` first only in the
# first two, a month's name first only in Kibana's, digits alone only in an epoch number)
_SHAPES = (
    (re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T"), 0),
    (re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]"), 1),
    (re.compile(r"[A-Za-z]{3} [0-9]{1,2}, [0-9]{4} @ "), 2),
    (re.compile(r"[+-]?[0-9]+$"), 3),
)


def _one_form_time(df: pl.DataFrame, s: pl.Expr) -> pl.Series | None:
    """`any_time_of`'s times read in one pass where every time is in the form the first
    one is in (a file writes its times in one form): a value that form reads is read by no
    other form (`_SHAPES`), so the forms before it would leave it to this one. None where
    some time is not read by it (the forms are then tried in turn)."""
    first = df.select(s.drop_nulls().first()).item()
    if first is None:
        return None
    form = next((k for shape, k in _SHAPES if shape.match(first)), None)
    if form is None:
        return None
    e = (pl.when(s.str.contains("T")).then(rfc3339_ns_of(df, s)) if form == 0
         else s.str.to_datetime(("%Y-%m-%d %H:%M:%S%.f", "%b %d, %Y @ %H:%M:%S%.f")[form - 1], time_unit="ns", strict=False)
         .dt.replace_time_zone("UTC") if form < 3 else _epoch(s))
    out = df.select(e.cast(WTS).alias("_t"), s.is_not_null().sum().alias("_w"))
    return out["_t"] if out["_t"].count() == out["_w"][0] else None


def _epoch(s: pl.Expr) -> pl.Expr:
    """An epoch number (s, ms, us or ns by its size) -> Datetime(ns, UTC)."""
    num = s.cast(pl.Int64, strict=False)
    scale = pl.when(num > 10**17).then(1).when(num > 10**14).then(1_000).when(num > 10**11).then(1_000_000).otherwise(1_000_000_000)
    return (num * scale).cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")


def any_time(expr: pl.Expr) -> pl.Expr:
    """A platform's time column -> Datetime(ns, UTC): RFC 3339, `YYYY-MM-DD HH:MM:SS.fff`
    (UTC), Kibana's `Jun 10, 2026 @ 14:23:45.123` (UTC), or an epoch number (s, ms, us or ns
    by its size)."""
    s = expr.str.strip_chars()
    naive = pl.coalesce(
        s.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="ns", strict=False),
        s.str.to_datetime("%b %d, %Y @ %H:%M:%S%.f", time_unit="ns", strict=False),
    ).dt.replace_time_zone("UTC")
    return pl.coalesce(pl.when(s.str.contains("T")).then(rfc3339_ns(s)), naive, _epoch(s)).cast(WTS)
