"""Field extraction for the TGI parser (`tgi.py`): Rust `Duration` strings to exact
nanoseconds, the `GenerateParameters { ... }` Debug dump, the launcher `Args { ... }`
dump and the capacity lines of warm-up. Pure polars expressions, no per-line Python.

Durations are Rust `Debug` of `std::time::Duration` (`"2.458150804s"`, `"13.678487ms"`,
`"184.26µs"`, `"70µs"`, `"12ns"`): the integer and fraction digits are read as integers
and combined into integer nanoseconds; seconds are then the float nearest to ns / 1e9
(no binary-float rounding on the way).
"""

from __future__ import annotations

import polars as pl

# µ as Rust prints it (U+00B5), Greek mu (U+03BC) from re-typed logs, and ASCII `us`.
DURATION_RE = r"^[ \t]*(?P<int>[0-9]{1,12})(?:\.(?P<frac>[0-9]{1,9}))?(?P<unit>s|ms|\x{00B5}s|\x{03BC}s|us|ns)[ \t]*$"

NS_PER_S = 1_000_000_000


# span field name -> column prefix of its duration parts (`_d_total_i`, `_f`, `_u`)
DURATION_FIELDS = {
    "total_time": "_d_total",
    "validation_time": "_d_valid",
    "queue_time": "_d_queue",
    "inference_time": "_d_inf",
    "time_per_token": "_d_tpot",
}


def _group(prefix: str) -> str:
    return (
        rf"(?P<{prefix}_i>[0-9]{{1,12}})(?:\.(?P<{prefix}_f>[0-9]{{1,9}}))?"
        rf"(?P<{prefix}_u>s|ms|\x{{00B5}}s|\x{{03BC}}s|us|ns)"
    )


# The router's text span fields in declaration order (server.rs `#[instrument]`): one regex
# pass reads all five durations and the seed, cheaper than one search per field.
TIMING_RE = (
    "^ "
    + " ".join(f'{field}="{_group(prefix)}"' for field, prefix in DURATION_FIELDS.items())
    + ' seed="(?P<_seed>[^"]*)"'
)


def duration_struct(expr: pl.Expr, prefix: str) -> pl.Expr:
    """A duration string -> struct of its parts `{prefix}_i`, `_f`, `_u` (to unnest)."""
    return (
        expr.str.extract_groups(DURATION_RE)
        .struct.rename_fields([f"{prefix}_i", f"{prefix}_f", f"{prefix}_u"])
        .alias(prefix)
    )


def parts_ns(prefix: str) -> pl.Expr:
    """Int64 nanoseconds from the parts columns `{prefix}_i`, `_f`, `_u`."""
    return _ns(pl.col(f"{prefix}_i"), pl.col(f"{prefix}_f"), pl.col(f"{prefix}_u"))


def parts_ns_staged(prefixes: tuple[str, ...], names: tuple[str, ...]) -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr, ...]]:
    """`parts_ns` of each prefix as `names`, in two steps (each a `with_columns`; the second
    drops nothing: the caller drops `{prefix}_n`, `_w`, `_9`): the unit's nanoseconds, the
    whole number and the fraction as columns first, as eager polars evaluates a
    sub-expression again at each use (in `parts_ns` over a capture, the capture would run
    once for each use of the unit)."""
    first, second = [], []
    for prefix, name in zip(prefixes, names):
        unit_ns, whole, frac9 = _ns_parts(pl.col(f"{prefix}_i"), pl.col(f"{prefix}_f"), pl.col(f"{prefix}_u"))
        first += [unit_ns.alias(f"{prefix}_n"), whole.alias(f"{prefix}_w"), frac9.alias(f"{prefix}_9")]
        second.append(_ns_of(pl.col(f"{prefix}_w"), pl.col(f"{prefix}_9"), pl.col(f"{prefix}_n")).alias(name))
    return tuple(first), tuple(second)


def duration_ns(expr: pl.Expr) -> pl.Expr:
    """A Rust Debug duration string -> Int64 nanoseconds (null when it is not one)."""
    g = expr.str.extract_groups(DURATION_RE)
    return _ns(g.struct.field("int"), g.struct.field("frac"), g.struct.field("unit"))


def _ns(whole: pl.Expr, frac: pl.Expr, unit: pl.Expr) -> pl.Expr:
    unit_ns, whole, frac9 = _ns_parts(whole, frac, unit)
    return _ns_of(whole, frac9, unit_ns)


def _ns_parts(whole: pl.Expr, frac: pl.Expr, unit: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(the unit in nanoseconds, the whole number, the fraction in units of 1e-9 of the unit)."""
    unit_ns = (
        pl.when(unit == "s").then(pl.lit(NS_PER_S, pl.Int64))
        .when(unit == "ms").then(pl.lit(1_000_000, pl.Int64))
        .when(unit == "ns").then(pl.lit(1, pl.Int64))
        .when(unit.is_not_null()).then(pl.lit(1_000, pl.Int64))
    )
    # fraction digits padded to 9 = the fraction in units of 1e-9 of the unit; exact for
    # every fraction Rust prints (<= 9 digits for s, 6 for ms, 3 for µs)
    frac9 = frac.fill_null("").str.pad_end(9, "0").cast(pl.Int64, strict=False)
    return unit_ns, whole.cast(pl.Int64, strict=False), frac9


def _ns_of(whole: pl.Expr, frac9: pl.Expr, unit_ns: pl.Expr) -> pl.Expr:
    # a duration past 2**63 ns (292 years) would wrap around: null instead
    fits = whole <= (2**63 - 1) // unit_ns - 1
    return pl.when(fits).then(whole * unit_ns + (frac9 * unit_ns) // NS_PER_S)


def ns_to_s(expr: pl.Expr) -> pl.Expr:
    """Int64 nanoseconds -> Float64 seconds, correctly rounded (== ns / 1e9 in Python).

    Below 2**53 ns (104 days) the float of ns is exact and one IEEE division rounds
    correctly, but only when the divisor is a column: polars turns a division by a
    constant into a multiplication by its reciprocal, which is off by one ulp for many
    values. Larger values go through the decimal text `S.NNNNNNNNN`."""
    exact = expr.abs() < 2**53
    big = pl.when(~exact).then(expr)  # null elsewhere, so the text path costs little
    return pl.when(exact).then(ns_to_s_small(expr)).otherwise(_ns_to_s_text(big))


def ns_to_s_small(expr: pl.Expr) -> pl.Expr:
    """`ns_to_s` for values below 2**53 in magnitude (the caller knows they are)."""
    per_s = (expr * 0).cast(pl.Float64) + float(NS_PER_S)  # a column of 1e9, not a literal
    return expr.cast(pl.Float64) / per_s


def _ns_to_s_text(expr: pl.Expr) -> pl.Expr:
    sign = pl.when(expr < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    a = expr.abs()
    text = pl.concat_str(
        [sign, (a // NS_PER_S).cast(pl.String), pl.lit("."), (a % NS_PER_S).cast(pl.String).str.zfill(9)]
    )
    return text.cast(pl.Float64, strict=False)


def span_field(spans: pl.Expr, name: str) -> pl.Expr:
    """`name="value"` as tracing prints a string-recorded span field -> value."""
    return spans.str.extract(rf'(?:^|[{{ ]){name}="([^"]*)"', 1)


# ---------------------------------------------------------------------------------------
# GenerateParameters { best_of: None, temperature: Some(0.69), ..., max_new_tokens: Some(180), ... }

_FLOAT_PARAMS = ("temperature", "top_p", "typical_p", "repetition_penalty", "frequency_penalty")
_INT_PARAMS = ("best_of", "top_k", "truncate", "top_n_tokens")
_BOOL_PARAMS = ("do_sample", "return_full_text", "watermark", "details", "decoder_input_details")


def _param(params: pl.Expr, name: str) -> pl.Expr:
    # `name: Some(v)` or (older routers) `name: v`; `None` -> null
    v = params.str.extract(rf"(?-u:\b){name}: (?:Some\()?([^,() \t}}]+)", 1)
    return pl.when(v != "None").then(v)


def generate_parameters(params: pl.Expr) -> dict[str, pl.Expr]:
    """Sampling parameters from the Debug dump, typed, keyed by their TGI names."""
    out: dict[str, pl.Expr] = {}
    for name in _INT_PARAMS:
        out[name] = _param(params, name).cast(pl.Int64, strict=False)
    for name in _FLOAT_PARAMS:
        out[name] = _param(params, name).cast(pl.Float64, strict=False)
    for name in _BOOL_PARAMS:
        v = _param(params, name)
        out[name] = pl.when(v == "true").then(True).when(v == "false").then(False)
    # the seed is a u64: keep it as text (it does not fit Int64)
    out["param_seed"] = _param(params, "seed")
    out["adapter_id"] = params.str.extract(r'(?-u:\b)adapter_id: Some\("([^"]*)"\)', 1)
    return out


def max_new_tokens(params: pl.Expr) -> pl.Expr:
    return params.str.extract(r"(?-u:\b)max_new_tokens: (?:Some\()?([0-9]+)", 1).cast(pl.Int64, strict=False)


def seed_value(seed: pl.Expr) -> pl.Expr:
    """The response seed span field `"None"` / `"Some(13465365087046561476)"` -> digits."""
    # a search without captures, then a slice: cheaper than extracting the group
    return pl.when(seed.str.contains(r"^Some\([0-9]+\)$")).then(seed.str.slice(5).str.strip_suffix(")"))


# ---------------------------------------------------------------------------------------
# launcher `Args { ... }` (single line `{:?}` up to v2.0, pretty `{:#?}` since v2.1)


def _args_some_int(msg: pl.Expr, name: str) -> pl.Expr:
    # `name: Some(4)` or pretty `name: Some(\n        4,\n    )`; bare `name: 128`
    return msg.str.extract(rf"(?-u:\b){name}: (?:Some\([ \t\n]*)?([0-9]+)", 1).cast(pl.Int64, strict=False)


def args_fields(msg: pl.Expr) -> dict[str, pl.Expr]:
    return {
        "model": msg.str.extract(r'(?-u:\b)model_id: "((?:[^"\\]|\\.)*)"', 1),
        "max_num_seqs": _args_some_int(msg, "max_batch_size"),
        "max_batch_tokens": _args_some_int(msg, "max_batch_total_tokens"),
        "max_concurrent_requests": _args_some_int(msg, "max_concurrent_requests"),
        "max_batch_prefill_tokens": _args_some_int(msg, "max_batch_prefill_tokens"),
        "max_total_tokens": _args_some_int(msg, "max_total_tokens"),
        "max_input_tokens": pl.coalesce(
            _args_some_int(msg, "max_input_tokens"), _args_some_int(msg, "max_input_length")
        ),
        "max_waiting_tokens": _args_some_int(msg, "max_waiting_tokens"),
        "num_shard": _args_some_int(msg, "num_shard"),
        "waiting_served_ratio": msg.str.extract(r"(?-u:\b)waiting_served_ratio: ([0-9.]+)", 1).cast(
            pl.Float64, strict=False
        ),
        "quantize": msg.str.extract(r"(?-u:\b)quantize: Some\([ \t\n]*([A-Za-z0-9_]+)", 1),
    }


# ---------------------------------------------------------------------------------------
# capacity lines (router warm-up and launcher defaults)

SETTING_MAX_BATCH_RE = r"(?:Setting max batch total tokens to|Inferred max batch total tokens:) ([0-9]+)"
KV_BLOCKS_RE = r"KV-cache blocks: (?P<blocks>[0-9]+), size: (?P<size>[0-9]+)"
DEFAULT_RE = r"^Default `(?P<key>max_[A-Za-z0-9_]+)` to (?P<val>[0-9]+)"
ROUTER_DEFAULT_RE = r"^Maximum (?P<key>input|total) tokens defaulted to (?P<val>[0-9]+)"
MODEL_SUPPORTS_RE = r"^Model supports up to (?P<max>[0-9]+) but tgi will now set its default to (?P<dflt>[0-9]+)"


CAPACITY_GROUPS = {"kv": KV_BLOCKS_RE, "dflt": DEFAULT_RE, "sup": MODEL_SUPPORTS_RE, "rdef": ROUTER_DEFAULT_RE}


def capacity_fields(msg: pl.Expr, groups: dict[str, pl.Expr] | None = None) -> dict[str, pl.Expr]:
    """The capacity lines' fields of `msg`. `groups`: the captures of CAPACITY_GROUPS'
    patterns over `msg` (struct columns read before: each is read several times here)."""
    if groups is None:
        groups = {name: msg.str.extract_groups(pattern) for name, pattern in CAPACITY_GROUPS.items()}
    kv = groups["kv"]
    blocks = kv.struct.field("blocks").cast(pl.Int64, strict=False)
    size = kv.struct.field("size").cast(pl.Int64, strict=False)
    dflt = groups["dflt"]
    dkey, dval = dflt.struct.field("key"), dflt.struct.field("val").cast(pl.Int64, strict=False)
    sup = groups["sup"]
    rdef = groups["rdef"]
    rkey, rval = rdef.struct.field("key"), rdef.struct.field("val").cast(pl.Int64, strict=False)
    return {
        "max_batch_tokens": msg.str.extract(SETTING_MAX_BATCH_RE, 1).cast(pl.Int64, strict=False),
        "kv_blocks_total": blocks,
        "block_size": size,
        # capacity in tokens = blocks x tokens per block: both numbers are on the line
        "kv_capacity_tokens": blocks * size,
        # (the `--max-...=N` flags that line suggests are not settings: not read)
        "max_batch_prefill_tokens": pl.when(dkey == "max_batch_prefill_tokens").then(dval),
        "max_total_tokens": pl.coalesce(
            pl.when(dkey == "max_total_tokens").then(dval),
            pl.when(rkey == "total").then(rval),
            sup.struct.field("dflt").cast(pl.Int64, strict=False),
        ),
        "max_input_tokens": pl.coalesce(
            pl.when(dkey == "max_input_tokens").then(dval), pl.when(rkey == "input").then(rval)
        ),
        "model_max_total_tokens": sup.struct.field("max").cast(pl.Int64, strict=False),
    }


CAPACITY_RE = (
    r"^(?:Setting max batch total tokens to [0-9]+|Inferred max batch total tokens: [0-9]+"
    r"|Default `max_[A-Za-z0-9_]+` to [0-9]+|Model supports up to [0-9]+ but tgi will now set its default"
    r"|KV-cache blocks: [0-9]+, size: [0-9]+|Maximum (?:input|total) tokens defaulted to [0-9]+|Args \{)"
)
