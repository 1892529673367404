"""The SGLang parser: what an SGLang server (`python -m sglang.launch_server`) prints, from
v0.1 (2024) to today, into the common schema.

This module owns the anatomy of a line (docs/sglang.md): SGLang's
`[%(asctime)s{ranks}] message` prefix (`[2025-02-27 04:46:39 DP1 TP1 EP1] `, time-only
`[16:43:29 TP0] ` before Oct 2024, `[TP0] ` in trimmed pastes, no prefix at all in v0.1),
the Python-logging form a `SGLANG_LOGGING_CONFIG_PATH` config prints (`2026-06-07
10:59:31,659 [INFO] sglang.srt...: `), bare uvicorn lines, the per-request metrics JSON of
`--export-metrics-to-file`, and multi-line records (a scheduler's `hit an exception:
Traceback ...` is one error event). What each message means is in `fields.py` (`other.py`: the remaining lines).

Choices worth knowing:
- SGLang prints no level: lines are INFO-or-WARNING alike, so `level` stays null except for
  uvicorn lines, the Python-logging form and errors (ERROR).
- Times have no zone (server local time) and are taken as UTC. Time-only prefixes take
  their date from the file's modification time (`attrs.date_source = "mtime"`); a day
  rollover (the clock jumping back by more than 12 h) is seen within a chunk.
- The rank prefix is kept in attrs (`dp_rank`, `tp_rank`, `pp_rank`, `ep_rank`,
  `attn_cp_rank`, `moe_dp_rank`). Every TP rank logs a retraction: of the lines with the
  same (second, DP rank, message), the first of each rank's k-th makes a `preemption` event,
  the other ranks' copies are `log` events with `attrs.rank_copy` (within one chunk).
- Prefill/decode disaggregation: a prefill worker's and a decode worker's lines differ (PD
  fields, `disaggregation_mode=` in the server args). Their events go to the instance
  `<instance>:prefill` / `<instance>:decode` (carried forward in file order), so every view,
  which groups by instance, keeps the two queues apart.
- A per-request metrics file (`sglang-request-metrics-YYYYMMDD_HH.log`) names no server;
  its requests go to the instance named by the directory it is in (the instance its
  hourly file name would otherwise give is a different one every hour).
- Wrapper prefixes (Ray `(SGLangEngine pid=1) `, docker/k8s times) and ANSI colour codes
  are the decoding stage's job (parsers/wrappers); a prefix found behind another lead is still read, the lead kept in
  `attrs.wrapper`.
"""

from __future__ import annotations

import datetime as dt
import re

import polars as pl

from ... import uvicorn
from . import fields as F
from .other import other_columns
from ...base import ParseContext, attrs_column, record_ids

NAME = "sglang"
CARRY_FORWARD = ("model", "instance")
# what every line naming a carried value contains (a newest-first export's reader looks
# for them before the chunks: pipeline/sources/carry_scan.py)
CARRY_HINT = ("model_path=", "served_model_name=")
# whether a line starts a record depends on it and the line before only
RECORD_LOOKBACK = 1

# (mid-2024's `[gpu_id=0] ` prefix names the GPU of the TP worker, with no time)
_RANK = r"(?:[A-Z][A-Z_]*\d+|gpu_id=\d+)"
# `[2025-02-27 04:46:39 DP1 TP1] `, `[16:43:29 TP0] `, `[2026-04-05 20:02:51] `, `[TP0] `
_PREFIX = (
    r"^\[(?:(?P<date>\d{4}-\d{2}-\d{2}) )?(?P<hms>\d{2}:\d{2}:\d{2})?(?:[.,](?P<frac>\d{1,6}))?"
    rf"(?P<ranks>(?: ?{_RANK})*)\] ?"
)
# the commonest prefix, `[2025-02-27 04:46:39 DP1 TP1] ` (with or without a fraction of a
# second and ranks), as a pattern that never has two ways on (one-pass: its captures cost
# about one search); where it matches within 120 characters, _PREFIX matches the same text
# with the same captures (each class is a part of _PREFIX's)
_FULL_PREFIX = (
    r"^(?P<pre>\[(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:[.,](?P<frac>[0-9]{1,6}))?(?P<ranks>(?: [A-Z][A-Z_]*[0-9]+)*)\] ?)"
)
_EMPTY_MESSAGE = r"^\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?: [A-Z]+\d+)*\] ?$"
_PREFIX_HINT = rf"^\[(?:\d{{4}}-\d{{2}}-\d{{2}} \d|\d{{2}}:\d{{2}}:\d{{2}}[ \].,]|{_RANK}[ \]])"
# a logging config's `%(asctime)s [%(levelname)s] %(name)s: %(message)s`
_LEVEL = r"DEBUG|INFO|WARNING|ERROR|CRITICAL"
_PYLOG = (
    r"^(?P<pdate>\d{4}-\d{2}-\d{2}) (?P<phms>\d{2}:\d{2}:\d{2})(?:[,.](?P<pfrac>\d{1,6}))? "
    rf"\[(?P<plevel>{_LEVEL})\] (?P<plogger>[\w.]+): "
)
_PYLOG_HINT = rf"^\d{{4}}-\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}}(?:[,.]\d+)? \[(?:{_LEVEL})\] "
# a logging config of `%(asctime)s %(levelname)s %(process)d [{ranks} %(filename)s:%(lineno)d] `
# (`2025-10-20 03:02:22 INFO 31223 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch. ...`)
_CUSTOM = (
    r"^(?P<cdate>\d{4}-\d{2}-\d{2}) (?P<chms>\d{2}:\d{2}:\d{2})(?:[,.](?P<cfrac>\d{1,6}))? "
    rf"(?P<clevel>{_LEVEL}) (?P<cpid>\d+) \[(?P<cranks>(?:{_RANK} )*)(?P<csrc>[\w.-]+\.py:\d+)\] "
)
_CUSTOM_HINT = rf"^\d{{4}}-\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}}(?:[,.]\d+)? (?:{_LEVEL}) \d+ \["
# the prefix behind some other lead (a wrapper the decoding stage did not take off)
_LATE_PREFIX = rf"^(?P<lead>.{{1,200}}?)\[(?:\d{{4}}-\d{{2}}-\d{{2}} )?\d{{2}}:\d{{2}}:\d{{2}}(?: {_RANK})*\] "
_LATE_HINT = r"\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}[ \]]"
_CHAINED = r"^(?:The above exception was the direct cause|During handling of the above exception)"
_TRACEBACK = "Traceback (most recent call last)"
_RANK_NAMES = {"DP": "dp_rank", "TP": "tp_rank", "PP": "pp_rank", "EP": "ep_rank",
               "ATTN_CP": "attn_cp_rank", "MOE_DP": "moe_dp_rank", "gpu_id=": "gpu_id"}
# the instance a metrics file's path gives (discover strips the `-YYYYMMDD_HH` suffix or not)
_METRICS_FILE = re.compile(r"^sglang-request-metrics(?:-\d{8}_\d{2})?$")


def _any(df: pl.DataFrame, expr: pl.Expr) -> bool:
    return bool(df.select(expr.fill_null(False).any()).item()) if df.height else False


# ---------------------------------------------------------------------------------------
# contract


def detect(lines: list[str]) -> float:
    """High when the lines hold SGLang's own messages (scheduler stats, server args,
    capacity, per-request metrics) or its rank prefix; 0 otherwise. A `[date time] ` prefix
    alone is not enough: other programs print it too."""
    if not lines:
        return 0.0
    raw = pl.Series(lines, dtype=pl.String)
    if not raw.str.contains(_MAYBE_STRONG).any():
        return 0.0
    return _score(raw)


# what some line holds anywhere when `detect` counts it strong (the message and the ranks
# are parts of the line): a sample without any scores 0, its lines need not be taken apart
_MAYBE_STRONG = (
    r"Prefill batch|Decode batch|new fill batch|#running-req: |server_args=ServerArgs\(|max_total_num_tokens="
    r"|KV Cache is allocated\. #tokens|sglang|SGLang|Decode out of memory happened|KV cache pool is full\. Retract"
    r'|"e2e_latency"|(?:TP|DP)\d'
)


def _score(raw: pl.Series) -> float:
    """`detect`'s score of the sample lines `raw`, the lines taken apart."""
    df = pl.DataFrame({"t": raw})
    df = _split_prefix(df.rename({"t": "_t"}))
    m = pl.col("m")
    strong = (
        F.IS_STATS
        | m.str.contains(r"^server_args=ServerArgs\(|^max_total_num_tokens=\d+|^KV Cache is allocated\. #tokens")
        | m.str.contains(r"sglang|SGLang|^Decode out of memory happened|^KV cache pool is full\. Retract")
        | (pl.col("_hdr") & pl.col("ranks").str.contains(r"\b(?:TP|DP)\d+"))
        | F.IS_METRICS_JSON
    )
    foreign = pl.col("_t").str.contains(r"TensorRT-LLM|text_generation_(?:router|launcher)|vllm\.|\[TRT")
    n_strong, n_foreign = df.select(strong.fill_null(False).sum(), foreign.sum()).row(0)
    if not n_strong or n_foreign > n_strong:
        return 0.0
    return min(1.0, 0.6 + 0.4 * n_strong / len(raw))


def record_starts(text: pl.Series) -> pl.Series:
    """False for a continuation line: no SGLang prefix and indented, blank, a chained-
    exception note, or the exception line closing a traceback (after an indented frame or
    the `Traceback` line)."""
    df = pl.DataFrame({"t": text.fill_null("")})
    t = pl.col("t")
    # a message that opens with a newline (`logger.info("\nBenchmark...")`): the prefix alone
    # on its line, the text on the next
    bare = t.str.contains(_EMPTY_MESSAGE)
    if not _any(df, t.str.contains(r"^(?:[ \t]|$|The above|During handling)|^\s*$|" + _EMPTY_MESSAGE)):
        return pl.repeat(True, df.height, dtype=pl.Boolean, eager=True).alias("starts")
    hdr = t.str.contains(_PREFIX_HINT) | t.str.contains(_PYLOG_HINT) | t.str.contains(_CUSTOM_HINT)
    indented = t.str.contains(r"^[ \t]")
    blank = t.str.strip_chars() == ""
    tb_ish = (indented & ~blank) | t.str.contains(_TRACEBACK, literal=True)
    exc_close = t.str.contains(F.EXCEPTION) & tb_ish.shift(1).fill_null(False)
    # the message a traceback belongs to: v0.1's `Exception in ModelRpcClient:`, uvicorn's
    # `ERROR:    Exception in ASGI application` (its traceback follows on the next line), the
    # PD transfer worker's `logger.exception` (`Unexpected transfer worker error for room N`)
    introduced = t.str.starts_with(_TRACEBACK) & t.shift(1).str.contains(
        r"^\S.*:\s*$|(?:ERROR|CRITICAL):\s+Exception in ASGI application\s*$"
        r"|Unexpected transfer worker error for room \d+\s*$").fill_null(False)
    cont = ~hdr & (indented | blank | t.str.contains(_CHAINED) | exc_close | introduced | bare.shift(1).fill_null(False))
    return df.select((~cont).alias("starts")).to_series()


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return lines.select("line", pl.lit("unparsed").alias("event"), pl.col("text").alias("message"))
    text = pl.col("text").fill_null("")
    df = lines.select("line", text.alias("text"))
    t = pl.col("text")
    if df.select(t.str.contains("\r", literal=True).any()).item():
        t = t.str.strip_chars_end("\r")
    df = df.with_columns(t.alias("_t"))
    df = _launcher_lead(df)
    starts = record_starts(df["_t"])
    df = _split_prefix(df)
    if "_lead0" in df.columns:
        df = df.with_columns(pl.coalesce("lead", "_lead0").alias("lead")).drop("_lead0")
    rec = _records(df, starts)
    return _events(rec, ctx)


# ---------------------------------------------------------------------------------------
# anatomy


# a launcher that re-logs SGLang's output through its own Python logging (`%(asctime)s -
# %(name)s - %(levelname)s - `): the lead is taken off every line so that SGLang's prefix and
# a traceback's indented lines read as they were printed; it is kept in attrs `wrapper`
_LAUNCHER = rf"^\d{{4}}-\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}},\d{{3}} - [\w.]+ - (?:{_LEVEL}) - "


def _launcher_lead(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("_t")
    if not _any(df, t.str.slice(0, 30).str.contains(r"^\d{4}-\d{2}-\d{2} [\d:]{8},\d{3} - ")):
        return df
    lead = t.str.slice(0, 120).str.extract(rf"({_LAUNCHER[1:]})", 1)
    return df.with_columns(
        pl.when(lead.is_not_null()).then(t.str.slice(lead.str.len_chars())).otherwise(t).alias("_t"),
        lead.str.strip_chars_end().str.strip_chars_end("-").str.strip_chars_end().alias("_lead0"),
    )


def _split_prefix(df: pl.DataFrame) -> pl.DataFrame:
    """Adds the prefix fields (`date`, `hms`, `frac`, `ranks`; `pdate`... of the logging
    form; `lead` of a late prefix), `_hdr` (a prefix was found) and `m`: the message."""
    t = pl.col("_t")
    head = t.str.slice(0, 120)
    # the full prefix (date, time, blank-separated ranks) by its one-pass pattern; the
    # other lines by _PREFIX, on their first 120 characters
    df = df.with_columns(t.str.extract_groups(_FULL_PREFIX).alias("_f"))
    f = pl.col("_f").struct.field
    full = (f("pre").str.len_chars() <= 120).fill_null(False)
    if not df.select(full.all()).item():
        rest = pl.when(~full).then(t)
        df = df.with_columns(
            pl.when(rest.str.contains(_PREFIX_HINT)).then(head).str.extract_groups(_PREFIX).alias("_p"),
            rest.str.slice(0, 120).str.extract(_PREFIX, 0).str.len_chars().alias("_plen"),
        ).unnest("_p")
        # `[]` or a bare `[` ... `]` with neither time nor rank is no prefix
        ok = pl.col("hms").is_not_null() | (pl.col("ranks").str.strip_chars() != "")
        df = df.with_columns(
            *(pl.when(full).then(f(c)).otherwise(pl.col(c)).alias(c) for c in ("date", "hms", "frac", "ranks")),
            (full | ok.fill_null(False)).alias("_hdr"),
            pl.when(full).then(f("pre").str.len_chars()).when(ok).then(pl.col("_plen")).alias("_plen"),
        )
    else:
        df = df.with_columns(
            *(f(c).alias(c) for c in ("date", "hms", "frac", "ranks")),
            pl.lit(True).alias("_hdr"),
            f("pre").str.len_chars().alias("_plen"),
        )
    df = df.drop("_f")
    pylog_cols = ("pdate", "phms", "pfrac", "plevel", "plogger")
    if _any(df, ~pl.col("_hdr") & t.str.contains(_PYLOG_HINT)):
        df = df.with_columns(
            pl.when(~pl.col("_hdr")).then(head).str.extract_groups(_PYLOG).alias("_g")
        ).unnest("_g")
        plog = pl.col("phms").is_not_null()
        df = df.with_columns(
            (pl.col("_hdr") | plog).alias("_hdr"),
            pl.coalesce("_plen", pl.when(plog).then(head.str.extract(_PYLOG, 0).str.len_chars())).alias("_plen"),
        )
    else:
        df = df.with_columns(pl.lit(None, pl.String).alias(c) for c in pylog_cols)
    if _any(df, ~pl.col("_hdr") & t.str.contains(_CUSTOM_HINT)):
        c = pl.col("_c").struct
        df = df.with_columns(pl.when(~pl.col("_hdr")).then(head).str.extract_groups(_CUSTOM).alias("_c"))
        hit = c.field("chms").is_not_null()
        df = df.with_columns(
            *(pl.coalesce(pl.col(a), c.field(b)).alias(a) for a, b in (
                ("pdate", "cdate"), ("phms", "chms"), ("pfrac", "cfrac"), ("plevel", "clevel"), ("plogger", "csrc"))),
            pl.when(hit).then(c.field("cranks").str.strip_chars_end()).otherwise(pl.col("ranks")).alias("ranks"),
            (pl.col("_hdr") | hit).alias("_hdr"),
            pl.coalesce("_plen", pl.when(hit).then(head.str.extract(_CUSTOM, 0).str.len_chars())).alias("_plen"),
        ).drop("_c")
    if _any(df, ~pl.col("_hdr") & t.str.contains(_LATE_HINT)):
        late = pl.when(~pl.col("_hdr")).then(t.str.slice(0, 320)).str.extract(_LATE_PREFIX, 0)
        df = df.with_columns(late.alias("_late"))
        inner = pl.col("_t").str.slice(pl.col("_late").str.extract(r"^(.*?)\[[^\]]*\] $", 1).str.len_chars())
        df = df.with_columns(
            pl.when(pl.col("_late").is_not_null())
            .then(inner.str.slice(0, 120).str.extract_groups(_PREFIX))
            .alias("_q"),
            pl.col("_late").str.extract(r"^(.*?)\[[^\]]*\] $", 1).str.strip_chars_end().alias("lead"),
        )
        q = pl.col("_q").struct
        df = df.with_columns(
            *(pl.coalesce(pl.col(c), q.field(c)).alias(c) for c in ("date", "hms", "frac", "ranks")),
            (pl.col("_hdr") | pl.col("_late").is_not_null()).alias("_hdr"),
            pl.coalesce("_plen", pl.col("_late").str.len_chars()).alias("_plen"),
        ).drop("_q", "_late")
    else:
        df = df.with_columns(pl.lit(None, pl.String).alias("lead"))
    df = df.with_columns(pl.col("_t").str.slice(pl.col("_plen").fill_null(0)).alias("m"))
    return _inner_prefix(df)


def _inner_prefix(df: pl.DataFrame) -> pl.DataFrame:
    """SGLang's prefix right behind another `[date time] ` (a log viewer's or collector's own
    time, `[2025-03-11 16:44:27] [2025-03-11 01:44:27 TP0] Decode batch. ...`): the inner one
    is SGLang's, the outer is kept as the lead (attrs `wrapper`)."""
    m = pl.col("m")
    nested = pl.col("_hdr") & m.str.contains(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
    if not _any(df, nested):
        return df
    g = pl.col("_i").struct
    df = df.with_columns(pl.when(nested).then(m.str.slice(0, 120).str.extract_groups(_PREFIX)).alias("_i"),
                         pl.when(nested).then(m.str.slice(0, 120).str.extract(_PREFIX, 0)).alias("_ipre"))
    inner = pl.col("_ipre").is_not_null() & g.field("hms").is_not_null()
    outer = pl.col("_t").str.slice(0, pl.col("_plen")).str.strip_chars_end()
    return df.with_columns(
        *(pl.when(inner).then(g.field(c)).otherwise(pl.col(c)).alias(c) for c in ("date", "hms", "frac", "ranks")),
        pl.when(inner).then(pl.coalesce(pl.col("lead"), outer)).otherwise(pl.col("lead")).alias("lead"),
        pl.when(inner).then(m.str.slice(pl.col("_ipre").str.len_chars())).otherwise(m).alias("m"),
    ).drop("_i", "_ipre")


def _records(df: pl.DataFrame, starts: pl.Series) -> pl.DataFrame:
    """One row per record: the first line's anatomy, `n_lines`, `raw` (its lines joined),
    `body_all` (message and continuation lines) and the exception its continuation
    lines name last (`_xt`, `_xm`), `has_tb`."""
    keep = [c for c in df.columns if c not in ("text",)]
    if bool(starts.all()):
        return df.select(
            *keep,
            pl.lit(1, pl.Int32).alias("n_lines"),
            pl.col("text").alias("raw"),
            pl.col("m").alias("body_all"),
            pl.lit(None, pl.String).alias("_xt"),
            pl.lit(None, pl.String).alias("_xm"),
            pl.col("m").str.contains(_TRACEBACK, literal=True).alias("has_tb"),
        )
    df = df.with_columns(record_ids(starts))
    exc = pl.col("_t").str.extract_groups(F.EXCEPTION)
    agg = (
        df.filter(pl.len().over("_rec") > 1)
        .with_columns(exc.alias("_e"))
        .group_by("_rec", maintain_order=True)
        .agg(
            pl.col("line").first(),
            pl.len().cast(pl.Int32).alias("n_lines"),
            pl.col("text").str.join("\n").alias("raw"),
            pl.concat_str([pl.col("m").first(), pl.col("_t").slice(1).str.join("\n")], separator="\n").alias("body_all"),
            pl.col("_e").struct.field("exc").drop_nulls().last().alias("_xt"),
            pl.col("_e").struct.field("excmsg").filter(pl.col("_e").struct.field("exc").is_not_null()).last().alias("_xm"),
            pl.col("_t").str.contains(_TRACEBACK, literal=True).any().alias("has_tb"),
        )
        .drop("_rec")
    )
    first = df.filter(pl.col("_rec").is_first_distinct()).drop("_rec")
    return (
        first.join(agg, on="line", how="left", maintain_order="left")
        .with_columns(
            pl.col("n_lines").fill_null(1),
            pl.coalesce("raw", "text").alias("raw"),
            pl.coalesce("body_all", "m").alias("body_all"),
            pl.coalesce("has_tb", pl.col("m").str.contains(_TRACEBACK, literal=True)).alias("has_tb"),
        )
        .drop("text")
    )


# ---------------------------------------------------------------------------------------
# events


def _family() -> pl.Expr:
    m, hdr = pl.col("m"), pl.col("_hdr")
    bare = ~hdr
    return (
        pl.when(F.STATS_HINT & F.IS_STATS).then(pl.lit("stats"))
        .when(hdr & F.CAPACITY_HINT & (F.IS_SERVER_ARGS | F.IS_POOL | F.IS_KV_ALLOC | F.IS_JAX_POOL)).then(pl.lit("cap"))
        .when((hdr & F.IS_RETRACT) | (bare & F.IS_BARE_RETRACT)).then(pl.lit("retract"))
        # (a paste may keep the message without its prefix)
        .when(F.IS_XFER_FAIL).then(pl.lit("xfer_fail"))
        .when(F.REQUEST_HINT & ((bare & F.IS_METRICS_JSON) | (hdr & F.IS_FINISH))).then(pl.lit("request"))
        # (`Receive: obj=` names its request: read without the prefix too)
        .when(F.REQUEST_HINT & F.IS_RECEIVE).then(pl.lit("arrive"))
        .when(hdr & F.IS_REQ_TIME).then(pl.lit("reqtime"))
        .when(m.str.contains(F.UVICORN_ACCESS)).then(pl.lit("access"))
        .when(hdr & m.str.contains(F.AIOHTTP_ACCESS)).then(pl.lit("aiohttp"))
        .otherwise(pl.lit("other"))
    )


def _families(rec: pl.DataFrame) -> pl.Series:
    """_family() of every record; the two commonest kinds told by their head first, so that
    the chain's tests run only on the other records. (A message starting with a stats label
    is a stats record when IS_STATS's test of labelled lines says so; one starting with
    `INFO:` passes none of the chain's tests before the access one, each anchored at another
    head.)"""
    m = pl.col("m")
    labelled = m.str.starts_with("Prefill batch") | m.str.starts_with("Decode batch")
    info = m.str.starts_with("INFO:")
    fam = rec.select(
        pl.when(labelled & m.str.contains(F.STATS_LABELLED)).then(pl.lit("stats"))
        .when(info & m.str.contains(F.UVICORN_ACCESS)).then(pl.lit("access"))
        .alias("_fam")
    ).to_series()
    rest = fam.is_null()
    if rest.any():
        idx = rest.arg_true()
        fam = fam.scatter(idx, rec[idx].select(_family()).to_series())
    return fam


def _events(rec: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    rec = rec.with_columns(_families(rec), *_times(rec, ctx))
    parts = [
        _family_frame(fam, part, ctx)
        for (fam,), part in rec.partition_by("_fam", as_dict=True, maintain_order=True).items()
    ]
    out = pl.concat(parts, how="diagonal_relaxed").sort("line", maintain_order=True)
    return out.with_row_index("_seq")


def _times(rec: pl.DataFrame, ctx: ParseContext) -> list[pl.Expr]:
    """`ts` (naive, taken as UTC by finalize) from the prefix; `_date_source` for
    time-only prefixes."""
    frac = pl.col("frac").fill_null("0").str.pad_end(6, "0").cast(pl.Int64, strict=False)
    full = pl.concat_str([pl.col("date"), pl.lit(" "), pl.col("hms")]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S", time_unit="us", strict=False
    ) + pl.duration(microseconds=frac)
    pfrac = pl.col("pfrac").fill_null("0").str.pad_end(6, "0").cast(pl.Int64, strict=False)
    pylog = pl.concat_str([pl.col("pdate"), pl.lit(" "), pl.col("phms")]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S", time_unit="us", strict=False
    ) + pl.duration(microseconds=pfrac)
    exprs = [pl.coalesce(full, pylog).alias("ts"), pl.lit(None, pl.String).alias("_date_source")]
    only_time = pl.col("date").is_null() & pl.col("hms").is_not_null()
    if not _any(rec, only_time):
        return exprs
    # time-only (SGLang before Oct 2024): the date of the file's last write, one day later
    # each time the clock jumps back by more than 12 hours
    anchor = (ctx.mtime or dt.datetime.now(dt.timezone.utc)).date()
    secs = rec.select(
        pl.when(only_time).then(
            pl.col("hms").str.to_time("%H:%M:%S", strict=False).cast(pl.Int64) // 1_000_000_000
        )
    ).to_series()
    prev = secs.forward_fill().shift(1)
    rolled = ((secs < prev - 43200).fill_null(False)).cast(pl.Int64).cum_sum()
    days_back = rolled.max() - rolled  # the last line is on the anchor day
    base = dt.datetime.combine(anchor, dt.time())
    when = (
        pl.lit(base)
        - pl.duration(days=pl.Series(days_back))
        + pl.duration(seconds=pl.Series(secs).fill_null(0))
        + pl.duration(microseconds=frac)
    )
    exprs[0] = pl.coalesce(full, pylog, pl.when(only_time).then(when)).alias("ts")
    exprs[1] = pl.when(only_time).then(pl.lit("mtime" if ctx.mtime else "today")).alias("_date_source")
    return exprs


def _rank_attrs(sub: pl.DataFrame) -> dict[str, pl.Expr]:
    """The ranks' attrs (each rank tag's number; `ranks_other`: a rank token we do not know, a
    newer parallelism or a pid suffix, kept as printed), none when no row has ranks. A chunk
    holds a few distinct rank strings: they are read once each and looked up per row."""
    ranks = pl.col("ranks")
    seen = sub.select(ranks.unique())
    if not _any(seen, ranks.str.strip_chars() != ""):
        return {}
    known = "|".join(sorted(_RANK_NAMES, key=len, reverse=True))
    other = ranks.str.replace_all(rf"(?:^|\s)(?:{known})\d+\b", "").str.strip_chars()
    table = seen.drop_nulls().select(
        "ranks",
        *(ranks.str.extract(rf"(?:^|\s){tag}(\d+)\b", 1).cast(pl.Int64, strict=False).alias(name)
          for tag, name in _RANK_NAMES.items()),
        pl.when(other != "").then(other).alias("ranks_other"),
    )
    # (an attr null for every rank string is null on every row: in no row's attrs)
    return {
        name: ranks.replace_strict(table["ranks"], table[name], default=None, return_dtype=table.schema[name])
        for name in table.columns[1:] if table[name].null_count() < table.height
    }


def _common_attrs(sub: pl.DataFrame) -> dict[str, pl.Expr]:
    return _rank_attrs(sub) | {
        "logger": pl.col("plogger"),
        "wrapper": pl.col("lead"),
        "date_source": pl.col("_date_source"),
    }


def _role_instance(role: pl.Expr, ctx: ParseContext) -> pl.Expr:
    return pl.when(role.is_not_null()).then(pl.concat_str([pl.lit(ctx.instance + ":"), role]))


def _family_frame(fam: str, sub: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """Event kind, schema columns and attrs for the records of one family."""
    m = pl.col("m")
    cols: dict[str, pl.Expr] = {}
    extra: dict[str, pl.Expr] = {}
    extra_json = None
    if fam == "stats":
        sub, cols, extra, extra_json = _stats_frame(sub, ctx)
    elif fam == "cap":
        cap = F.capacity_columns()
        mode = F.capacity_attrs()["disaggregation_mode"]
        cols = {"event": pl.lit("capacity"), **cap,
                "instance": _role_instance(pl.when(mode.is_in(["prefill", "decode"])).then(mode), ctx)}
        extra = F.capacity_attrs()
    elif fam == "retract":
        extra = F.retraction_attrs()
        copy = _rank_copy(pl.col("m"))
        cols = {"event": pl.when(copy).then(pl.lit("log")).otherwise(pl.lit("preemption"))}
        extra["rank_copy"] = pl.when(copy).then(True)
    elif fam == "xfer_fail":
        # the scheduler aborts the request with this error: a failed request (an abort at
        # ERROR), once per request (each TP rank names its own `rank=N`)
        extra = F.xfer_fail_attrs()
        # (the exception text may name each rank's own session: the request is the key)
        g = pl.col("m").str.extract_groups(r"^(\w+ \w+) failed for request .*?\brid='([^']+)'")
        copy = _rank_copy(pl.concat_str([g.struct.field("1"), g.struct.field("2")], separator=" "))
        cols = {"event": pl.when(copy).then(pl.lit("log")).otherwise(pl.lit("request_aborted")),
                # (SGLang prints no level: ERROR is ours, on the line that counts)
                "level": pl.when(~copy).then(pl.lit("ERROR")), **F.xfer_fail_columns()}
        extra["rank_copy"] = pl.when(copy).then(True)
    elif fam == "request":
        sub = sub.with_columns(**F.request_columns())
        cols = {
            "event": pl.lit("request"),
            "request_id": pl.col("request_id"),
            "prompt_tokens": pl.col("prompt_tokens"),
            "output_tokens": pl.col("output_tokens"),
            "e2e_s": pl.col("e2e_s"),
            "queue_s": pl.col("queue_s"),
            "ttft_s": pl.col("ttft_s"),
            "tpot_s": pl.col("tpot_s"),
            # the exporter's own Unix time wins; a `Finish:` line has its prefix time
            "ts": pl.coalesce(
                pl.from_epoch((pl.col("_finished_unix") * 1e6).round().cast(pl.Int64), time_unit="us"), pl.col("ts")
            ),
            "instance": pl.lit(_metrics_instance(ctx)) if _metrics_instance(ctx) else pl.lit(None, pl.String),
        }
        extra = F.request_attrs()
    elif fam == "reqtime":
        # one worker's stages of a finished request (no end-to-end time: a PD request has
        # one such line on the prefill and one on the decode worker)
        extra = F.req_time_attrs()
        stage = extra["stage"]
        cols = {"event": pl.lit("request"), **F.req_time_columns(),
                "instance": _role_instance(pl.when(stage.is_in(["prefill", "decode"])).then(stage), ctx)}
    elif fam == "arrive":
        cols = {"event": pl.lit("request_arrived"), "request_id": F.receive_request_id(),
                "sampling_params": F.receive_sampling_params()}
    elif fam == "access":
        sub, cols, extra = uvicorn.access_columns(sub, m)
    elif fam == "aiohttp":
        g = m.str.extract_groups(F.AIOHTTP_ACCESS)
        cols = {"event": pl.lit("http_access"), "http_status": g.struct.field("status").cast(pl.Int32, strict=False)}
        extra = {k: g.struct.field(k) for k in ("method", "path", "client")} | {"protocol": g.struct.field("proto")}
    else:
        cols, extra = other_columns(sub)
    message = pl.col("body_all")
    if fam == "other":  # an unparsed record keeps its lines as they were
        message = pl.when(cols["event"] == "unparsed").then(pl.col("raw")).otherwise(message)
    fields = {**_common_attrs(sub), **extra}
    base = ["line", "n_lines", "ts"]
    if "level" not in cols:
        cols["level"] = pl.col("plevel")
    out = sub.select(
        *(c for c in base if c not in cols),
        *(v.alias(k) for k, v in cols.items()),
        message.alias("message"),
        *(v.alias(f"_a_{k}") for k, v in fields.items()),
        *([extra_json.alias("_extra")] if extra_json is not None else []),
    )
    vals = out.select(pl.col(f"_a_{k}").alias(k) for k in fields)
    attrs = attrs_column(vals, list(fields))
    out = out.drop(f"_a_{k}" for k in fields).with_columns(attrs)
    if extra_json is not None:
        out = out.with_columns(_merge_json(pl.col("attrs"), pl.col("_extra")).alias("attrs")).drop("_extra")
    return out


def _rank_copy(message: pl.Expr) -> pl.Expr:
    """True on the other ranks' copies of a line every TP rank logs within the same second:
    the first line of each (second, DP rank, message) counts (a node of a multi-node TP group
    may never see TP0's line); a rank logging the same message twice in a second is two
    events: the k-th line of each rank pairs with the k-th of the others."""
    dp = pl.col("ranks").str.extract(r"(?:^|\s)DP(\d+)\b", 1).fill_null("")
    tp = pl.col("ranks").str.extract(r"(?:^|\s)TP(\d+)\b", 1).fill_null("")
    key = pl.concat_str([pl.col("ts").cast(pl.String).fill_null(""), dp, message], separator="|")
    nth = pl.int_range(pl.len()).over(key, tp)
    return ~pl.struct(key, nth).is_first_distinct()


def _merge_json(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """Two JSON objects (either may be null) as one: `{..a..,..b..}`."""
    a, b = a.cast(pl.String), b.cast(pl.String)
    return (
        pl.when(a.is_null()).then(b)
        .when(b.is_null()).then(a)
        .otherwise(pl.concat_str([a.str.strip_suffix("}"), pl.lit(","), b.str.strip_prefix("{")]))
    )


def _stats_frame(sub: pl.DataFrame, ctx: ParseContext):
    """The scheduler stats records: those of the common shapes by one pattern each
    (fields.stats_shaped), the others key by key (fields.stats_by_key)."""
    m = pl.col("m")
    head = pl.when(m.str.starts_with("Prefill batch")).then(pl.lit("Prefill batch"))
    head = head.when(m.str.starts_with("Decode batch")).then(pl.lit("Decode batch"))
    done, rest = [], []
    for (label,), part in sub.with_columns(head.alias("_k")).partition_by("_k", as_dict=True).items():
        part = part.drop("_k")
        if label is None:
            rest.append(part)
            continue
        shaped, other = F.stats_shaped(part, label)
        done.append(shaped)
        rest.append(other)
    rest = [r for r in rest if r.height]
    if rest:
        done.append(F.stats_by_key(pl.concat(rest) if len(rest) > 1 else rest[0]))
    sub = pl.concat(done, how="diagonal_relaxed") if len(done) > 1 else done[0]
    label = pl.col("_h").struct.field("label")
    is_prefill = label.is_in(["Prefill batch", "new fill batch"]).fill_null(False)
    pd_prefill = is_prefill & pl.any_horizontal(pl.col(k).is_not_null() for k in F.PD_PREFILL_KEYS)
    pd_decode = ~is_prefill & pl.any_horizontal(pl.col(k).is_not_null() for k in F.PD_DECODE_KEYS)
    role = pl.when(pd_prefill).then(pl.lit("prefill")).when(pd_decode).then(pl.lit("decode"))
    cols = {
        # a prefill line is one batch the scheduler ran; a decode line a periodic snapshot
        "event": pl.when(is_prefill).then(pl.lit("batch")).otherwise(pl.lit("engine_stats")),
        **{c: pl.col(c) for c in F.STATS_COLUMNS},
        # the requests this prefill batch took in (`#new-seq`, v0.1's `#seq`)
        "batch_size": pl.when(is_prefill).then(pl.col("new_seq")),
        "instance": _role_instance(role, ctx),
    }
    extra = {
        "phase": pl.when(is_prefill).then(pl.lit("prefill")).otherwise(pl.lit("decode")),
        **{c: pl.col(c) for c in F.STATS_ATTRS},
        "graph_device": pl.col("graph_device"),
        "mixed_running_reqs": pl.col("_h").struct.field("mixed").cast(pl.Int64, strict=False),
        "forward_iter": pl.col("_h").struct.field("fwd").cast(pl.Int64, strict=False),
        "unparsed_fields": pl.col("_fragments"),
    }
    return sub, cols, extra, pl.col("_extra")


def _metrics_instance(ctx: ParseContext) -> str | None:
    """The instance of a per-request metrics file: its directory's, when the instance is
    the one its hourly file name gives (no --instance was given)."""
    if not _METRICS_FILE.match(ctx.instance or ""):
        return None
    return ctx.directory_instance
