"""The one common event schema: every parser emits rows of exactly this table.

This module is the single definition of the columns, their Arrow and polars types, their
units and their meaning. `docs/schema.md` is generated from it (and a test checks that it
is up to date), the store writes it, and the SQL views read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    arrow: pa.DataType
    unit: str
    doc: str


TS_TYPE = pa.timestamp("us", tz="UTC")
# a text column whose few distinct values repeat over many rows: each distinct value is held
# once per batch (Arrow dictionary) and once per row group on disk (Parquet dictionary page);
# DuckDB reads it as VARCHAR, polars as String
DICT_STRING = pa.dictionary(pa.int32(), pa.string())
WRAPPER_TS_TYPE = pa.timestamp("ns", tz="UTC")

COLUMNS: tuple[Column, ...] = (
    Column("ts", TS_TYPE, "µs, UTC", "when the event happened; null only when no time can be inferred"),
    Column("ts_inferred", pa.bool_(), "", "true when the line carried no time of its own and `ts` was taken from the nearest earlier line"),
    Column("engine", pa.string(), "", "the parser's name in `parsers.ENGINES` (`vllm`, `tgi`, `trtllm`, `sglang`, `llamacpp`, `client` for a benchmark client's results), or `unknown` for a file no parser recognised"),
    Column("instance", pa.string(), "", "which server wrote it (from the file's path unless `--instance` is given)"),
    Column("source", pa.string(), "", "the file the event came from"),
    Column("line", pa.int64(), "line number", "1-based line number in `source` where the event starts"),
    Column("n_lines", pa.int32(), "lines", "physical lines the event spans (a traceback is one event over many lines)"),
    Column("level", pa.string(), "", "DEBUG / INFO / WARNING / ERROR / CRITICAL, normalised across engines; null when the line has no level"),
    Column("event", pa.string(), "", "event kind, one of EVENT_KINDS"),
    Column("request_id", pa.string(), "", "the engine's request id"),
    Column("model", pa.string(), "", "model name, when the line names it"),
    Column("prompt_tokens", pa.int64(), "tokens", "prompt (input) tokens"),
    Column("output_tokens", pa.int64(), "tokens", "generated (output) tokens"),
    Column("max_tokens", pa.int64(), "tokens", "the request's output-token limit"),
    Column("e2e_s", pa.float64(), "s", "end-to-end request latency, arrival to last token"),
    Column("queue_s", pa.float64(), "s", "time the request waited before its first forward pass"),
    Column("ttft_s", pa.float64(), "s", "time to first token"),
    Column("tpot_s", pa.float64(), "s", "time per output token (decode)"),
    Column("inference_s", pa.float64(), "s", "time from the start of inference to the last token"),
    Column("running", pa.int64(), "requests", "requests running (in the batch) at `ts`"),
    Column("waiting", pa.int64(), "requests", "requests waiting in the queue at `ts`"),
    Column("swapped", pa.int64(), "requests", "requests swapped out to CPU at `ts`"),
    Column("batch_size", pa.int64(), "requests", "requests in the batch (scheduled this iteration)"),
    Column("batch_tokens", pa.int64(), "tokens", "tokens in the batch"),
    Column("kv_usage", pa.float64(), "fraction 0..1", "fraction of the GPU KV cache in use (log percentages become fractions)"),
    Column("kv_blocks_used", pa.int64(), "blocks", "KV cache blocks in use"),
    Column("kv_blocks_total", pa.int64(), "blocks", "KV cache blocks in total"),
    Column("prompt_tps", pa.float64(), "tokens/s", "prompt (prefill) throughput"),
    Column("gen_tps", pa.float64(), "tokens/s", "generation (decode) throughput"),
    Column("max_num_seqs", pa.int64(), "requests", "announced limit of concurrent sequences (max batch size)"),
    Column("max_batch_tokens", pa.int64(), "tokens", "announced token budget of one batch (max_num_batched_tokens / max batch total tokens / maxNumTokens)"),
    Column("kv_capacity_tokens", pa.int64(), "tokens", "announced KV cache capacity"),
    Column("http_status", pa.int32(), "", "HTTP status code of an access-log line"),
    Column("message", pa.string(), "", "the message text; for `unparsed`, the whole raw line (all lines of a multi-line record); null on the bulk events whose columns say what the line said (`request`, `request_arrived`, `request_finished`, `engine_stats`, `batch`, `http_access` below WARNING and not a failed HTTP request) unless the store was ingested with `--keep-lines`"),
    Column("attrs", pa.string(), "JSON object", "every other field the line carried, so nothing a line says is thrown away"),
    Column("wrapper_ts", WRAPPER_TS_TYPE, "ns, UTC", "the time the log's wrapper gave the line (CRI, docker json-file, journald, `docker logs --timestamps`...); `ts` takes it when the engine's own time is coarser (the engine's then in attrs `engine_ts`); null for a plain log"),
    Column("stream", pa.string(), "", "`stdout` or `stderr`, when the wrapper says which (CRI, docker json-file)"),
    Column("labels", pa.string(), "JSON object", "labels the wrapper and the file's path gave the line: Kubernetes `namespace`, `pod`, `container`, `restart`; compose `service`; syslog/journald `host`, `app`, `unit`..."),
    Column("sampling_params", DICT_STRING, "JSON object", "the request's sampling parameters as the engine logged them, typed, keyed by the engine's names; a parameter logged as None is absent. TGI `request`: the `GenerateParameters` dump (`temperature`, `top_k`, `top_p`, `typical_p`, `repetition_penalty`, `frequency_penalty`, `best_of`, `do_sample`, `max_new_tokens`, ...); vLLM `request_arrived`: the `SamplingParams(...)` repr's number and boolean fields (`n`, `temperature`, `top_p`, `top_k`, `min_p`, penalties, `ignore_eos`...; its strings and lists are left out, and `max_tokens`, which the server may compute per request, is in `max_tokens`). Clients repeat the same few, so each distinct value is stored once per row group (a dictionary column; VARCHAR in SQL: `sampling_params->>'temperature'`); the requested seed is per request and stays in attrs `param_seed`; null where the line carries none and in parts written before this column"),
    Column("byte_offset", pa.int64(), "bytes", "where the event's first line starts in `source`: bytes into the file's content (decompressed for `.gz`), so `servelens show` reads the raw lines back (`n_lines` of them) without a re-ingest; null in parts written before this column"),
)

EVENT_SCHEMA = pa.schema([pa.field(c.name, c.arrow) for c in COLUMNS])
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


def _polars_type(t: pa.DataType) -> pl.DataType:
    if t == TS_TYPE:
        return pl.Datetime("us", "UTC")
    if t == WRAPPER_TS_TYPE:
        return pl.Datetime("ns", "UTC")
    if t == DICT_STRING:
        # polars String: a join or gather from the distinct values copies 16-byte views, not
        # the text (a Categorical would intern every value in a process-wide mapping)
        return pl.String()
    return {
        pa.bool_(): pl.Boolean(),
        pa.string(): pl.String(),
        pa.int64(): pl.Int64(),
        pa.int32(): pl.Int32(),
        pa.float64(): pl.Float64(),
    }[t]


POLARS_SCHEMA: dict[str, pl.DataType] = {c.name: _polars_type(c.arrow) for c in COLUMNS}
DICTIONARY_COLUMNS: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.arrow == DICT_STRING)


def events_to_arrow(df: pl.DataFrame) -> pa.Table:
    """An `events` frame (POLARS_SCHEMA) as an EVENT_SCHEMA table. The dictionary columns
    are encoded from polars' string views (`to_arrow` would first copy each row's text into
    a plain string array: a dump repeated over a million rows, gigabytes).

    The table is made in the schema's types directly, without Arrow's cast: polars' large
    strings get 32-bit offsets, the dictionary columns are encoded by polars. (Arrow's cast
    and dictionary_encode live in pyarrow.compute, whose import costs an ingest more than
    the work itself.)"""
    dict_cols = [c for c in DICTIONARY_COLUMNS if c in df.columns]
    table = df.drop(dict_cols).to_arrow()
    present = {*table.column_names, *dict_cols}  # (column_names makes a new list at each call)
    fields = [f for f in EVENT_SCHEMA if f.name in present]
    cols = [_dictionary_column(df[f.name]) if f.name in dict_cols else _as_type(table[f.name], f.type)
            for f in fields]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _as_type(col: pa.ChunkedArray, t: pa.DataType) -> pa.ChunkedArray:
    """`col` as type `t`: polars' large strings as strings by narrowing their offsets; any
    other difference by Arrow's cast."""
    if col.type == t:
        return col
    if col.type == pa.large_string() and t == pa.string():
        chunks = [_narrow(c) for c in col.chunks]
        if all(c is not None for c in chunks):
            return pa.chunked_array(chunks, t)
    return col.cast(t)


def _narrow(arr: pa.Array) -> pa.Array | None:
    """A large string array as a string array over the same bytes (None when its offsets
    do not fit 32 bits: Arrow's cast says so)."""
    if len(arr) == 0:
        # (not pa.array([]): converting a Python list first imports pandas, if installed)
        return pa.nulls(0, pa.string())
    validity, offsets, data = arr.buffers()
    wide = np.frombuffer(offsets, dtype=np.int64, count=arr.offset + len(arr) + 1)
    if wide[-1] > np.iinfo(np.int32).max:
        return None
    return pa.Array.from_buffers(
        pa.string(), len(arr), [validity, pa.py_buffer(wide.astype(np.int32)), data if data is not None else pa.py_buffer(b"")],
        arr.null_count, arr.offset,
    )


def _dictionary_column(s: pl.Series) -> pa.Array:
    """A String series as a DICT_STRING array: its distinct values in the order they first
    appear (as Arrow's dictionary_encode orders them), each row their index."""
    s = s.cast(pl.String)
    if s.null_count() == len(s):  # the column of most events: nothing to look up
        return pa.DictionaryArray.from_arrays(pa.nulls(len(s), pa.int32()), pa.nulls(0, pa.string()))
    values = s.drop_nulls().unique(maintain_order=True)
    codes = (
        s.to_frame("v")
        .join(values.to_frame("v").with_row_index("i"), on="v", how="left", maintain_order="left")["i"]
        .cast(pl.Int32)
    )
    dictionary = values.to_arrow()
    narrow = _narrow(dictionary) if dictionary.type == pa.large_string() else None
    dictionary = narrow if narrow is not None else dictionary.cast(pa.string())
    return pa.DictionaryArray.from_arrays(codes.to_arrow(), dictionary)


def events_from_arrow(table: pa.Table) -> pl.DataFrame:
    """An `events` table (EVENT_SCHEMA, or part of it) as a polars frame of POLARS_SCHEMA
    types: a dictionary column becomes String by a gather from its distinct values (views,
    not copies; `pl.from_arrow` would make it a Categorical)."""
    dict_cols = [c for c in table.column_names if pa.types.is_dictionary(table.schema.field(c).type)]
    df = pl.from_arrow(table.drop_columns(dict_cols)) if dict_cols else pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    for c in dict_cols:
        parts = [
            pl.from_arrow(ch.dictionary).cast(pl.String).gather(pl.from_arrow(ch.indices))
            for ch in table[c].chunks
        ]
        s = pl.concat(parts) if parts else pl.Series(dtype=pl.String)
        df = df.with_columns(s.alias(c))
    return df.select(table.column_names)

EVENT_KINDS: dict[str, str] = {
    "request": "a finished request with its timings (one line carries the whole story, e.g. TGI's `Success`)",
    "request_arrived": "the server received or queued a request",
    "request_finished": "the server finished a request (no timings on the line)",
    "request_aborted": "a request was aborted (client gone, error, timeout)",
    "http_access": "an HTTP access-log line (status, method and path)",
    "engine_stats": "a periodic or per-iteration snapshot of the engine's state",
    "batch": "one batch / iteration the engine ran",
    "capacity": "a limit the server announced at start-up (KV blocks, max sequences, token budget)",
    "preemption": "a sequence was preempted because the KV cache ran out",
    "error": "an ERROR/CRITICAL record, traceback or failure",
    "log": "a line the parser understood that carries no metrics",
    "unparsed": "a line the parser did not understand; kept whole in `message`",
    "request_output": "streamed output of a request, folded (vLLM `--enable-log-outputs` `streaming delta` lines): with a request id, that request's chunks in one parsed chunk (`ts` = its first, attrs `deltas`, `last_delta_s`); without, the run of lines it covers (attrs `folded_lines`)",
    "shutdown": "the server began or went through an orderly shutdown (signal received, `shutdown triggered`, application shutdown)",
    "client_request": "one request as a benchmark client saw it (`vllm bench serve` results, genai-perf / AIPerf, GuideLLM): exact client-side TTFT, ITL and E2E",
}

LEVELS: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def empty_events() -> pl.DataFrame:
    """A zero-row frame with exactly the event schema."""
    return pl.DataFrame(schema=POLARS_SCHEMA)


def schema_markdown() -> str:
    """The schema as a Markdown table (docs/schema.md is generated from this)."""
    rows = ["| column | type | unit | meaning |", "|---|---|---|---|"]
    for c in COLUMNS:
        kind = "string (dictionary-encoded)" if c.arrow == DICT_STRING else c.arrow
        rows.append(f"| `{c.name}` | {kind} | {c.unit} | {c.doc} |")
    kinds = ["| event | meaning |", "|---|---|"]
    kinds += [f"| `{k}` | {v} |" for k, v in EVENT_KINDS.items()]
    return (
        "# The servelens event schema\n\n"
        "<!-- generated from parsers/schema.py by `python -m servelens.parsers.schema`; do not edit -->\n\n"
        "Every parser emits rows of exactly this table; the store keeps it as Parquet and the SQL view\n"
        "`events` reads it. A value a log does not carry stays null (never 0). Percentages in logs become\n"
        "fractions and durations become seconds. Times without a year take it from `--year` or the\n"
        "file's modification time (with Dec 31 -> Jan 1 rollover inside a file); times without a zone\n"
        "are taken as UTC.\n\n"
        + "\n".join(rows)
        + "\n\n## Reading a line back\n\n"
        "The bulk events keep no text (`message` above), yet every event says where it came from:\n"
        "`source`, `line`, `n_lines` and `byte_offset`, where its first line starts in the file's\n"
        "content. `servelens show` reads the raw lines back from there, once the file still holds the\n"
        "content ingested (the manifest's fingerprint of it: the hash of its first bytes and of the\n"
        "bytes before the offset read); a file renamed, rotated or gzipped since is found by the same\n"
        "fingerprint. `byte_offset` was added to the schema later: parts written before it read it as\n"
        "null (their lines are shown as parsed columns; re-ingesting into a new store gives offsets).\n"
        "A column is only ever appended, so every older part stays readable.\n"
        + "\n## Event kinds\n\n"
        + "\n".join(kinds)
        + "\n"
    )


if __name__ == "__main__":  # pragma: no cover
    print(schema_markdown(), end="")
