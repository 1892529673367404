"""vLLM log writer: what an OpenAI-compatible vLLM server prints, at the moment it prints it.

Variants (as real vLLM versions print them; sample_logs/vllm/real/):
* `v0` — vLLM 0.6.6.post1, V0 engine run as AsyncLLMEngine (`--disable-frontend-multiprocessing`):
  header `INFO 05-12 08:01:39 metrics.py:467] ...`, Received/Added/Finished request lines, uvicorn
  access lines, `# GPU blocks` capacity lines, Swapped/Pending stats every 5 s when busy (10 s
  forced when idle; idle lines are DEBUG and so not shown), every 50th preemption warning.
* `v1` — vLLM 0.12.0, V1 engine: `(APIServer pid=1) INFO 05-12 08:01:39 [loggers.py:236] Engine 000:
  ...` with Waiting and Preemptions, stats every 10 s, request logging on (`--enable-log-requests`).
* `v1_outputs` — `v1` with output logging on (`--enable-log-outputs`): the per-chunk
  `Generated response` lines of writers_vllm_outputs.py.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .lines import Lines, py_dt, ts_expr
from .writers_vllm_outputs import write_outputs
from .writers_common import (
    client_ports, cum_tokens, oom_message, prompt_body, state_at, tokens_between, word_pool,
)

V0_VERSION = "0.6.6.post1"
V1_VERSION = "0.12.0"
SAMPLING = (
    "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
    "temperature=0.7, top_p=1.0, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
    "bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens="
)
SAMPLING_TAIL = (
    ", min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
    "spaces_between_special_tokens=True, truncate_prompt_tokens=None, guided_decoding=None)"
)
SAMPLING_TAIL_V1 = SAMPLING_TAIL[:-1] + ", extra_args=None)"
# Llama 3.1 chat template; the date line is the server's day
CHAT_HEAD = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
    "December 2023\nToday Date: {today}\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
)
CHAT_TAIL = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
API_PID = 1
CORE_PID = 250


class Fmt:
    """Header of one variant."""

    def __init__(self, variant: str):
        self.v1 = variant in ("v1", "v1_outputs")

    def head(self, level: str, when: str, src: str, proc: str = "APIServer", pid: int = API_PID) -> str:
        if self.v1:
            return f"({proc} pid={pid}) {level} {when} [{src}] "
        return f"{level} {when} {src}] "

    def line(self, ns: int, level: str, src: str, msg: str, **kw) -> str:
        return self.head(level, py_dt(ns).strftime("%m-%d %H:%M:%S"), src, **kw) + msg

    def uvicorn(self, msg: str) -> str:
        pre = f"(APIServer pid={API_PID}) " if self.v1 else ""
        return f"{pre}INFO:     {msg}"

    def header_expr(self, ns: pl.Expr, level: str, src: str) -> pl.Expr:
        when = ts_expr(ns).dt.strftime("%m-%d %H:%M:%S")
        if self.v1:
            return pl.concat_str([pl.lit(f"(APIServer pid={API_PID}) {level} "), when, pl.lit(f" [{src}] ")])
        return pl.concat_str([pl.lit(f"{level} "), when, pl.lit(f" {src}] ")])


def write(d) -> Lines:
    f = Fmt(d.variant)
    out = Lines()
    _startup(d, f, out)
    _requests(d, f, out)
    if d.variant == "v1_outputs":
        write_outputs(d, f, out)
    _stats(d, f, out)
    if not f.v1:
        _preemptions(d, f, out)
    if d.res.crash_ts is not None:
        _crash(d, f, out)
    return out


def _startup(d, f: Fmt, out: Lines) -> None:
    cfg, rng, m = d.cfg, d.rng, d.model
    t = d.start_ns - 48 * 10**9
    step = lambda s: t + int(s * 1e9)  # noqa: E731
    conc = cfg.num_gpu_blocks * cfg.block_size / d.max_model_len
    weights = 14.9888 + float(rng.uniform(0, 0.0005))
    mll = d.opts.get("max_log_len")
    if not f.v1:
        rows = [
            (0.0, "api_server.py:712", f"vLLM API server version {V0_VERSION}"),
            (0.0, "api_server.py:713",
             f"args: Namespace(subparser='serve', model_tag='{m}', config='', host=None, port=8000, "
             "uvicorn_log_level='info', allow_credentials=False, allowed_origins=['*'], "
             "allowed_methods=['*'], allowed_headers=['*'], api_key=None, lora_modules=None, "
             "prompt_adapters=None, chat_template=None, response_role='assistant', "
             f"disable_frontend_multiprocessing=True, model='{m}', tokenizer=None, "
             f"dtype='auto', max_model_len={d.max_model_len}, block_size={cfg.block_size}, "
             "gpu_memory_utilization=0.9, num_gpu_blocks_override=None, "
             f"max_num_batched_tokens=None, max_num_seqs={cfg.max_num_seqs}, enforce_eager=False, "
             f"disable_log_stats=False, disable_log_requests=False, max_log_len={mll}, "
             "disable_fastapi_docs=False, enable_prompt_tokens_details=False)"),
            (2.1, "llm_engine.py:234",
             f"Initializing an LLM engine (v{V0_VERSION}) with config: model='{m}', "
             f"speculative_config=None, tokenizer='{m}', skip_tokenizer_init=False, tokenizer_mode=auto, "
             "revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
             f"max_seq_len={d.max_model_len}, download_dir=None, load_format=LoadFormat.AUTO, "
             "tensor_parallel_size=1, pipeline_parallel_size=1, disable_custom_all_reduce=False, "
             "quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
             f"seed=0, served_model_name={m}, num_scheduler_steps=1, enable_prefix_caching=False, "
             "chunked_prefill_enabled=False, use_async_output_proc=True, use_cached_outputs=False, "),
            (3.0, "selector.py:120", "Using Flash Attention backend."),
            (3.4, "model_runner.py:1094", f"Starting to load model {m}..."),
            (11.9, "model_runner.py:1099", f"Loading model weights took {weights:.4f} GB"),
            (13.6, "gpu_executor.py:76", f"# GPU blocks: {cfg.num_gpu_blocks}, # CPU blocks: 2048"),
            (13.6, "gpu_executor.py:80",
             f"Maximum concurrency for {d.max_model_len} tokens per request: {conc:.2f}x"),
            (15.2, "model_runner.py:1415",
             "Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model "
             "is not static. To run the model in eager mode, set 'enforce_eager=True' or use "
             "'--enforce-eager' in the CLI. If out-of-memory error occurs during cudagraph capture, "
             "consider decreasing `gpu_memory_utilization` or switching to eager mode. You can also "
             "reduce the `max_num_seqs` as needed to decrease memory usage."),
            (29.3, "model_runner.py:1535", "Graph capturing finished in 14 secs, took 0.85 GiB"),
            (29.4, "llm_engine.py:431",
             "init engine (profile, create kv cache, warmup model) took 17.53 seconds"),
            (30.1, "launcher.py:19", "Available routes are:"),
        ]
        for path, meth in (("/health", "GET"), ("/v1/models", "GET"), ("/v1/chat/completions", "POST"),
                           ("/v1/completions", "POST")):
            rows.append((30.1, "launcher.py:27", f"Route: {path}, Methods: {meth}"))
        for s, src, msg in rows:
            out.add(step(s), f.line(step(s), "INFO", src, msg))
    else:
        kv_tokens = cfg.num_gpu_blocks * cfg.block_size
        rows = [
            (0.0, "APIServer", "api_server.py:1772", f"vLLM API server version {V1_VERSION}"),
            (0.0, "APIServer", "utils.py:253",
             f"non-default args: {{'model_tag': '{m}', 'enable_log_requests': True, 'model': '{m}', "
             f"'max_model_len': {d.max_model_len}, 'max_num_batched_tokens': {cfg.max_batched_tokens}, "
             f"'max_num_seqs': {cfg.max_num_seqs}}}"),
            (1.2, "APIServer", "model.py:631", "Resolved architecture: LlamaForCausalLM"),
            (1.2, "APIServer", "model.py:1745", f"Using max model len {d.max_model_len}"),
            (1.3, "APIServer", "scheduler.py:216",
             f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_batched_tokens}."),
            (3.5, "EngineCore_DP0", "core.py:93",
             f"Initializing a V1 LLM engine (v{V1_VERSION}) with config: model='{m}', "
             f"speculative_config=None, tokenizer='{m}', skip_tokenizer_init=False, tokenizer_mode=auto, "
             "revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
             f"max_seq_len={d.max_model_len}, download_dir=None, load_format=auto, "
             "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
             "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
             f"kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name={m}, "
             "enable_prefix_caching=False, chunked_prefill_enabled=True"),
            (12.8, "EngineCore_DP0", "gpu_model_runner.py:3450",
             f"Model loading took {weights:.4f} GiB memory and 7.{int(rng.integers(10**5, 10**6))} seconds"),
            (19.5, "EngineCore_DP0", "gpu_worker.py:359",
             f"Available KV cache memory: {kv_tokens * 131072 / 2**30:.2f} GiB"),
            (19.6, "EngineCore_DP0", "kv_cache_utils.py:1286", f"GPU KV cache size: {kv_tokens:,} tokens"),
            (19.6, "EngineCore_DP0", "kv_cache_utils.py:1291",
             f"Maximum concurrency for {d.max_model_len:,} tokens per request: {conc:.2f}x"),
            (31.0, "EngineCore_DP0", "core.py:254",
             "init engine (profile, create kv cache, warmup model) took 18.42 seconds"),
            (33.0, "APIServer", "api_server.py:1520", "Starting vLLM API server 0 on http://0.0.0.0:8000"),
        ]
        for s, proc, src, msg in rows:
            pid = API_PID if proc == "APIServer" else CORE_PID
            out.add(step(s), f.line(step(s), "INFO", src, msg, proc=proc, pid=pid))
    for s, msg in ((40.0, f"Started server process [{API_PID}]"), (40.0, "Waiting for application startup."),
                   (40.0, "Application startup complete."),
                   (40.0, "Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)")):
        out.add(step(s), f.uvicorn(msg))


def _requests(d, f: Fmt, out: Lines) -> None:
    req = d.req
    n = req.height
    if n == 0:
        return
    rng = d.rng
    ip = f"10.0.{d.index}.{int(rng.integers(2, 250))}"
    ports = client_ports(rng, n)
    df = req.with_columns(ports.alias("port"))
    rid = pl.col("request_id")
    mt = pl.col("max_tokens").cast(pl.String)
    if not f.v1:
        mll = d.opts.get("max_log_len")
        pool = word_pool(rng, 4 * int(req["prompt_tokens"].max()) + 8192)
        body_len = (pl.col("prompt_tokens") * 4 - 120).clip(lower_bound=8)
        offs = pl.Series(rng.integers(0, 8000, n))
        head = CHAT_HEAD.format(today=py_dt(d.start_ns).strftime("%d %b %Y"))
        raw = pl.concat_str([pl.lit(head), prompt_body(pool, offs, body_len), pl.lit(CHAT_TAIL)])
        if mll is not None:
            raw = raw.str.slice(0, mll)
        prompt = pl.concat_str([pl.lit("'"), raw.str.replace_all("\n", "\\n", literal=True), pl.lit("'")])
        received = pl.concat_str([
            f.header_expr(pl.col("queue_start_ns"), "INFO", "logger.py:37"),
            pl.lit("Received request "), rid, pl.lit(": prompt: "), prompt,
            pl.lit(", params: " + SAMPLING), mt, pl.lit(SAMPLING_TAIL),
            pl.lit(", prompt_token_ids: None, lora_request: None, prompt_adapter_request: None."),
        ])
        added_src, finished_src = "async_llm_engine.py:211", "async_llm_engine.py:179"
    else:
        received = pl.concat_str([
            f.header_expr(pl.col("queue_start_ns"), "INFO", "logger.py:49"),
            pl.lit("Received request "), rid, pl.lit(": params: " + SAMPLING), mt,
            pl.lit(SAMPLING_TAIL_V1 + ", lora_request: None."),
        ])
        added_src, finished_src = "async_llm.py:360", None
    lines = df.select(
        pl.col("queue_start_ns"),
        pl.col("finish_ns"),
        pl.col("status"),
        received.alias("received"),
        pl.concat_str([f.header_expr(pl.col("queue_start_ns"), "INFO", added_src),
                       pl.lit("Added request "), rid, pl.lit(".")]).alias("added"),
        (pl.concat_str([f.header_expr(pl.col("finish_ns"), "INFO", finished_src),
                        pl.lit("Finished request "), rid, pl.lit(".")]) if finished_src
         else pl.lit(None, pl.String)).alias("finished"),
        pl.concat_str([
            pl.lit(f.uvicorn(f"{ip}:")), pl.col("port"), pl.lit(' - "POST /v1/chat/completions HTTP/1.1" '),
            pl.when(pl.col("status") == "ok").then(pl.lit("200 OK")).otherwise(pl.lit("500 Internal Server Error")),
        ]).alias("access"),
    )
    out.add_frame(lines["queue_start_ns"], lines["received"], seq=1)
    out.add_frame(lines["queue_start_ns"], lines["added"], seq=2)
    done = lines.filter(pl.col("finish_ns").is_not_null())
    ok = done.filter(pl.col("status") == "ok")
    if finished_src:
        out.add_frame(ok["finish_ns"], ok["finished"], seq=3)
    out.add_frame(done["finish_ns"], done["access"], seq=4)


def _stats(d, f: Fmt, out: Lines) -> None:
    res = d.res
    end = (d.end_ns - d.start_ns) / 1e9
    if res.crash_ts is not None:
        end = min(end, res.crash_ts)
    cum = cum_tokens(res)
    times = []
    if f.v1:
        times = list(np.arange(10.0, end + 1e-9, 10.0))
    else:
        iter_ts = res.st_ts[res.st_iter >= 0]
        last = 0.0
        while True:
            want = last + 5.0
            k = np.searchsorted(iter_ts, want)
            nxt = float(iter_ts[k]) if k < len(iter_ts) and iter_ts[k] <= last + 10.0 else last + 10.0
            if nxt > end:
                break
            times.append(nxt)
            last = nxt
    prev_idle = False
    pre_last = 0
    for i, t in enumerate(times):
        t0 = times[i - 1] if i else 0.0
        p, g = tokens_between(cum, t0, t)
        k = int(state_at(res, np.array([t]))[0])
        run, wait = int(res.st_running[k]), int(res.st_waiting[k])
        kv = res.st_blocks[k] / d.cfg.num_gpu_blocks * 100
        pre = int(res.st_preempt_cum[k])
        idle = p == 0 and g == 0
        dt_s = t - t0
        if not (idle and prev_idle):  # 0.6.6+/V1: a second idle interval in a row is DEBUG
            ns = d.ns(t)
            if f.v1:
                parts = [f"Engine 000: Avg prompt throughput: {p / dt_s:.1f} tokens/s",
                         f"Avg generation throughput: {g / dt_s:.1f} tokens/s",
                         f"Running: {run} reqs", f"Waiting: {wait} reqs"]
                if pre - pre_last > 0:
                    parts.append(f"Preemptions: {pre - pre_last}")
                parts += [f"GPU KV cache usage: {kv:.1f}%", "Prefix cache hit rate: 0.0%"]
                out.add(ns, f.line(ns, "INFO", "loggers.py:236", ", ".join(parts)), seq=5)
            else:
                msg = (f"Avg prompt throughput: {p / dt_s:.1f} tokens/s, Avg generation throughput: "
                       f"{g / dt_s:.1f} tokens/s, Running: {run} reqs, Swapped: 0 reqs, Pending: {wait} reqs, "
                       f"GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: 0.0%.")
                out.add(ns, f.line(ns, "INFO", "metrics.py:467", msg), seq=5)
        pre_last = pre
        prev_idle = idle


def _preemptions(d, f: Fmt, out: Lines) -> None:
    ids = d.req["request_id"]
    for t, ridx, cum in d.res.preempt_log:
        ns = d.ns(t)
        msg = (f"Sequence group {ids[ridx]} is preempted by PreemptionMode.RECOMPUTE mode because there "
               "is not enough KV cache space. This can affect the end-to-end performance. Increase "
               "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
               f"total_num_cumulative_preemption={cum}")
        out.add(ns, f.line(ns, "WARNING", "scheduler.py:1555", msg), seq=0)


def _multiline(out: Lines, ns: int, head: str, text: str, seq: int) -> None:
    # NewLineFormatter: every continuation repeats the header and the stream has \r\n
    lines = text.split("\n")
    for i, ln in enumerate(lines):
        out.add(ns, head + ln + ("\r" if i < len(lines) - 1 else ""), seq=seq)


def _crash(d, f: Fmt, out: Lines) -> None:
    ns = d.ns(d.res.crash_ts)
    oom = oom_message(d.rng, pid=CORE_PID if f.v1 else API_PID)
    site = "/usr/local/lib/python3.12/dist-packages"
    when = py_dt(ns).strftime("%m-%d %H:%M:%S")
    if not f.v1:
        tb = (
            "Engine background task failed\nTraceback (most recent call last):\n"
            f'  File "{site}/vllm/engine/async_llm_engine.py", line 55, in _log_task_completion\n'
            "    return_value = task.result()\n"
            "                   ^^^^^^^^^^^^^\n"
            f'  File "{site}/vllm/engine/async_llm_engine.py", line 879, in run_engine_loop\n'
            "    result = task.result()\n"
            f'  File "{site}/vllm/worker/model_runner.py", line 1711, in execute_model\n'
            "    hidden_or_intermediate_states = model_executable(\n"
            f'  File "{site}/torch/nn/modules/module.py", line 1736, in _wrapped_call_impl\n'
            "    return self._call_impl(*args, **kwargs)\n"
            f"torch.OutOfMemoryError: {oom}"
        )
        _multiline(out, ns, f.head("ERROR", when, "async_llm_engine.py:65"), tb, seq=0)
    else:
        tb = (
            "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
            f'  File "{site}/vllm/v1/engine/core.py", line 835, in run_engine_core\n'
            "    engine_core.run_busy_loop()\n"
            f'  File "{site}/vllm/v1/engine/core.py", line 862, in run_busy_loop\n'
            "    self._process_engine_step()\n"
            f'  File "{site}/vllm/v1/worker/gpu_model_runner.py", line 2555, in execute_model\n'
            "    model_output = self._model_forward(\n"
            f"torch.OutOfMemoryError: {oom}"
        )
        _multiline(out, ns, f.head("ERROR", when, "core.py:844", proc="EngineCore_DP0", pid=CORE_PID), tb, seq=0)
        tb2 = (
            "AsyncLLM output_handler failed.\nTraceback (most recent call last):\n"
            f'  File "{site}/vllm/v1/engine/async_llm.py", line 439, in output_handler\n'
            "    outputs = await engine_core.get_output_async()\n"
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
            "See stack trace (above) for the root cause."
        )
        _multiline(out, ns, f.head("ERROR", when, "async_llm.py:480"), tb2, seq=0)
    end = ns + 2 * 10**9
    for msg in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                f"Finished server process [{API_PID}]"):
        out.add(end, f.uvicorn(msg), seq=9)
