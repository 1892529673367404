"""The cheap readings of the commonest lines say what the general ones say: a stats line of
`fields.STATS_SHAPE` read by that one pattern (`fields.shaped_stats`) gives what the per-key
regexes give, a `Received request` line of V1's or V0's common shape read by `fields.shaped_received`
what the general request readings give, and `uvicorn.access_groups` gives `uvicorn.ACCESS`'s
captures, on every line (those of the fixtures and sample logs, generated ones, and near
misses)."""

from __future__ import annotations

import re

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers import uvicorn
from servelens.parsers.engines.vllm import fields as F

from tests.helpers.common import logged_messages

NON_RARE = [k for k in F.stats_attrs() if k not in F.RARE_STATS_KEYS]


def by_key(messages: list[str]) -> pl.DataFrame:
    df = pl.DataFrame({"m": messages}, schema={"m": pl.String})
    exprs = {**F.stats_columns(), **{k: v for k, v in F.stats_attrs().items() if k in NON_RARE}}
    return df.select(v.alias(k) for k, v in exprs.items())


def shaped(messages: list[str]) -> tuple[pl.Series, pl.DataFrame]:
    """Which messages are of the shape, and what shaped_stats reads on all of them."""
    df = pl.DataFrame({"m": messages}, schema={"m": pl.String})
    df = df.with_columns(pl.col("m").str.extract_groups(F.STATS_SHAPE).alias("_st"))
    cols, attrs = F.shaped_stats(pl.col("_st"))
    fits = df["_st"].struct.field("prompt").is_not_null()
    return fits, df.select(v.alias(k) for k, v in {**cols, **attrs}.items())


def assert_same_where_shaped(messages: list[str]) -> pl.Series:
    fits, fast = shaped(messages)
    slow = by_key(messages)
    assert fast.columns == slow.columns
    diff = [(m, a, b) for m, f, a, b in zip(messages, fits, fast.rows(), slow.rows()) if f and a != b]
    assert diff == []
    return fits


def test_the_shape_reads_the_keys_in_the_order_of_the_per_key_regexes():
    cols, attrs = F.shaped_stats(pl.col("_st"))
    assert list(cols) == list(F.stats_columns())
    assert list(attrs) == NON_RARE


def logged_stats_messages() -> list[str]:
    """The stats messages of the fixtures and sample logs (the text after the first
    `Avg prompt throughput` line's header, found by its own regex)."""
    return logged_messages(
        "Avg prompt throughput",
        r"^.*?(?:\] |^)((?:Engine \d+: |\d+ Engines Aggregated: )?Avg prompt throughput: .*)$",
    )


def test_logged_stats_lines_read_the_same_and_the_common_ones_by_the_shape():
    messages = logged_stats_messages()
    assert len(messages) > 100
    fits = assert_same_where_shaped(messages)
    # every V0 and V1 line without an optional part is of the shape
    plain = [not re.search(F.RARE_STATS, m) for m in messages]
    assert [m for m, f, p in zip(messages, fits, plain) if p and not f] == []


NEAR_MISSES = [
    # a label of six letters: no label for the per-key regexes
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, ABCDEF KV cache usage: 3.0%, Prefix cache hit rate: 4.0%",
    # no label
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, KV cache usage: 3.0%",
    # digits of another script, an exponent, a sign, a thousands separator
    "Engine ٠٠٠: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
    "Running: ٣ reqs, Waiting: 0 reqs, GPU KV cache usage: 3.0%",
    "Avg prompt throughput: 1e3 tokens/s, Avg generation throughput: -2.0 tokens/s, Running: 1,024 reqs, "
    "Waiting: +1 reqs, GPU KV cache usage: 3.0%",
    # numbers that are no numbers, V0 with a period and V1 with a trailing blank
    "Avg prompt throughput: 1.2.3 tokens/s, Avg generation throughput: . tokens/s, Running: 0001 reqs, "
    "Swapped: 0 reqs, Pending: 99999999999999999999 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.",
    "Engine 001: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, CPU KV cache usage: 3.0%, Prefix cache hit rate: 4.0% ",
    # both optional tails, a second device
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, XPU KV cache usage: 3.0%, CPU KV cache usage: 5.5%",
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 3.0%, Prefix cache hit rate: 4.0%, CPU KV cache usage: 5.5%",
]


def test_near_misses_read_the_same():
    fits = assert_same_where_shaped(NEAR_MISSES)
    assert fits.any() and not fits.all()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.from_regex(F.STATS_SHAPE, fullmatch=True), min_size=1, max_size=20))
def test_every_line_of_the_shape_reads_the_same(messages):
    messages = [m for m in messages if "\n" not in m]
    fits = assert_same_where_shaped(messages)
    assert fits.all()


ACCESS_LINES = [
    'INFO:     127.0.0.1:58928 - "GET /health HTTP/1.1" 200 OK',
    'INFO:     10.0.0.2:40052 - "POST /v1/chat/completions HTTP/1.1" 200',
    'WARNING:  [::1]:1 - "GET /a?b="c" HTTP/2" 404 Not Found',
    # other forms: a paste without the level, a tab, a status run on, a character of several bytes
    '127.0.0.1:1 - "GET / HTTP/1.1" 200 OK',
    'INFO:\t127.0.0.1:1 - "GET / HTTP/1.1" 200 OK',
    'INFO:\u00a0127.0.0.1:1 - "GET / HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1\t:1 - "GET / HTTP/1.1" 200 OK',
    'INFO:     hôte:1 - "GET / HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:1 - "GET / HTTP/1.1" 2000',
    'INFO:     127.0.0.1:1 - "GET / HTTP/1.1" 200,',
    'INFO:     127.0.0.1:1 - "GET / HTTP/1.1" 200é',
    'INFO:     127.0.0.1:1 - "GET /é HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:1 - "GET / HTTP/١.1" 200 OK',
    'INFO: h:1 - "get / HTTP/1.1" 200 OK',
    "",
]


def assert_access_same(lines: list[str]) -> None:
    s = pl.Series("m", lines, dtype=pl.String)
    want = s.str.extract_groups(uvicorn.ACCESS).struct.unnest()
    got = uvicorn.access_groups(s).struct.unnest()
    assert got.columns == want.columns
    assert [(t, a, b) for t, a, b in zip(lines, got.rows(), want.rows()) if a != b] == []


def test_access_lines_read_the_same():
    assert_access_same(ACCESS_LINES)


some_chars = st.characters(min_codepoint=9, max_codepoint=0x1F0)
common_access = st.builds(
    lambda level, pad, client, method, path, status, tail: (
        f'{level}:{pad}{client} - "{method} {path} HTTP/1.1" {status}{tail}'
    ),
    st.sampled_from(["INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL", "NOTICE"]),
    st.from_regex(r"[ ]{0,6}|[ \t\u00a0]{1,3}", fullmatch=True),
    st.one_of(st.from_regex(r"[!-~]{1,20}", fullmatch=True), st.text(alphabet=some_chars, min_size=1, max_size=10)),
    st.sampled_from(["GET", "POST", "get", "PO ST"]),
    st.text(alphabet=some_chars, min_size=0, max_size=20),
    st.from_regex(r"[0-9]{2,4}", fullmatch=True),
    st.sampled_from(["", " OK", "OK", ",", "é", "\t"]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(common_access, st.from_regex(uvicorn.ACCESS)), min_size=1, max_size=20))
def test_generated_access_lines_read_the_same(lines):
    assert_access_same([t for t in lines if "\n" not in t])


def received_both(messages: list[str]) -> tuple[pl.Series, pl.DataFrame, pl.DataFrame]:
    """Which messages are of V1's common `Received request` shape, and on those, what
    shaped_received reads and what the general request readings read."""
    df = pl.DataFrame({"m": messages}, schema={"m": pl.String}).with_row_index("_i")
    shaped, _ = F.received_shapes(df)
    shaped = shaped.sort("_i")
    fits = df["_i"].is_in(shaped["_i"].implode())
    part, cols, attrs = F.shaped_received(shaped)
    fast = part.select(v.alias(k) for k, v in {**cols, **attrs}.items())
    general = F.with_sampling_params(df.filter(fits).with_columns(**F.request_parts()))
    slow_exprs = {
        "event": F.request_kind(), **F.request_columns(), "sampling_params": pl.col("sampling_params"),
        **F.request_attrs(), "param_seed": pl.col("param_seed"),
    }
    slow = general.select(v.alias(k) for k, v in slow_exprs.items())
    return fits, fast, slow


def assert_received_same(messages: list[str]) -> pl.Series:
    fits, fast, slow = received_both(messages)
    assert fast.columns == slow.columns
    assert fast.schema == slow.schema or fast.height == 0
    shaped = [m for m, f in zip(messages, fits) if f]
    assert [(m, a, b) for m, a, b in zip(shaped, fast.rows(), slow.rows()) if a != b] == []
    return fits


def logged_received_messages() -> list[str]:
    """The `Received request` messages of the fixtures and sample logs (found by their own regex)."""
    return logged_messages("Received request ", r"^.*?(?:\] |^)(Received request .*)$")


def test_logged_received_lines_read_the_same_and_v1_and_v0_ones_by_the_shapes():
    messages = logged_received_messages()
    fits = assert_received_same(messages)
    assert fits.sum() > 100
    v1 = [m for m in messages if re.fullmatch(r"Received request [\w-]+: params: SamplingParams\([^)]*\), lora_request: None\.", m)]
    assert [m for m, f in zip(messages, fits) if m in v1 and not f] == []
    # V0's, with the prompt, whose prompt holds none of the fields' words (counted apart)
    v0 = [
        m for m in messages
        if re.fullmatch(r"Received request [\w-]+: prompt: .*, params: SamplingParams\([^)]*\), prompt_token_ids: None, "
                        r"lora_request: None(?:, prompt_adapter_request: None)?\.", m)
        and not re.search(r"max_tokens=|finish_reason|token.ids: \[|prompt_len=|streaming_complete|SamplingParams\(",
                          m[: m.index(", params: SamplingParams(")])
    ]
    assert len(v0) > 100
    assert [m for m, f in zip(messages, fits) if m in v0 and not f] == []


SP = (
    "n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.7, top_p=1.0, "
    "top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, "
    "ignore_eos=False, max_tokens=1024, min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
    "spaces_between_special_tokens=True, truncate_prompt_tokens=None, guided_decoding=None, extra_args=None"
)
RECEIVED_NEAR_MISSES = [
    f"Received request chatcmpl-1: params: SamplingParams({SP}), lora_request: None.",
    f"Received request chatcmpl-1: params: SamplingParams({SP.replace('seed=None', 'seed=7')}), lora_request: None.",
    f"Received request tokenize-1: params: SamplingParams({SP}), lora_request: None.",
    f"Received request detokenize-1: params: SamplingParams({SP}), lora_request: None.",
    # fields the general readings look for anywhere, inside the repr
    "Received request a: params: SamplingParams(stop=['finish_reason: length', 'prompt_token_ids: [1, 2]', "
    "'output_token_ids: [3]', \": output: '<streaming_complete: 4 tokens>'\"], prompt_len=5, max_tokens=6), "
    "lora_request: None.",
    "Received request a: params: SamplingParams(), lora_request: None.",
    # an id the general reading cuts or finds fields in; a repr holding `)`; other ends
    f"Received request a-max_tokens=5: params: SamplingParams({SP}), lora_request: None.",
    f"Received request a\u00a0b: params: SamplingParams({SP}), lora_request: None.",
    f"Received request a,b: params: SamplingParams({SP}), lora_request: None.",
    f"Received request a)b: params: SamplingParams({SP}), lora_request: None.",
    f"Received request : params: SamplingParams({SP}), lora_request: None.",
    f"Received request é: params: SamplingParams({SP}), lora_request: None.",
    "Received request a: params: SamplingParams(guided_decoding=GuidedDecodingParams(json=None), max_tokens=2), "
    "lora_request: None.",
    f"Received request a: params: SamplingParams({SP}), lora_request: None",
    f"Received request a: params: SamplingParams({SP}), lora_request: None., finish_reason: stop",
    f"Received request a: params: SamplingParams({SP}), prompt_token_ids: [1, 2], lora_request: None.",
    f"Received request a: prompt: 'x', params: SamplingParams({SP}), lora_request: None.",
    "Received request tokenize-1: params: None",
]


def test_received_near_misses_read_the_same():
    fits = assert_received_same(RECEIVED_NEAR_MISSES)
    assert fits.any() and not fits.all()


V0_TAIL = "), prompt_token_ids: None, lora_request: None, prompt_adapter_request: None."
V0_TAIL_SHORT = "), prompt_token_ids: None, lora_request: None."
# V0's lines print the prompt before the repr: the general readings look for their fields in it
V0_NEAR_MISSES = [
    f"Received request chatcmpl-1: prompt: 'Hello there', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request chatcmpl-1: prompt: 'Hello there', params: SamplingParams({SP}{V0_TAIL_SHORT}",
    f"Received request chatcmpl-1: prompt: \"it's\", params: SamplingParams({SP.replace('seed=None', 'seed=3')}{V0_TAIL}",
    f"Received request tokenize-1: prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: '', params: SamplingParams({V0_TAIL}",
    f"Received request a: prompt: 'caf\u00e9 \u2603', params: SamplingParams({SP}{V0_TAIL}",
    # each field's words in the prompt: the general readings find them there
    f"Received request a: prompt: 'set max_tokens=5 please', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'finish_reason: length', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'prompt_token_ids: [1, 2, 3]', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'prompt token ids: [1]', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'output_token_ids: [4, 5]', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'prompt_len=12', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: \": output: '<streaming_complete: 9 tokens>'\", params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'params: SamplingParams(max_tokens=1)', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'SamplingParams(', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'max_tokens', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'x)', params: SamplingParams({SP}{V0_TAIL}",
    # the fields' words inside the repr
    "Received request a: prompt: 'x', params: SamplingParams(stop=['finish_reason: length', 'prompt_token_ids: [1, 2]', "
    "'output_token_ids: [3]', \": output: '<streaming_complete: 4 tokens>'\"], prompt_len=5, max_tokens=6" + V0_TAIL,
    # ids the general reading cuts, reprs holding `)`, other ends
    f"Received request a b: prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a,b: prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a=b: prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request : prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a\u00a0: prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request \u00e9: prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a prompt: 'x', params: SamplingParams({SP}{V0_TAIL}",
    "Received request a: prompt: 'x', params: SamplingParams(guided_decoding=GuidedDecodingParams(json=None), "
    "max_tokens=2" + V0_TAIL,
    f"Received request a: prompt: 'x', params: SamplingParams({SP}), prompt_token_ids: [1, 2], lora_request: None.",
    f"Received request a: prompt: 'x', params: SamplingParams({SP}{V0_TAIL[:-1]}",
    f"Received request a: prompt: 'x', params: SamplingParams({SP}{V0_TAIL}, finish_reason: stop",
    f"Received request a: prompt: 'x', params: SamplingParams({SP}, lora_request: None.",
    f"Received request a: prompt: 'x', sampling_params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'x' params: SamplingParams({SP}{V0_TAIL}",
    f"Received request a: prompt: 'x', params: SamplingParams{V0_TAIL}",
]


def test_v0_near_misses_read_the_same():
    fits = assert_received_same(V0_NEAR_MISSES)
    # the first six, a prompt holding a field's name without its value or a `)`, the fields'
    # words in the repr, a non-ASCII id, the repr behind other words: the shape; the rest not
    shaped = {0, 1, 2, 3, 4, 5, 15, 16, 17, 23, 30, 31}
    assert [i for i, f in enumerate(fits) if f] == sorted(shaped)




repr_chars = st.characters(min_codepoint=9, max_codepoint=0x1F0)
repr_fields = st.lists(
    st.one_of(
        st.sampled_from([
            "seed=None", "seed=3", "max_tokens=16", "max_tokens=None", "prompt_len=9", "temperature=0.7",
            "stop=['a, b=1']", "finish_reason: stop", "prompt_token_ids: [1, 2]", "output_token_ids: []",
            ": output: '<streaming_complete: 8 tokens>'", "ignore_eos=False", "top_k=-1", "é=1",
        ]),
        st.text(alphabet=repr_chars, max_size=12),
    ),
    max_size=6,
).map(", ".join)
common_received = st.builds(
    lambda rid, sp, end: f"Received request {rid}: params: SamplingParams({sp}){end}",
    st.one_of(st.from_regex(r"[\w-]{1,20}", fullmatch=True), st.text(alphabet=repr_chars, min_size=0, max_size=10)),
    repr_fields,
    st.sampled_from(["), lora_request: None.", "), lora_request: None", "), prompt_embeds: None."]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(common_received, min_size=1, max_size=20))
def test_generated_received_lines_read_the_same(messages):
    assert_received_same([m for m in messages if "\n" not in m])


prompt_parts = st.lists(
    st.one_of(
        st.sampled_from([
            "max_tokens=7", "finish_reason: stop", "prompt_token_ids: [1, 2]", "prompt token ids: [3]",
            "output_token_ids: [4]", "prompt_len=3", "<streaming_complete: 2 tokens>", "SamplingParams(",
            "params: SamplingParams(n=1)", ")", "'", ", ", ":", "seed=4", "\\n",
        ]),
        st.text(alphabet=repr_chars, max_size=12),
    ),
    max_size=6,
).map("".join)
v0_received = st.builds(
    lambda rid, prompt, sp, end: f"Received request {rid}: prompt: {prompt!r}, params: SamplingParams({sp}{end}",
    st.one_of(st.from_regex(r"[\w-]{1,20}", fullmatch=True), st.text(alphabet=repr_chars, min_size=0, max_size=10)),
    prompt_parts,
    repr_fields,
    st.sampled_from([V0_TAIL, V0_TAIL_SHORT, V0_TAIL[:-1], "), prompt_token_ids: [1], lora_request: None."]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(v0_received, min_size=1, max_size=20))
def test_generated_v0_received_lines_read_the_same(messages):
    assert_received_same([m for m in messages if "\n" not in m])
