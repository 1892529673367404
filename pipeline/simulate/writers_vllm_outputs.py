"""vLLM V1 output logging (`--enable-log-outputs`, variant `v1_outputs`): what the chat
endpoint prints per request, from entrypoints/logger.py `log_outputs`:

* streamed requests (nine in ten): one `Generated response X (streaming delta): output: %r,
  output_token_ids: [...], finish_reason: None` line per chunk, the first at the request's
  first token and the last (finish_reason `length` / `stop`) at its finish, then `Generated
  response X (streaming complete): output: '<streaming_complete: N tokens>', output_token_ids:
  None, finish_reason: streaming_complete`;
* the others: one `Generated response X: output: %r, output_token_ids: [...], finish_reason: F`.

A real server logs one delta per streamed chunk: one token each by default, more with
`--stream-interval` or speculative decoding. The writer streams at most MAX_DELTAS chunks per
request, spreading its tokens over them evenly in time from the first token to the finish,
so the truth's TTFT and e2e are what the lines say.
"""

from __future__ import annotations

import polars as pl

from .lines import Lines

MAX_DELTAS = 128
TOKEN_ID = "1734"  # the chunks' token ids carry no meaning here, only their count
SRC = "logger.py:79"


def _id_list(n: pl.Expr, counts: list[int]) -> pl.Expr:
    lists = {c: "[" + ", ".join([TOKEN_ID] * c) + "]" for c in counts}
    return n.replace_strict(lists, return_dtype=pl.String)


def write_outputs(d, f, out: Lines) -> None:
    req = d.req.filter(
        (pl.col("status") == "ok") & pl.col("first_token_ns").is_not_null() & (pl.col("output_tokens") >= 1)
    ).with_row_index("_i")
    if req.height == 0:
        return
    rid = pl.col("request_id")
    streamed = req.filter(pl.col("_i") % 10 != 9)
    answered = req.filter(pl.col("_i") % 10 == 9)

    n_d = pl.min_horizontal(pl.col("output_tokens"), pl.lit(MAX_DELTAS))
    deltas = (
        streamed.with_columns(n_d.alias("n_d"))
        .with_columns(pl.int_ranges(0, pl.col("n_d")).alias("k"))
        .explode("k")
        .with_columns(
            (pl.col("first_token_ns")
             + (pl.col("finish_ns") - pl.col("first_token_ns")) * pl.col("k") // pl.max_horizontal(pl.col("n_d") - 1, 1))
            .alias("ts"),
            (pl.col("output_tokens") // pl.col("n_d")
             + (pl.col("k") < pl.col("output_tokens") % pl.col("n_d")).cast(pl.Int64)).alias("t"),
        )
    )
    last = pl.col("k") == pl.col("n_d") - 1
    counts = deltas["t"].unique().to_list()
    deltas = deltas.select(
        "ts",
        pl.concat_str([
            f.header_expr(pl.col("ts"), "INFO", SRC), pl.lit("Generated response "), rid,
            pl.lit(" (streaming delta): output: ' tok', output_token_ids: "), _id_list(pl.col("t"), counts),
            pl.lit(", finish_reason: "), pl.when(last).then(pl.col("finish_reason")).otherwise(pl.lit("None")),
        ]).alias("text"),
    )
    out.add_frame(deltas["ts"], deltas["text"], seq=3)
    complete = streamed.select(
        "finish_ns",
        pl.concat_str([
            f.header_expr(pl.col("finish_ns"), "INFO", SRC), pl.lit("Generated response "), rid,
            pl.lit(" (streaming complete): output: '<streaming_complete: "), pl.col("output_tokens").cast(pl.String),
            pl.lit(" tokens>', output_token_ids: None, finish_reason: streaming_complete"),
        ]).alias("text"),
    )
    out.add_frame(complete["finish_ns"], complete["text"], seq=5)
    if answered.height:
        counts = answered["output_tokens"].unique().to_list()
        answer = answered.select(
            "finish_ns",
            pl.concat_str([
                f.header_expr(pl.col("finish_ns"), "INFO", SRC), pl.lit("Generated response "), rid,
                pl.lit(": output: ' tok', output_token_ids: "), _id_list(pl.col("output_tokens"), counts),
                pl.lit(", finish_reason: "), pl.col("finish_reason"),
            ]).alias("text"),
        )
        out.add_frame(answer["finish_ns"], answer["text"], seq=5)
