"""The parser framework: what an engine parser receives, what it returns, and the shared
steps every parser's output goes through (parsers/finalize.py: timestamps, schema conformance).

An engine parser is a module (see `parsers/__init__.py` for the registry) exposing:

    NAME: str                                   # "vllm"
    def detect(lines: list[str]) -> float       # 0..1: how sure we are these first lines are ours
    def record_starts(text: pl.Series) -> pl.Series
        # Boolean per physical line: True where a new log record begins, False for a
        # continuation (traceback frame, pretty-printed dict). The ingest loop uses it to
        # never split a multi-line record across two chunks.
    def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame
        # `lines` has columns `line` (Int64, 1-based) and `text` (String, no line ending).
        # Returns events: any subset of the schema columns, plus optional helper columns
        # that `finalize` resolves:
        #   ts         Datetime: a complete time (with year); naive means UTC
        #   ts_noyear  Datetime with the placeholder year 2000 for times printed without a
        #              year (vLLM `06-10 14:23:45`, glog `I0514 ...`); finalize picks the year
        #   ts_rel_us  Int64 microseconds since the process started, for times printed
        #              relative to it (llama.cpp) that the chunk could not anchor itself;
        #              finalize anchors them in file order (see `finalize._resolve_relative`)
        # Every input line must be covered by exactly one event span [line, line + n_lines)
        # (several events may share one span, e.g. one line aborting several requests).
        # parse must not depend on earlier chunks: chunks are parsed in parallel.
    WRITTEN_WHOLE: bool                         # optional: the file is written once, not appended to
        # (a benchmark client's results): its unterminated last line is complete
    CARRY_FORWARD: tuple[str, ...]              # optional: columns whose last value carries
        # on to later events of the file (finalize fills them in file order)
    def scan_file(frames: Iterable[pl.DataFrame], ctx: ParseContext) -> None
        # optional: a cheap first pass, before any chunk is parsed, over the lines about to
        # be read (`line`, `text`; reading offset to the end of the file, wrappers undone);
        # it leaves what only the whole file tells in `ctx.file` (llama.cpp: where each
        # process run's relative times end, `rel_runs`, see `finalize._resolve_relative`)

Parsing is vectorised: polars expressions over the whole chunk, never a Python loop per line.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from .finalize import as_utc, finalize
from .schema import COLUMN_NAMES, EVENT_KINDS, LEVELS, POLARS_SCHEMA

PLACEHOLDER_YEAR = 2000  # a leap year, so Feb 29 survives until the real year is known

# ANSI colour codes as they survive in real logs: with the ESC byte, rendered as `#033`
# (CloudWatch/SageMaker), or with the ESC byte lost (`[2m`). Without the ESC byte the code
# must carry a number, or `[m` would eat the start of `[metrics.py:481]`.
ANSI_RE = r"(?:\x1b|#033)\[[0-9;]*[A-Za-z]|\[\d{1,3}(?:;\d{1,3})*m"
# docker-compose service prefix: `vllm-1  | `, `svc_1 | `
COMPOSE_PREFIX_RE = r"^[A-Za-z0-9][\w.-]*\s+\|\s?"
# `docker logs --timestamps` / Kubernetes: RFC 3339 with up to nanoseconds, then a space
RFC3339_RE = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})"


@dataclass
class ParseContext:
    """Everything a parser may need to know about the file, plus state carried from one
    chunk of the file to the next (the framework updates it; parsers may use `state`)."""

    engine: str
    source: str
    instance: str
    year: int | None = None  # --year: the year of yearless timestamps at the start of the file
    mtime: dt.datetime | None = None  # the file's modification time (UTC), for year inference
    # carried between chunks:
    last_ts: dt.datetime | None = None
    last_month: int | None = None
    year_base: int | None = None
    rollovers: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    # impossible values nulled by the domain checks, per column (not saved in checkpoints:
    # a count of this run, for the ingest summary)
    invalid: dict[str, int] = field(default_factory=dict)
    parse_failures: int = 0  # records the parser raised on, kept as `unparsed` (parse_isolated)
    # what a parser's `scan_file` learnt from the whole file before its chunks are parsed
    # (not saved in checkpoints: it describes this read of the file)
    file: dict[str, Any] = field(default_factory=dict)
    # keep the text (`message`) of every event; by default the bulk kinds whose columns say
    # what the line said drop it (pipeline/sources/lines.py `trim_messages`)
    keep_lines: bool = False
    # the instance the file's directory names (the pipeline's naming rule): the instance of
    # files an engine's exporter names after itself rather than after the server
    directory_instance: str | None = None


# ---------------------------------------------------------------------------------------
# helpers parsers share


def rfc3339_to_ts(expr: pl.Expr) -> pl.Expr:
    """`2026-05-12T08:01:39.331095044Z` (or with an offset) -> Datetime(us, UTC)."""
    norm = (
        expr.str.replace(r",", ".")
        .str.replace(r"Z$", "+00:00")
        .str.replace(r"([+-]\d{2})(\d{2})$", "$1:$2")
    )
    return norm.str.to_datetime(
        "%Y-%m-%dT%H:%M:%S%.f%:z", time_unit="us", time_zone="UTC", strict=False
    )


@functools.cache
def find_counts_chars() -> bool:
    """Whether `str.find` gives offsets in characters (polars 2.2 on) or in bytes (before)."""
    return pl.select(pl.lit("\u00e9:").str.find(":", literal=True)).item() == 1


def find_slice(
    expr: pl.Expr, offset: pl.Expr | int, length: pl.Expr | int | None = None, *, binary: bool = False
) -> pl.Expr:
    """A slice of a string at an offset, and of a length, in the unit `str.find` gives them
    (and `find_len`): characters or bytes by polars version. Byte offsets are only ever
    those of an ASCII match's edge, which are always character boundaries. `binary`: the
    slice as bytes (made text later, once per distinct value)."""
    if find_counts_chars():
        out = expr.str.slice(offset, length)
        return out.cast(pl.Binary) if binary else out
    out = expr.cast(pl.Binary).bin.slice(offset, length)
    return out if binary else out.cast(pl.String)


def find_len(expr: pl.Expr) -> pl.Expr:
    """A string's length in the unit `str.find` gives offsets in."""
    return expr.str.len_chars() if find_counts_chars() else expr.str.len_bytes()


def record_ids(starts: pl.Series) -> pl.Series:
    """Running record number per line (the first line always opens a record)."""
    s = starts.fill_null(True)
    if len(s):
        s = s.scatter(0, True)
    return s.cast(pl.Int64).cum_sum().alias("_rec")


def group_records(lines: pl.DataFrame, starts: pl.Series) -> pl.DataFrame:
    """Collapse continuation lines into their record.

    Returns one row per record with `line` (first line), `n_lines`, `text` (the physical
    lines joined with "\\n") and `first` (the record's first line). Single-line records,
    by far the most common, skip the aggregation.
    """
    df = lines.with_columns(record_ids(starts)).with_columns(
        pl.len().over("_rec").alias("_len")
    )
    single = df.filter(pl.col("_len") == 1).select(
        "line",
        pl.lit(1, pl.Int32).alias("n_lines"),
        "text",
        pl.col("text").alias("first"),
    )
    multi = df.filter(pl.col("_len") > 1)
    if multi.height:
        multi = multi.group_by("_rec", maintain_order=True).agg(
            pl.col("line").first(),
            pl.len().cast(pl.Int32).alias("n_lines"),
            pl.col("text").str.join("\n"),
            pl.col("text").first().alias("first"),
        ).drop("_rec")
        return pl.concat([single, multi]).sort("line")
    return single


def attrs_json(**fields: pl.Expr) -> pl.Expr:
    """A JSON object of the given fields, omitting nulls; null when every field is null.

    One native struct encode (exact JSON escaping), then the `"key":null` members are cut
    out: keys are plain identifiers, and a quote inside a string value is escaped, so the
    pattern cannot match inside a value."""
    if not fields:
        return pl.lit(None, pl.String)
    enc = pl.struct([v.alias(k) for k, v in fields.items()]).struct.json_encode()
    obj = enc.str.replace_all(r'"[A-Za-z_][A-Za-z0-9_]*":null,?', "").str.replace(r",\}$", "}")
    return pl.when(obj != "{}").then(obj)


# attrs_column: more distinct shapes than this, or fewer rows per shape than that, and one
# attrs_json regex is cheaper than a pass per shape (~4 us a row against ~0.3 ms a group)
_MAX_SHAPES = 64
_MIN_ROWS_PER_SHAPE = 100


def attrs_column(df: pl.DataFrame, keys: list[str], keep: pl.Expr | None = None) -> pl.Series:
    """`attrs_json` of the columns `keys` of `df` (where `keep` is true; else null), as a
    String Series aligned with the rows, for a fraction of the cost on large frames.

    attrs_json's regex cutting `"key":null` members costs several times the encoding. Rows
    fall into a few shapes (which fields are set), so rows are grouped by shape and each
    group encodes just its set fields: nothing to cut. NaN and infinities, which the encoder
    writes as null (and attrs_json then drops), count as unset."""
    keep = pl.lit(True) if keep is None else keep
    # a field null on every row is in no row's JSON (and an all-null column may have the
    # Null type, which would send the frame down the regex path)
    keys = [k for k in keys if df[k].null_count() < df.height]
    if not keys:
        return pl.repeat(None, df.height, dtype=pl.String, eager=True).alias("attrs")
    schema = df.schema
    simple = all(schema[k].is_numeric() or schema[k] in (pl.String, pl.Boolean) for k in keys)
    if len(keys) > 62 or not simple or df.height < _MIN_ROWS_PER_SHAPE:
        return _attrs_by_regex(df, keys, keep)
    # the shape of a row: bit i set when keys[i] is; 0 for rows that get no attrs. Fields
    # set on every row need no bit: they are in every shape.
    # (each bit a literal picked by `when`: cheaper than a cast and a product; 32-bit when the
    # bits fit, half the memory to write and add)
    width = pl.Int32 if len(keys) < 32 else pl.Int64
    bit = lambda test, i: pl.when(test).then(pl.lit(1 << i, width)).otherwise(pl.lit(0, width))  # noqa: E731
    always, bits = 0, []
    for i, k in enumerate(keys):
        if schema[k].is_float():
            bits.append(bit(pl.col(k).is_finite(), i))
        elif df[k].null_count() == 0:
            always |= 1 << i
        else:
            bits.append(bit(pl.col(k).is_not_null(), i))
    shape = pl.sum_horizontal(bits) + pl.lit(always, width) if bits else pl.lit(always, width)
    rows = df.select(*keys, pl.when(keep).then(shape).otherwise(0).alias("_shape")).with_row_index("_row")
    # the row numbers partitioned, then each shape's own fields taken at its rows (a partition
    # of every column would copy the fields a shape lacks as well)
    groups = rows.select("_row", "_shape").partition_by("_shape", as_dict=True)
    if len(groups) > _MAX_SHAPES or df.height < _MIN_ROWS_PER_SHAPE * len(groups):
        return _attrs_by_regex(df, keys, keep)
    if len(groups) == 1:  # the common case: no reordering needed
        ((bits_of,),) = groups.keys()
        return _encode_shape(rows, keys, bits_of)
    parts = []
    for (bits_of,), part in groups.items():
        taken = rows.select("_row", *[k for i, k in enumerate(keys) if bits_of >> i & 1]).gather(part["_row"])
        parts.append(taken.select("_row", _encode_shape(taken, keys, bits_of)))
    return pl.concat(parts).sort("_row")["attrs"]


def _encode_shape(rows: pl.DataFrame, keys: list[str], bits: int) -> pl.Series:
    present = [k for i, k in enumerate(keys) if bits >> i & 1]
    if not present:
        return pl.repeat(None, rows.height, dtype=pl.String, eager=True).alias("attrs")
    encode = pl.struct(present).struct.json_encode().alias("attrs")
    # a shape whose fields hold one value on every row (a process's own lines) is encoded
    # once, from the first row. Only then: cutting the constant fields out of a per-row
    # encoding and splicing them back in costs a string pass that encoding them does not.
    # Floats are left out (0.0 and -0.0 are equal but print differently); the first and
    # last rows are compared first, which settles most shapes without a pass over them.
    if rows.height > 1 and not any(rows.schema[k].is_float() for k in present):
        ends = rows.select(present)
        if ends.row(0) == ends.row(-1) and ends.select(pl.all_horizontal(pl.all() == pl.all().first()).all()).item():
            head = ends.head(1).select(encode).item()
            return pl.repeat(head, rows.height, dtype=pl.String, eager=True).alias("attrs")
    return rows.select(encode).to_series()


def _attrs_by_regex(df: pl.DataFrame, keys: list[str], keep: pl.Expr) -> pl.Series:
    return df.select(
        pl.when(keep).then(attrs_json(**{k: pl.col(k) for k in keys})).alias("attrs")
    ).to_series()


# ---------------------------------------------------------------------------------------
# isolating a parser failure to the record that causes it

# the attrs key saying why a record is `unparsed` after its parser failed on it
PARSE_ERROR_KEY = "parse_error"


def parse_isolated(parser: Any, lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """`parser.parse`, except that a failure costs only the records that cause it.

    A parser raising on a chunk (a value its vectorised expressions cannot take) would stop
    the whole file. Instead the chunk is halved at a record start and each half parsed
    again, down to the single record that fails, which becomes one `unparsed` event with
    the error in `attrs`. The normal path costs nothing; a bad record costs about
    2 * log2(chunk records) extra parses."""
    try:
        return parser.parse(lines, ctx)
    except Exception as e:  # noqa: BLE001 - any parser failure is isolated, never fatal
        return _bisect(parser, lines, ctx, e)


def _bisect(parser: Any, lines: pl.DataFrame, ctx: ParseContext, error: Exception) -> pl.DataFrame:
    n = lines.height
    cut = 0
    if n > 1:
        try:
            starts = parser.record_starts(lines["text"]).fill_null(True).to_numpy()
            idx = np.flatnonzero(starts[1:]) + 1
        except Exception:  # noqa: BLE001 - record_starts failed too: every line a record
            idx = np.arange(1, n)
        if len(idx):
            cut = int(idx[np.argmin(np.abs(idx - n / 2))])
    if cut == 0:  # one record: it is the one that fails
        return _failed_record(lines, error)
    halves = [parse_isolated(parser, lines.slice(0, cut), ctx),
              parse_isolated(parser, lines.slice(cut), ctx)]
    # a parser leaving `n_lines` out means one line per event (finalize's default)
    halves = [h if "n_lines" in h.columns or not h.width else h.with_columns(pl.lit(1, pl.Int32).alias("n_lines"))
              for h in halves]
    return _concat_aligned(halves)


def _failed_record(lines: pl.DataFrame, error: Exception) -> pl.DataFrame:
    detail = " ".join(f"{type(error).__name__}: {error}".split())[:300]
    return pl.DataFrame(
        {
            "line": [lines["line"][0]],
            "n_lines": pl.Series([lines.height], dtype=pl.Int32),
            "event": ["unparsed"],
            "message": ["\n".join(lines["text"].fill_null("").to_list())],
            "attrs": [json.dumps({PARSE_ERROR_KEY: detail})],
            "_parse_failed": [True],  # counted by finalize
        }
    )


def _concat_aligned(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate parser outputs that may differ in columns and types (a half without a
    column, a column all-null in one half): schema columns take the schema's type."""
    frames = [f for f in frames if f.width]
    try:
        return pl.concat(frames, how="diagonal_relaxed")
    except Exception:  # noqa: BLE001 - types no supertype joins: conform them first
        pass
    out = []
    for f in frames:
        exprs = []
        for name, dtype in f.schema.items():
            if name in POLARS_SCHEMA and name not in ("ts",):
                exprs.append(pl.col(name).cast(POLARS_SCHEMA[name], strict=False))
            elif name in ("ts", "ts_noyear") and isinstance(dtype, pl.Datetime):
                exprs.append(as_utc(pl.col(name), dtype).alias(name))
            else:
                exprs.append(pl.col(name).cast(pl.String, strict=False))
        out.append(f.select(exprs))
    return pl.concat(out, how="diagonal_relaxed")


# ---------------------------------------------------------------------------------------
# checks used by tests and by the ingest loop


def check_events(events: pl.DataFrame) -> None:
    """Raise if `events` does not conform: exact schema, known kinds and levels."""
    if tuple(events.columns) != COLUMN_NAMES:
        raise ValueError(f"columns {events.columns} != schema {COLUMN_NAMES}")
    for name, dtype in POLARS_SCHEMA.items():
        if events.schema[name] != dtype:
            raise ValueError(f"column {name} is {events.schema[name]}, schema says {dtype}")
    bad_kind = set(events["event"].drop_nulls().unique()) - set(EVENT_KINDS)
    if bad_kind or events["event"].null_count():
        raise ValueError(f"unknown event kinds {bad_kind or 'null'}")
    bad_level = set(events["level"].drop_nulls().unique()) - set(LEVELS)
    if bad_level:
        raise ValueError(f"unknown levels {bad_level}")


def uncovered_lines(events: pl.DataFrame, first_line: int, last_line: int) -> list[int]:
    """Lines in [first_line, last_line] that no event covers, plus lines covered twice
    (by two different spans). Empty when every line is accounted for exactly once."""
    spans = events.select("line", "n_lines").unique()
    covered: dict[int, int] = {}
    for line, n in spans.iter_rows():
        for k in range(line, line + n):
            covered[k] = covered.get(k, 0) + 1
    wrong = [k for k in range(first_line, last_line + 1) if covered.get(k, 0) != 1]
    wrong += [k for k in covered if k < first_line or k > last_line]
    return sorted(wrong)


def lines_frame(texts: list[str], first_line: int = 1) -> pl.DataFrame:
    """Physical lines as the frame `parse` receives (tests and small inputs)."""
    return pl.DataFrame(
        {
            "line": pl.Series(range(first_line, first_line + len(texts)), dtype=pl.Int64),
            "text": pl.Series(texts, dtype=pl.String),
        }
    )


def parse_lines(parser: Any, lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """Run one parser over one chunk of lines and finalize onto the schema."""
    return finalize(parse_isolated(parser, lines, ctx), ctx, carry=getattr(parser, "CARRY_FORWARD", ()))
