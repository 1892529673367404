"""Samples: what an engine's `/metrics` said, one row per sample, beside the events.

Every source of samples (a live scrape, a file of scrapes, a Prometheus server) ends in
`finish`, which gives each row its metric family, type, engine and servelens meaning, so the
store holds one schema (SAMPLE_SCHEMA) whatever the source:

- counters and gauges: one row per series per scrape;
- histograms: the `_bucket` rows with their upper bound in `le` (+Inf included), and the
  `_sum` and `_count` rows, so a percentile over any window is computed from the buckets
  (sql/staging/scraped_latency.sql), as PromQL's `histogram_quantile` does;
- summaries: the quantile rows with `quantile`, `_sum` and `_count`.

`labels` is the series' labels as a JSON object with sorted keys, without `le`, `quantile`
and the target labels Prometheus adds (`instance`, `job`: the instance is a column, the job
is not kept), so one series reads the same from a live scrape, a file and a Prometheus
server. A metric no engine mapping knows is kept by its name with a null meaning.
"""

from __future__ import annotations

import pyarrow as pa
import polars as pl

SAMPLE_SCHEMA = pa.schema([
    pa.field("ts", pa.timestamp("us", tz="UTC")),      # when the sample was taken
    pa.field("instance", pa.string()),                 # the server (the name its log has)
    pa.field("engine", pa.string()),                   # vllm | sglang | llamacpp | tgi | trtllm | unknown
    pa.field("name", pa.string()),                     # the sample's name as exposed (`..._bucket`, `..._total`)
    pa.field("family", pa.string()),                   # the metric family (histogram: its name without `_bucket`)
    pa.field("type", pa.string()),                     # counter | gauge | histogram | summary | untyped
    pa.field("labels", pa.string()),                   # JSON object, sorted keys, no le / quantile / instance / job
    pa.field("le", pa.float64()),                      # a histogram bucket's upper bound (inf for +Inf)
    pa.field("quantile", pa.float64()),                # a summary's quantile
    pa.field("value", pa.float64()),
    pa.field("meaning", pa.string()),                  # servelens' name for it (METRIC_NAMES), null when unknown
    pa.field("target", pa.string()),                   # the address scraped (host:port), when known
    pa.field("source", pa.string()),                   # the URL scraped, the file read, or the Prometheus server
])
SAMPLE_COLUMNS = [f.name for f in SAMPLE_SCHEMA]
POLARS_SCHEMA = {
    "ts": pl.Datetime("us", "UTC"), "instance": pl.Utf8, "engine": pl.Utf8, "name": pl.Utf8,
    "family": pl.Utf8, "type": pl.Utf8, "labels": pl.Utf8, "le": pl.Float64, "quantile": pl.Float64,
    "value": pl.Float64, "meaning": pl.Utf8, "target": pl.Utf8, "source": pl.Utf8,
}
# a sample is known by these: the same sample read twice (a file ingested again, a scrape
# also found in Prometheus) is stored once
SAMPLE_KEY = ["instance", "name", "labels", "le", "quantile", "ts"]

# Metric names per engine, and what servelens calls them. `label` restricts a row to the
# series carrying that label value (Triton publishes several meanings under one name).
# Units: latencies in seconds, KV usage a fraction 0..1, the rest counts, as the engines
# publish them (vLLM's `..._perc` gauges are fractions despite their name).
# (engine, family, type, meaning, label)
METRIC_NAMES: list[tuple[str, str, str, str, str | None]] = [
    # vLLM (V1 names; V0's where they differ)
    ("vllm", "vllm:num_requests_running", "gauge", "running", None),
    ("vllm", "vllm:num_requests_waiting", "gauge", "waiting", None),
    ("vllm", "vllm:num_requests_swapped", "gauge", "swapped", None),
    ("vllm", "vllm:kv_cache_usage_perc", "gauge", "kv_usage", None),
    ("vllm", "vllm:gpu_cache_usage_perc", "gauge", "kv_usage", None),
    ("vllm", "vllm:num_preemptions", "counter", "preemptions", None),
    ("vllm", "vllm:prompt_tokens", "counter", "prompt_tokens", None),
    ("vllm", "vllm:generation_tokens", "counter", "generation_tokens", None),
    ("vllm", "vllm:request_success", "counter", "requests_finished", None),
    ("vllm", "vllm:time_to_first_token_seconds", "histogram", "ttft", None),
    ("vllm", "vllm:inter_token_latency_seconds", "histogram", "itl", None),
    ("vllm", "vllm:request_time_per_output_token_seconds", "histogram", "tpot", None),
    ("vllm", "vllm:time_per_output_token_seconds", "histogram", "tpot", None),
    ("vllm", "vllm:e2e_request_latency_seconds", "histogram", "e2e", None),
    ("vllm", "vllm:request_queue_time_seconds", "histogram", "queue", None),
    ("vllm", "vllm:request_prefill_time_seconds", "histogram", "prefill", None),
    ("vllm", "vllm:request_decode_time_seconds", "histogram", "decode", None),
    ("vllm", "vllm:request_inference_time_seconds", "histogram", "inference", None),
    # SGLang
    ("sglang", "sglang:num_running_reqs", "gauge", "running", None),
    ("sglang", "sglang:num_queue_reqs", "gauge", "waiting", None),
    ("sglang", "sglang:token_usage", "gauge", "kv_usage", None),
    ("sglang", "sglang:num_retracted_requests", "counter", "preemptions", None),
    ("sglang", "sglang:prompt_tokens", "counter", "prompt_tokens", None),
    ("sglang", "sglang:generation_tokens", "counter", "generation_tokens", None),
    ("sglang", "sglang:num_requests", "counter", "requests_finished", None),
    ("sglang", "sglang:time_to_first_token_seconds", "histogram", "ttft", None),
    ("sglang", "sglang:inter_token_latency_seconds", "histogram", "itl", None),
    ("sglang", "sglang:time_per_output_token_seconds", "histogram", "tpot", None),
    ("sglang", "sglang:e2e_request_latency_seconds", "histogram", "e2e", None),
    ("sglang", "sglang:queue_time_seconds", "histogram", "queue", None),
    # llama.cpp's llama-server (--metrics); a deferred request waits for a free slot
    ("llamacpp", "llamacpp:requests_processing", "gauge", "running", None),
    ("llamacpp", "llamacpp:requests_deferred", "gauge", "waiting", None),
    ("llamacpp", "llamacpp:kv_cache_usage_ratio", "gauge", "kv_usage", None),
    ("llamacpp", "llamacpp:prompt_tokens", "counter", "prompt_tokens", None),
    ("llamacpp", "llamacpp:tokens_predicted", "counter", "generation_tokens", None),
    # TGI (metrics-exporter-prometheus: counters without `_total`)
    ("tgi", "tgi_queue_size", "gauge", "waiting", None),
    ("tgi", "tgi_batch_current_size", "gauge", "running", None),
    ("tgi", "tgi_request_success", "counter", "requests_finished", None),
    ("tgi", "tgi_request_input_count", "counter", "requests_arrived", None),
    ("tgi", "tgi_request_duration", "histogram", "e2e", None),
    ("tgi", "tgi_request_queue_duration", "histogram", "queue", None),
    ("tgi", "tgi_request_inference_duration", "histogram", "inference", None),
    ("tgi", "tgi_request_mean_time_per_token_duration", "histogram", "tpot", None),
    # TensorRT-LLM: trtllm-serve (`trtllm_`, or `trtllm:` under Dynamo) and Triton's backend
    ("trtllm", "trtllm_request_success", "counter", "requests_finished", None),
    ("trtllm", "trtllm_e2e_request_latency_seconds", "histogram", "e2e", None),
    ("trtllm", "trtllm_time_to_first_token_seconds", "histogram", "ttft", None),
    ("trtllm", "trtllm_time_per_output_token_seconds", "histogram", "tpot", None),
    ("trtllm", "trtllm_request_queue_time_seconds", "histogram", "queue", None),
    ("trtllm", "trtllm_kv_cache_utilization", "gauge", "kv_usage", None),
    ("trtllm", "nv_trt_llm_request_metrics", "gauge", "running", "request_type=scheduled"),
    ("trtllm", "nv_trt_llm_request_metrics", "gauge", "waiting", "request_type=waiting"),
    ("trtllm", "nv_trt_llm_kv_cache_block_metrics", "gauge", "kv_usage", "kv_cache_block_type=fraction"),
]
# the servelens meanings of the mapping, each with its unit
MEANINGS = {
    "running": "requests", "waiting": "requests", "swapped": "requests", "kv_usage": "fraction",
    "preemptions": "count", "prompt_tokens": "tokens", "generation_tokens": "tokens",
    "requests_finished": "requests", "requests_arrived": "requests",
    "ttft": "s", "tpot": "s", "itl": "s", "e2e": "s", "queue": "s", "prefill": "s",
    "decode": "s", "inference": "s",
}
# an engine by the prefix of its metric names
ENGINE_PREFIXES = [("vllm:", "vllm"), ("sglang:", "sglang"), ("llamacpp:", "llamacpp"),
                   ("tgi_", "tgi"), ("trtllm_", "trtllm"), ("trtllm:", "trtllm"), ("nv_trt_llm_", "trtllm")]
SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount", "_info")


def names_frame() -> pl.DataFrame:
    """METRIC_NAMES as a frame; `trtllm:` names (Dynamo's prefix) are the `trtllm_` ones."""
    rows = [*METRIC_NAMES, *((e, "trtllm:" + f[len("trtllm_"):], t, m, lab)
                             for e, f, t, m, lab in METRIC_NAMES if f.startswith("trtllm_"))]
    df = pl.DataFrame(rows, schema=["map_engine", "family", "map_type", "meaning", "label"], orient="row")
    return df.with_columns(
        pl.col("label").str.split_exact("=", 1).struct.rename_fields(["label_key", "label_value"])
    ).unnest("label").with_columns(
        # the label as it appears in the labels JSON
        pl.when(pl.col("label_key").is_not_null())
        .then(pl.format('"{}":"{}"', "label_key", "label_value")).alias("label_json")
    ).drop("label_key", "label_value")


def engine_of(name: pl.Expr) -> pl.Expr:
    expr = pl.lit("unknown")
    for prefix, engine in reversed(ENGINE_PREFIXES):
        expr = pl.when(name.str.starts_with(prefix)).then(pl.lit(engine)).otherwise(expr)
    return expr


def finish(df: pl.DataFrame, types: dict[str, str] | None = None) -> pl.DataFrame:
    """Samples with ts, name, labels, le, quantile, value, target, source, instance -> the
    SAMPLE_SCHEMA frame: each row's family, type, engine and meaning.

    `types`: family -> type as the source declared it (`# TYPE`, Prometheus' metadata);
    else the mapping's type, else what the names say (`_bucket` rows with `le`: a histogram;
    `_total`: a counter)."""
    if df.height == 0:
        return pl.DataFrame(schema=POLARS_SCHEMA)
    declared = pl.DataFrame(
        {"family": list((types or {}).keys()), "declared": list((types or {}).values())},
        schema={"family": pl.Utf8, "declared": pl.Utf8},
    ).unique("family", keep="last")
    names = names_frame()
    mapped_types = names.select("family", "map_type").unique("family")
    # a name's candidate families: itself, and itself without each suffix it ends with
    base = pl.col("name")
    stripped = pl.coalesce([
        pl.when(base.str.ends_with(s)).then(base.str.slice(0, base.str.len_chars() - len(s)))
        for s in SUFFIXES
    ])
    uniq = df.group_by("name").agg(pl.col("le").is_not_null().any().alias("has_le"))
    uniq = uniq.with_columns(stripped.alias("stripped"))
    # histogram families of the data itself (for sources that declare no type)
    hist = set(uniq.filter(pl.col("has_le") & pl.col("name").str.ends_with("_bucket"))["stripped"].to_list())
    summ = set(df.filter(pl.col("quantile").is_not_null())["name"].unique().to_list())
    uniq = (
        uniq.join(declared.rename({"declared": "t_name"}), left_on="name", right_on="family", how="left")
        .join(declared.rename({"declared": "t_base"}), left_on="stripped", right_on="family", how="left")
        .join(mapped_types.rename({"map_type": "m_name"}), left_on="name", right_on="family", how="left")
        .join(mapped_types.rename({"map_type": "m_base"}), left_on="stripped", right_on="family", how="left")
    )
    suffix_is = lambda *s: pl.any_horizontal([pl.col("name").str.ends_with(x) for x in s])  # noqa: E731
    histo_base = pl.col("stripped").is_in(list(hist)) | pl.col("t_base").is_in(["histogram", "gaugehistogram"]) | (pl.col("m_base") == "histogram")
    summ_base = pl.col("stripped").is_in(list(summ)) | (pl.col("t_base") == "summary")
    uniq = uniq.with_columns(
        pl.when(histo_base & suffix_is("_bucket", "_sum", "_count", "_gsum", "_gcount", "_created"))
        .then(pl.struct(family=pl.col("stripped"), type=pl.lit("histogram")))
        .when(summ_base & suffix_is("_sum", "_count", "_created"))
        .then(pl.struct(family=pl.col("stripped"), type=pl.lit("summary")))
        .when(pl.col("name").is_in(list(summ)) | (pl.col("t_name") == "summary"))
        .then(pl.struct(family=pl.col("name"), type=pl.lit("summary")))
        # Prometheus' text format declares a counter under its sample name (`x_total`),
        # OpenMetrics under the family (`x`)
        .when(pl.col("t_name").is_not_null())
        .then(pl.struct(family=pl.when(suffix_is("_total")).then(pl.col("stripped")).otherwise(pl.col("name")),
                        type=pl.col("t_name")))
        .when(suffix_is("_total") & (pl.col("t_base").is_not_null() | pl.col("m_base").is_not_null()))
        .then(pl.struct(family=pl.col("stripped"), type=pl.coalesce("t_base", "m_base")))
        .when(pl.col("m_name").is_not_null())
        .then(pl.struct(family=pl.col("name"), type=pl.col("m_name")))
        .when(suffix_is("_total"))
        .then(pl.struct(family=pl.col("stripped"), type=pl.lit("counter")))
        .otherwise(pl.struct(family=pl.col("name"), type=pl.lit("untyped")))
        .alias("ft")
    ).unnest("ft").with_columns(
        pl.col("type").replace({"unknown": "untyped", "gaugehistogram": "histogram"})
    )
    out = df.join(uniq.select("name", "family", "type"), on="name", how="left")
    out = out.with_columns(engine_of(pl.col("family")).alias("engine"))
    # the meaning: by family, and for a mapping row with a label, only where the labels hold it
    cand = out.select("family", "labels").unique().join(names.select("family", "meaning", "label_json"), on="family", how="inner")
    cand = cand.filter(pl.col("label_json").is_null() | pl.col("labels").str.contains(pl.col("label_json"), literal=True))
    cand = cand.unique(["family", "labels"], keep="first").select("family", "labels", "meaning")
    out = out.join(cand, on=["family", "labels"], how="left", nulls_equal=True)
    return out.select([pl.col(c).cast(t) for c, t in POLARS_SCHEMA.items()])


def to_arrow(df: pl.DataFrame) -> pa.Table:
    return df.select(SAMPLE_COLUMNS).to_arrow().cast(SAMPLE_SCHEMA)
