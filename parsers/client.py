"""Benchmark clients' per-request results as a request source (engine `client`): what the
client measured, exact to its own clock, for each request it sent.

Formats (field names read from the clients' source and docs):

* `vllm bench serve --save-result --save-detailed` (vllm/benchmarks/serve.py): one JSON
  object, written on one line, whose per-request lists are parallel arrays in the order the
  requests were issued: `input_lens`, `output_lens`, `ttfts` (s), `itls` (a list of s per
  request), `start_times` (s, `time.perf_counter()`, so only their differences mean
  anything), `errors` ("" when the request succeeded), `generated_texts`; some builds add
  `latencies` / `e2els` (s). `date` (`%Y%m%d-%H%M%S`, local time, taken when the run ended)
  places the run's last answer on the wall clock, to the second (`duration` (s) starts
  before the first request, which a low request rate sends seconds into the run). The requests were sent
  with ids `<--request-id-prefix><index>`; the prefix is not in the file (unless a build
  writes `request_id_prefix`), so each event carries its `index` and, when the prefix is
  known, the id.
* AIPerf `profile_export.jsonl` (genai-perf's successor): one JSON record per request,
  `metadata.x_request_id` (sent as `X-Request-ID`, so vLLM's id is `chatcmpl-<it>`),
  `metadata.request_start_ns` / `request_end_ns` (epoch ns), `metrics.time_to_first_token`,
  `request_latency`, `inter_token_latency` (`{"value", "unit": "ms"}`),
  `input_sequence_length`, `output_sequence_length` (tokens), `error` (`code`, `type`,
  `message`) or null.

Each request becomes one `client_request` event: `ts` = when the client sent it, `ttft_s`,
`e2e_s`, `tpot_s` (decode time per token after the first), `prompt_tokens`,
`output_tokens`, `http_status` / `message` for a failure, and attrs `client`, `index`,
`itl_s` (mean inter-token latency), `itl_max_s`, `success`, `start_estimated` (true when
`ts` is placed from `date`, to the second), `error_type`, `cancelled` (true when the client
cancelled the request itself: AIPerf `was_cancelled`). All the events of one JSON record share its
line span. Anything else in such a file is kept as `unparsed`.
"""

from __future__ import annotations

import datetime as dt
import json

import polars as pl

from .base import ParseContext, attrs_column, group_records

NAME = "client"
RECORD_LOOKBACK = 1
# A results file is written once, when the run ends (vLLM without a final newline): its last
# line is finished however fresh the file, so ingest must not hold it back as a live log's.
WRITTEN_WHOLE = True

_VLLM_BENCH_KEYS = ('"ttfts"', '"input_lens"', '"num_prompts"', '"endpoint_type"', '"model_id"')
_AIPERF_HEAD = r'^\{\s*"metadata"\s*:\s*\{'
_GUIDELLM_KEYS = ('"generative_benchmark"', '"generative_text_response"', '"generative_request_stats"',
                  '"time_to_first_token_ms"', '"request_loader"', '"scheduler_metrics"')


def detect(lines: list[str]) -> float:
    """Certain (1.0) for a `vllm bench serve` results object, AIPerf per-request records or a
    GuideLLM report: their structure is unmistakable, while the texts they hold (a model's
    generated output) can name any engine and so must not hand the file to that engine."""
    head = [ln for ln in lines if ln.strip()][:20]
    if not head or not head[0].lstrip().startswith("{"):
        return 0.0
    text = "\n".join(head)
    if text.lstrip().startswith('{"date": "') and sum(k in text for k in _VLLM_BENCH_KEYS) >= 2:
        return 1.0
    if '"x_request_id"' in text and '"request_start_ns"' in text and '"metrics"' in text:
        return 1.0
    if '"benchmarks"' in text and any(k in text for k in _GUIDELLM_KEYS):
        return 1.0
    return 0.0


def record_starts(text: pl.Series) -> pl.Series:
    """A JSON record starts at a line opening with `{` (one line per record for both
    formats; an indented object continues until the next)."""
    return text.fill_null("").str.starts_with("{").alias("starts")


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return lines.select("line", pl.lit("unparsed").alias("event"), pl.col("text").alias("message"))
    rec = group_records(lines, record_starts(lines["text"]))
    # GuideLLM's report also opens with `{"metadata": {`; its `benchmarks` list tells it apart
    is_aiperf = rec["first"].str.contains(_AIPERF_HEAD) & ~rec["text"].str.contains('"benchmarks":', literal=True)
    parts = []
    if is_aiperf.any():
        parts.append(_aiperf(rec.filter(is_aiperf)))
    for r in rec.filter(~is_aiperf).iter_rows(named=True):  # a results object per file: few
        parts.append(_guidellm(r) if _is_guidellm(r["text"]) else _vllm_bench(r))
    out = pl.concat(parts, how="diagonal_relaxed").sort("line", maintain_order=True)
    return out.with_row_index("_seq")


def _unparsed(r: dict) -> pl.DataFrame:
    return pl.DataFrame(
        {"line": [r["line"]], "n_lines": [r["n_lines"]], "event": ["unparsed"], "message": [r["text"]]},
        schema={"line": pl.Int64, "n_lines": pl.Int32, "event": pl.String, "message": pl.String},
    )


# cancelled: the client gave up on the request itself (AIPerf `was_cancelled`), an abort
# rather than a failure
_ATTRS = ["client", "index", "itl_s", "itl_max_s", "success", "start_estimated", "error_type", "cancelled"]


def _vllm_bench(r: dict) -> pl.DataFrame:
    try:
        obj = json.loads(r["text"])
    except (ValueError, RecursionError):
        return _unparsed(r)
    if not isinstance(obj, dict) or not isinstance(obj.get("ttfts"), list):
        return _unparsed(r)  # a results file saved without --save-detailed: no requests in it
    n = len(obj["ttfts"])

    def col(key: str, dtype: pl.DataType = pl.Float64) -> pl.Series:
        v = obj.get(key)
        if not isinstance(v, list) or len(v) != n:
            return pl.Series(key, [None] * n, dtype=dtype)
        return pl.Series(key, v, dtype=dtype, strict=False)

    itls = obj.get("itls") if isinstance(obj.get("itls"), list) and len(obj["itls"]) == n else [[]] * n
    df = pl.DataFrame({
        "index": pl.Series(range(n), dtype=pl.Int64),
        "ttft": col("ttfts"),
        "itls": pl.Series(itls, dtype=pl.List(pl.Float64), strict=False),
        "start": col("start_times"),
        "prompt_tokens": col("input_lens", pl.Int64),
        "output_tokens": col("output_lens", pl.Int64),
        "latency": col("latencies" if isinstance(obj.get("latencies"), list) else "e2els"),
        "error": col("errors", pl.String),
    })
    ended = _bench_date(obj.get("date"))
    duration = obj.get("duration") if isinstance(obj.get("duration"), (int, float)) else None
    prefix = obj.get("request_id_prefix") if isinstance(obj.get("request_id_prefix"), str) else None
    ok = pl.col("error").fill_null("") == ""
    e2e = pl.coalesce(pl.col("latency"), pl.col("ttft") + pl.col("itls").list.sum())
    first_start = df["start"].min()
    # `duration` runs from before the first request (sent after a random gap: seconds at a
    # low rate) to the last answer, and `date` is taken just after that answer: the last
    # answer is the moment the two pin to the wall clock
    last_end = df.select((pl.col("start") + e2e.fill_null(0.0)).max()).item()
    ts = pl.lit(None, pl.Datetime("us", "UTC"))
    if ended is not None and last_end is not None:
        ts = pl.from_epoch(
            (pl.lit(int(ended.timestamp() * 1e6)) + ((pl.col("start") - last_end) * 1e6).round().cast(pl.Int64)),
            time_unit="us").dt.replace_time_zone("UTC")
    elif ended is not None and duration is not None and first_start is not None:
        run_start_us = int((ended.timestamp() - duration) * 1e6)
        ts = pl.from_epoch(
            (pl.lit(run_start_us) + ((pl.col("start") - first_start) * 1e6).round().cast(pl.Int64)), time_unit="us"
        ).dt.replace_time_zone("UTC")
    df = df.with_columns(
        ts.alias("ts"),
        pl.when(ok).then(pl.col("ttft")).alias("ttft_s"),
        pl.when(ok).then(e2e).alias("e2e_s"),
        pl.when(ok & (pl.col("output_tokens") > 1))
        .then((e2e - pl.col("ttft")) / (pl.col("output_tokens") - 1)).alias("tpot_s"),
        pl.lit("vllm-bench").alias("client"),
        pl.when(ok).then(pl.col("itls").list.mean()).alias("itl_s"),
        pl.when(ok).then(pl.col("itls").list.max()).alias("itl_max_s"),
        ok.alias("success"),
        pl.lit(True).alias("start_estimated"),
        pl.lit(None, pl.String).alias("error_type"),
        pl.lit(None, pl.Boolean).alias("cancelled"),
    )
    return df.select(
        pl.lit(r["line"], pl.Int64).alias("line"),
        pl.lit(r["n_lines"], pl.Int32).alias("n_lines"),
        "ts",
        pl.lit("client_request").alias("event"),
        (pl.lit(prefix) + pl.col("index").cast(pl.String) if prefix is not None else pl.lit(None, pl.String))
        .alias("request_id"),
        pl.lit(obj.get("model_id") if isinstance(obj.get("model_id"), str) else None, pl.String).alias("model"),
        pl.when(ok).then(pl.col("prompt_tokens")).otherwise(pl.col("prompt_tokens")).alias("prompt_tokens"),
        pl.when(ok).then(pl.col("output_tokens")).alias("output_tokens"),
        "ttft_s", "e2e_s", "tpot_s",
        pl.when(~ok).then(pl.col("error")).alias("message"),
        attrs_column(df, _ATTRS),
    )


def _is_guidellm(text: str) -> bool:
    """A GuideLLM report: a `benchmarks` list, and not vllm bench's `{"date": ...` object."""
    return '"benchmarks"' in text and not text.lstrip().startswith('{"date"')


_GUIDELLM_STATUS = ("successful", "incomplete", "errored")


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _guidellm_request(q: dict, status: str) -> dict:
    """One GuideLLM request record (either schema) as the fields of a `client_request`."""
    timings = (q.get("info") or {}).get("timings") or {} if isinstance(q.get("info"), dict) else {}
    start = _num(timings.get("request_start")) or _num(q.get("start_time")) \
        or _num((q.get("info") or {}).get("started_at") if isinstance(q.get("info"), dict) else None)
    end = _num(timings.get("request_end")) or _num(q.get("end_time"))
    first = _num(timings.get("first_token_iteration")) or _num(q.get("first_token_time"))
    ttft = _num(q.get("time_to_first_token_ms"))
    ttft = ttft / 1000 if ttft is not None else (first - start if first is not None and start is not None else None)
    e2e = _num(q.get("request_latency"))
    if e2e is None and start is not None and end is not None:
        e2e = end - start
    itl = _num(q.get("inter_token_latency_ms"))
    out_tok = q.get("output_tokens")
    if not isinstance(out_tok, int):
        out_tok = (q.get("output_metrics") or {}).get("total_tokens") if isinstance(q.get("output_metrics"), dict) else None
    in_tok = q.get("prompt_tokens")
    if not isinstance(in_tok, int):
        in_tok = (q.get("input_metrics") or {}).get("total_tokens") if isinstance(q.get("input_metrics"), dict) else None
    error = q.get("error") if isinstance(q.get("error"), str) else None
    if error is None and isinstance(q.get("info"), dict) and isinstance(q["info"].get("error"), str):
        error = q["info"]["error"]
    ok = status == "successful"
    rid = q.get("response_id") if isinstance(q.get("response_id"), str) else None
    return {
        "ts_s": start, "request_id": rid or (q.get("request_id") if isinstance(q.get("request_id"), str) else None),
        "prompt_tokens": in_tok if isinstance(in_tok, int) else None,
        "output_tokens": out_tok if isinstance(out_tok, int) else None,
        "ttft_s": ttft, "e2e_s": e2e if ok else None,
        "tpot_s": (e2e - ttft) / (out_tok - 1) if ok and e2e is not None and ttft is not None
        and isinstance(out_tok, int) and out_tok > 1 else None,
        "message": None if ok else (error or status),
        "itl_s": itl / 1000 if itl is not None and ok else None, "success": ok,
        "error_type": None if ok else status,
    }


def _guidellm(r: dict) -> pl.DataFrame:
    try:
        obj = json.loads(r["text"])
    except (ValueError, RecursionError):
        return _unparsed(r)
    benches = obj.get("benchmarks") if isinstance(obj, dict) else None
    if not isinstance(benches, list):
        return _unparsed(r)
    rows = []
    for b in benches:
        reqs = b.get("requests") if isinstance(b, dict) else None
        for status in _GUIDELLM_STATUS:
            for q in (reqs.get(status) or []) if isinstance(reqs, dict) else []:
                if isinstance(q, dict):
                    rows.append(_guidellm_request(q, status))
    if not rows:
        return _unparsed(r)
    df = pl.DataFrame(rows, schema={
        "ts_s": pl.Float64, "request_id": pl.String, "prompt_tokens": pl.Int64, "output_tokens": pl.Int64,
        "ttft_s": pl.Float64, "e2e_s": pl.Float64, "tpot_s": pl.Float64, "message": pl.String,
        "itl_s": pl.Float64, "success": pl.Boolean, "error_type": pl.String,
    }).with_row_index("index").with_columns(
        pl.col("index").cast(pl.Int64),
        pl.lit("guidellm").alias("client"),
        pl.lit(None, pl.Float64).alias("itl_max_s"),
        pl.lit(False).alias("start_estimated"),
        pl.lit(None, pl.Boolean).alias("cancelled"),  # its `incomplete` status says it (error_type)
    )
    return df.select(
        pl.lit(r["line"], pl.Int64).alias("line"),
        pl.lit(r["n_lines"], pl.Int32).alias("n_lines"),
        pl.from_epoch((pl.col("ts_s") * 1e6).round().cast(pl.Int64), time_unit="us")
        .dt.replace_time_zone("UTC").alias("ts"),
        pl.lit("client_request").alias("event"),
        "request_id", "prompt_tokens",
        pl.when(pl.col("success")).then(pl.col("output_tokens")).alias("output_tokens"),
        "ttft_s", "e2e_s", "tpot_s", "message",
        attrs_column(df, _ATTRS),
    )


def _bench_date(value: object) -> dt.datetime | None:
    """`date` of a vllm bench results file: `%Y%m%d-%H%M%S`, the local time the run ended
    (taken as UTC, as on most servers and containers)."""
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.strptime(value, "%Y%m%d-%H%M%S").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _aiperf(rec: pl.DataFrame) -> pl.DataFrame:
    val = {"value": pl.Float64, "unit": pl.String}
    schema = pl.Struct({
        "metadata": pl.Struct({
            "x_request_id": pl.String, "session_num": pl.Int64, "request_start_ns": pl.Int64,
            "request_end_ns": pl.Int64, "was_cancelled": pl.Boolean,
        }),
        "metrics": pl.Struct({
            k: pl.Struct(val) for k in (
                "time_to_first_token", "request_latency", "inter_token_latency", "input_sequence_length",
                "output_sequence_length",
            )
        } | {"inter_chunk_latency": pl.Struct({"value": pl.List(pl.Float64), "unit": pl.String})}),
        "error": pl.Struct({"code": pl.Int64, "type": pl.String, "message": pl.String}),
    })
    try:
        d = rec.with_columns(pl.col("text").str.json_decode(schema).alias("_j"))
    except pl.exceptions.ComputeError:
        # a cut or garbled record fails the whole decode: only then is each record checked
        # (the bad ones become `unparsed`, kept whole)
        good = pl.Series([_is_json(t) for t in rec["text"]], dtype=pl.Boolean)
        decoded = rec.filter(good).select(pl.col("text").str.json_decode(schema).alias("_j"))["_j"]
        d = rec.with_columns(pl.lit(None, schema).alias("_j"))
        d = d.with_columns(d["_j"].scatter(good.arg_true(), decoded))
    md, mt, err = (pl.col("_j").struct.field(k) for k in ("metadata", "metrics", "error"))

    def metric_s(name: str) -> pl.Expr:
        m = mt.struct.field(name)
        scale = pl.when(m.struct.field("unit") == "ns").then(1e-9).when(m.struct.field("unit") == "us").then(1e-6) \
            .when(m.struct.field("unit") == "s").then(1.0).otherwise(1e-3)
        return m.struct.field("value") * scale

    icl = mt.struct.field("inter_chunk_latency").struct.field("value")
    d = d.with_columns(
        pl.lit("aiperf").alias("client"),
        md.struct.field("session_num").alias("index"),
        metric_s("inter_token_latency").alias("itl_s"),
        (icl.list.max() * 1e-3).alias("itl_max_s"),
        err.struct.field("type").is_null().alias("success"),
        pl.lit(False).alias("start_estimated"),
        err.struct.field("type").alias("error_type"),
        pl.when(md.struct.field("was_cancelled")).then(True).alias("cancelled"),
    )
    ttft, e2e = metric_s("time_to_first_token"), metric_s("request_latency")
    out_tok = mt.struct.field("output_sequence_length").struct.field("value").cast(pl.Int64)
    return d.select(
        "line", "n_lines",
        pl.from_epoch(md.struct.field("request_start_ns"), time_unit="ns").dt.cast_time_unit("us")
        .dt.replace_time_zone("UTC").alias("ts"),
        pl.when(pl.col("_j").is_not_null()).then(pl.lit("client_request")).otherwise(pl.lit("unparsed")).alias("event"),
        md.struct.field("x_request_id").alias("request_id"),
        mt.struct.field("input_sequence_length").struct.field("value").cast(pl.Int64).alias("prompt_tokens"),
        out_tok.alias("output_tokens"),
        ttft.alias("ttft_s"),
        e2e.alias("e2e_s"),
        pl.when(out_tok > 1).then((e2e - ttft) / (out_tok - 1)).alias("tpot_s"),
        err.struct.field("code").cast(pl.Int32).alias("http_status"),
        pl.when(pl.col("_j").is_null()).then(pl.col("text")).otherwise(err.struct.field("message")).alias("message"),
        attrs_column(d, _ATTRS, keep=pl.col("_j").is_not_null()),
    )
