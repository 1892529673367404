"""llama.cpp's per-request timing block: the lines that become one finished `request`.

llama-server prints, when a task ends (docs/llamacpp.md):

    prompt eval time =  X ms / N tokens ( .. ms per token, .. tokens per second)
           eval time =  X ms / N tokens ( .. ms per token, .. tokens per second)
          total time =  X ms / N tokens
       graphs reused =  N                                  (2026-05+, #23279)
    draft acceptance = R ( A accepted / G generated)[, mean len = L]

- 2024 (`server_log`): three records, each with the slot and task as extras (`id_slot`,
  `id_task`; `slot_id`/`task_id` before) and the exact numbers (`t_prompt_processing`,
  `n_prompt_tokens_processed`, `t_token_generation`, `n_decoded`, `t_total`); the decode
  line says `generation eval time = .. runs`.
- 2024-09 .. 2026-05 (common/log): ONE log call: a header `slot print_timing: id  0 | task
  124 | ` and the lines as unprefixed continuations.
- 2026-05+: each line is its own fully prefixed log call `slot print_timing: id  0 | task
  160 | prompt eval time = ...`.

Other lines may come between the parts (the HTTP thread's access line, a router child's
output), so the parts are paired by (router port, slot, task), not by position. The block's
request event sits on its LAST line; its other lines are `log` events that say which line
holds the request (`request_line`).

Chunks are parsed apart, so `open_block` tells the ingest hold-back not to cut a chunk inside
a block: a block never spans two chunks (unless it exceeds the look-back, i.e. is damaged).
"""

from __future__ import annotations

import polars as pl

# how far back (lines) a block opener keeps later lines from being a chunk cut point; a real
# block spans 2..6 lines, a few more with interleaved lines
BLOCK_LOOKBACK = 32

NUM = r"([0-9]+(?:\.[0-9]+)?|inf|nan|-nan)"
# the message forms of each part (any era; `generation eval time` / `runs` in 2024)
_RATE = rf"(?:\s*\(\s*{NUM} ms per token,\s*{NUM} tokens per second\))?"
PROMPT_RE = rf"^\s*prompt eval time\s*=\s*{NUM} ms /\s*([0-9]+) tokens{_RATE}"
EVAL_RE = rf"^\s*(?:generation )?eval time\s*=\s*{NUM} ms /\s*([0-9]+) (?:tokens|runs){_RATE}"
TOTAL_RE = rf"^\s*total time\s*=\s*{NUM} ms(?: /\s*([0-9]+) tokens)?"
GRAPHS_RE = r"^\s*graphs reused\s*=\s*([0-9]+)"
DRAFT_RE = (
    r"^\s*draft acceptance(?: rate)?\s*=\s*([0-9.]+) \(\s*([0-9]+) accepted /\s*([0-9]+) generated\)"
    # `mean len` (2026-05), `mean acceptance length` (2026-06 on)
    r"(?:, mean (?:acceptance )?len(?:gth)? =\s*([0-9.]+))?"
)
PART_RE = (
    r"^\s*(?:prompt eval time|(?:generation )?eval time|total time|graphs reused|draft acceptance(?: rate)?)\s*="
)
# journald stores a line it will not print as `[100B blob data]`: the value is hidden
BLOB_RE = r"^\[[0-9.]+[KMGT]?B blob data\]$"


# the parts' heads as one anchored pattern: they open with different words, so at most one
# of them matches a message; the kind is told by the head's first two letters
PART_HEAD_RE = r"^\s*(prompt eval time\s*=|(?:generation )?eval time\s*=|total time\s*=|graphs reused\s*=|draft acceptance)"
_KIND_BY_HEAD = {"pr": "prompt", "ev": "eval", "ge": "eval", "to": "total", "gr": "graphs", "dr": "draft"}


def part_kind(msg: pl.Expr) -> pl.Expr:
    """`prompt` / `eval` / `total` / `graphs` / `draft` for a timing message, else null. One
    pattern (`extract` skips a null message: a caller may null the rows that cannot be parts)."""
    return msg.str.extract(PART_HEAD_RE, 1).str.head(2).replace_strict(_KIND_BY_HEAD, default=None, return_dtype=pl.String)


def _num(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Float64, strict=False)


def part_fields(df: pl.DataFrame) -> pl.DataFrame:
    """The values of each timing part row (`_part` set), from the message; 2024 records'
    exact extras (`_x_*` columns) win over the rounded printed numbers."""
    msg, kind = pl.col("_msg"), pl.col("_part")
    x = lambda k: pl.col(f"_x_{k}") if f"_x_{k}" in df.columns else pl.lit(None, pl.Float64)  # noqa: E731
    # each part's pattern only on its own rows (its values are read there alone), as a
    # column of its own: a pattern under `when` is not shared between the fields read from it
    on = lambda k: pl.when(kind == k).then(msg)  # noqa: E731
    df = df.with_columns(
        on("prompt").str.extract_groups(PROMPT_RE).alias("_pg"),
        on("eval").str.extract_groups(EVAL_RE).alias("_eg"),
        on("total").str.extract_groups(TOTAL_RE).alias("_ttg"),
        on("draft").str.extract_groups(DRAFT_RE).alias("_dg"),
    )
    p, e, t, d = pl.col("_pg"), pl.col("_eg"), pl.col("_ttg"), pl.col("_dg")
    return df.with_columns(
        pl.when(kind == "prompt").then(pl.coalesce(x("t_prompt_processing"), _num(p.struct.field("1")))).alias("_prompt_ms"),
        pl.when(kind == "prompt").then(pl.coalesce(x("n_prompt_tokens_processed"), _num(p.struct.field("2")))).alias("_prompt_n"),
        pl.when(kind == "eval").then(pl.coalesce(x("t_token_generation"), _num(e.struct.field("1")))).alias("_eval_ms"),
        pl.when(kind == "eval").then(pl.coalesce(x("n_decoded"), _num(e.struct.field("2")))).alias("_eval_n"),
        pl.when(kind == "eval").then(_num(e.struct.field("3"))).alias("_eval_printed_ms"),
        pl.when(kind == "eval").then(_num(e.struct.field("4"))).alias("_eval_printed_tps"),
        pl.when(kind == "prompt").then(_num(p.struct.field("4"))).alias("_prompt_printed_tps"),
        pl.when(kind == "total").then(pl.coalesce(x("t_total"), _num(t.struct.field("1")))).alias("_total_ms"),
        pl.when(kind == "total").then(_num(t.struct.field("2"))).alias("_total_n"),
        _num(on("graphs").str.extract(GRAPHS_RE, 1)).alias("_graphs"),
        pl.when(kind == "draft").then(_num(d.struct.field("1"))).alias("_draft_rate"),
        pl.when(kind == "draft").then(_num(d.struct.field("2"))).alias("_draft_acc"),
        pl.when(kind == "draft").then(_num(d.struct.field("3"))).alias("_draft_gen"),
        pl.when(kind == "draft").then(_num(d.struct.field("4"))).alias("_draft_len"),
    ).drop("_pg", "_eg", "_ttg", "_dg")


_VALUES = (
    "_prompt_ms", "_prompt_n", "_eval_ms", "_eval_n", "_total_ms", "_total_n",
    "_eval_printed_ms", "_eval_printed_tps", "_prompt_printed_tps",
    "_graphs", "_draft_rate", "_draft_acc", "_draft_gen", "_draft_len",
)


def blocks(df: pl.DataFrame) -> pl.DataFrame:
    """Group the timing rows of a chunk into blocks and return the chunk with, per row,
    `_blk_last` (true on the row that gets the request event), plus the block's values on
    that row.

    Expects per row: `line`, `_part` (prompt/eval/total/graphs/draft/header/hidden or null),
    `_opener` (the row opens a block), `_key` (port|slot|task, null for rows without)."""
    t = df.filter(pl.col("_part").is_not_null())
    if t.height == 0:
        return df.with_columns(
            pl.lit(False).alias("_blk_last"),
            pl.lit(None, pl.Int64).alias("_last_line"),
            pl.lit(None, pl.UInt32).alias("_n_hidden"), pl.lit(None, pl.UInt32).alias("_n_core"),
            *[pl.lit(None, pl.Float64).alias(c) for c in _VALUES],
        )
    t = part_fields(t.with_columns(pl.col("_key").fill_null("?")))
    t = t.with_columns(pl.col("_opener").cast(pl.Int64, strict=False).cum_sum().over("_key").alias("_nth"))
    # a block is its key and its opener's number: grouped by the two (numbering the pairs
    # first would cost a ranking of them)
    blk = ["_key", "_nth"]
    agg = t.group_by(blk).agg(
        pl.col("line").max().alias("_last_line"),
        pl.col("line").min().alias("_first_line"),
        *[pl.col(c).drop_nulls().first().alias(c) for c in _VALUES],
        (pl.col("_part") == "hidden").sum().alias("_n_hidden"),
        pl.col("_part").filter(pl.col("_part").is_in(["prompt", "eval", "total"])).unique().len().alias("_n_core"),
    )
    values = [c for c in agg.columns if c not in (*blk, "_last_line", "_first_line")]
    # a block needs one of its core lines to be a request: a pasted fragment of only
    # `graphs reused` / `draft acceptance` lines stays `log`
    agg = agg.with_columns(pl.when(pl.col("_n_core") > 0).then(pl.col("_last_line")).alias("_last_line"))
    t = t.select("line", *blk).join(agg, on=blk, how="left").drop(blk).with_columns(
        (pl.col("line") == pl.col("_last_line")).fill_null(False).alias("_blk_last"),
    )
    t = t.with_columns(
        [pl.when(pl.col("_blk_last")).then(pl.col(c)).alias(c) for c in values]
    )
    return df.join(t.drop("_first_line"), on="line", how="left").with_columns(
        pl.col("_blk_last").fill_null(False)
    )


def request_columns() -> list[pl.Expr]:
    """The request event's schema columns from the block values (on the `_blk_last` row).

    e2e_s = inference_s = total time (prompt + eval: from the start of prompt processing; the
    time waiting for a free slot is not logged); ttft_s stays null (the prompt eval time is
    TTFT minus that wait and tokenisation: `prefill_s` in attrs); tpot_s = eval time / (N - 1):
    the eval timer starts at the first token, which the prompt pass produced, so N tokens
    took N - 1 steps (llama.cpp's own `ms per token` mostly divides by N: kept as printed in
    attrs `ms_per_token`, with the printed `tokens per second`)."""
    eval_ms, eval_n = pl.col("_eval_ms"), pl.col("_eval_n")
    total = pl.coalesce(pl.col("_total_ms"), pl.col("_prompt_ms") + eval_ms)
    return [
        (total / 1000.0).round(9).alias("e2e_s"),
        (total / 1000.0).round(9).alias("inference_s"),
        pl.when(eval_n > 1).then(eval_ms / (eval_n - 1) / 1000.0).alias("tpot_s"),
        pl.col("_prompt_n").cast(pl.Int64, strict=False).alias("prompt_tokens"),
        eval_n.cast(pl.Int64, strict=False).alias("output_tokens"),
        (pl.col("_prompt_ms") / 1000.0).round(9).alias("prefill_s"),
        (eval_ms / 1000.0).round(9).alias("decode_s"),
        pl.col("_eval_printed_ms").alias("ms_per_token"),
        pl.col("_prompt_printed_tps").alias("prompt_tokens_per_s"),
        pl.col("_eval_printed_tps").alias("gen_tokens_per_s"),
        pl.col("_total_n").cast(pl.Int64, strict=False).alias("total_tokens"),
        pl.col("_graphs").cast(pl.Int64, strict=False).alias("graphs_reused"),
        pl.col("_draft_rate").alias("draft_acceptance"),
        pl.col("_draft_acc").cast(pl.Int64, strict=False).alias("draft_accepted"),
        pl.col("_draft_gen").cast(pl.Int64, strict=False).alias("draft_generated"),
        pl.col("_draft_len").alias("draft_mean_len"),
        pl.when(pl.col("_n_hidden") > 0).then(pl.col("_n_hidden").cast(pl.Int64, strict=False)).alias("hidden_lines"),
        pl.when(pl.col("_n_core") < 3).then(pl.lit(True)).alias("timing_incomplete"),
    ]


REQUEST_ATTRS = (
    "prefill_s", "decode_s", "ms_per_token", "prompt_tokens_per_s", "gen_tokens_per_s",
    "total_tokens", "graphs_reused", "draft_acceptance", "draft_accepted", "draft_generated",
    "draft_mean_len", "hidden_lines", "timing_incomplete",
)


def open_block(opener: pl.Expr, closer: pl.Expr, inner: pl.Expr) -> pl.Expr:
    """True where a line may not start a chunk: a timing part that continues a block
    (`inner`), or any line after a block opener within BLOCK_LOOKBACK lines with no closer
    (`total time`) since. Depends on the BLOCK_LOOKBACK lines before it only."""
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    last_open = pl.when(opener).then(idx).forward_fill()
    last_close = pl.when(closer).then(idx).forward_fill()
    # the state before this line: shift by one
    lo, lc = last_open.shift(1), last_close.shift(1)
    unclosed = lo.is_not_null() & (lc.is_null() | (lc < lo)) & (idx - lo <= BLOCK_LOOKBACK)
    return inner | unclosed.fill_null(False)
