"""TensorRT-LLM iteration statistics: the JSON forms (Triton/GptManager "Active Request
Count" objects and executor camelCase `IterationStats`, one object or an array) and the
PyTorch-backend `iter = N, ...` log line, turned into `engine_stats` columns.

The JSON is read with polars' JSON decoder against one explicit struct type that covers
both key sets, so key order never matters. `trtllm.py` owns line anatomy and calls in here.
"""

from __future__ import annotations

import json
from functools import lru_cache

import polars as pl

_I = pl.Int64
_F = pl.Float64

# Triton backend / GptManager keys (backend <=0.8 alphabetical, >=0.9 code order; units:
# memory in bytes, "KV cache transfer time" in ms, "Timestamp" MM-DD-YYYY HH:MM:SS[.ffffff]).
GPTMANAGER_KEYS: dict[str, pl.DataType] = {
    "Active Request Count": _I,
    "Iteration Counter": _I,
    "Max Request Count": _I,
    "Runtime CPU Memory Usage": _I,
    "Runtime GPU Memory Usage": _I,
    "Runtime Pinned Memory Usage": _I,
    "Timestamp": pl.String,
    "Context Requests": _I,
    "Generation Requests": _I,
    "MicroBatch ID": _I,
    "Paused Requests": _I,
    "Scheduled Requests": _I,
    "Total Context Tokens": _I,
    "Total Generation Tokens": _I,
    "Empty Generation Slots": _I,
    "Free KV cache blocks": _I,
    "Max KV cache blocks": _I,
    "Tokens per KV cache block": _I,
    "Used KV cache blocks": _I,
    "Reused KV cache blocks": _I,
    "KV cache transfer time": _F,
    "Request count": _I,
}

# Executor API IterationStats (trtllm-serve /metrics, getLatestIterationStats): camelCase.
EXECUTOR_KEYS: dict[str, pl.DataType] = {
    "cpuMemUsage": _I,
    "gpuMemUsage": _I,
    "pinnedMemUsage": _I,
    "iter": _I,
    "iterLatencyMS": _F,
    "newActiveRequestsQueueLatencyMS": _F,
    "numActiveRequests": _I,
    "numQueuedRequests": _I,
    "numCompletedRequests": _I,
    "numNewActiveRequests": _I,
    "maxNumActiveRequests": _I,
    "maxBatchSizeRuntime": _I,
    "maxBatchSizeStatic": _I,
    "maxNumTokensRuntime": _I,
    "maxNumTokensStatic": _I,
    "timestamp": pl.String,
    "kvCacheStats": pl.Struct(
        {
            "maxNumBlocks": _I,
            "freeNumBlocks": _I,
            "usedNumBlocks": _I,
            "tokensPerBlock": _I,
            "allocTotalBlocks": _I,
            "allocNewBlocks": _I,
            "reusedBlocks": _I,
            "missedBlocks": _I,
            "cacheHitRate": _F,
        }
    ),
    "inflightBatchingStats": pl.Struct(
        {
            "numScheduledRequests": _I,
            "numContextRequests": _I,
            "numCtxTokens": _I,
            "numGenRequests": _I,
            "numPausedRequests": _I,
            "microBatchId": _I,
            "avgNumDecodedTokensPerIter": _F,
        }
    ),
    "staticBatchingStats": pl.Struct(
        {
            "numScheduledRequests": _I,
            "numContextRequests": _I,
            "numCtxTokens": _I,
            "numGenTokens": _I,
            "emptyGenSlots": _I,
        }
    ),
}

STATS_STRUCT = pl.Struct({**GPTMANAGER_KEYS, **EXECUTOR_KEYS})
STATS_DTYPE = pl.List(STATS_STRUCT)

# A message is stats JSON when it is an object/array naming one of these keys.
STATS_JSON_RE = (
    r'^\s*[\[{].*"(?:Active Request Count|Iteration Counter|numActiveRequests|'
    r'iterLatencyMS|kvCacheStats|inflightBatchingStats)"'
)
PYTORCH_ITER_RE = r"^iter = \d+, global_rank = \d+"


def safe_json_decode(s: pl.Series, dtype: pl.DataType) -> pl.Series:
    """Decode a JSON string column; rows that are not valid JSON of `dtype` become null.

    polars raises on the first bad row, so on failure we bisect: the common all-good
    chunk costs one vectorised decode, k bad rows cost O(k log n) decodes. polars also
    reads a row holding several values (`[..],[..]`, `{..} {..}`) as several rows; a
    length change counts as a failure too, or every later row would shift. The decoded
    pieces are joined once at the end (joining at every level of the bisection costs
    more than the decoding when many rows are bad)."""
    parts: list[pl.Series] = []
    _decode_into(s, dtype, parts)
    return parts[0] if len(parts) == 1 else pl.concat(parts)


def _decode_into(s: pl.Series, dtype: pl.DataType, parts: list[pl.Series]) -> None:
    if s.null_count() == len(s):
        parts.append(pl.Series(s.name, [], dtype=dtype).extend_constant(None, len(s)))
        return
    try:
        out = s.str.json_decode(dtype)
        if len(out) == len(s):
            parts.append(out)
            return
    except pl.exceptions.PolarsError:  # ComputeError on the first bad row
        pass
    if len(s) == 1:
        parts.append(pl.Series(s.name, [], dtype=dtype).extend_constant(None, 1))
        return
    mid = len(s) // 2
    _decode_into(s[:mid], dtype, parts)
    _decode_into(s[mid:], dtype, parts)


def split_stats(df: pl.DataFrame, msg: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stats rows, other rows) of `df`, as `split_stats_general` gives them.

    A chunk's stats lines are nearly always of one form: all flat objects (Triton) or all
    nested objects and arrays (the executor). Then only the stats rows are decoded, taken
    apart from the others before: filtering a frame of text columns is cheap, filtering it
    once it holds the wide decoded struct is not. Any other mix, or a stats row that does
    not decode, takes the general path."""
    m = pl.col(msg)
    is_json = _stats_rows(df.select(m))
    n_json = int(is_json.sum())
    if n_json == 0:
        return df.head(0), df
    stats = df if n_json == df.height else df.filter(is_json)
    other = df.head(0) if n_json == df.height else df.filter(~is_json)
    st = read_flat_by_template(stats[msg])
    if st is not None:  # flat objects, unpadded: what the decode below gives them
        return stats.with_columns(st.alias("_st")), other
    j = stats.select(_json_text(m, stats).alias("_st"))
    shape = j.select(
        _flat(pl.col("_st")).sum().alias("flat"), pl.col("_st").str.ends_with("}").sum().alias("closed")
    ).row(0)
    if shape == (n_json, n_json):  # every stats row a flat object: decoded as a struct
        st = _decode_flat(j["_st"])
        if st.null_count():
            return split_stats_general(df, msg)
        stats = stats.with_columns(st)
    elif shape[0] == 0:  # nested objects and arrays: decoded as arrays, one row per element
        elements = safe_json_decode(j.select(_wrapped(pl.col("_st")))[:, 0], STATS_DTYPE)
        if elements.null_count():
            return split_stats_general(df, msg)
        stats = stats.with_columns(elements).explode("_st", empty_as_null=True)
    else:
        return split_stats_general(df, msg)
    return stats, other


def _is_json(m: pl.Expr) -> pl.Expr:
    return m.str.contains(STATS_JSON_RE) | m.str.contains(r"^\s*\[\]\s*$")


# Lines that match STATS_JSON_RE by their literals alone: Triton's object opens with its
# first key; an executor object names `iterLatencyMS` on the same line (`.` is any but `\n`)
_SURE_TRITON = pl.first().str.starts_with('{"Active Request Count"').fill_null(False)
_SURE_STATS = (
    _SURE_TRITON
    | (
        pl.first().str.starts_with("{")
        & pl.first().str.contains('"iterLatencyMS"', literal=True)
        & ~pl.first().str.contains("\n", literal=True)
    )
).fill_null(False)


def _stats_rows(msg: pl.DataFrame) -> pl.Series:
    """`_is_json` of each row of the one-column frame `msg` (null as false). Each test runs
    only on the rows the ones before did not settle: Triton's head, then the executor's
    literals, then the pattern (a pattern under `when` would still read every row; the
    executor's literals read a line to its end)."""
    sure = msg.select(_SURE_TRITON)[:, 0]
    if sure.all():
        return sure
    return sure.scatter((~sure).arg_true(), _stats_rows_rest(msg.filter(~sure)))


def _stats_rows_rest(msg: pl.DataFrame) -> pl.Series:
    sure = msg.select(_SURE_STATS)[:, 0]
    if sure.all():
        return sure
    unsure = ~sure
    found = msg.filter(unsure).select(_is_json(pl.first()).fill_null(False))[:, 0]
    return sure.scatter(unsure.arg_true(), found)


def _json_text(m: pl.Expr, df: pl.DataFrame) -> pl.Expr:
    """The message without surrounding whitespace (stripped only when some row has any)."""
    padded = m.str.contains(r"^\s") | m.str.contains(r"\s$")
    return m.str.strip_chars() if any_row(df, padded) else m


def _flat(j: pl.Expr) -> pl.Expr:
    # only a flat object (no `}` before its last character) can be read as one value
    return j.str.starts_with("{") & ~j.str.contains(r"(?s)\}.")


def _wrapped(j: pl.Expr) -> pl.Expr:
    return pl.when(j.str.starts_with("[")).then(j).otherwise(pl.concat_str([pl.lit("["), j, pl.lit("]")]))


def split_stats_general(df: pl.DataFrame, msg: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(stats rows, other rows) of `df`: a stats row holds one decoded stats object in the
    struct column `_st`; an array's elements share their record's row span (an empty
    array, the executor's stats buffer before the first iteration, gives one null `_st`).

    A flat object (Triton's stats) is decoded straight into the struct, not wrapped as a
    one-element array (the list decode costs ~20% more); other objects (nested executor
    stats, `{..}, {..}`: polars would read that as two rows) and arrays get the array
    decode. The JSON is the message without surrounding whitespace: tested on the message
    as is (the patterns allow it), stripped only when some row has any."""
    m = pl.col(msg)
    df = df.with_columns(_is_json(m).alias("_is_json"))
    is_json = pl.col("_is_json")
    padded = is_json & (m.str.contains(r"^\s") | m.str.contains(r"\s$"))
    text = m.str.strip_chars() if any_row(df, padded) else m
    df = df.with_columns(pl.when(is_json).then(text).alias("_json")).drop("_is_json")
    j = pl.col("_json")
    # one without a closing `}` at all (a cut line) is not tried: bad rows make decoding bisect
    df = df.with_columns(_flat(j).alias("_flat"))
    obj = df.select(pl.when(pl.col("_flat") & j.str.ends_with("}")).then(j))["_json"]
    df = df.with_columns(_decode_flat(obj).alias("_st"))
    array = j.is_not_null() & ~pl.col("_flat")  # a flat object failing alone fails wrapped
    if not any_row(df, array):
        n_objects = df.height - df["_st"].null_count()
        if n_objects == df.height:  # filtering the wide struct costs more than this test
            return df.drop("_json", "_flat"), df.head(0).drop("_st", "_json", "_flat")
        if n_objects == 0:
            return df.head(0).drop("_json", "_flat"), df.drop("_st", "_json", "_flat")
        stats = df.filter(pl.col("_st").is_not_null())
        other = df.filter(pl.col("_st").is_null())
        return stats.drop("_json", "_flat"), other.drop("_st", "_json", "_flat")
    wrapped = df.select(pl.when(array).then(_wrapped(j)).alias("_json"))["_json"]
    df = df.with_columns(safe_json_decode(wrapped, STATS_DTYPE).alias("_elements"))
    df = df.drop("_flat")
    objects = df.filter(pl.col("_st").is_not_null()).drop("_elements", "_json")
    arrays = (
        df.filter(pl.col("_elements").is_not_null())
        .drop("_st", "_json")
        .explode("_elements", empty_as_null=True)
        .rename({"_elements": "_st"})
    )
    other = df.filter(pl.col("_st").is_null() & pl.col("_elements").is_null())
    return pl.concat([objects, arrays]), other.drop("_st", "_elements", "_json")


def _decode_flat(obj: pl.Series) -> pl.Series:
    """Flat stats objects (null elsewhere) as STATS_STRUCT, null where not valid: one
    struct decode when all are valid; else the array decode of each wrapped as `[obj]`,
    whose bisection over bad rows is ~1.5x cheaper than the struct decode's."""
    try:
        out = obj.str.json_decode(STATS_STRUCT)
        if len(out) == len(obj):
            return out
    except pl.exceptions.PolarsError:
        pass
    wrapped = obj.to_frame().select(pl.concat_str([pl.lit("["), pl.col(obj.name), pl.lit("]")]))
    return safe_json_decode(wrapped.to_series(), STATS_DTYPE).list.first().alias(obj.name)


def read_flat_by_template(obj: pl.Series) -> pl.Series | None:
    """`_decode_flat(obj)` read without the JSON decoder, when every row is the first row's
    object with other values; None otherwise (then the decoder reads them).

    A backend prints its stats objects with the same keys in the same order, integers and a
    timestamp string: the first row names them. Each row is cut at its first commas; a row
    counts only if each piece opens with its key (`"key":`), the pieces and commas make the
    whole row, the last closes it, every integer is written as JSON writes one and fits
    Int64, and every string holds no quote, backslash or control character (no escape to
    undo). Such a row has one JSON reading: the values between the keys."""
    if obj.len() == 0 or obj.null_count():
        return None
    keys = _template(obj[0])
    if keys is None:
        return None
    cut, read, check, build = _template_exprs(keys)
    values = obj.to_frame("_j").select(cut).select(read).select(check)
    if not values["_ok"].all() or values.drop("_ok").null_count().row(0) != (0,) * len(keys):
        return None
    return values.select(build).to_series().alias(obj.name)


def _template(first: str) -> tuple[str, ...] | None:
    """The keys of a flat object whose values are integers of Int64 keys or strings of
    String keys; None for any other object (floats, nulls, nesting, repeated or unknown
    keys)."""
    if not first.startswith("{"):
        return None
    try:
        pairs = json.loads(first, object_pairs_hook=lambda p: p)
    except (ValueError, RecursionError):
        return None
    if not isinstance(pairs, list) or not pairs:
        return None
    keys = tuple(k for k, _ in pairs)
    if len(set(keys)) != len(keys):
        return None
    for key, value in pairs:
        dtype = GPTMANAGER_KEYS.get(key)
        if not ((dtype == _I and type(value) is int) or (dtype == pl.String and type(value) is str)):
            return None
    return keys


# JSON's integer grammar; the strings a template accepts: no escape, no control character,
# no `}` (a row holding one is not read as a flat object by `split_stats`)
_JSON_INT = r"-?(?:0|[1-9][0-9]*)"
_PLAIN_STRING = r'^"[^"\\}\x00-\x1f]*"$'


@lru_cache(maxsize=16)
def _template_exprs(keys: tuple[str, ...]) -> tuple[list[pl.Expr], list[pl.Expr], list[pl.Expr], pl.Expr]:
    """Four stages (eager polars evaluates a shared sub-expression at every use): the row
    `_j` cut at its first commas; the text after each key `_tI` and `_ok` (the keys and
    commas make the row); each value `_vI` and `_ok` (the texts are JSON values of the
    key's type); `_st` (STATS_STRUCT)."""
    j = pl.col("_j")
    n = len(keys)
    heads = [("{" if i == 0 else "") + json.dumps(k) + ":" for i, k in enumerate(keys)]
    cut = [j, j.str.split_exact(",", n - 1).alias("_parts")]
    pieces = [pl.col("_parts").struct.field(f"field_{i}") for i in range(n)]
    # each piece less its key (a piece not opening with it is left whole: told below)
    texts = [p.str.strip_prefix(h).alias(f"_t{i}") for i, (p, h) in enumerate(zip(pieces, heads))]
    texts[-1] = texts[-1].str.strip_suffix("}")
    pieces_len = pl.sum_horizontal(p.str.len_bytes() for p in pieces)
    shape = [
        pieces[-1].str.ends_with("}"),
        # the pieces and the commas between them are the whole row
        pieces_len + (n - 1) == j.str.len_bytes(),
    ]
    read = [*texts, pl.all_horizontal(shape).alias("_ok"), pieces_len.alias("_plen")]
    # every piece opened with its key (and the last closed with `}`): then the texts are the
    # pieces less the keys' bytes and that one; a piece without its key would add its key's
    # length (the keys are ASCII: `len` counts their bytes)
    keys_len = sum(len(h) for h in heads) + 1
    ok = [pl.col("_ok"), pl.sum_horizontal(pl.col(f"_t{i}").str.len_bytes() for i in range(n)) + keys_len == pl.col("_plen")]
    ints = [pl.col(f"_t{i}") for i, k in enumerate(keys) if GPTMANAGER_KEYS[k] == _I]
    if ints:
        ok.append(
            pl.concat_str(ints, separator=",").str.contains(
                f"^{_JSON_INT}" + f"(?:,{_JSON_INT}){{{len(ints) - 1}}}$"
            )
        )
    values = []
    for i, key in enumerate(keys):
        text = pl.col(f"_t{i}")
        if GPTMANAGER_KEYS[key] == _I:
            values.append(text.cast(_I, strict=False).alias(f"_v{i}"))  # null past Int64
        else:
            ok.append(text.str.contains(_PLAIN_STRING))
            values.append(text.str.slice(1, text.str.len_chars() - 2).alias(f"_v{i}"))
    check = [*values, pl.all_horizontal(ok).fill_null(False).alias("_ok")]
    value_of = {k: pl.col(f"_v{i}") for i, k in enumerate(keys)}
    build = pl.struct(
        value_of[f.name].alias(f.name) if f.name in value_of else pl.lit(None, f.dtype).alias(f.name)
        for f in STATS_STRUCT.fields
    ).alias("_st")
    return cut, read, check, build


def any_row(df: pl.DataFrame, test: pl.Expr) -> bool:
    """Whether `test` holds on some row of `df`: most clean-ups are needed by few files,
    and a test that matches nothing costs far less than rewriting every line."""
    return bool(df.select(test.any()).item())


def _ts(expr: pl.Expr, fmt: str) -> pl.Expr:
    return expr.str.to_datetime(fmt, time_unit="us", strict=False)


def json_stats_columns(st: str) -> tuple[dict[str, pl.Expr], dict[str, pl.Expr]]:
    """(schema columns, attrs fields) from the exploded stats struct column `st`."""
    f = pl.col(st).struct.field
    kv = f("kvCacheStats").struct.field
    ifb = f("inflightBatchingStats").struct.field
    sb = f("staticBatchingStats").struct.field
    used = pl.coalesce(f("Used KV cache blocks"), kv("usedNumBlocks"))
    total = pl.coalesce(f("Max KV cache blocks"), kv("maxNumBlocks"))
    stamp = pl.coalesce(f("Timestamp"), f("timestamp"))
    return {
        "ts": _ts(stamp, "%m-%d-%Y %H:%M:%S%.f"),
        "running": pl.coalesce(f("Active Request Count"), f("numActiveRequests")),
        "waiting": f("numQueuedRequests"),
        "batch_size": pl.coalesce(
            f("Scheduled Requests"),
            ifb("numScheduledRequests"),
            sb("numScheduledRequests"),
        ),
        "kv_blocks_used": used,
        "kv_blocks_total": total,
        "kv_usage": pl.when(total > 0).then(used.cast(_F) / total),
    }, {
        "iteration": pl.coalesce(f("Iteration Counter"), f("iter")),
        "iter_latency_s": f("iterLatencyMS") / 1000.0,
        "queue_latency_s": f("newActiveRequestsQueueLatencyMS") / 1000.0,
        "gpu_mem_bytes": pl.coalesce(f("Runtime GPU Memory Usage"), f("gpuMemUsage")),
        "cpu_mem_bytes": pl.coalesce(f("Runtime CPU Memory Usage"), f("cpuMemUsage")),
        "pinned_mem_bytes": pl.coalesce(
            f("Runtime Pinned Memory Usage"), f("pinnedMemUsage")
        ),
        "max_request_count": pl.coalesce(
            f("Max Request Count"), f("maxNumActiveRequests")
        ),
        "context_requests": pl.coalesce(
            f("Context Requests"), ifb("numContextRequests"), sb("numContextRequests")
        ),
        "generation_requests": pl.coalesce(
            f("Generation Requests"), ifb("numGenRequests")
        ),
        "context_tokens": pl.coalesce(
            f("Total Context Tokens"), ifb("numCtxTokens"), sb("numCtxTokens")
        ),
        "generation_tokens": pl.coalesce(
            f("Total Generation Tokens"), sb("numGenTokens")
        ),
        "empty_generation_slots": pl.coalesce(
            f("Empty Generation Slots"), sb("emptyGenSlots")
        ),
        "paused_requests": pl.coalesce(f("Paused Requests"), ifb("numPausedRequests")),
        "micro_batch_id": pl.coalesce(f("MicroBatch ID"), ifb("microBatchId")),
        "kv_blocks_free": pl.coalesce(f("Free KV cache blocks"), kv("freeNumBlocks")),
        "tokens_per_block": pl.coalesce(
            f("Tokens per KV cache block"), kv("tokensPerBlock")
        ),
        "kv_blocks_reused": pl.coalesce(
            f("Reused KV cache blocks"), kv("reusedBlocks")
        ),
        "kv_blocks_alloc_new": kv("allocNewBlocks"),
        "kv_blocks_alloc_total": kv("allocTotalBlocks"),
        "kv_blocks_missed": kv("missedBlocks"),
        "kv_cache_hit_rate": kv("cacheHitRate"),
        "kv_transfer_s": f("KV cache transfer time") / 1000.0,
        "request_count": f("Request count"),
        "completed_requests": f("numCompletedRequests"),
        "new_active_requests": f("numNewActiveRequests"),
        "max_batch_size_runtime": f("maxBatchSizeRuntime"),
        "max_batch_size_static": f("maxBatchSizeStatic"),
        "max_num_tokens_runtime": f("maxNumTokensRuntime"),
        "max_num_tokens_static": f("maxNumTokensStatic"),
        "avg_decoded_tokens_per_iter": ifb("avgNumDecodedTokensPerIter"),
    }


def _int(msg: pl.Expr, pattern: str) -> pl.Expr:
    return msg.str.extract(pattern, 1).cast(_I, strict=False)


def pytorch_iter_columns(msg: pl.Expr) -> tuple[dict[str, pl.Expr], dict[str, pl.Expr]]:
    """(schema columns, attrs fields) of the PyTorch-backend `iter = N, global_rank = ...`
    line; every pattern names a field of that line, so other lines give nulls.

    Fields are extracted one by one (not one positional regex) because releases add and
    move fields (elapsed_time -> host/prev_device step times, num_scheduled_requests,
    kv_cache_util, ...)."""
    f = lambda p: msg.str.extract(p, 1).cast(_F, strict=False)
    kv_util = msg.str.extract(r"kv_cache_util = ([\d.]+%?)", 1)
    kv_frac = (
        pl.when(kv_util.str.ends_with("%"))
        .then(kv_util.str.strip_suffix("%").cast(_F, strict=False) / 100.0)
        .otherwise(kv_util.cast(_F, strict=False))
    )
    cols = {
        "ts": _ts(
            msg.str.extract(r"timestamp = (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})", 1),
            "%Y-%m-%d %H:%M:%S",
        ),
        "batch_size": _int(msg, r"num_scheduled_requests[:=] ?(\d+)"),
        "kv_usage": kv_frac,
    }
    attrs = {
        "iteration": _int(msg, r"^iter = (\d+), global_rank"),
        "global_rank": _int(msg, r"^iter = \d+, global_rank = (\d+)"),
        "rank": _int(msg, r"^iter = \d+, global_rank = \d+, rank = (\d+)"),
        "currank_requests": _int(msg, r"currank_total_requests = (\d+)/"),
        "total_requests": _int(msg, r"currank_total_requests = \d+/(\d+)"),
        "iter_latency_s": f(r"elapsed_time = ([\d.eE+-]+)s"),
        "host_step_time_s": f(r"host_step_time = ([\d.eE+-]+)ms") / 1000.0,
        "prev_device_step_time_s": f(r"prev_device_step_time = ([\d.eE+-]+)ms")
        / 1000.0,
        "context_requests": _int(msg, r"'num_ctx_requests': (\d+)"),
        "context_tokens": _int(msg, r"'num_ctx_tokens': (\d+)"),
        "generation_tokens_padded": _int(msg, r"'num_generation_tokens': (\d+)"),
    }
    return cols, attrs
