"""What an SGLang message says: the scheduler's `Prefill batch` / `Decode batch` lines taken
apart key by key, capacity announcements, retractions, and per-request metrics.

`parsers/engines/sglang/parser.py` owns the line anatomy (the `[date time DPn TPn]` prefix, records,
families); this module looks at the message column `m` only. Formats follow
docs/sglang.md. SGLang renames and adds scheduler fields every few months,
so a stats line is split into its `key: value` pairs and each key is looked up by name
(`STATS_KEYS`); a key we do not know lands in `attrs` under a normalised name, never dropped.
"""

from __future__ import annotations

import polars as pl

from ... import uvicorn

M = pl.col("m")

# ---------------------------------------------------------------------------------------
# the scheduler stats lines

# `Prefill batch. `, `Prefill batch, `, `Prefill batch [1234], ` (SGLANG_LOG_FORWARD_ITERS),
# `Prefill batch(mixed #running-req: 3). ` (mixed chunked prefill), `Decode batch. `,
# v0.1's `new fill batch. ` and its unlabelled decode line `#running-req: N, #token: ...`
STATS_HEAD = (
    r"^(?P<label>Prefill batch|Decode batch|new fill batch)"
    r"(?:\(mixed #running-req: (?P<mixed>\d+)\))?(?: \[(?P<fwd>\d+)\])?[.,] "
)
STATS_LABELLED = r"^(?:Prefill batch|Decode batch|new fill batch)(?:\(mixed [^)]*\))?(?: \[\d+\])?[.,] "
IS_STATS = M.str.contains(STATS_LABELLED) | M.str.contains(
    r"^#running-req: \d+, #token: \d+, "
)
STATS_HINT = M.str.contains(r"^(?:Prefill batch|Decode batch|new fill batch|#running-req: )")

# key as printed -> (name, kind). Schema columns are named as in the schema; the rest go
# to attrs. kinds: int, float, pct (printed in percent -> fraction), bool.
STATS_KEYS: dict[str, tuple[str, str]] = {
    # prefill
    "#new-seq": ("new_seq", "int"),
    "#seq": ("new_seq", "int"),  # v0.1
    "#new-token": ("batch_tokens", "int"),
    "#new_token": ("batch_tokens", "int"),  # v0.1
    "#cached-token": ("cached_tokens", "int"),
    "#cached_token": ("cached_tokens", "int"),  # v0.1
    "cache hit rate": ("cache_hit_rate", "pct"),  # 2024, cumulative
    "tree_cache_hit_rate": ("cache_hit_rate", "pct"),  # v0.1
    "#remaining_req": ("waiting", "int"),  # v0.1
    "#running_req": ("running", "int"),  # v0.1
    "#pending-token": ("pending_tokens", "int"),
    "#inflight-req": ("inflight_reqs", "int"),
    "input throughput (token/s)": ("prompt_tps", "float"),
    # shared
    "token usage": ("kv_usage", "float"),
    "full token usage": ("kv_usage", "float"),  # hybrid (SWA / Mamba) models
    "swa token usage": ("swa_kv_usage", "float"),
    "mamba usage": ("mamba_usage", "float"),
    "#running-req": ("running", "int"),
    "#queue-req": ("waiting", "int"),
    "cuda graph": ("graph", "bool"),
    "npu graph": ("graph", "bool"),
    "cpu graph": ("graph", "bool"),
    # decode
    "#token": ("kv_tokens", "int"),
    "#full token": ("kv_tokens", "int"),
    "#swa token": ("swa_kv_tokens", "int"),
    "mamba num": ("mamba_num", "int"),
    "gen throughput (token/s)": ("gen_tps", "float"),
    "accept len": ("accept_len", "float"),
    "accept rate": ("accept_rate", "float"),
    "largest-len": ("largest_len", "int"),
    # prefill/decode disaggregation
    "#unbootstrapped-req": ("unbootstrapped_reqs", "int"),
    "#bootstrap-req": ("bootstrap_reqs", "int"),
    "#optimistic-req": ("optimistic_reqs", "int"),
    "#transferring-req": ("transferring_reqs", "int"),
    "#prealloc-req": ("prealloc_reqs", "int"),
    "#transfer-req": ("transfer_reqs", "int"),
    "pre-allocated usage": ("prealloc_kv_usage", "float"),
    "#retracted-req": ("retracted_reqs", "int"),
}
# names that are schema columns (the rest go to attrs)
STATS_COLUMNS = ("batch_tokens", "kv_usage", "running", "waiting", "prompt_tps", "gen_tps")
KINDS = {name: kind for name, kind in STATS_KEYS.values()}
STATS_ATTRS = tuple(dict.fromkeys(n for n, _ in STATS_KEYS.values() if n not in STATS_COLUMNS))
# the PD fields that say which side of a disaggregated pair printed the line
PD_PREFILL_KEYS = ("unbootstrapped_reqs", "bootstrap_reqs", "transferring_reqs", "prealloc_reqs")
PD_DECODE_KEYS = ("prealloc_reqs", "transfer_reqs", "prealloc_kv_usage")


def stats_pairs(df: pl.DataFrame) -> pl.DataFrame:
    """The `key: value` pairs of the stats rows of `df` (columns `_row`, `m`), one row per
    pair: `_row`, `k` (as printed), `v` (as printed), `name` (STATS_KEYS, null if unknown).

    The pairs are separated by `, ` (v0.1: `. `); a trailing separator (`, ` from
    2025-03, `.` in v0.1) and blanks a paste added are dropped first."""
    body = M.str.replace(STATS_HEAD, "")
    # v0.1 prefill separates with `. `: a value never contains `. ` (decimals have no blank)
    v01 = M.str.starts_with("new fill batch")
    body = pl.when(v01).then(body.str.replace_all(". ", ", ", literal=True)).otherwise(body)
    pairs = (
        df.select("_row", body.str.strip_chars().str.strip_chars_end(",.").str.strip_chars().alias("_b"))
        .with_columns(pl.col("_b").str.split(", "))
        .explode("_b")
        .filter(pl.col("_b").is_not_null() & (pl.col("_b").str.strip_chars() != ""))
        .with_columns(pl.col("_b").str.strip_chars().str.splitn(": ", 2).alias("_kv"))
        .select(
            "_row",
            pl.col("_kv").struct.field("field_0").alias("k"),
            pl.col("_kv").struct.field("field_1").alias("v"),
        )
    )
    return pairs.with_columns(
        pl.col("k").replace_strict({k: n for k, (n, _) in STATS_KEYS.items()}, default=None, return_dtype=pl.String).alias("name")
    )


def _typed(v: pl.Expr, kind: str) -> pl.Expr:
    v = v.str.strip_chars()
    if kind == "int":
        return v.str.replace_all(",", "", literal=True).cast(pl.Int64, strict=False)
    if kind == "float":
        return v.cast(pl.Float64, strict=False)
    if kind == "pct":
        return (v.str.strip_suffix("%").cast(pl.Float64, strict=False) / 100.0).round(6)
    return pl.when(v == "True").then(True).when(v == "False").then(False)


def stats_wide(pairs: pl.DataFrame) -> pl.DataFrame:
    """One row per `_row` with a typed column per known field (STATS_COLUMNS and
    STATS_ATTRS, null when the line lacks it), `graph_device` (cuda/npu/cpu), and
    `_extra`: the unknown pairs as a JSON object string (keys normalised:
    `#cache_miss` -> `cache_miss`), `_fragments`: pieces without a `: `."""
    known = pairs.filter(pl.col("name").is_not_null())
    # the graph key names the device (`cuda graph` / `npu graph` / `cpu graph`)
    known = pl.concat([
        known.select("_row", "name", "v"),
        known.filter(pl.col("name") == "graph").select(
            "_row", pl.lit("graph_device").alias("name"), pl.col("k").str.extract(r"^(\w+) graph$", 1).alias("v")
        ),
    ])
    # one pivot (a key printed twice on one line, never seen, keeps its first value)
    wide = known.pivot(on="name", index="_row", values="v", aggregate_function="first")
    wide = wide.with_columns(
        _typed(pl.col(name), kind).alias(name) for name, kind in KINDS.items() if name in wide.columns
    )
    unknown = pairs.filter(pl.col("name").is_null())
    if unknown.height:
        key = (
            pl.col("k").str.to_lowercase().str.replace_all(r"[^a-z0-9]+", "_").str.strip_chars("_")
        )
        key = pl.when(key == "").then(pl.lit("field")).otherwise(key)
        val = pl.col("v").str.strip_chars()
        number = val.str.contains(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
        as_json = (
            pl.when(number).then(val)
            .when(val == "True").then(pl.lit("true"))
            .when(val == "False").then(pl.lit("false"))
            # a string, escaped by the JSON encoder: `{"s":"..."}` -> `"..."`
            .otherwise(pl.struct(val.alias("s")).struct.json_encode().str.slice(5).str.strip_suffix("}"))
        )
        member = pl.concat_str([pl.lit('"'), key, pl.lit('":'), as_json])
        extra = (
            unknown.filter(pl.col("v").is_not_null())
            .group_by("_row")
            .agg(pl.concat_str([pl.lit("{"), member.str.join(","), pl.lit("}")]).first().alias("_extra"))
        )
        frags = (
            unknown.filter(pl.col("v").is_null())
            .group_by("_row")
            .agg(pl.col("k").str.join(", ").alias("_fragments"))
        )
        wide = wide.join(extra, on="_row", how="full", coalesce=True).join(frags, on="_row", how="full", coalesce=True)
    return wide


# The stats lines of the shapes SGLang prints most (v0.4 on: prefill and decode, with or
# without the forward counter, cuda/npu/cpu graph, speculative decoding's accept figures,
# the PD fields, SWA models' decode line), each key at its place, as one anchored pattern per
# label that never has two ways on (one-pass: its captures cost about one search, where
# splitting and pivoting the pairs costs many; at most 16 groups keep a pattern one-pass).
# Every field ends with `, ` or the end of the line, and each optional part starts with a
# character nothing it may be skipped for starts with. On a line of these shapes
# `stats_pairs` splits exactly these `key: value` pairs, every key known and printed once,
# the value digits, a decimal, a percentage or True/False, so the typed captures are what
# `stats_wide` reads; lines of any other shape are read key by key.
_SHAPE_VALUE = {"int": "[0-9]+", "float": r"[0-9]+(?:\.[0-9]+)?", "pct": r"[0-9]+(?:\.[0-9]+)?"}
_SHAPE_GROUPS: dict[str, list[str]] = {}  # field name -> its capture groups (either pattern)
_END = "(?:, |$)"


def _field(key: str, name: str) -> str:
    """`key: value, ` with the value a group of field `name` (key as a pattern, `#` off
    where the pattern has read it already)."""
    kind = KINDS[name]
    group = f"g{sum(map(len, _SHAPE_GROUPS.values()))}"
    _SHAPE_GROUPS.setdefault(name, []).append(group)
    return f"{key}: (?P<{group}>{_SHAPE_VALUE[kind]})" + ("%" if kind == "pct" else "") + _END


def _graph(side: str) -> str:
    # `cuda graph: True` / `cpu graph` / `npu graph` as one group: the device and the flag
    return rf"(?:(?P<{side}graph>(?:c(?:uda|pu)|npu) graph: (?:True|False)){_END})?"


PREFILL_SHAPE = (
    r"^Prefill batch(?:\(mixed #running-req: (?P<mixed>[0-9]+)\))?(?: \[(?P<pfwd>[0-9]+)\])?[.,] "
    + _field("#new-seq", "new_seq") + _field("#new-token", "batch_tokens")
    + _field("#cached-token", "cached_tokens")
    + f"(?:{_field('cache hit rate', 'cache_hit_rate')})?"
    + _field("(?:full )?token usage", "kv_usage")
    + _field("#running-req", "running") + _field("#queue-req", "waiting")
    + "(?:" + _field("#pending-token", "pending_tokens")
    + "(?:#(?:" + _field("bootstrap-req", "bootstrap_reqs") + "#|" + _field("prealloc-req", "prealloc_reqs") + "#)"
    + _field("inflight-req", "inflight_reqs") + f"(?:{_field('#optimistic-req', 'optimistic_reqs')})?)?)?"
    + _graph("p") + "(?:" + _field(r"input throughput \(token/s\)", "prompt_tps") + ")?$"
)
_PREFILL_GROUPS = {g for gs in _SHAPE_GROUPS.values() for g in gs}
DECODE_SHAPE = (
    r"^Decode batch(?: \[(?P<dfwd>[0-9]+)\])?[.,] "
    + _field("#running-req", "running")
    + _field("#(?:full )?token", "kv_tokens") + _field("(?:full )?token usage", "kv_usage")
    + f"(?:{_field('#swa token', 'swa_kv_tokens')}{_field('swa token usage', 'swa_kv_usage')})?"
    + f"(?:{_field('accept len', 'accept_len')}(?:{_field('accept rate', 'accept_rate')})?)?"
    + f"(?:{_field('pre-allocated usage', 'prealloc_kv_usage')}(?:#(?:"
    + _field("prealloc-req", "prealloc_reqs") + _field("#transfer-req", "transfer_reqs") + "#)?"
    + _field("retracted-req", "retracted_reqs") + ")?)?"
    + _graph("d") + _field(r"gen throughput \(token/s\)", "gen_tps")
    + f"(?:{_field('largest-len', 'largest_len')})?(?:{_field('#queue-req', 'waiting')})?$"
)
_GRAPH_DEVICE = {f"{d} graph: {v}": d for d in ("cuda", "cpu", "npu") for v in ("True", "False")}
STATS_SHAPES = {"Prefill batch": PREFILL_SHAPE, "Decode batch": DECODE_SHAPE}
_STATS_DTYPES = {"int": pl.Int64, "float": pl.Float64, "pct": pl.Float64, "bool": pl.Boolean}


def stats_shaped(sub: pl.DataFrame, label: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows of `sub` (stats rows whose message starts with `label`) of the label's shape,
    with what stats_by_key adds, read from the pattern's captures: every field of KINDS
    (typed as stats_wide types it, null where the line lacks it), `graph_device`, `_extra`
    and `_fragments` (none: every key of the shapes is known and has a value), the head `_h`
    (STATS_HEAD's captures); and the other rows, as they were."""
    prefill = label == "Prefill batch"
    sub = sub.with_columns(M.str.extract_groups(STATS_SHAPES[label]).alias("_s"))
    g = pl.col("_s").struct.field
    mine = (lambda x: x in _PREFILL_GROUPS) if prefill else (lambda x: x not in _PREFILL_GROUPS)
    # (the first field of each shape is never optional)
    first = _SHAPE_GROUPS["new_seq" if prefill else "running"]
    shaped = sub.select(g(next(x for x in first if mine(x))).is_not_null()).to_series()
    graph = g("pgraph" if prefill else "dgraph")
    out: dict[str, pl.Expr] = {}
    for name, kind in KINDS.items():
        found = [g(x) for x in _SHAPE_GROUPS.get(name, ()) if mine(x)]
        if name == "graph":
            out[name] = graph.str.ends_with("True")
        elif not found:
            out[name] = pl.lit(None, _STATS_DTYPES[kind])
        else:
            typed = found[0].cast(_STATS_DTYPES[kind], strict=False)  # (digits past Int64: null, as _typed)
            out[name] = (typed / 100.0).round(6) if kind == "pct" else typed
    out["graph_device"] = graph.replace_strict(_GRAPH_DEVICE, default=None)
    out["_extra"] = pl.lit(None, pl.String)
    out["_fragments"] = pl.lit(None, pl.String)
    out["_h"] = pl.struct(
        pl.lit(label).alias("label"),
        (g("mixed") if prefill else pl.lit(None, pl.String)).alias("mixed"),
        g("pfwd" if prefill else "dfwd").alias("fwd"),
    )
    done = sub.filter(shaped).with_columns(v.alias(k) for k, v in out.items()).drop("_s")
    return done, sub.filter(~shaped).drop("_s")


def stats_by_key(sub: pl.DataFrame) -> pl.DataFrame:
    """`sub` (stats rows) with every field of KINDS, `graph_device`, `_extra`, `_fragments`
    and the head `_h`, read key by key (stats_pairs, stats_wide)."""
    sub = sub.with_row_index("_row")
    wide = stats_wide(stats_pairs(sub.select("_row", "m")))
    sub = sub.join(wide, on="_row", how="left", maintain_order="left").drop("_row")
    for c in (*STATS_COLUMNS, *STATS_ATTRS, "graph_device", "_extra", "_fragments"):
        if c not in sub.columns:
            sub = sub.with_columns(pl.lit(None, _STATS_DTYPES.get(KINDS.get(c), pl.String)).alias(c))
    return sub.with_columns(M.str.extract_groups(STATS_HEAD).alias("_h"))


# ---------------------------------------------------------------------------------------
# capacity announced at start-up

# `server_args=ServerArgs(model_path='...', ..., chunked_prefill_size=8192, ...)`
IS_SERVER_ARGS = M.str.contains(r"^server_args=ServerArgs\(|^ServerArgs\(")
# `max_total_num_tokens=N, chunked_prefill_size=N, max_prefill_tokens=N,
# max_running_requests=N, context_len=N, available_gpu_mem=F GB` (scheduler, each rank)
IS_POOL = M.str.contains(r"^max_total_num_tokens=\d+")
# `KV Cache is allocated. #tokens: N, K size: F GB, V size: F GB` (memory pool)
IS_KV_ALLOC = M.str.contains(r"^KV Cache is allocated\. #tokens: \d+")
# sglang-jax: `ModelRunner max_total_num_tokens: 315424`
IS_JAX_POOL = M.str.contains(r"^ModelRunner max_total_num_tokens: \d+")
CAPACITY_HINT = M.str.contains(r"^(?:server_args=|ServerArgs\(|max_total_num_tokens=|KV Cache is allocated|ModelRunner max_total_num_tokens:)")


def _arg_int(name: str) -> pl.Expr:
    return M.str.extract(rf"\b{name}=(-?\d+)\b", 1).cast(pl.Int64, strict=False)


def capacity_columns() -> dict[str, pl.Expr]:
    chunk = _arg_int("chunked_prefill_size")
    running = _arg_int("max_running_requests")
    return {
        "kv_capacity_tokens": pl.coalesce(
            pl.when(IS_POOL).then(_arg_int("max_total_num_tokens")),
            pl.when(IS_KV_ALLOC).then(M.str.extract(r"#tokens: (\d+)", 1).cast(pl.Int64, strict=False)),
            pl.when(IS_JAX_POOL).then(M.str.extract(r"max_total_num_tokens: (\d+)", 1).cast(pl.Int64, strict=False)),
        ),
        # -1 disables chunked prefill: no per-batch token budget then
        "max_batch_tokens": pl.when(chunk > 0).then(chunk),
        "max_num_seqs": pl.when(running > 0).then(running),
        "model": pl.when(IS_SERVER_ARGS).then(
            pl.coalesce(
                M.str.extract(r"\bserved_model_name='([^']+)'", 1),
                M.str.extract(r"\bmodel_path='([^']+)'", 1),
            )
        ),
    }


def capacity_attrs() -> dict[str, pl.Expr]:
    return {
        "max_prefill_tokens": _arg_int("max_prefill_tokens"),
        "max_model_len": pl.coalesce(_arg_int("context_len"), _arg_int("context_length")),
        "available_gpu_mem_gb": M.str.extract(r"\bavailable_gpu_mem=([\d.]+)", 1).cast(pl.Float64, strict=False),
        "tp_size": _arg_int("tp_size"),
        "dp_size": _arg_int("dp_size"),
        "pp_size": _arg_int("pp_size"),
        "ep_size": _arg_int("ep_size"),
        "page_size": _arg_int("page_size"),
        "mem_fraction_static": M.str.extract(r"\bmem_fraction_static=([\d.]+)", 1).cast(pl.Float64, strict=False),
        "disaggregation_mode": M.str.extract(r"\bdisaggregation_mode='(\w+)'", 1),
        "k_size_gb": M.str.extract(r"\bK size: ([\d.]+) GB", 1).cast(pl.Float64, strict=False),
        "v_size_gb": M.str.extract(r"\bV size: ([\d.]+) GB", 1).cast(pl.Float64, strict=False),
    }


# ---------------------------------------------------------------------------------------
# retraction: the KV cache ran out, running requests go back to the queue

# `Decode out of memory happened. #retracted_reqs: N, #new_token_ratio: a -> b` (to 2025),
# `KV cache pool is full. Retract requests. #retracted_reqs: N, [#new_tokens_gained: N, ]
# #new_token_ratio: a -> b` (newer)
IS_RETRACT = M.str.contains(r"^(?:Decode out of memory happened|KV cache pool is full\. Retract requests)")
# v0.1 printed it without the prefix, like its stats lines; a bare line must carry the counts
IS_BARE_RETRACT = M.str.contains(r"^Decode out of memory happened\. #retracted_reqs: \d+")


def retraction_attrs() -> dict[str, pl.Expr]:
    return {
        "retracted_reqs": M.str.extract(r"#retracted_reqs: (\d+)", 1).cast(pl.Int64, strict=False),
        "new_tokens_gained": M.str.extract(r"#new_tokens_gained: (\d+)", 1).cast(pl.Int64, strict=False),
        "new_token_ratio_before": M.str.extract(r"#new_token_ratio: ([\d.]+) ->", 1).cast(pl.Float64, strict=False),
        "new_token_ratio_after": M.str.extract(r"#new_token_ratio: [\d.]+ -> ([\d.]+)", 1).cast(pl.Float64, strict=False),
    }


# ---------------------------------------------------------------------------------------
# prefill/decode disaggregation: a request whose KV hand-off failed

# `Prefill transfer failed for request rank=4 req.rid='...' req.bootstrap_room=N with
# exception KVTransferError(...): ...`, its decode-side twin `Decode transfer failed for
# request rank=8 decode_req.req.rid='...' ...`, and the bootstrap / handshake failures before
# it (disaggregation/prefill.py, decode.py): the scheduler aborts the request with that error
IS_XFER_FAIL = M.str.contains(
    r"^(?:Prefill|Decode|Encode|MultimodalEmbedding) (?:transfer|bootstrap|handshake) failed for request\b"
)


def xfer_fail_columns() -> dict[str, pl.Expr]:
    return {"request_id": M.str.extract(r"\brid='([^']+)'", 1)}


def xfer_fail_attrs() -> dict[str, pl.Expr]:
    return {
        "stage": M.str.extract(r"^(\w+) (?:transfer|bootstrap|handshake) failed", 1).str.to_lowercase(),
        "failed_step": M.str.extract(r"^\w+ (transfer|bootstrap|handshake) failed", 1),
        "bootstrap_room": M.str.extract(r"\bbootstrap_room=(\d+)", 1).cast(pl.Int64, strict=False),
        "exc_type": M.str.extract(r" with exception (\w+)", 1),
        "exc_message": M.str.extract(r" with exception (.*)$", 1),
    }


# ---------------------------------------------------------------------------------------
# per-request facts: `--export-metrics-to-file` JSON lines, `--log-requests` Finish lines

# The exporter writes `{"request_parameters": "<json string>", **meta_info}` per finished
# request (python/sglang/srt/managers/request_metrics_exporter.py); meta_info holds `id`,
# `prompt_tokens`, `completion_tokens`, `cached_tokens`, `e2e_latency` (s), `finish_reason`,
# and with request time stats `request_received_ts`, `request_finished_ts`,
# `response_sent_to_client_ts` (Unix s), `queue_time` (s), `prefill_finished_ts` (or
# `prefill_finished_time`, Unix s), `decode_throughput` (tokens/s). The `Finish: obj=...
# out={...'meta_info': {...}}` line of --log-requests repeats meta_info in Python repr.
IS_METRICS_JSON = M.str.starts_with("{") & M.str.contains(r'"e2e_latency"\s*:')
IS_FINISH = M.str.contains(r"^Finish: obj=") & M.str.contains(r"'e2e_latency': ")
IS_RECEIVE = M.str.contains(r"^Receive: obj=")
REQUEST_HINT = M.str.contains(r"^(?:\{|Finish: obj=|Receive: obj=)")

_Q = r"""['"]"""  # JSON or Python-repr quotes


def _meta_num(key: str) -> pl.Expr:
    return M.str.extract(rf"{_Q}{key}{_Q}:\s*(-?[\d.]+(?:[eE][-+]?\d+)?)", 1).cast(pl.Float64, strict=False)


def _meta_int(key: str) -> pl.Expr:
    return M.str.extract(rf"{_Q}{key}{_Q}:\s*(\d+)\b", 1).cast(pl.Int64, strict=False)


def _unix(key_expr: pl.Expr) -> pl.Expr:
    # a plausible Unix time only (perf_counter values, small numbers, are not times)
    return pl.when(key_expr > 1e9).then(key_expr)


def request_columns() -> dict[str, pl.Expr]:
    received = _unix(_meta_num("request_received_ts"))
    finished = _unix(pl.coalesce(_meta_num("request_finished_ts"), _meta_num("response_sent_to_client_ts")))
    prefill_done = _unix(pl.coalesce(_meta_num("prefill_finished_ts"), _meta_num("prefill_finished_time")))
    decode_tps = _meta_num("decode_throughput")
    e2e = _meta_num("e2e_latency")
    ttft = pl.when(prefill_done >= received).then((prefill_done - received).round(9))
    return {
        # a top-level `"id"` (request_parameters is a JSON string: its quotes are escaped)
        "request_id": pl.coalesce(
            M.str.extract(r"""["']id["']:\s*["']([^"']+)["']""", 1),
            M.str.extract(r"\brid='([^']+)'", 1),
        ),
        "prompt_tokens": _meta_int("prompt_tokens"),
        "output_tokens": _meta_int("completion_tokens"),
        "e2e_s": e2e,
        "queue_s": _meta_num("queue_time"),
        "ttft_s": ttft,
        "tpot_s": pl.when(decode_tps > 0).then(1.0 / decode_tps),
        "_finished_unix": pl.coalesce(finished, pl.when(received.is_not_null() & e2e.is_not_null()).then(received + e2e)),
    }


def request_attrs() -> dict[str, pl.Expr]:
    return {
        "cached_tokens": _meta_int("cached_tokens"),
        "finish_reason": pl.coalesce(
            M.str.extract(rf"{_Q}finish_reason{_Q}:\s*\{{[^}}]*?{_Q}type{_Q}:\s*{_Q}(\w+){_Q}", 1),
            M.str.extract(rf"{_Q}finish_reason{_Q}:\s*{_Q}(\w+){_Q}", 1),
        ),
        "num_retractions": pl.coalesce(_meta_int("num_retractions"), _meta_int("total_retractions")),
        "decode_throughput": _meta_num("decode_throughput"),
        "request_received_ts": _meta_num("request_received_ts"),
        "dp_rank": _meta_int("dp_rank"),
    }


# PD (and newer) schedulers log each finished request's stage durations:
# `ReqTimeStats(rid=X, bootstrap_room=3, input_len=4, cached_input_len=0, output_len=1,
# attempts=0, type=prefill): bootstrap_duration=0.32ms, queue_duration=0.41ms,
# forward_duration=8348.19ms, entry_time=1790239662.267, ...`
IS_REQ_TIME = M.str.starts_with("ReqTimeStats(rid=")


def _ms(key: str) -> pl.Expr:
    return (M.str.extract(rf"\b{key}=([\d.]+)ms\b", 1).cast(pl.Float64, strict=False) / 1000.0).round(9)


def req_time_columns() -> dict[str, pl.Expr]:
    return {
        "request_id": M.str.extract(r"^ReqTimeStats\(rid=([^,)\s]+)", 1),
        "prompt_tokens": M.str.extract(r"\binput_len=(\d+)", 1).cast(pl.Int64, strict=False),
        "output_tokens": M.str.extract(r"\boutput_len=(\d+)", 1).cast(pl.Int64, strict=False),
        "queue_s": _ms("queue_duration"),
    }


def req_time_attrs() -> dict[str, pl.Expr]:
    return {
        "stage": M.str.extract(r"\btype=(\w+)\)", 1),
        "cached_tokens": M.str.extract(r"\bcached_input_len=(\d+)", 1).cast(pl.Int64, strict=False),
        "bootstrap_s": _ms("bootstrap_duration"),
        "alloc_wait_s": _ms("alloc_wait_duration"),
        "transfer_s": _ms("transfer_duration"),
        "forward_s": _ms("forward_duration"),
        "attempts": M.str.extract(r"\battempts=(\d+)", 1).cast(pl.Int64, strict=False),
        "entry_time": M.str.extract(r"\bentry_time=([\d.]+)", 1).cast(pl.Float64, strict=False),
    }


def receive_request_id() -> pl.Expr:
    return M.str.extract(r"\brid='([^']+)'", 1)


def receive_sampling_params() -> pl.Expr:
    """`Receive: obj=GenerateReqInput(..., sampling_params={'temperature': 0.1, 'max_new_tokens':
    None, 'stop': None, 'top_k': -1, 'ignore_eos': False, ...}, ...)` as a JSON object of its
    number and boolean entries (a None is absent; strings and lists are left out, as for vLLM)."""
    d = M.str.extract(r"\bsampling_params=\{([^{}]*)\}", 1)
    num = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
    # (each entry closed by its comma: the last one is given one)
    pairs = pl.concat_str([d, pl.lit(",")]).str.extract_all(rf"'\w+': (?:{num}|True|False),").list.eval(
        pl.element().str.strip_suffix(",").str.replace(r"^'(\w+)': ", '"$1":')
        .str.replace(r":True$", ":true").str.replace(r":False$", ":false")
    )
    return pl.when(pairs.list.len() > 0).then(pl.concat_str([pl.lit("{"), pairs.list.join(","), pl.lit("}")]))


# ---------------------------------------------------------------------------------------
# uvicorn and errors

# `INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK`
UVICORN_ACCESS = uvicorn.ACCESS
# aiohttp's access log (the PD bootstrap / Mooncake metadata server run inside SGLang):
# `10.6.131.6 [14/Apr/2025:03:55:53 +0000] "PUT /metadata?key=... HTTP/1.1" 200 176 "-" "-"`
AIOHTTP_ACCESS = (
    r'^(?P<client>\S+) \[\d{2}/\w{3}/\d{4}:[\d:]+ [-+]\d{4}\] '
    r'"(?P<method>[A-Z]+) (?P<path>\S+) (?P<proto>HTTP/[\d.]+)" (?P<status>\d{3}) (?P<bytes>\d+|-)'
)
# glog lines of the C++ libraries in the same stream (Mooncake, NCCL plugins):
# `E0414 03:56:41.856248 77969 transfer_metadata_plugin.cpp:173] message`
GLOG = r"^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6}\s+\d+ [\w.-]+:\d+\] "
UVICORN_OTHER = uvicorn.OTHER
# `Scheduler hit an exception: Traceback ...`, `DataParallelController hit an exception`,
# `TokenizerManager hit an exception`, `Received sigquit from a child process...`, and the
# scheduler's watchdog (`Watchdog timeout (self.watchdog_timeout=300)`: the process is killed)
IS_FATAL = M.str.contains(r"^\w+ hit an exception|Received sigquit from a child proces|^Watchdog timeout \(")
EXCEPTION = (
    r"^(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|"
    r"Timeout|Fault))(?::\s*(?P<excmsg>.*))?$"
)
# tqdm bars and start-up progress printed without the SGLang prefix
PROGRESS = (
    r"^(?:Loading |Capturing |Compiling |Multi-thread loading ).*(?:\d+%|it/s|s/it)|\d+%\|"
    r"|\[\d+:\d+(?::\d+)?(?:<|, )[^\]]*(?:it/s|s/it)\]"
)
