"""TensorRT-LLM log writer.

Variants (as real TensorRT-LLM / Triton versions print them; sample_logs/trtllm/real/):
* `triton` — Triton 24.04 with tensorrtllm_backend 0.9 at `--log-verbose=1`: glog lines
  (`I0512 08:00:01.000123 1 model_lifecycle.cc:469] loading: tensorrt_llm:1`, unquoted as in
  Triton before 24.05), `[TensorRT-LLM][INFO]` engine-load and KV-cache sizing lines, and the
  backend's iteration-stats JSON (`{"Active Request Count":..., "Used KV cache blocks":...}`)
  in code order. "Active Request Count" is the executor's active set (scheduled requests plus
  those waiting inside it for KV capacity, at most "Max Request Count"); "Scheduled Requests"
  is the batch. No per-request lines: Triton logs none by default.
* `executor` — trtllm-serve: `[TRT-LLM] [I]` Python lines, the same C++ engine lines, uvicorn
  access lines, and the executor's camelCase `IterationStats` JSON, one object per line (as
  polled from `/metrics`), keys alphabetical.

Stats are printed for the latest iteration at each `stats_period` (default 1 s; 0 = every
iteration, as the backend does when it polls faster than the engine iterates); a period with no
iteration prints nothing, like an idle engine.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .lines import Lines, py_dt
from .writers_common import client_ports

TRTLLM_VERSION = {"triton": "0.9.0", "executor": "0.19.0"}
STATS_TID = 4521
MAIN_TID = 1


def write(d) -> Lines:
    out = Lines()
    triton = d.variant == "triton"
    _startup(d, triton, out)
    _stats(d, triton, out)
    if not triton:
        _access(d, out)
    if d.res.crash_ts is not None:
        _crash(d, triton, out)
    return out


def glog(ns: int, msg: str, level: str = "I", tid: int = MAIN_TID) -> str:
    t = py_dt(ns)
    return f"{level}{t:%m%d %H:%M:%S}.{t.microsecond:06d} {tid} {msg}"


def pylog(ns: int, msg: str, sev: str = "I") -> str:
    return f"[{py_dt(ns):%m/%d/%Y-%H:%M:%S}] [TRT-LLM] [{sev}] {msg}"


def _engine_lines(d) -> list[str]:
    cfg = d.cfg
    kv_tokens = cfg.num_gpu_blocks * cfg.block_size
    kv_gib = kv_tokens * 131072 / 2**30
    return [
        "[TensorRT-LLM][WARNING] max_beam_width is not specified, will use default value of 1",
        "[TensorRT-LLM][INFO] Initializing MPI with thread mode 3",
        "[TensorRT-LLM][INFO] MPI size: 1, rank: 0",
        "[TensorRT-LLM][INFO] Rank 0 is using GPU 0",
        f"[TensorRT-LLM][INFO] TRTGptModel maxNumSequences: {cfg.max_num_seqs}",
        f"[TensorRT-LLM][INFO] TRTGptModel maxBatchSize: {cfg.max_num_seqs}",
        "[TensorRT-LLM][INFO] TRTGptModel maxBeamWidth: 1",
        f"[TensorRT-LLM][INFO] TRTGptModel mMaxAttentionWindowSize: {d.max_model_len}",
        "[TensorRT-LLM][INFO] TRTGptModel enableTrtOverlap: 0",
        "[TensorRT-LLM][INFO] TRTGptModel normalizeLogProbs: 1",
        f"[TensorRT-LLM][INFO] TRTGptModel maxNumTokens: {cfg.max_batched_tokens}",
        "[TensorRT-LLM][INFO] Capacity Scheduler Policy: GUARANTEED_NO_EVICT",
        "[TensorRT-LLM][INFO] Context Chunking Scheduler Policy: None",
        "[TensorRT-LLM][INFO] Loaded engine size: 15323 MiB",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 1184.04 MiB for execution context memory.",
        "[TensorRT-LLM][INFO] [MemUsageChange] TensorRT-managed allocation in IExecutionContext creation: "
        "CPU +0, GPU +0, now: CPU 0, GPU 15314 (MiB)",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 1.52 GB GPU memory for runtime buffers.",
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 4.17 GB GPU memory for decoder.",
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: total: 79.14 GiB, "
        f"available: {kv_gib / 0.9:.2f} GiB",
        f"[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: {cfg.num_gpu_blocks}",
        "[TensorRT-LLM][INFO] Number of blocks in KV cache secondary pool: 0, onboard blocks to primary "
        "memory before reuse: true",
        f"[TensorRT-LLM][INFO] Number of tokens per block: {cfg.block_size}.",
        f"[TensorRT-LLM][INFO] [MemUsageChange] Allocated {kv_gib:.2f} GiB for max tokens in paged KV cache "
        f"({kv_tokens}).",
    ]


def _startup(d, triton: bool, out: Lines) -> None:
    t = d.start_ns - 30 * 10**9
    step = lambda s: t + int(s * 1e9)  # noqa: E731
    eng = _engine_lines(d)
    if triton:
        out.add(step(0), glog(step(0), "pinned_memory_manager.cc:275] Pinned memory pool is created at "
                                       "'0x7f3f6e000000' with size 268435456"))
        out.add(step(0), glog(step(0), "cuda_memory_manager.cc:107] CUDA memory pool is created on device 0 "
                                       "with size 67108864"))
        out.add(step(0.2), glog(step(0.2), "model_lifecycle.cc:469] loading: tensorrt_llm:1"))
        out.add(step(1.1), glog(step(1.1), "backend_model.cc:692] Using the TRT-LLM C++ backend"))
        out.add_many(step(1.2), eng[:13])
        out.add_many(step(6.4), eng[13:])
        out.add(step(9.0), glog(step(9.0), "model_lifecycle.cc:835] successfully loaded 'tensorrt_llm'"))
        out.add(step(9.1), glog(step(9.1), "grpc_server.cc:2463] Started GRPCInferenceService at 0.0.0.0:8001"))
        out.add(step(9.1), glog(step(9.1), "http_server.cc:4692] Started HTTPService at 0.0.0.0:8000"))
        out.add(step(9.2), glog(step(9.2), "http_server.cc:362] Started Metrics Service at 0.0.0.0:8002"))
    else:
        out.add(step(0), f"[TensorRT-LLM] TensorRT-LLM version: {TRTLLM_VERSION['executor']}")
        out.add(step(0.5), pylog(step(0.5), f"Loading engine from /engines/{d.model.split('/')[-1]}"))
        out.add_many(step(1.2), eng[:13])
        out.add_many(step(6.4), eng[13:])
        out.add(step(9.0), pylog(step(9.0), "Load model weights and build engine done."))
        for msg in ("Started server process [1]", "Waiting for application startup.",
                    "Application startup complete.",
                    "Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)"):
            out.add(step(9.5), f"INFO:     {msg}")


def _stats(d, triton: bool, out: Lines) -> None:
    res, cfg = d.res, d.cfg
    period = d.opts.get("stats_period")
    period = 1.0 if period is None else float(period)
    it_mask = res.st_iter >= 0
    its = np.nonzero(it_mask)[0]
    if len(its) == 0:
        return
    ends = res.st_ts[its] + res.st_dt[its]
    if period > 0:
        # the latest iteration finished by each poll, once
        end_s = min(ends[-1] + period, (d.end_ns - d.start_ns) / 1e9)  # the log covers the run
        polls = np.arange(period, end_s + 1e-9, period)
        k = np.searchsorted(ends, polls, side="right") - 1
        valid = k >= 0
        polls, k = polls[valid], k[valid]
        keep = np.r_[True, k[1:] != k[:-1]] if len(k) else np.zeros(0, bool)
        polls, rows = polls[keep], its[k[keep]]
    else:
        polls, rows = ends, its
    n = len(rows)
    if n == 0:
        return
    run = res.st_running[rows]
    wait = res.st_waiting[rows]
    ctx = res.st_ctx_reqs[rows]
    used = res.st_blocks[rows]
    poll_ns = d.start_ns + np.round(polls * 1e9).astype(np.int64)
    iter_ns = d.start_ns + np.round(res.st_ts[rows] * 1e9).astype(np.int64)
    gpu_mem = 16_068_206_592 + used * 4096
    # The executor takes requests from its queue into its active set up to maxNumActiveRequests;
    # active requests the capacity scheduler cannot fit yet wait inside it (Active - Scheduled).
    active = np.minimum(run + wait, cfg.max_num_seqs)
    df = pl.DataFrame({
        "poll_ns": poll_ns, "iter_ns": iter_ns, "active": active, "queued": run + wait - active,
        "iter": res.st_iter[rows],
        "ctx": ctx, "gen": run - ctx, "sched": run, "ctx_tok": res.st_ctx_tokens[rows],
        "free": cfg.num_gpu_blocks - used, "used": used, "gpu": gpu_mem, "wait": wait,
        "lat": np.round(res.st_dt[rows] * 1000, 3), "new": ctx,
    })
    c = lambda k: pl.col(k).cast(pl.String)  # noqa: E731
    when = pl.from_epoch(pl.col("iter_ns"), time_unit="ns")
    if triton:
        stamp = when.dt.strftime("%m-%d-%Y %H:%M:%S")
        glog_t = pl.from_epoch(pl.col("poll_ns"), time_unit="ns").dt.strftime("I%m%d %H:%M:%S%.6f")
        text = pl.concat_str([
            glog_t, pl.lit(f" {STATS_TID} model_instance_state.cc:1062] "),
            pl.lit('{"Active Request Count":'), c("active"), pl.lit(',"Iteration Counter":'), c("iter"),
            pl.lit(f',"Max Request Count":{cfg.max_num_seqs},"Runtime CPU Memory Usage":142606336,'
                   '"Runtime GPU Memory Usage":'), c("gpu"),
            pl.lit(',"Runtime Pinned Memory Usage":56623104,"Timestamp":"'), stamp,
            pl.lit('","Context Requests":'), c("ctx"), pl.lit(',"Generation Requests":'), c("gen"),
            pl.lit(',"MicroBatch ID":0,"Paused Requests":0,"Scheduled Requests":'), c("sched"),
            pl.lit(',"Total Context Tokens":'), c("ctx_tok"), pl.lit(',"Free KV cache blocks":'), c("free"),
            pl.lit(f',"Max KV cache blocks":{cfg.num_gpu_blocks},"Tokens per KV cache block":{cfg.block_size},'
                   '"Used KV cache blocks":'), c("used"), pl.lit("}"),
        ])
    else:
        stamp = when.dt.strftime("%m-%d-%Y %H:%M:%S%.6f")
        text = pl.concat_str([
            pl.lit('{"cpuMemUsage":0,"gpuMemUsage":'), c("gpu"),
            pl.lit(',"inflightBatchingStats":{"avgNumDecodedTokensPerIter":1.0,"microBatchId":0,'
                   '"numContextRequests":'), c("ctx"), pl.lit(',"numCtxTokens":'), c("ctx_tok"),
            pl.lit(',"numGenRequests":'), c("gen"), pl.lit(',"numPausedRequests":0,"numScheduledRequests":'),
            c("sched"), pl.lit('},"iter":'), c("iter"), pl.lit(',"iterLatencyMS":'), c("lat"),
            pl.lit(',"kvCacheStats":{"allocNewBlocks":0,"allocTotalBlocks":'), c("used"),
            pl.lit(',"cacheHitRate":0.0,"freeNumBlocks":'), c("free"),
            pl.lit(f',"maxNumBlocks":{cfg.num_gpu_blocks},"missedBlocks":0,"reusedBlocks":0,'
                   f'"tokensPerBlock":{cfg.block_size},"usedNumBlocks":'), c("used"),
            pl.lit(f'}},"maxBatchSizeRuntime":{cfg.max_num_seqs},"maxBatchSizeStatic":{cfg.max_num_seqs},'
                   f'"maxBatchSizeTunerRecommended":0,"maxNumActiveRequests":{cfg.max_num_seqs},'
                   f'"maxNumTokensRuntime":{cfg.max_batched_tokens},"maxNumTokensStatic":{cfg.max_batched_tokens},'
                   '"maxNumTokensTunerRecommended":0,"newActiveRequestsQueueLatencyMS":0.0,'
                   '"numActiveRequests":'), c("active"),
            pl.lit(',"numCompletedRequests":0,"numNewActiveRequests":'), c("new"),
            pl.lit(',"numQueuedRequests":'), c("queued"),
            pl.lit(',"pinnedMemUsage":0,"specDecodingStats":null,"staticBatchingStats":null,"timestamp":"'),
            stamp, pl.lit('"}'),
        ])
    lines = df.select("poll_ns", text.alias("text"))
    out.add_frame(lines["poll_ns"], lines["text"], seq=5)


def _access(d, out: Lines) -> None:
    done = d.req.filter(pl.col("finish_ns").is_not_null())
    if done.height == 0:
        return
    ports = client_ports(d.rng, done.height)
    text = pl.concat_str([
        pl.lit("INFO:     127.0.0.1:"), ports, pl.lit(' - "POST /v1/chat/completions HTTP/1.1" '),
        pl.when(pl.col("status") == "ok").then(pl.lit("200 OK")).otherwise(pl.lit("500 Internal Server Error")),
    ])
    lines = done.with_columns(ports.alias("p")).select("finish_ns", text.alias("text"))
    out.add_frame(lines["finish_ns"], lines["text"], seq=4)


def _crash(d, triton: bool, out: Lines) -> None:
    ns = d.ns(d.res.crash_ts)
    src = "/home/jenkins/agent/workspace/LLM/release-0.9/L0_PostMerge/llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112"
    what = ("[TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): "
            f"out of memory ({src})")
    out.add(ns, f"[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: {what}", seq=0)
    frames = [
        "void tensorrt_llm::common::check<cudaError>(cudaError, char const*, char const*, int) + 92",
        "tensorrt_llm::runtime::BufferManager::gpu(unsigned long, nvinfer1::DataType) const + 277",
        "tensorrt_llm::batch_manager::TrtGptModelInflightBatching::forwardAsync(std::__cxx11::list<std::"
        "shared_ptr<tensorrt_llm::batch_manager::LlmRequest>, std::allocator<std::shared_ptr<tensorrt_llm::"
        "batch_manager::LlmRequest> > > const&) + 1486",
        "tensorrt_llm::executor::Executor::Impl::forwardAsync(std::__cxx11::list<std::shared_ptr<tensorrt_llm::"
        "batch_manager::LlmRequest>, std::allocator<std::shared_ptr<tensorrt_llm::batch_manager::LlmRequest> > >&)"
        " + 180",
        "tensorrt_llm::executor::Executor::Impl::executionLoop() + 1257",
        "/lib/x86_64-linux-gnu/libstdc++.so.6(+0xdc253) [0x7f3e5c0dc253]",
        "/lib/x86_64-linux-gnu/libc.so.6(+0x94ac3) [0x7f3e5be4bac3]",
        "/lib/x86_64-linux-gnu/libc.so.6(clone+0x44) [0x7f3e5bedcd54]",
    ]
    base = 0x7F3C2A2A241C
    for i, fr in enumerate(frames, 1):
        out.add(ns, f"{i:<8}0x{base + i * 0x1F3A0:x} {fr}", seq=0)
    failed = d.req.filter(pl.col("status") == "error")["request_id"].to_list()
    for rid in failed:
        out.add(ns, f"[TensorRT-LLM][ERROR] Encountered error for requestId {rid}: Encountered an error in "
                    f"forwardAsync function: {what}", seq=1)
    if triton:
        out.add(ns + 2 * 10**9, "Signal (6) received.", seq=9)
    else:
        out.add(ns + 10**6, pylog(ns + 10**6, "Error in event loop: Executor is shutting down due to an "
                                              "earlier error", "E"), seq=9)
        for msg in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                    "Finished server process [1]"):
            out.add(ns + 2 * 10**9, f"INFO:     {msg}", seq=9)
