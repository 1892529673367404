"""TGI log writer: text-generation-inference 2.0.4 (launcher + router in one stdout).

Variants (as real TGI versions print them; sample_logs/tgi/real/):
* `text` — tracing's Full format for the router (`2024-02-14T06:49:51.437631Z  INFO generate{...}:
  text_generation_router::server: router/src/server.rs:305: Success`) and the compact format for
  the launcher (`... INFO shard-manager: text_generation_launcher: Shard ready in 12.7s rank=0`).
* `json` — `--json-output`: router objects flattened with file/line and span/spans, launcher
  objects with `fields.message`.

One `Success` line per finished request, at its finish time, with total/validation/queue/
inference/time_per_token as Rust `Duration` Debug strings computed from integer nanoseconds
(total = validation + queue + inference exactly; time_per_token = inference // tokens).
TGI prints no request id and no periodic queue/batch line.
"""

from __future__ import annotations

import json

import polars as pl

from .lines import Lines, py_dt, rust_duration, rust_duration_py, ts_expr
from .writers_common import oom_message

SUCCESS_SRC = ("text_generation_router::server", "router/src/server.rs", 305)


def _params_expr(max_new: pl.Expr) -> pl.Expr:
    return pl.concat_str([
        pl.lit("GenerateParameters { best_of: None, temperature: Some(0.7), repetition_penalty: None, "
               "frequency_penalty: None, top_k: None, top_p: None, typical_p: None, do_sample: true, "
               "max_new_tokens: Some("),
        max_new.cast(pl.String),
        pl.lit("), return_full_text: None, stop: [], truncate: None, watermark: false, details: false, "
               "decoder_input_details: false, seed: None, top_n_tokens: None, grammar: None }"),
    ])


class Fmt:
    def __init__(self, variant: str):
        self.json = variant == "json"

    @staticmethod
    def when(ns: int) -> str:
        return py_dt(ns).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def launcher(self, ns: int, level: str, msg: str, span: str | None = None, rank: int | None = None) -> str:
        if self.json:
            obj = {"timestamp": self.when(ns), "level": level, "fields": {"message": msg},
                   "target": "text_generation_launcher"}
            if span:
                sp = {"rank": rank, "name": span} if rank is not None else {"name": span}
                obj["span"] = sp
                obj["spans"] = [sp]
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        pre = f"{span}: " if span else ""
        post = f" rank={rank}" if rank is not None else ""
        return f"{self.when(ns)} {level:>5} {pre}text_generation_launcher: {msg}{post}"

    def router(self, ns: int, level: str, msg: str, line: int, target: str = "text_generation_router",
               file: str = "router/src/main.rs") -> str:
        if self.json:
            obj = {"timestamp": self.when(ns), "level": level, "message": msg, "target": target,
                   "filename": file, "line_number": line}
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        return f"{self.when(ns)} {level:>5} {target}: {file}:{line}: {msg}"


def write(d) -> Lines:
    f = Fmt(d.variant)
    out = Lines()
    _startup(d, f, out)
    _success(d, f, out)
    if d.res.crash_ts is not None:
        _crash(d, f, out)
    return out


def _startup(d, f: Fmt, out: Lines) -> None:
    cfg, m = d.cfg, d.model
    t = d.start_ns - 40 * 10**9
    step = lambda s: t + int(s * 1e9)  # noqa: E731
    total_tokens = cfg.num_gpu_blocks * cfg.block_size
    ready = 12 + float(d.rng.uniform(0.1, 0.9))
    args = (
        f'Args {{ model_id: "{m}", revision: None, validation_workers: 2, sharded: None, num_shard: None, '
        "quantize: None, speculate: None, dtype: None, trust_remote_code: false, "
        "max_concurrent_requests: 128, max_best_of: 2, max_stop_sequences: 4, max_top_n_tokens: 5, "
        f"max_input_tokens: Some({d.max_model_len // 2}), max_input_length: None, "
        f"max_total_tokens: Some({d.max_model_len}), waiting_served_ratio: 0.3, "
        f"max_batch_prefill_tokens: Some({cfg.max_batched_tokens}), max_batch_total_tokens: None, "
        f'max_waiting_tokens: 20, max_batch_size: None, cuda_graphs: None, hostname: "{d.name}", '
        'port: 80, shard_uds_path: "/tmp/text-generation-server", master_addr: "localhost", '
        'master_port: 29500, huggingface_hub_cache: Some("/data"), weights_cache_override: None, '
        "disable_custom_kernels: false, cuda_memory_fraction: 1.0, rope_scaling: None, rope_factor: None, "
        f"json_output: {'true' if f.json else 'false'}, otlp_endpoint: None, cors_allow_origin: [], "
        "watermark_gamma: None, watermark_delta: None, ngrok: false, ngrok_authtoken: None, "
        "ngrok_edge: None, tokenizer_config_path: None, disable_grammar_support: false, env: false, "
        "max_client_batch_size: 4 }"
    )
    L = [
        (0.0, "launcher", "INFO", args, None, None),
        (0.0, "launcher", "INFO", "Starting download process.", "download", None),
        (1.5, "launcher", "INFO", "Files are already present on the host. Skipping download.", None, None),
        (2.1, "launcher", "INFO", "Successfully downloaded weights.", "download", None),
        (2.1, "launcher", "INFO", "Starting shard", "shard-manager", 0),
        (12.1, "launcher", "INFO", "Waiting for shard to be ready...", "shard-manager", 0),
        (2.1 + ready - 0.2, "launcher", "INFO", "Server started at unix:///tmp/text-generation-server-0", None, None),
        (2.1 + ready, "launcher", "INFO", f"Shard ready in {rust_duration_py(int(ready * 1e9))}", "shard-manager", 0),
        (2.2 + ready, "launcher", "INFO", "Starting Webserver", None, None),
    ]
    for s, _, lvl, msg, span, rank in L:
        out.add(step(s), f.launcher(step(s), lvl, msg, span, rank))
    r0 = 2.4 + ready
    out.add(step(r0), f.router(step(r0), "INFO", "Using config Some(Llama)", 289))
    out.add(step(r0), f.router(step(r0), "INFO", "Warming up model", 328))
    out.add(step(r0 + 3.0), f.launcher(step(r0 + 3.0), "INFO",
                                       f"KV-cache blocks: {cfg.num_gpu_blocks}, size: {cfg.block_size}"))
    out.add(step(r0 + 5.1), f.router(step(r0 + 5.1), "INFO", f"Setting max batch total tokens to {total_tokens}", 365))
    out.add(step(r0 + 5.1), f.router(step(r0 + 5.1), "INFO", "Connected", 366))


def _success(d, f: Fmt, out: Lines) -> None:
    ok = d.req.filter(pl.col("status") == "ok")
    if ok.height == 0:
        return
    seeds = pl.Series(d.rng.integers(0, 2**63 - 1, ok.height, dtype="int64")).cast(pl.UInt64) * 2 + 1
    ns = {
        "total": pl.col("finish_ns") - pl.col("arrival_ns"),
        "validation": pl.col("queue_start_ns") - pl.col("arrival_ns"),
        "queue": pl.col("start_ns") - pl.col("queue_start_ns"),
        "inference": pl.col("finish_ns") - pl.col("start_ns"),
    }
    df = ok.with_columns(seeds.alias("seed")).select(
        pl.col("finish_ns"),
        ts_expr(pl.col("finish_ns")).dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").alias("when"),
        _params_expr(pl.col("max_tokens")).alias("params"),
        *[rust_duration(e).alias(k) for k, e in ns.items()],
        rust_duration(ns["inference"] // pl.col("output_tokens")).alias("tpt"),
        pl.concat_str([pl.lit("Some("), pl.col("seed").cast(pl.String), pl.lit(")")]).alias("seed"),
    )
    c = pl.col
    q = lambda k: pl.concat_str([pl.lit('"'), c(k), pl.lit('"')])  # noqa: E731
    target, file, line = SUCCESS_SRC
    if not f.json:
        text = pl.concat_str([
            c("when"), pl.lit("  INFO generate{parameters="), c("params"),
            pl.lit(" total_time="), q("total"), pl.lit(" validation_time="), q("validation"),
            pl.lit(" queue_time="), q("queue"), pl.lit(" inference_time="), q("inference"),
            pl.lit(" time_per_token="), q("tpt"), pl.lit(" seed="), q("seed"),
            pl.lit(f"}}: {target}: {file}:{line}: Success"),
        ])
    else:
        span = pl.concat_str([
            pl.lit('{"inference_time":'), q("inference"), pl.lit(',"name":"generate","parameters":"'),
            c("params"), pl.lit('","queue_time":'), q("queue"), pl.lit(',"seed":'), q("seed"),
            pl.lit(',"time_per_token":'), q("tpt"), pl.lit(',"total_time":'), q("total"),
            pl.lit(',"validation_time":'), q("validation"), pl.lit("}"),
        ])
        text = pl.concat_str([
            pl.lit('{"timestamp":"'), c("when"),
            pl.lit(f'","level":"INFO","message":"Success","target":"{target}","filename":"{file}",'
                   f'"line_number":{line},"span":'),
            span, pl.lit(',"spans":['), span, pl.lit("]}"),
        ])
    lines = df.select("finish_ns", text.alias("text"))
    out.add_frame(lines["finish_ns"], lines["text"], seq=3)


def _crash(d, f: Fmt, out: Lines) -> None:
    ns = d.ns(d.res.crash_ts)
    oom = oom_message(d.rng)
    err = f"Server error: {oom}"
    b = max(d.res.crash_batch, 1)
    if f.json:
        out.add(ns, json.dumps(
            {"timestamp": f.when(ns), "level": "ERROR", "message": err, "target": "text_generation_client",
             "filename": "router/client/src/lib.rs", "line_number": 33,
             "span": {"name": "decode", "size": b},
             "spans": [{"batch_size": b, "name": "batch"}, {"name": "decode"}, {"name": "decode", "size": b},
                       {"name": "decode", "size": b}]}, ensure_ascii=False, separators=(",", ":")), seq=0)
    else:
        out.add(ns, f"{f.when(ns)} ERROR batch{{batch_size={b}}}:decode:decode{{size={b}}}:decode{{size={b}}}: "
                    f"text_generation_client: router/client/src/lib.rs:33: {err}", seq=0)
    failed = d.req.filter(pl.col("status") == "error")
    for mt in failed["max_tokens"].to_list():
        params = (
            "GenerateParameters { best_of: None, temperature: Some(0.7), repetition_penalty: None, "
            "frequency_penalty: None, top_k: None, top_p: None, typical_p: None, do_sample: true, "
            f"max_new_tokens: Some({mt}), return_full_text: None, stop: [], truncate: None, watermark: false, "
            "details: false, decoder_input_details: false, seed: None, top_n_tokens: None, grammar: None }"
        )
        msg = f"Request failed during generation: {err}"
        if f.json:
            sp = {"name": "generate", "parameters": params}
            out.add(ns, json.dumps(
                {"timestamp": f.when(ns), "level": "ERROR", "message": msg, "target": "text_generation_router::infer",
                 "filename": "router/src/infer.rs", "line_number": 554, "span": {"name": "send_error"},
                 "spans": [sp, {"name": "infer"}, {"name": "send_error"}]},
                ensure_ascii=False, separators=(",", ":")), seq=1)
        else:
            out.add(ns, f"{f.when(ns)} ERROR generate{{parameters={params}}}:infer:send_error: "
                        f"text_generation_router::infer: router/src/infer.rs:554: {msg}", seq=1)
    site = "/opt/conda/lib/python3.10/site-packages"
    tb = (
        "Method Decode encountered an error.\nTraceback (most recent call last):\n"
        '  File "/opt/conda/bin/text-generation-server", line 8, in <module>\n'
        "    sys.exit(app())\n"
        f'  File "{site}/text_generation_server/interceptor.py", line 21, in intercept\n'
        "    return await response\n"
        f'  File "{site}/text_generation_server/server.py", line 195, in Decode\n'
        "    generations, next_batch, timings = self.model.generate_token(batch)\n"
        f'  File "{site}/text_generation_server/models/flash_causal_lm.py", line 1045, in generate_token\n'
        "    raise e\n"
        f"torch.cuda.OutOfMemoryError: {oom}"
    )
    t1 = ns + 1000
    if f.json:
        out.add(t1, f.launcher(t1, "ERROR", tb), seq=2)
    else:
        first, *rest = tb.split("\n")
        out.add(t1, f.launcher(t1, "ERROR", first), seq=2)
        out.add_many(t1, rest, seq=2)
    t2 = ns + 350_000_000
    for dt_ms, lvl, msg, span, rank in (
        (0, "ERROR", "Shard process was signaled to shutdown with signal 9", "shard-manager", 0),
        (1, "ERROR", "Shard 0 crashed", None, None),
        (1, "INFO", "Terminating webserver", None, None),
        (1, "INFO", "Waiting for webserver to gracefully shutdown", None, None),
        (40, "INFO", "webserver terminated", None, None),
        (40, "INFO", "Shutting down shards", None, None),
    ):
        tt = t2 + dt_ms * 10**6
        out.add(tt, f.launcher(tt, lvl, msg, span, rank), seq=9)
