"""SGLang log writer: what `python -m sglang.launch_server` prints, at the moment it prints it,
plus the per-request metrics file of `--export-metrics-to-file`.

Variants (docs/sglang.md):
* `v0_5` — SGLang 0.5.x (2025-11 on), `--tp 2`: `[2026-05-12 08:00:05 TP0] Decode batch, ...`
  with `cuda graph` and a trailing `, `; `Prefill batch, ...` with `input throughput` last;
  scheduler lines from TP0 only, retractions from both TP ranks (`KV cache pool is full.
  Retract requests.`); prefixed uvicorn lines from the HTTP process (no rank).
* `v0_4` — SGLang 0.4.x (2025-03..10), `--tp 2`: `Decode batch. ` / `Prefill batch. ` labels,
  `Decode out of memory happened.` retractions.
* `pd` — a prefill/decode-disaggregated pair sharing one stream (both launched from one
  script), DP attention `[2026-05-12 08:00:05.123 DP0 TP0 EP0]`: the prefill worker's
  `Prefill batch [n], ..., #bootstrap-req, #inflight-req, ...` and the decode worker's
  `Decode batch [n], ..., pre-allocated usage, #prealloc-req, #transfer-req, #retracted-req`.
  The model's waiting queue is the prefill worker's queue; its running batch is the decode
  worker's; the decode worker's own queue is empty (the model has none).

Every variant writes `<instance>/sglang-request-metrics-YYYYMMDD_HH.log` beside the log (the
exporter's JSON lines, one per finished request, exact integer-ns timings; the directory
names the instance, as the parser expects): see `extra_files`.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from .lines import Lines, py_dt
from .writers_common import cum_tokens, oom_message, tokens_between

DECODE_LOG_INTERVAL = 40  # SGLang's default --decode-log-interval (decode iterations)
SITE = "/usr/local/lib/python3.12/dist-packages"


class Fmt:
    def __init__(self, variant: str):
        self.variant = variant
        self.pd = variant == "pd"
        self.v05 = variant in ("v0_5", "pd")

    def prefix(self, ns: int, ranks: str = "") -> str:
        t = py_dt(ns)
        when = t.strftime("%Y-%m-%d %H:%M:%S") + (f".{t.microsecond // 1000:03d}" if self.pd else "")
        return f"[{when}{' ' + ranks if ranks else ''}] "

    def sched(self, ns: int) -> str:
        return self.prefix(ns, "DP0 TP0 EP0" if self.pd else "TP0")

    def label(self, kind: str, count: int) -> str:
        if self.pd:
            return f"{kind} batch [{count}], "
        return f"{kind} batch{',' if self.v05 else '.'} "


def write(d) -> Lines:
    f = Fmt(d.variant)
    out = Lines()
    _startup(d, f, out)
    _batches(d, f, out)
    _retractions(d, f, out)
    _access(d, f, out)
    if d.res.crash_ts is not None:
        _crash(d, f, out)
    return out


def _tp(f: Fmt) -> int:
    return 1 if f.pd else 2


def _startup(d, f: Fmt, out: Lines) -> None:
    cfg = d.cfg
    t = d.start_ns - 30 * 10**9
    step = lambda s: t + int(s * 1e9)  # noqa: E731
    kv_tokens = cfg.num_gpu_blocks * cfg.block_size
    mem = 78.5 - float(d.rng.uniform(0.0, 0.4))
    # a PD pair: the prefill worker starts first, each worker prints its args and its pool
    for w, mode in enumerate(("prefill", "decode") if f.pd else ("null",)):
        args = (
            f"server_args=ServerArgs(model_path='{d.model}', tokenizer_path='{d.model}', tokenizer_mode='auto', "
            f"host='0.0.0.0', port={30000 + w}, mem_fraction_static=0.88, max_running_requests={cfg.max_num_seqs}, "
            f"max_total_tokens=None, chunked_prefill_size={cfg.max_batched_tokens}, max_prefill_tokens=16384, "
            f"schedule_policy='fcfs', schedule_conservativeness=1.0, page_size={cfg.block_size}, "
            f"tp_size={_tp(f)}, dp_size=1, decode_log_interval={DECODE_LOG_INTERVAL}, "
            f"disaggregation_mode='{mode}')"
        )
        out.add(step(0.1 + w), f.prefix(step(0.1 + w)) + args)
        for s, msg in (
            (2.0, f"Load weight begin. avail mem={mem:.2f} GB"),
            (14.0, f"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem={mem - 15.1:.2f} GB, mem usage=15.06 GB."),
            (14.2, f"KV Cache is allocated. #tokens: {kv_tokens}, K size: 20.10 GB, V size: 20.10 GB"),
            (14.2, f"Memory pool end. avail mem={mem - 55.4:.2f} GB"),
            (18.5, f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={cfg.max_batched_tokens}, "
                   f"max_prefill_tokens=16384, max_running_requests={cfg.max_num_seqs}, "
                   f"context_len={d.max_model_len}, available_gpu_mem={mem - 57.0:.2f} GB"),
        ):
            ns = step(s + w)
            out.add(ns, f.sched(ns) + msg)
    ns = step(25.0)
    out.add(ns, f.prefix(ns) + "INFO:     Started server process [1]")
    out.add(ns, f.prefix(ns) + "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    ns = step(29.0)
    out.add(ns, f.prefix(ns) + "The server is fired up and ready to roll!")


def _batches(d, f: Fmt, out: Lines) -> None:
    """One `Prefill batch` line per iteration that admitted requests, one `Decode batch`
    line every DECODE_LOG_INTERVAL decode iterations; values from the model's state at the
    iteration start."""
    res, cfg = d.res, d.cfg
    it = res.st_iter >= 0
    if not it.any():
        return
    ts = res.st_ts[it]
    running, waiting, blocks = res.st_running[it], res.st_waiting[it], res.st_blocks[it]
    ctx_reqs, ctx_tok, gen_tok = res.st_ctx_reqs[it], res.st_ctx_tokens[it], res.st_gen_tokens[it]
    iters = res.st_iter[it]
    total = cfg.num_gpu_blocks
    bs = cfg.block_size
    cum = cum_tokens(res)
    # SGLang's throughputs: tokens since the previous line of the same kind / seconds since it
    pre = np.flatnonzero(ctx_reqs > 0)
    dec_ct = np.cumsum(gen_tok > 0)
    dec = np.flatnonzero((gen_tok > 0) & (dec_ct % DECODE_LOG_INTERVAL == 0))
    lines = []
    last_t = 0.0
    for k in pre:
        t = float(ts[k])
        p, _ = tokens_between(cum, last_t, t)
        dt_s = max(t - last_t, 1e-9)
        last_t = t
        usage = blocks[k] / total
        fields = [f"#new-seq: {ctx_reqs[k]}", f"#new-token: {ctx_tok[k]}", "#cached-token: 0",
                  f"token usage: {usage:.2f}", f"#running-req: {running[k] - ctx_reqs[k]}",
                  f"#queue-req: {waiting[k]}"]
        if f.pd:
            fields += ["#pending-token: 0", "#bootstrap-req: 0", f"#inflight-req: {ctx_reqs[k]}", "#optimistic-req: 0"]
        if f.v05:
            fields += ["cuda graph: False", f"input throughput (token/s): {p / dt_s:.2f}"]
        tail = "" if f.v05 else ", "
        lines.append((k, f.label("Prefill", int(iters[k]) + 1) + ", ".join(fields) + tail))
    last_t = 0.0
    for j, k in enumerate(dec):
        t = float(ts[k])
        _, g = tokens_between(cum, last_t, t)
        dt_s = max(t - last_t, 1e-9)
        last_t = t
        fields = [f"#running-req: {running[k]}", f"#token: {blocks[k] * bs}", f"token usage: {blocks[k] / total:.2f}"]
        if f.pd:
            fields += ["pre-allocated usage: 0.00", "#prealloc-req: 0", "#transfer-req: 0", "#retracted-req: 0"]
        fields += ["cuda graph: True", f"gen throughput (token/s): {g / dt_s:.2f}",
                   f"#queue-req: {0 if f.pd else waiting[k]}"]
        lines.append((k, f.label("Decode", int(dec_ct[k])) + ", ".join(fields) + ", "))
    for k, msg in lines:
        ns = d.ns(float(ts[k]))
        out.add(ns, f.sched(ns) + msg, seq=5)


def _retractions(d, f: Fmt, out: Lines) -> None:
    """One retraction line per scheduler step that retracted requests (where the model's
    cumulative preemption count rises), from every TP rank (the parser counts it once)."""
    res = d.res
    cum = res.st_preempt_cum
    if len(cum) < 2:
        return
    rise = np.diff(cum, prepend=cum[:1])
    ratio, last = 0.7, 0.0
    for k in np.flatnonzero(rise > 0):
        t, n = float(res.st_ts[k]), int(rise[k])
        # the ratio decays by ~0.00093 per decode step (~20 ms) and jumps at a retraction
        ratio = max(0.14, ratio - 0.00093 * (t - last) / 0.02)
        last = t
        new = min(1.0, ratio + 0.05 * n)
        ns = d.ns(t)
        if f.v05:
            msg = f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_token_ratio: {ratio:.4f} -> {new:.4f}"
        else:
            msg = f"Decode out of memory happened. #retracted_reqs: {n}, #new_token_ratio: {ratio:.4f} -> {new:.4f}"
        ranks = ["DP0 TP0 EP0"] if f.pd else [f"TP{r}" for r in range(_tp(f))]
        for r in ranks:
            out.add(ns, f.prefix(ns, r) + msg, seq=1)
        ratio = new


def _access(d, f: Fmt, out: Lines) -> None:
    ok = d.req.filter(pl.col("status") == "ok")
    if ok.height == 0:
        return
    ports = pl.Series(d.rng.integers(32768, 61000, ok.height)).cast(pl.String)
    when = pl.from_epoch(pl.col("finish_ns"), time_unit="ns").dt.strftime(
        "%Y-%m-%d %H:%M:%S%.3f" if f.pd else "%Y-%m-%d %H:%M:%S"
    )
    text = ok.with_columns(ports.alias("port")).select(
        pl.concat_str([pl.lit("["), when, pl.lit('] INFO:     10.0.0.7:'), pl.col("port"),
                       pl.lit(' - "POST /v1/chat/completions HTTP/1.1" 200 OK')])
    ).to_series()
    out.add_frame(ok["finish_ns"], text, seq=9)


def _crash(d, f: Fmt, out: Lines) -> None:
    ns = d.ns(d.res.crash_ts)
    oom = oom_message(d.rng, pid=1)
    tb = (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 2963, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1017, in event_loop_overlap\n'
        "    batch_result = self.run_batch(batch)\n"
        f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 1750, in forward\n'
        "    output = self._forward_raw(\n"
        f"torch.OutOfMemoryError: {oom}\n"
    )
    lines = tb.split("\n")
    out.add(ns, f.sched(ns) + lines[0], seq=20)
    for ln in lines[1:]:
        out.add(ns, ln, seq=20)
    out.add(ns, f.prefix(ns) + "Received sigquit from a child process. It usually means the child failed.", seq=21)


def extra_files(d) -> dict[str, bytes]:
    """`<instance>/sglang-request-metrics-YYYYMMDD_HH.log`: the exporter's record per
    finished request, in the hour file of its finish (UTC)."""
    ok = d.req.filter(pl.col("status") == "ok").sort("finish_ns")
    if ok.height == 0:
        return {}
    files: dict[str, list[str]] = {}
    NS = 1e9
    for r in ok.iter_rows(named=True):
        n = r["output_tokens"]
        decode_s = (r["finish_ns"] - r["first_token_ns"]) / NS
        rec = {
            "request_parameters": json.dumps({"rid": r["request_id"], "stream": False,
                                              "sampling_params": {"max_new_tokens": r["max_tokens"]}}),
            "id": r["request_id"],
            "finish_reason": {"type": r["finish_reason"]} if r["finish_reason"] == "stop" else
            {"type": "length", "length": r["max_tokens"]},
            "prompt_tokens": r["prompt_tokens"],
            "completion_tokens": n,
            "cached_tokens": 0,
            "e2e_latency": (r["finish_ns"] - r["arrival_ns"]) / NS,
            "queue_time": (r["start_ns"] - r["queue_start_ns"]) / NS,
            "request_received_ts": r["arrival_ns"] / NS,
            "prefill_finished_ts": r["first_token_ns"] / NS,
            "request_finished_ts": r["finish_ns"] / NS,
            "response_sent_to_client_ts": (r["finish_ns"] + 150_000) / NS,
        }
        if n > 1 and decode_s > 0:
            rec["decode_throughput"] = (n - 1) / decode_s
        hour = py_dt(r["finish_ns"]).strftime("%Y%m%d_%H")
        files.setdefault(f"{d.name}/sglang-request-metrics-{hour}.log", []).append(json.dumps(rec))
    return {k: ("\n".join(v) + "\n").encode() for k, v in files.items()}
