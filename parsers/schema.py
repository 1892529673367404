"""The one common event schema: every parser emits rows of exactly this table.

This module is the single definition of the columns, their Arrow and polars types, their
units and their meaning. `docs/schema.md` is generated from it (and a test checks that it
is up to date), the store writes it, and the SQL views read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    arrow: pa.DataType
    unit: str
    doc: str


TS_TYPE = pa.timestamp("us", tz="UTC")
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
)

EVENT_SCHEMA = pa.schema([pa.field(c.name, c.arrow) for c in COLUMNS])
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


def _polars_type(t: pa.DataType) -> pl.DataType:
    if t == TS_TYPE:
        return pl.Datetime("us", "UTC")
    if t == WRAPPER_TS_TYPE:
        return pl.Datetime("ns", "UTC")
    return {
        pa.bool_(): pl.Boolean(),
        pa.string(): pl.String(),
        pa.int64(): pl.Int64(),
        pa.int32(): pl.Int32(),
        pa.float64(): pl.Float64(),
    }[t]


POLARS_SCHEMA: dict[str, pl.DataType] = {c.name: _polars_type(c.arrow) for c in COLUMNS}

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
        rows.append(f"| `{c.name}` | {c.arrow} | {c.unit} | {c.doc} |")
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
        + "\n\n## Event kinds\n\n"
        + "\n".join(kinds)
        + "\n"
    )


if __name__ == "__main__":  # pragma: no cover
    print(schema_markdown(), end="")
