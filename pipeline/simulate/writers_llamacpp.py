"""llama.cpp `llama-server` log writer (docs/llamacpp.md).

Variants:
* `v2026` — a 2026-05+ build: every line prefixed with the time since process start
  (`M.SS.mmm.uuu`) and a level letter, one fully prefixed line per timing part.
* `v2024` — a 2024 build with the default `--log-format json`: one JSON object per line with
  unix-second timestamps and the exact timings as extras.

Per request (task id = arrival order, as the truth's request_id): `processing task` and `new
prompt` when a slot takes it (start), `prompt done` at its first token, and at its finish the
timing block (prompt eval = first token - start over the prompt tokens, eval = finish - first
token over the output tokens, total = finish - start), the slot release and the HTTP access
line. Slots are numbered as the server would: the lowest free slot at start. The progress
line `n_decoded = N, tg = X t/s` comes every 3 s of a long decode, after 100 tokens. A crash
prints the CUDA error and the abort. The file's mtime is set to its last line's time
(`FILE_MTIME_IS_LAST_LINE`): that is what anchors the relative times, as on a real server.
"""

from __future__ import annotations

import heapq
import json

import polars as pl

from .lines import Lines

FILE_MTIME_IS_LAST_LINE = True
BUILD = "b7400 (8c6a1f2)"
LOAD_S = 20.0  # the process starts this long before simulated t = 0


class Fmt:
    def __init__(self, d):
        self.json = d.variant == "v2024"
        self.t0 = d.start_ns - int(LOAD_S * 1e9)  # process start

    def rel(self, ns: int) -> str:
        us = (ns - self.t0) // 1000
        m, rest = divmod(us, 60_000_000)
        s, rest = divmod(rest, 1_000_000)
        ms, u = divmod(rest, 1000)
        return f"{m}.{s:02d}.{ms:03d}.{u:03d}"

    def line(self, ns: int, level: str, body: str) -> str:
        return f"{self.rel(ns)} {level} {body}"

    def slot(self, ns: int, func: str, slot: int, task: int, msg: str, level: str = "I") -> str:
        return self.line(ns, level, f"slot {func[:12]:>12}: id {slot:2d} | task {task} | {msg}")

    def srv(self, ns: int, func: str, msg: str, level: str = "I") -> str:
        return self.line(ns, level, f"srv  {func[:12]:>12}: {msg}")

    def obj(self, ns: int, level: str, function: str, line: int, msg: str, **extra) -> str:
        o = {"tid": "140245", "timestamp": ns // 1_000_000_000, "level": level, "function": function,
             "line": line, "msg": msg, **extra}
        return json.dumps(o, separators=(",", ":"))


def write(d) -> Lines:
    f = Fmt(d)
    out = Lines()
    slots = _assign_slots(d)
    _startup(d, f, out)
    _requests(d, f, out, slots)
    if d.res.crash_ts is not None:
        _crash(d, f, out)
    return out


def _n_ctx(d) -> tuple[int, int]:
    total = d.cfg.num_gpu_blocks * d.cfg.block_size
    return total, total // d.cfg.max_num_seqs


def _startup(d, f: Fmt, out: Lines) -> None:
    n_slots = d.cfg.max_num_seqs
    total, per_slot = _n_ctx(d)
    gguf = "/models/" + d.model.split("/")[-1] + "-Q4_K_M.gguf"
    t = lambda s: f.t0 + int(s * 1e9)  # noqa: E731
    if f.json:
        rows = [
            (0.001, "INFO", "main", 2900, "build info", {"build": 3600, "commit": "8c6a1f2"}),
            (0.002, "INFO", "main", 2905, "system info", {"n_threads": 16, "n_threads_batch": -1, "total_threads": 32}),
            (LOAD_S - 0.5, "INFO", "init", 700, "initializing slots", {"n_slots": n_slots}),
            *[(LOAD_S - 0.5, "INFO", "init", 712, "new slot", {"id_slot": i, "n_ctx_slot": per_slot})
              for i in range(n_slots)],
            (LOAD_S - 0.4, "INFO", "main", 3100, "model loaded", {}),
            (LOAD_S - 0.3, "INFO", "main", 3120, "HTTP server listening", {"hostname": "0.0.0.0", "port": "8080", "n_threads_http": "31"}),
            (LOAD_S - 0.2, "INFO", "update_slots", 1600, "all slots are idle", {}),
        ]
        for s, lvl, fn, ln, msg, extra in rows:
            out.add(t(s), f.obj(t(s), lvl, fn, ln, msg, **extra))
        return
    rows = [
        (0.001, f"build: {BUILD} with cc (GCC) 13.2.0 for x86_64-linux-gnu"),
        (0.002, "system info: n_threads = 16, n_threads_batch = 16, total_threads = 32"),
        (0.003, "main: loading model"),
        (0.004, f"srv    load_model: loading model '{gguf}'"),
        (LOAD_S - 1.0, f"llama_context: n_seq_max     = {n_slots}"),
        (LOAD_S - 1.0, f"llama_context: n_ctx         = {total}"),
        (LOAD_S - 1.0, f"llama_context: n_ctx_per_seq = {per_slot}"),
        (LOAD_S - 0.5, f"srv          init: initializing slots, n_slots = {n_slots}"),
        *[(LOAD_S - 0.5, f"slot         init: id {i:2d} | task -1 | new slot, n_ctx = {per_slot}") for i in range(n_slots)],
        (LOAD_S - 0.4, "main: model loaded"),
        (LOAD_S - 0.3, "main: server is listening on http://0.0.0.0:8080"),
        (LOAD_S - 0.2, "srv  update_slots: all slots are idle"),
    ]
    for s, body in rows:
        out.add(t(s), f.line(t(s), "I", body))


def _assign_slots(d) -> dict[int, int]:
    """Slot id per started request index: the lowest slot free at its start."""
    req = d.req.with_row_index("_i").filter(pl.col("start_ns").is_not_null()).sort("start_ns", "_i")
    free = list(range(d.cfg.max_num_seqs))
    heapq.heapify(free)
    busy: list[tuple[int, int]] = []  # (end ns, slot)
    out: dict[int, int] = {}
    inf = 2**62
    for i, start, finish in req.select("_i", "start_ns", "finish_ns").iter_rows():
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        slot = heapq.heappop(free) if free else len(out) % d.cfg.max_num_seqs
        out[i] = slot
        heapq.heappush(busy, (finish if finish is not None else inf, slot))
    return out


def _requests(d, f: Fmt, out: Lines, slots: dict[int, int]) -> None:
    req = d.req.with_row_index("_i")
    rows = req.filter(pl.col("start_ns").is_not_null()).select(
        "_i", "start_ns", "first_token_ns", "finish_ns", "prompt_tokens", "output_tokens", "status"
    )
    _, per_slot = _n_ctx(d)
    for i, start, first, finish, prompt, output, status in rows.iter_rows():
        s, task = slots[i], int(i)
        if f.json:
            out.add(start, f.obj(start, "INFO", "launch_slot_with_task", 1010, "slot is processing task",
                                 id_slot=s, id_task=task), seq=1)
            out.add(start, f.obj(start, "INFO", "update_slots", 1900, "kv cache rm [p0, end)",
                                 id_slot=s, id_task=task, p0=0), seq=1)
        else:
            out.add(start, f.slot(start, "launch_slot_", s, task, "processing task, is_child = 0"), seq=1)
            out.add(start, f.slot(start, "update_slots", s, task,
                                  f"new prompt, n_ctx_slot = {per_slot}, n_keep = 0, task.n_tokens = {prompt}"), seq=1)
        if first is not None and not f.json:
            out.add(first, f.slot(first, "update_slots", s, task,
                                  f"prompt done, n_tokens = {prompt}, batch.n_tokens = {prompt}"), seq=2)
        if status != "ok":
            continue
        _progress(f, out, s, task, first, finish, output)
        _timing(f, out, s, task, start, first, finish, prompt, output)


def _progress(f: Fmt, out: Lines, s: int, task: int, first: int, finish: int, output: int) -> None:
    """`n_decoded = N, tg = X t/s` every 3 s once 100 tokens are out (tokens spread evenly)."""
    if f.json or output <= 100:
        return
    step = (finish - first) / max(output - 1, 1)
    t = first + 3_000_000_000
    while t < finish:
        n = 1 + int((t - first) / step)
        if n >= 100:
            tg = n / ((t - first) / 1e9)
            out.add(t, f.slot(t, "print_timing", s, task, f"n_decoded = {n:6d}, tg = {tg:6.2f} t/s, tg_3s = {tg:6.2f} t/s"), seq=3)
        t += 3_000_000_000


def _timing(f: Fmt, out: Lines, s, task, start, first, finish, prompt, output) -> None:
    p_ms = (first - start) / 1e6
    e_ms = (finish - first) / 1e6
    t_ms = (finish - start) / 1e6
    p_tok = p_ms / prompt
    p_tps = 1e3 / p_ms * prompt if p_ms > 0 else float("inf")
    e_tok = e_ms / output
    e_tps = 1e3 / e_ms * output if e_ms > 0 else float("inf")
    if f.json:
        ts = finish
        out.add(ts, f.obj(ts, "INFO", "print_timings", 313,
                          f"prompt eval time     = {p_ms:10.2f} ms / {prompt:5d} tokens ({p_tok:8.2f} ms per token, {p_tps:8.2f} tokens per second)",
                          id_slot=s, id_task=task, t_prompt_processing=p_ms, n_prompt_tokens_processed=prompt,
                          t_token=p_tok, n_tokens_second=p_tps), seq=4)
        out.add(ts, f.obj(ts, "INFO", "print_timings", 327,
                          f"generation eval time = {e_ms:10.2f} ms / {output:5d} runs   ({e_tok:8.2f} ms per token, {e_tps:8.2f} tokens per second)",
                          id_slot=s, id_task=task, t_token_generation=e_ms, n_decoded=output,
                          t_token=e_tok, n_tokens_second=e_tps), seq=4)
        out.add(ts, f.obj(ts, "INFO", "print_timings", 337, f"          total time = {t_ms:10.2f} ms",
                          id_slot=s, id_task=task, t_prompt_processing=p_ms, t_token_generation=e_ms, t_total=t_ms), seq=4)
        out.add(ts, f.obj(ts, "INFO", "update_slots", 1600, "slot released", id_slot=s, id_task=task,
                          n_ctx=0, n_past=prompt + output - 1, n_system_tokens=0,
                          n_cache_tokens=prompt + output - 1, truncated=False), seq=5)
        out.add(ts, f.obj(ts, "INFO", "log_server_request", 2900, "request", remote_addr="127.0.0.1",
                          remote_port=50000 + task % 10000, status=200, method="POST", path="/v1/chat/completions",
                          params={}), seq=6)
        return
    # the slot's timing lines are written within microseconds of the finish
    lines = [
        f"prompt eval time = {p_ms:10.2f} ms / {prompt:5d} tokens ({p_tok:8.2f} ms per token, {p_tps:8.2f} tokens per second)",
        f"       eval time = {e_ms:10.2f} ms / {output:5d} tokens ({e_tok:8.2f} ms per token, {e_tps:8.2f} tokens per second)",
        f"      total time = {t_ms:10.2f} ms / {prompt + output:5d} tokens",
        f"   graphs reused = {max(output - 2, 0):10d}",
    ]
    for k, msg in enumerate(lines):
        t = finish + 1000 * k
        out.add(t, f.slot(t, "print_timing", s, task, msg), seq=4)
    t = finish + 5000
    out.add(t, f.slot(t, "release", s, task, f"stop processing: n_tokens = {prompt + output - 1}, truncated = 0"), seq=5)
    t = finish + 6000
    out.add(t, f.srv(t, "log_server_r", "done request: POST /v1/chat/completions 127.0.0.1 200"), seq=6)


def _crash(d, f: Fmt, out: Lines) -> None:
    ns = d.ns(d.res.crash_ts)
    msgs = [
        ("E", "ggml_cuda_compute_forward: MUL_MAT failed"),
        ("E", "CUDA error: out of memory"),
        ("E", "  current device: 0, in function ggml_cuda_compute_forward at /app/ggml/src/ggml-cuda/ggml-cuda.cu:2478"),
        ("E", "/app/ggml/src/ggml-cuda/ggml-cuda.cu:88: CUDA error"),
    ]
    for k, (lvl, msg) in enumerate(msgs):
        t = ns + k * 1000
        if f.json:
            out.add(t, f.obj(t, "ERROR", "ggml_cuda_error", 88, msg), seq=8)
        else:
            out.add(t, f.line(t, lvl, msg), seq=8)
