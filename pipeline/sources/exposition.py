"""Reading the Prometheus text exposition format and OpenMetrics, vectorised.

What reads here (detected by content, `looks_like_exposition`):

- one scrape of `/metrics` (`curl localhost:8000/metrics > m.prom`): `# HELP`, `# TYPE`,
  sample lines `name{label="value",...} value [timestamp]`, OpenMetrics' `# EOF`, `# UNIT`
  and exemplars (`... # {trace_id="..."} 0.5`, dropped);
- many scrapes one after another, each after a line saying when it was taken:
  `# scrape at <epoch seconds | ISO 8601>` (what `while :; do echo "# scrape at $(date
  +%s.%N)"; curl -s URL/metrics; sleep 1; done` writes; `tools/record_vllm.py
  --raw-metrics` writes the same);
- samples that carry their own timestamp: Prometheus' text format (integer ms),
  OpenMetrics (seconds), `promtool tsdb dump` (`{__name__="...", instance=..., job=...}
  value ms`) and `promtool tsdb dump-openmetrics`. A timestamp of 1e11 or more is taken
  as milliseconds, else as seconds (1e11 s is the year 5138; 1e11 ms is 1973).

A sample with neither its own timestamp nor a `# scrape at` line before it takes
`default_ts` (the file's modification time, or the moment of a live scrape). A line that is
none of these is counted and the first few are kept for the summary; never dropped silently.

The work is polars expressions over all lines at once; the labels are parsed once per
distinct label set (a file of a thousand scrapes repeats the same few hundred).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import polars as pl

from .samples import POLARS_SCHEMA, finish

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
SAMPLE_RE = (
    rf"^(?P<name>{_NAME})?\s*(?:\{{(?P<labels>(?:[^\"}}]|{_QUOTED})*)\}})?"
    r"\s+(?P<value>[^\s#]+)(?:\s+(?P<ts>-?[0-9][0-9.eE+-]*))?\s*(?:#.*)?$"
)
# a sample line with a number for its value (what detection asks: a log line of two words
# would match SAMPLE_RE)
DETECT_SAMPLE_RE = (
    rf"^(?:{_NAME}\s*(?:\{{(?:[^\"}}]|{_QUOTED})*\}})?|\{{\s*__name__\s*=(?:[^\"}}]|{_QUOTED})*\}})\s+"
    r"[-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|inf|NaN|nan)(?:\s+-?[0-9][0-9.eE+-]*)?\s*(?:#.*)?$"
)
PAIR_RE = rf'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*({_QUOTED})'
_PAIR_GROUPS = rf'^(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"(?P<val>(?:[^"\\]|\\.)*)"$'
TYPE_RE = rf"^#\s*TYPE\s+(?P<family>{_NAME})\s+(?P<type>\w+)"
SCRAPE_AT_RE = r"^#\s*scrape(?:d)?\s+at\s*[:=]?\s*(?P<at>\S+)"
# labels Prometheus adds to a target's series: the target is a column of its own, the job
# is not kept (the same series from a live scrape and from Prometheus read the same)
TARGET_LABEL, DROPPED_LABELS = "instance", ("job",)
MS_THRESHOLD = 1e11
DETECT_LINES = 40


@dataclass
class ParseStats:
    lines: int = 0
    samples: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    timeless: int = 0  # samples that took default_ts


def looks_like_exposition(text: str) -> bool:
    """True when the first lines are Prometheus / OpenMetrics exposition (comments of its
    kinds and sample lines, at least one sample), not a log."""
    lines = [ln for ln in text.splitlines()[:DETECT_LINES * 3] if ln.strip()][:DETECT_LINES]
    if not lines:
        return False
    s = pl.Series("l", lines)
    comment = s.str.contains(r"^#\s*(?:HELP|TYPE|UNIT|EOF|scrape)")
    sample = s.str.contains(DETECT_SAMPLE_RE)
    return bool(sample.any()) and int((comment | sample).sum()) >= 0.9 * len(lines)


def exposition_flags(texts: list[str | None]) -> list[bool]:
    """looks_like_exposition of many texts in one polars pass (None: not exposition): a
    directory of many small files would pay two polars calls per file."""
    ids: list[int] = []
    lines: list[str] = []
    for i, text in enumerate(texts):
        if text:
            kept = [ln for ln in text.splitlines()[:DETECT_LINES * 3] if ln.strip()][:DETECT_LINES]
            ids.extend([i] * len(kept))
            lines.extend(kept)
    if not lines:
        return [False] * len(texts)
    df = pl.DataFrame({"i": ids, "l": lines}, schema={"i": pl.Int64, "l": pl.String})
    sample = pl.col("l").str.contains(DETECT_SAMPLE_RE)
    comment = pl.col("l").str.contains(r"^#\s*(?:HELP|TYPE|UNIT|EOF|scrape)")
    per_file = df.group_by("i").agg(any_sample=sample.any(), good=(comment | sample).sum(), n=pl.len())
    yes = set(per_file.filter(pl.col("any_sample") & (pl.col("good") >= 0.9 * pl.col("n")))["i"].to_list())
    return [i in yes for i in range(len(texts))]


def epoch_to_ts(col: pl.Expr) -> pl.Expr:
    """Epoch seconds or milliseconds (by magnitude) -> UTC timestamp (µs)."""
    us = pl.when(col.abs() >= MS_THRESHOLD).then(col * 1_000).otherwise(col * 1_000_000)
    return us.round(0).cast(pl.Int64).cast(pl.Datetime("us")).dt.replace_time_zone("UTC")


def _marker_ts(at: pl.Expr) -> pl.Expr:
    num = at.cast(pl.Float64, strict=False)
    iso = at.str.to_datetime(time_unit="us", time_zone="UTC", strict=False)
    return pl.coalesce(epoch_to_ts(num), iso)


def parse_text(
    text: str,
    default_ts: dt.datetime | None,
    stats: ParseStats | None = None,
    carry_ts: dt.datetime | None = None,
) -> tuple[pl.DataFrame, dt.datetime | None]:
    """One block of exposition text -> raw samples (ts, name, labels, le, quantile, value,
    target) and the last `# scrape at` time seen (to carry into the next block).

    `stats` collects counts, the `# TYPE`s (family -> type) and the first bad lines."""
    stats = stats if stats is not None else ParseStats()
    lines = pl.DataFrame({"line": text.split("\n")}).with_row_index("i")
    lines = lines.filter(pl.col("line").str.strip_chars().str.len_bytes() > 0)
    stats.lines += lines.height
    is_comment = pl.col("line").str.starts_with("#")
    types = lines.filter(is_comment).select(pl.col("line").str.extract_groups(TYPE_RE).alias("t")).unnest("t").drop_nulls()
    for fam, typ in types.unique("family", keep="last").iter_rows():
        stats.types[fam] = typ.lower()
    marks = lines.with_columns(
        pl.when(is_comment).then(_marker_ts(pl.col("line").str.extract(SCRAPE_AT_RE, 1))).alias("mark")
    )
    if carry_ts is not None:  # the scrape the previous block ended in goes on here
        marks = pl.concat([
            pl.DataFrame({"i": [-1], "line": ["#"], "mark": [carry_ts]},
                         schema={"i": marks.schema["i"], "line": pl.Utf8, "mark": pl.Datetime("us", "UTC")}),
            marks,
        ])
    marks = marks.with_columns(pl.col("mark").forward_fill())
    last_mark = marks["mark"][-1] if marks.height else carry_ts
    body = marks.filter(~pl.col("line").str.starts_with("#"))
    parsed = body.with_columns(pl.col("line").str.extract_groups(SAMPLE_RE).alias("m")).unnest("m")
    parsed = parsed.with_columns(
        pl.col("value").str.replace(r"^\+", "").str.to_lowercase().cast(pl.Float64, strict=False).alias("value"),
        pl.col("ts").cast(pl.Float64, strict=False).alias("ts_num"),
    )
    ok = pl.col("value").is_not_null() & (pl.col("name").is_not_null() | pl.col("labels").str.contains(r"__name__\s*="))
    ok = ok & (pl.col("ts").is_null() | pl.col("ts_num").is_not_null())
    bad = parsed.filter(~ok.fill_null(False))
    if bad.height:
        stats.bad += bad.height
        stats.bad_examples.extend(bad["line"].head(3 - len(stats.bad_examples)).to_list() if len(stats.bad_examples) < 3 else [])
    parsed = parsed.filter(ok.fill_null(False))
    if parsed.height == 0:
        return _empty_raw(), last_mark
    labels = _parse_labels(parsed.select(pl.col("labels").fill_null("")).unique())
    parsed = parsed.with_columns(pl.col("labels").fill_null("")).join(labels, on="labels", how="left")
    default = pl.lit(default_ts).cast(pl.Datetime("us", "UTC")) if default_ts is not None else pl.lit(None, pl.Datetime("us", "UTC"))
    out = parsed.select(
        pl.coalesce(epoch_to_ts(pl.col("ts_num")), pl.col("mark"), default).alias("ts"),
        pl.coalesce(pl.col("name"), pl.col("name_label")).alias("name"),
        pl.col("labels_json").alias("labels"),
        "le", "quantile", "value", "target",
    )
    stats.timeless += out["ts"].null_count()
    out = out.filter(pl.col("ts").is_not_null())
    stats.samples += out.height
    return out, last_mark


def _empty_raw() -> pl.DataFrame:
    return pl.DataFrame(schema={"ts": pl.Datetime("us", "UTC"), "name": pl.Utf8, "labels": pl.Utf8,
                                "le": pl.Float64, "quantile": pl.Float64, "value": pl.Float64, "target": pl.Utf8})


def _parse_labels(uniq: pl.DataFrame) -> pl.DataFrame:
    """Distinct label blocks -> labels_json (sorted keys, without le / quantile / __name__ /
    instance / job), le, quantile, name_label (__name__), target (instance)."""
    pairs = (
        uniq.with_row_index("lid")
        .with_columns(pl.col("labels").str.extract_all(PAIR_RE).alias("pair"))
        .explode("pair")
        .with_columns(pl.col("pair").str.extract_groups(_PAIR_GROUPS).alias("kv"))
        .unnest("kv")
    )
    special = ["le", "quantile", "__name__", TARGET_LABEL, *DROPPED_LABELS]
    plain = pairs.filter(pl.col("key").is_not_null() & ~pl.col("key").is_in(special)).sort("lid", "key")
    as_json = plain.group_by("lid").agg(
        pl.format('"{}":"{}"', "key",
                  pl.col("val").str.replace_all("\t", "\\t", literal=True).str.replace_all("\r", "\\r", literal=True))
        .str.join(",").alias("body")
    )
    def pick(key: str) -> pl.DataFrame:
        return pairs.filter(pl.col("key") == key).group_by("lid").agg(pl.col("val").last().alias(key))
    out = uniq.with_row_index("lid").join(as_json, on="lid", how="left")
    for key in ("le", "quantile", "__name__", TARGET_LABEL):
        out = out.join(pick(key), on="lid", how="left")
    num = lambda c: pl.col(c).str.replace(r"^\+", "").str.to_lowercase().cast(pl.Float64, strict=False)  # noqa: E731
    return out.select(
        "labels",
        pl.concat_str(pl.lit("{"), pl.col("body").fill_null(""), pl.lit("}")).alias("labels_json"),
        num("le").alias("le"),
        num("quantile").alias("quantile"),
        pl.col("__name__").alias("name_label"),
        pl.col(TARGET_LABEL).alias("target"),
    )


def parse_blocks(
    blocks: Iterable[str],
    default_ts: dt.datetime | None,
    stats: ParseStats,
) -> Iterator[pl.DataFrame]:
    """Blocks of text (each ending at a line end) -> raw sample frames; `# scrape at` times
    and `# TYPE`s carry from one block to the next."""
    carry = None
    for text in blocks:
        frame, carry = parse_text(text, default_ts, stats, carry)
        if frame.height:
            yield frame


def finish_raw(raw: pl.DataFrame, stats: ParseStats, *, instance: str | None, source: str,
               target: str | None = None) -> pl.DataFrame:
    """Raw samples of a parse -> SAMPLE_SCHEMA rows (samples.finish) of `instance` (None:
    the `instance` column is left null for the caller to name per target)."""
    if raw.height == 0:
        return pl.DataFrame(schema=POLARS_SCHEMA)
    raw = raw.with_columns(
        pl.coalesce(pl.col("target"), pl.lit(target, pl.Utf8)).alias("target"),
        pl.lit(instance, pl.Utf8).alias("instance"),
        pl.lit(source, pl.Utf8).alias("source"),
    )
    return finish(raw, stats.types)
