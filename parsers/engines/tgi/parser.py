"""Parser for Hugging Face text-generation-inference (TGI) logs: the router's tracing
"Full" text lines, the launcher's compact lines (with the Python shard's messages it
relays), and both `--json-output` shapes, possibly mixed in one file. The formats are
TGI's own (router/src/, launcher/src/) as real logs show them. The text records are read in `text_format.py`, the JSON records in
`json_format.py` (both into the same columns), field helpers live in `fields.py` and the
`attrs` column in `_with_attrs` below.

Speed: most records of a busy server are the router's bare `Success`; they skip the
error/capacity classification, and each other kind's fields are read on its own rows
(see `text_format.py` for the text lines themselves). A parameters dump is read once per
process (`read_parameters`), and the steps' expressions are built once, not at every block.

Records: a record starts at a line whose TGI header is an RFC 3339 time plus a level, or
at a TGI JSON object (`{"timestamp":...`). Docker-compose prefixes, ANSI codes and outer
timestamps (`docker logs --timestamps`, CloudWatch) are undone before, by the decoding stage
(parsers/wrappers), which gives their service and time as `labels` and `wrapper_ts`. Every other line
(traceback frames, a pretty `Args { ... }` dump, a multi-line prompt, the empty line old
launchers print after each relayed shard message) continues the record before it.

Events:
- `request`: each `Success` line. e2e_s = total_time, queue_s = queue_time,
  inference_s = inference_time, tpot_s = time_per_token, max_tokens = max_new_tokens,
  output_tokens = round(inference_time / time_per_token). ttft_s stays null (TGI does not
  log it). attrs: `arrival_ts` = ts - total_time as an ISO-8601 UTC string with nanoseconds
  (`2024-02-14T06:49:50.826344252Z`; the line is written when the request ends),
  `validation_s`, `endpoint` (outermost span), `seed` (the response's), `param_seed` (the
  requested seed). The other sampling parameters of the `GenerateParameters { ... }` dump go to
  `sampling_params` (a JSON object encoded once per distinct dump; a dictionary column, so
  stored once per row group), not to attrs: clients repeat the same few, and in every
  request's attrs they were most of the bytes of a TGI store.
- `capacity`: `Setting max batch total tokens to N` / `Inferred max batch total tokens: N`
  (max_batch_tokens), `KV-cache blocks: N, size: S` (kv_blocks_total; kv_capacity_tokens =
  N x S; block_size in attrs), launcher defaults and `Model supports up to X ...` (attrs),
  the `Args { ... }` dump (model, max_batch_size -> max_num_seqs, max_batch_total_tokens ->
  max_batch_tokens, max_concurrent_requests etc. in attrs).
- `error`: any ERROR record, plus `Request failed during generation`, `Server error:`
  (batch_size from the `batch{batch_size=N}` span), `no permits available` (overload) and
  CUDA out-of-memory at any level; a relayed traceback is part of its record.
  A Rust panic (`thread 'main' panicked at ...`) and the launcher's exit line (`Error:
  WebserverFailed`) have no header but are error records of their own (level null, time
  inferred). attrs `error_kind`, `method`, `oom`.
- `log`: any other TGI line (lifecycle: Starting shard, Shard ready in X (attrs ready_s),
  Connected, Warming up model, ...).
- `batch`, and the `request` form with request_id/model/token counts: the illustrative lines
  of our design notes (`INFO batch: batch_size=16, max_tokens=2048, queued_requests=3`).
  There `max_tokens` is the batch's token budget, so it goes to max_batch_tokens (not
  batch_tokens, the tokens actually in the batch); queued_requests -> waiting.
- `unparsed`: records without a TGI header; message is the raw text.

Every understood event's attrs also say where it came from: `target`, `file` (file:line),
`span` (span names outer->inner), `rank` (launcher shard).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import polars as pl

from ...base import ParseContext, attrs_column, attrs_json, record_ids, rfc3339_to_ts
from .fields import (
    CAPACITY_GROUPS,
    CAPACITY_RE,
    DURATION_RE,
    args_fields,
    capacity_fields,
    generate_parameters,
    max_new_tokens,
    ns_to_s,
    ns_to_s_small,
    parts_ns,
    parts_ns_staged,
    seed_value,
)
from .json_format import json_records
from .text_format import LEVEL as _LEVEL
from .text_format import TS as _TS
from .text_format import text_records

NAME = "tgi"
# whether a line starts a record depends on that line alone (`record_starts`), so the
# ingest hold-back may ask about a block's last lines only (pipeline/sources/lines.py)
RECORD_LOOKBACK = 0

# a Rust panic and the launcher's exit error carry no header but are records of their own
_PANIC_RE = r"^thread '[^']*' panicked at"
_EXIT_RE = r"^Error: [A-Z][A-Za-z]+$"
_START_RE = rf"^(?:{_TS}[ \t]+{_LEVEL}(?-u:\b)|\{{\x22timestamp\x22)|{_PANIC_RE}|{_EXIT_RE}"

# v0.x launchers print the relayed message quoted: `"Method Decode encountered an error.`
_METHOD_RE = r'^"?Method ([A-Za-z0-9_]+) encountered an error'
_DESIGN_KV_RE = r"^[A-Za-z0-9_]+=[^,]*(?:, [A-Za-z0-9_]+=[^,]*)*$"

# a request chain of two spans: `compat_generate{..}:generate{..}` (the outer one's fields
# without a nested dump)
_CHAIN_RE = r"^([A-Za-z0-9_-]+)(?:\{[^{}]*\})?:([A-Za-z0-9_-]+)(?:\{|$)"

_STR = pl.String
_REQUEST_SPANS = ("generate", "generate_stream", "chat_completions", "completions", "compat_generate")


# ---------------------------------------------------------------------------------------
# contract


def record_starts(text: pl.Series) -> pl.Series:
    return text.cast(pl.String).str.contains(_START_RE).fill_null(False).alias("starts")


def detect(lines: list[str]) -> float:
    if not lines:
        return 0.0
    s = pl.Series(lines, dtype=pl.String)
    s = s.filter(s.str.strip_chars() != "")
    if s.len() == 0:
        return 0.0
    header = s.str.contains(rf"^{_TS}[ \t]+{_LEVEL}[ \t]")
    strong = (header & s.str.contains(r"(?-u:\b)text_generation_(?:launcher|router|client)")) | (
        s.str.starts_with('{"timestamp"') & s.str.contains(r'"target":"text_generation_')
    )
    design = header & s.str.contains(rf"^{_TS}[ \t]+{_LEVEL}[ \t]+(?:generate|batch): [A-Za-z0-9_]+=")
    n_strong, n_design, n = int(strong.sum()), int(design.sum()), s.len()
    if n_strong:
        return min(1.0, 0.6 + 0.4 * (n_strong + n_design) / n)
    if n_design:
        return 0.5 + 0.3 * n_design / n
    return 0.0


def _group(lines: pl.DataFrame) -> pl.DataFrame:
    """One row per record: `line`, `n_lines`, raw `text`, cleaned first line `_first`,
    continuation `_cont` (null for one-line records).
    Like base.group_records, with the first line and the continuation apart."""
    clean = pl.col("text").cast(pl.String)
    starts = lines["text"].cast(pl.String).str.contains(_START_RE).fill_null(False)
    # a one-line record: it starts and the next line starts too (or the chunk ends)
    starts = starts.scatter(0, True)
    one = starts & starts.shift(-1, fill_value=True)
    single = ("line", pl.lit(1, pl.Int32).alias("n_lines"), "text")
    if one.all():
        return lines.select(*single, clean.alias("_first"), pl.lit(None, _STR).alias("_cont"))
    df = lines.with_columns(clean.alias("_clean"), record_ids(starts), one.alias("_one"))
    single = df.filter(pl.col("_one")).select(
        *single, pl.col("_clean").alias("_first"), pl.lit(None, _STR).alias("_cont")
    )
    multi = df.filter(~pl.col("_one")).group_by("_rec", maintain_order=True).agg(
        pl.col("line").first(),
        pl.len().cast(pl.Int32).alias("n_lines"),
        pl.col("text").str.join("\n"),
        pl.col("_clean").first().alias("_first"),
        pl.col("_clean").slice(1).str.join("\n").alias("_cont"),
    ).drop("_rec")
    return pl.concat([single, multi]).sort("line")


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return pl.DataFrame({"line": pl.Series([], dtype=pl.Int64)})
    recs = _group(lines)
    is_json = recs["_first"].str.starts_with('{"timestamp"')
    if not is_json.any():
        parts = [text_records(recs)]
    else:
        parts = [text_records(recs.filter(~is_json)), json_records(recs.filter(is_json))]
    df = pl.concat([p for p in parts if p.height], how="diagonal_relaxed")
    return _events(df)


# ---------------------------------------------------------------------------------------
# classification and events


def _only(cond: pl.Expr, expr: pl.Expr) -> pl.Expr:
    """`expr` where `cond` holds, else null: a regex over the result then skips the rows
    whose outcome is already known (a search over null costs next to nothing)."""
    return pl.when(cond).then(expr)


def _outer_span(spans: pl.Expr) -> pl.Expr:
    """The outermost span's name: `generate{...}:infer` -> `generate`."""
    return spans.str.extract(r"^([A-Za-z0-9_-]+)", 1)


def _utc_ts(df: pl.DataFrame, col: str) -> pl.Expr:
    """`base.rfc3339_to_ts` of the column; when every time in the chunk is UTC with a `.`
    fraction (`2024-02-14T06:49:50.826Z`, as TGI writes them), one strict-format parse
    gives the same times without the three normalising regex replaces."""
    text = pl.col(col)
    all_z, any_comma = df.select(
        text.str.ends_with("Z").all().alias("z"), text.str.contains(",", literal=True).any().alias("comma")
    ).row(0)
    return _ts_expr(col, all_z and not any_comma)


@functools.cache
def _ts_expr(col: str, utc_dot: bool) -> pl.Expr:
    if utc_dot:
        return pl.col(col).str.to_datetime(
            "%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC", strict=False
        )
    return rfc3339_to_ts(pl.col(col))


def _kv(msg: pl.Expr, key: str) -> pl.Expr:
    return msg.str.extract(rf"(?:^|, ){key}=([^,]*)", 1)


def _events(df: pl.DataFrame) -> pl.DataFrame:
    missing = [
        col for col in ("_rank_json", "_ts", "_lvl", "_msg", "target", "file", "span", "_spans", "_params", "batch_size")
        if col not in df.columns
    ]
    if missing:
        df = df.with_columns(
            pl.lit(None, pl.Int64 if col in ("_rank_json", "batch_size") else _STR).alias(col) for col in missing
        )
    # (a chunk whose every record has a header, or is one line, has the simpler columns)
    headless, cont = df["_ts"].null_count() > 0, df["_cont"].null_count() < df.height
    special, columns, plain = _event_exprs(headless, cont)
    if headless:
        df = df.with_columns(special).with_columns(*columns, _utc_ts(df, "_ts").alias("ts"))
    else:
        df = df.with_columns(special, *columns, _utc_ts(df, "_ts").alias("ts"))
    df = df.with_columns(plain)
    return _events_of_kinds(df, int(df["_plain"].sum()))


@functools.cache
def _event_exprs(headless: bool, cont: bool) -> tuple[pl.Expr, tuple[pl.Expr, ...], pl.Expr]:
    """`_events`' columns: the headless records' kind, then `_full`, `rank` and `level`,
    then whether a record is a plain `Success` (built once: they are the same every call),
    for a chunk with or without headless records, with or without continuation lines."""
    msg, target = pl.col("_msg"), pl.col("target")
    cont_text = pl.col("_cont")
    has_cont = cont_text.is_not_null() & (cont_text.str.strip_chars() != "")
    full = pl.when(has_cont).then(
        pl.concat_str([msg, pl.lit("\n"), cont_text.str.strip_chars_end()])
    ).otherwise(msg) if cont else msg
    # launcher span fields come after the message: `... Shard ready in 10.3s rank=0`
    rank_re = r"[ \t]+rank=([0-9]+)[ \t]*$"
    lvl = pl.col("_lvl")
    first = pl.col("_first")
    if headless:
        headless_first = _only(pl.col("_ts").is_null(), first)
        special = (
            pl.when(headless_first.str.contains(_PANIC_RE)).then(pl.lit("panic"))
            .when(headless_first.str.contains(_EXIT_RE)).then(pl.lit("launcher_exit"))
        )
    else:
        special = pl.lit(None, _STR)
    with_rank = _only(full.str.contains("rank=", literal=True), full)
    full_special = pl.when(has_cont).then(
        pl.concat_str([first, pl.lit("\n"), cont_text.str.strip_chars_end()])
    ).otherwise(first) if cont else first
    full_of = pl.coalesce(with_rank.str.replace(rank_re, ""), full)
    columns = (
        (
            pl.when(pl.col("_special").is_not_null()).then(full_special).when(target.is_not_null()).then(full_of)
            if headless else pl.when(target.is_not_null()).then(full_of)
        ).alias("_full"),
        pl.coalesce(pl.col("_rank_json"), with_rank.str.extract(rank_re, 1).cast(pl.Int64, strict=False)).alias("rank"),
        pl.when(lvl == "WARN").then(pl.lit("WARNING")).when(lvl == "TRACE").then(pl.lit("DEBUG"))
        .otherwise(lvl).alias("level"),
    )
    full = pl.col("_full")
    router_says = target.str.starts_with("text_generation_router") | pl.col("_d_total_u").is_not_null()
    # Most records are the router's bare `Success`: a request with no error kind, which
    # the searches below could not match (set aside: they run on the other rows only)
    plain = (
        (msg == "Success") & (full == "Success") & target.is_not_null() & router_says
        & (pl.col("level") != "ERROR") & pl.col("_special").is_null()
    )
    return special.alias("_special"), columns, plain.fill_null(False).alias("_plain")


def _events_of_kinds(df: pl.DataFrame, n_plain: int) -> pl.DataFrame:
    if n_plain == df.height:
        plain_success, rest = df, df.clear()
    elif n_plain == 0:
        plain_success, rest = df.clear(), df
    else:
        plain_success, rest = df.filter(pl.col("_plain")), df.filter(~pl.col("_plain"))
    requests, events = [], []
    if plain_success.height:
        requests.append(plain_success.with_columns(
            pl.lit("request").alias("event"), pl.lit(None, _STR).alias("error_kind"), pl.lit(False).alias("_design")
        ))
    if rest.height:
        rest = _classify(rest)
        requests.append(rest.filter(pl.col("event") == "request"))
        events.append(_with_attrs(_others(rest.filter(pl.col("event") != "request"))))
    requests = [p for p in requests if p.height]
    if requests:
        events.append(_with_attrs(_requests(pl.concat(requests, how="diagonal_relaxed")), requests_only=True))
    return _finish([p for p in events if p.height])


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """`event`, `error_kind` and `_design` of records other than the plain `Success`."""
    first, second = _classify_exprs()
    return df.with_columns(*first).with_columns(*second).drop("_msg1", "_design_batch")


@functools.cache
def _classify_exprs() -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr, ...]]:
    """Two steps: what several columns read as columns first (eager polars evaluates a
    sub-expression again at each use, and plans each use: these records are few, the
    planning is most of their cost)."""
    msg, target, full, special = pl.col("_msg"), pl.col("target"), pl.col("_full"), pl.col("_special")
    no_file = pl.col("file").is_null()
    msg1 = msg.str.strip_chars()
    design_kv = _only(no_file & target.is_in(("generate", "batch")), msg1).str.contains(_DESIGN_KV_RE)
    first = (
        msg1.alias("_msg1"),
        (no_file & (target == "generate") & design_kv).alias("_design"),
        (no_file & (target == "batch") & design_kv).alias("_design_batch"),
    )
    msg1 = pl.col("_msg1")
    router_says = target.str.starts_with("text_generation_router") | pl.col("_d_total_u").is_not_null()
    design_req, design_batch = pl.col("_design"), pl.col("_design_batch")
    success = (msg1 == "Success") & (
        router_says
        | _outer_span(_only((msg1 == "Success") & ~router_says, pl.coalesce(pl.col("span"), pl.col("_spans"))))
        .is_in(_REQUEST_SPANS)
    )
    # (plain text is searched as a literal: one pattern fewer each for polars to compile,
    # and it keeps only a few compiled per thread)
    err_kind = (
        pl.when(special.is_not_null()).then(special)
        .when(full.str.contains("no permits available", literal=True)).then(pl.lit("overloaded"))
        .when(full.str.contains("Request failed during generation", literal=True)).then(pl.lit("generation"))
        .when(full.str.starts_with("Server error:")).then(pl.lit("server"))
        .when(full.str.contains(_METHOD_RE)).then(pl.lit("shard_exception"))
        .when(full.str.contains("Receiver dropped", literal=True)).then(pl.lit("client_gone"))
        .when(full.str.contains(r"(?i)cuda out of memory|OutOfMemoryError")).then(pl.lit("oom"))
        .when(pl.col("level") == "ERROR").then(pl.lit("error"))
    )
    event = (
        pl.when(special.is_not_null()).then(pl.lit("error"))
        .when(target.is_null()).then(pl.lit("unparsed"))
        .when(design_req | success).then(pl.lit("request"))
        .when(design_batch).then(pl.lit("batch"))
        .when(msg1.str.contains(CAPACITY_RE)).then(pl.lit("capacity"))
        .when(err_kind.is_not_null()).then(pl.lit("error"))
        .otherwise(pl.lit("log"))
    )
    design = design_req | design_batch
    return first, (
        event.alias("event"),
        err_kind.alias("error_kind"),
        # in the design-note lines `generate:` / `batch:` is a span name, not a target
        pl.when(design).then(target).otherwise(pl.col("span")).alias("span"),
        pl.when(design).then(None).otherwise(pl.col("_spans")).alias("_spans"),
        pl.when(design).then(None).otherwise(target).alias("target"),
    )


def _requests(df: pl.DataFrame) -> pl.DataFrame:
    if df.height == 0:
        return df
    df = df.with_columns(*_ns_exprs())
    design_any = bool(df["_design"].any())
    small = _small(df, "_ns_total", "_ns_queue", "_ns_inf", "_ns_tpot", "_ns_valid")
    # v0.3-v1.0 routers nest the request span in axum's `HTTP request{...}` span
    if df["_spans"].str.starts_with("HTTP request{").any():
        df = df.with_columns(pl.col("_spans").str.replace(r"^HTTP request\{[^{}]*\}:", "").alias("_spans"))
    df = df.with_columns(_endpoint_expr())
    main, last = _request_exprs(design_any, small)
    return df.with_columns(*main).pipe(_seed_apart).pipe(
        lambda d: d.join(read_parameters(d["_params"]), on="_params", how="left", nulls_equal=True)
    ).with_columns(*last)


@functools.cache
def _ns_exprs() -> tuple[pl.Expr, ...]:
    return tuple(parts_ns(p).alias("_ns" + p[2:]) for p in ("_d_total", "_d_valid", "_d_queue", "_d_inf", "_d_tpot"))


@functools.cache
def _endpoint_expr() -> pl.Expr:
    return _outer_span(pl.coalesce(pl.col("span"), pl.col("_spans"))).alias("_endpoint")


@functools.cache
def _request_exprs(design_any: bool, small: bool) -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr, ...]]:
    """`_requests`' columns before and after the parameters join, for a chunk with or
    without design-note lines, with or without durations past 2**53 ns."""
    design = pl.col("_design")
    msg = pl.col("_msg")
    # the design-note form carries its own counts (`request_id=.., prompt_tokens=..`)
    if design_any:
        design_msg = _only(design, msg)
        design_fields = [
            _kv(design_msg, "request_id").alias("request_id"),
            _kv(design_msg, "model").alias("model"),
            _kv(design_msg, "prompt_tokens").cast(pl.Int64, strict=False).alias("prompt_tokens"),
            _kv(design_msg, "generated_tokens").cast(pl.Int64, strict=False).alias("_gen_tokens"),
        ]
    else:
        design_fields = [
            pl.lit(None, _STR).alias("request_id"),
            pl.lit(None, _STR).alias("model"),
            pl.lit(None, pl.Int64).alias("prompt_tokens"),
            pl.lit(None, pl.Int64).alias("_gen_tokens"),
        ]
    seconds = _seconds(small)
    tpot_ok = pl.col("_ns_tpot") > 0
    arrival_ns = pl.col("ts").dt.epoch("ns") - pl.col("_ns_total")
    main = (
        seconds("_ns_total").alias("e2e_s"),
        seconds("_ns_queue").alias("queue_s"),
        seconds("_ns_inf").alias("inference_s"),
        seconds("_ns_tpot").alias("tpot_s"),
        seconds("_ns_valid").alias("validation_s"),
        pl.when(tpot_ok).then(
            (pl.col("_ns_inf").cast(pl.Float64) / pl.col("_ns_tpot").cast(pl.Float64)).round(0).cast(pl.Int64, strict=False)
        ).alias("_tokens_from_time"),
        seed_value(pl.col("_seed")).alias("seed"),
        pl.from_epoch(arrival_ns, time_unit="ns").dt.strftime("%Y-%m-%dT%H:%M:%S%.9fZ").alias("arrival_ts"),
        pl.col("_endpoint").alias("endpoint"),
        # request chains are `name{..}` or `compat_generate{..}:generate{..}`
        pl.coalesce(
            pl.col("span"),
            # (captures only where a search without them matched: most chains are one span)
            _only(pl.col("_spans").str.contains(_CHAIN_RE), pl.col("_spans"))
            .str.extract(_CHAIN_RE, 0).str.replace_all(r"\{[^{}]*\}|\{$", ""),
            pl.col("_endpoint"),
        ).alias("span"),
        *design_fields,
    )
    last = (
        pl.coalesce(pl.col("_gen_tokens"), pl.col("_tokens_from_time")).alias("output_tokens"),
        pl.when(~design).then(pl.col("_full")).otherwise(msg).alias("message"),
    )
    return main, last


def _small(df: pl.DataFrame, *ns_columns: str) -> bool:
    """Whether every value of the nanosecond columns is below 2**53 (a duration under 104
    days): then `ns_to_s` is its plain division, without the text path for huge values."""
    small = df.select(pl.max_horizontal(pl.col(c).abs().max() for c in ns_columns)).item()
    return small is None or small < 2**53


def _seconds(small: bool) -> Callable[[str], pl.Expr]:
    if small:
        return lambda c: ns_to_s_small(pl.col(c))
    return lambda c: ns_to_s(pl.col(c))


# the requested seed in a parameters dump: `seed: Some(42)` (older routers `seed: 42`)
_PARAM_SEED_RE = r"(?-u:\b)seed: (?:Some\(([0-9]+)\)|([0-9]+))"


def _seed_apart(df: pl.DataFrame) -> pl.DataFrame:
    """`param_seed` per request, and the dumps with their seed made `None`: a client that
    sends a seed per request would otherwise make nearly every dump distinct, and
    `read_parameters` would run its extracts once per request again."""
    has = df["_params"].str.contains(_PARAM_SEED_RE).fill_null(False)
    if not has.any():
        return df.with_columns(pl.lit(None, _STR).alias("param_seed"))
    params = pl.col("_params")
    with_seed = _only(pl.lit(has), params)
    seed = with_seed.str.extract_groups(_PARAM_SEED_RE)
    return df.with_columns(
        pl.coalesce(seed.struct.field("1"), seed.struct.field("2")).alias("param_seed"),
        pl.coalesce(with_seed.str.replace(_PARAM_SEED_RE, "seed: None"), params).alias("_params"),
    )


# what `_parameters_of` gave for each dump seen by this process: a client's few parameter
# sets recur in every block, and reading one anew runs some twenty extracts
_PARAMS_SEEN: dict[str | None, tuple[int | None, str | None]] = {}
# the memo's bounds (settings of this module, which a test may lower): at most this many
# dumps are kept; a longer dump than PARAMS_MEMO_DUMP_BYTES is read at each call, not kept
# (a server's dumps are a few hundred bytes, and the memo's memory stays bounded whatever a
# log's lines hold); more distinct dumps than PARAMS_MEMO_ROWS in one call, and they are
# read there without the memo
PARAMS_MEMO_DUMPS = 4096
PARAMS_MEMO_DUMP_BYTES = 4096
PARAMS_MEMO_ROWS = 256
_PARAMS_SCHEMA = {"_params": pl.String, "max_tokens": pl.Int64, "sampling_params": pl.String}


def forget_parameters() -> None:
    """Empty this process's memo of parameters dumps."""
    _PARAMS_SEEN.clear()


def remembered_parameters() -> frozenset[str | None]:
    """The dumps this process's memo holds."""
    return frozenset(_PARAMS_SEEN)


def read_parameters(params: pl.Series, *, memo: bool = True) -> pl.DataFrame:
    """Sampling parameters per distinct dump (its seed apart, see `_seed_apart`): clients
    repeat the same parameters, so this runs the many small extracts, and encodes
    `sampling_params`, once per distinct value, not once per request (the join then gives
    each request a view of its dump's JSON); and a dump this process read before is not
    read again (`memo=False`: every dump is read here, the memo neither asked nor filled).
    Columns `_params` (each distinct dump), `max_tokens`, `sampling_params`."""
    uniq = params.unique()
    if not memo or uniq.len() > PARAMS_MEMO_ROWS:
        return _parameters_of(uniq)
    dumps = uniq.to_list()
    got = {d: v for d in dumps if (v := _PARAMS_SEEN.get(d)) is not None}
    if len(got) < len(dumps):
        read = _parameters_of(pl.Series([d for d in dumps if d not in got], dtype=pl.String))
        new = dict(zip(read["_params"], zip(read["max_tokens"], read["sampling_params"])))
        got.update(new)
        kept = {d: v for d, v in new.items() if d is None or len(d) <= PARAMS_MEMO_DUMP_BYTES}
        if len(_PARAMS_SEEN) + len(kept) > PARAMS_MEMO_DUMPS:
            _PARAMS_SEEN.clear()
        _PARAMS_SEEN.update(kept)
    known = [got[d] for d in dumps]
    return pl.DataFrame(
        {"_params": dumps, "max_tokens": [k[0] for k in known], "sampling_params": [k[1] for k in known]},
        schema=_PARAMS_SCHEMA,
    )


def _parameters_of(dumps: pl.Series) -> pl.DataFrame:
    """`read_parameters` of distinct dumps, read here."""
    uniq = dumps.to_frame("_params")
    p = pl.col("_params")
    fields = generate_parameters(p)
    del fields["param_seed"]  # per request: `_seed_apart` read it
    return uniq.select(
        "_params",
        max_new_tokens(p).alias("max_tokens"),
        attrs_json(**fields, max_new_tokens=max_new_tokens(p)).alias("sampling_params"),
    )


def _others(df: pl.DataFrame) -> pl.DataFrame:
    """The non-request events: each kind's fields are read on that kind's rows only (a
    kind absent from the chunk costs nothing, not even compiling its regexes)."""
    if df.height == 0:
        return df
    full = pl.col("_full")
    df = df.with_columns(
        pl.coalesce(
            pl.col("span"),
            # span names in order: `a{...}:b:c{...}` -> "a:b:c" (two passes for the
            # parameter dump nested in a span's fields)
            pl.col("_spans").str.replace_all(r"\{[^{}]*\}", "").str.replace_all(r"\{[^{}]*\}", ""),
        ).alias("span"),
        pl.when(pl.col("event") == "unparsed").then(pl.col("text")).otherwise(full).alias("message"),
    )
    kinds = df.partition_by("event", as_dict=True, maintain_order=True)
    return pl.concat(
        [_KIND_FIELDS.get(kind, lambda p: p)(part) for (kind,), part in kinds.items()],
        how="diagonal_relaxed",
    )


def _capacity_fields(df: pl.DataFrame) -> pl.DataFrame:
    groups, fields = _capacity_exprs()
    return df.with_columns(*groups).with_columns(*fields).drop([g.meta.output_name() for g in groups])


@functools.cache
def _capacity_exprs() -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr, ...]]:
    """The capacity patterns' captures as columns, then the fields read from them (a
    capture read by several fields would run again for each)."""
    full = pl.col("_full")
    groups = tuple(full.str.extract_groups(pattern).alias(f"_cap_{name}") for name, pattern in CAPACITY_GROUPS.items())
    args = args_fields(full)
    capf = capacity_fields(full, {name: pl.col(f"_cap_{name}") for name in CAPACITY_GROUPS})
    return groups, (
        pl.coalesce(capf["max_batch_tokens"], args["max_batch_tokens"]).alias("max_batch_tokens"),
        capf["kv_blocks_total"].alias("kv_blocks_total"),
        capf["kv_capacity_tokens"].alias("kv_capacity_tokens"),
        capf["block_size"].alias("block_size"),
        args["model"].alias("model"),
        args["max_num_seqs"].alias("max_num_seqs"),
        *[
            (pl.coalesce(capf[k], args[k]) if k in capf else args[k]).alias(k)
            for k in ("max_concurrent_requests", "max_batch_prefill_tokens", "max_total_tokens",
                      "max_input_tokens", "max_waiting_tokens", "num_shard", "waiting_served_ratio", "quantize")
        ],
        capf["model_max_total_tokens"].alias("model_max_total_tokens"),
    )


def _batch_fields(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(*_batch_exprs())


@functools.cache
def _batch_exprs() -> tuple[pl.Expr, ...]:
    msg = pl.col("_msg")
    return (
        _kv(msg, "max_tokens").cast(pl.Int64, strict=False).alias("max_batch_tokens"),
        pl.coalesce(_kv(msg, "batch_size").cast(pl.Int64, strict=False), pl.col("batch_size")).alias("batch_size"),
        _kv(msg, "queued_requests").cast(pl.Int64, strict=False).alias("waiting"),
    )


def _error_fields(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(*_error_exprs())


@functools.cache
def _error_exprs() -> tuple[pl.Expr, ...]:
    full = pl.col("_full")
    return (
        full.str.extract(_METHOD_RE, 1).alias("method"),
        full.str.contains(r"(?i)cuda out of memory|OutOfMemoryError").alias("oom"),
    )


def _log_fields(df: pl.DataFrame) -> pl.DataFrame:
    # step by step: nested, the helpers' repeated sub-expressions multiply (slow to plan,
    # and run again at each use)
    steps = _log_exprs()
    for step in steps:
        df = df.with_columns(*step)
    return df.drop("_rg", "_ready_i", "_ready_f", "_ready_u", "_ready_n", "_ready_w", "_ready_9", "_ready_ns")


@functools.cache
def _log_exprs() -> tuple[tuple[pl.Expr, ...], ...]:
    ready = pl.col("_full").str.extract(r"^Shard ready in (\S+)$", 1)
    parts = pl.col("_rg").struct
    first, second = parts_ns_staged(("_ready",), ("_ready_ns",))
    return (
        (ready.str.extract_groups(DURATION_RE).alias("_rg"),),
        (parts.field("int").alias("_ready_i"), parts.field("frac").alias("_ready_f"), parts.field("unit").alias("_ready_u")),
        first, second, (ns_to_s(pl.col("_ready_ns")).alias("ready_s"),),
    )


_KIND_FIELDS = {
    "capacity": _capacity_fields,
    "batch": _batch_fields,
    "error": _error_fields,
    "log": _log_fields,
}


_ATTR_KEYS = (
    # request
    "endpoint", "arrival_ts", "validation_s", "seed", "param_seed",
    # capacity
    "block_size", "max_concurrent_requests", "max_batch_prefill_tokens", "max_total_tokens",
    "max_input_tokens", "max_waiting_tokens", "num_shard", "waiting_served_ratio", "quantize",
    "model_max_total_tokens",
    # error / log
    "error_kind", "method", "oom", "ready_s",
    # where it came from
    "target", "file", "span", "rank",
)

_OUT_COLS = (
    "line", "n_lines", "ts", "level", "event", "request_id", "model", "prompt_tokens",
    "output_tokens", "max_tokens", "e2e_s", "queue_s", "tpot_s", "inference_s", "waiting",
    "batch_size", "kv_blocks_total", "kv_capacity_tokens", "max_num_seqs", "max_batch_tokens",
    "message", "sampling_params",
)


def _with_attrs(df: pl.DataFrame, requests_only: bool = False) -> pl.DataFrame:
    """`df` with its `attrs`. The requests and the other events are encoded apart: a
    row's attrs hold its set fields only, so either part's encoding is what the whole
    frame's would give, and the requests' shape test then skips the other kinds' keys."""
    if df.height == 0:
        return df
    have = set(df.columns)
    keys = [k for k in _ATTR_KEYS if k in have]
    keep = None if requests_only else pl.col("event") != "unparsed"
    return df.with_columns(attrs_column(df, keys, keep=keep).alias("attrs"))


def _finish(parts: list[pl.DataFrame]) -> pl.DataFrame:
    # each part narrowed to the output before they are joined: the first step after a
    # concat copies every column of the joined frame into one piece
    df = pl.concat([p.select(*[c for c in _OUT_COLS if c in p.columns], "attrs") for p in parts], how="diagonal_relaxed")
    have = set(df.columns)
    # (a column no event kind of this chunk has is a null String; finalize casts it)
    out = [pl.col(c) if c in have else pl.lit(None, _STR).alias(c) for c in _OUT_COLS]
    df = df.select(*out, "attrs")
    # a chunk of one kind of record is in line order already
    return df if df["line"].is_sorted() else df.sort("line")
