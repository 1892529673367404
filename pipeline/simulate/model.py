"""The discrete-event model of one continuous-batching inference server.

It steps the server one engine iteration at a time: requests that finished validation join a
FIFO waiting queue; each iteration first grows every running sequence by one token (taking a
new KV block when it crosses a block boundary, preempting the newest running sequences by
recompute when the cache is full), then admits waiting requests while the batch limit, the
per-iteration prefill token budget and the free KV blocks allow, and costs
`t_base + t_seq * batch + t_prefill_tok * prefill_tokens + t_ctx * context_tokens` seconds.
Engines that reserve a request's whole KV need up front (TGI, TensorRT-LLM's
GUARANTEED_NO_EVICT) admit against prompt + max_tokens and never preempt.

Everything here is numbers; writers turn the result into log lines and truth.py into Parquet.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ServerConfig:
    max_num_seqs: int = 256
    num_gpu_blocks: int = 4096
    block_size: int = 16
    max_batched_tokens: int = 8192  # prefill tokens one iteration may take
    reserve_full: bool = False  # admit against prompt + max_tokens, never preempt
    t_base: float = 0.012  # s per iteration
    t_seq: float = 0.00035  # s per sequence in the batch
    t_prefill_tok: float = 0.00005  # s per prefilled token
    t_ctx: float = 4.0e-8  # s per token of context attended (all running sequences)
    t_wake: float = 0.00012  # s an idle scheduler needs to pick up a new request


@dataclass
class InstanceResult:
    """Per-request times (seconds from the simulation start, NaN when it never happened)
    and the per-iteration state trace of one instance."""

    start: np.ndarray  # first scheduled (prefill start)
    first_token: np.ndarray
    finish: np.ndarray
    generated: np.ndarray  # tokens delivered
    preemptions: np.ndarray
    failed: np.ndarray  # bool: the request ended with the instance's crash
    # state trace: one row per iteration start (plus idle marks)
    st_ts: np.ndarray
    st_running: np.ndarray
    st_waiting: np.ndarray
    st_blocks: np.ndarray
    st_preempt_cum: np.ndarray
    st_ctx_reqs: np.ndarray  # requests prefilled this iteration
    st_ctx_tokens: np.ndarray
    st_gen_tokens: np.ndarray  # tokens generated this iteration (one per batch member)
    st_dt: np.ndarray  # iteration length (0 for idle marks)
    st_iter: np.ndarray  # iteration counter (-1 for idle marks)
    preempt_log: list = field(default_factory=list)  # (t, request index, cumulative count)
    crash_ts: float | None = None
    crash_batch: int = 0


class _Trace:
    """The state trace as growing lists (cheap appends), one entry per iteration start."""

    FIELDS = ("ts", "running", "waiting", "blocks", "preempt_cum", "ctx_reqs", "ctx_tokens",
              "gen_tokens", "dt", "iter")

    def __init__(self) -> None:
        self.cols: dict[str, list] = {f: [] for f in self.FIELDS}

    def add(self, ts, running, waiting, blocks, preempt_cum, ctx_reqs=0, ctx_tokens=0, gen_tokens=0,
            dt=0.0, iter=-1) -> None:  # noqa: A002 - the column's name
        for f, v in zip(self.FIELDS, (ts, running, waiting, blocks, preempt_cum, ctx_reqs, ctx_tokens,
                                      gen_tokens, dt, iter)):
            self.cols[f].append(v)

    def extend(self, k: int, **cols) -> None:
        """k rows at once; a scalar repeats, an array gives one value per row."""
        for f in self.FIELDS:
            v = cols[f]
            self.cols[f].extend(v.tolist() if isinstance(v, np.ndarray) else list(v) if isinstance(v, range)
                                else [v] * k)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {f: np.array(v, np.int64) for f, v in self.cols.items()}
        out["ts"] = np.array(self.cols["ts"], np.float64)
        out["dt"] = np.array(self.cols["dt"], np.float64)
        return out


def run_instance(
    qstart: np.ndarray,
    prompt: np.ndarray,
    target: np.ndarray,
    max_tokens: np.ndarray,
    cfg: ServerConfig,
    end_s: float,
    crash_at: float | None = None,
) -> InstanceResult:
    """Simulate one server. `qstart` (sorted) is when each request is ready to queue,
    `target` how many tokens it will generate (<= max_tokens). Requests still in the server
    at `end_s` stay unfinished (NaN); at `crash_at` everything in the server fails."""
    n = len(qstart)
    bs = cfg.block_size
    total = cfg.num_gpu_blocks
    start = np.full(n, np.nan)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    gen = np.zeros(n, np.int64)
    npre = np.zeros(n, np.int64)
    failed = np.zeros(n, bool)
    reserve_need = -(-(prompt + max_tokens) // bs)

    trace = _Trace()
    preempt_log: list = []

    waiting: deque[int] = deque()
    r_id = np.zeros(0, np.int64)
    r_len = np.zeros(0, np.int64)  # tokens whose KV is stored
    r_res = np.zeros(0, np.int64)  # blocks held (reserved or allocated)
    free = total
    pre_cum = 0
    it = 0
    t = 0.0
    nxt = 0
    stop = end_s if crash_at is None else min(end_s, crash_at)
    crash_ts = None
    crash_batch = 0
    blocked = False  # the queue head could not be admitted and nothing has changed since

    trace.add(0.0, 0, 0, 0, 0)
    while True:
        while nxt < n and qstart[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if t >= stop:
            break
        if len(r_id) == 0 and not waiting:
            if nxt >= n or qstart[nxt] >= stop:
                break
            t = float(qstart[nxt]) + cfg.t_wake
            continue
        if FAST_FORWARD and len(r_id) and (blocked or not waiting):
            k = _fast_forward_len(t, r_id, r_len, gen, target, qstart, nxt, waiting, cfg, stop,
                                  crash_at, free, blocked)
            if k is not None:
                kk, t_j, dt_j, waits, used_j, need_tot, need_seq = k
                nb = len(r_id)
                trace.extend(kk, ts=t_j, running=nb, waiting=waits, blocks=used_j, preempt_cum=pre_cum,
                             ctx_reqs=0, ctx_tokens=0, gen_tokens=nb, dt=dt_j, iter=range(it, it + kk))
                it += kk
                gen[r_id] += kk
                r_len = r_len + kk
                if not cfg.reserve_full:
                    free -= need_tot
                    r_res = r_res + need_seq
                t = float(t_j[-1] + dt_j[-1])
                continue
        blocked = False
        preempted = False
        # 1. running sequences grow by one token
        if len(r_id):
            if cfg.reserve_full:
                r_len = r_len + 1
            else:
                need = (r_len % bs == 0).astype(np.int64)
                nneed = int(need.sum())
                while nneed > free and len(r_id):
                    v = len(r_id) - 1  # the newest running sequence goes first
                    free += int(r_res[v])
                    nneed -= int(need[v])
                    rid = int(r_id[v])
                    waiting.appendleft(rid)
                    npre[rid] += 1
                    pre_cum += 1
                    if pre_cum % 50 == 1:
                        preempt_log.append((t, rid, pre_cum))
                    r_id, r_len, r_res, need = r_id[:v], r_len[:v], r_res[:v], need[:v]
                    preempted = True
                free -= nneed
                r_len = r_len + 1
                r_res = r_res + need
        # 2. admit waiting requests
        new_ids: list[int] = []
        new_ctx: list[int] = []
        new_blk: list[int] = []
        if not preempted:
            budget = cfg.max_batched_tokens
            room = cfg.max_num_seqs - len(r_id)
            blocked = bool(waiting) and room <= 0
            while waiting and room > 0:
                rid = waiting[0]
                ctx = int(prompt[rid] + gen[rid])
                blk = int(reserve_need[rid]) if cfg.reserve_full else -(-ctx // bs)
                if blk > free:
                    blocked = True
                    break
                if ctx > budget and new_ids:
                    break
                waiting.popleft()
                free -= blk
                budget -= ctx
                room -= 1
                new_ids.append(rid)
                new_ctx.append(ctx)
                new_blk.append(blk)
                if np.isnan(start[rid]):
                    start[rid] = t
            if new_ids:
                r_id = np.concatenate([r_id, np.array(new_ids, np.int64)])
                r_len = np.concatenate([r_len, np.array(new_ctx, np.int64)])
                r_res = np.concatenate([r_res, np.array(new_blk, np.int64)])
        nb = len(r_id)
        if nb == 0:  # nothing fits (cannot happen with a sane config); wait for time to pass
            trace.add(t, 0, len(waiting), 0, pre_cum)
            t = float(qstart[nxt]) if nxt < n else stop
            continue
        ctx_tok = int(sum(new_ctx))
        ctx_all = int(r_len.sum())
        used = int(-(-r_len // bs).sum()) if cfg.reserve_full else total - free
        dt = cfg.t_base + cfg.t_seq * nb + cfg.t_prefill_tok * ctx_tok + cfg.t_ctx * ctx_all
        trace.add(t, nb, len(waiting), used, pre_cum, len(new_ids), ctx_tok, nb, dt, it)
        if crash_at is not None and t + dt > crash_at:
            crash_ts, crash_batch = crash_at, nb
            t = crash_at
            break
        it += 1
        t_end = t + dt
        # 3. every sequence in the batch produced one token
        ids = r_id
        gen[ids] += 1
        if new_ids:
            na = np.array(new_ids, np.int64)
            fresh = na[np.isnan(first[na])]
            first[fresh] = t_end
        done = gen[ids] >= target[ids]
        if done.any():
            blocked = False  # a finish frees room and blocks: admission may succeed again
            finish[ids[done]] = t_end
            free += int(r_res[done].sum())
            keep = ~done
            r_id, r_len, r_res = r_id[keep], r_len[keep], r_res[keep]
        t = t_end

    if crash_at is not None and crash_at <= end_s:
        crash_ts = crash_at
        crash_batch = crash_batch or len(r_id)
        inside = list(r_id) + list(waiting)
        while nxt < n and qstart[nxt] <= crash_at:
            inside.append(nxt)
            nxt += 1
        if inside:
            ia = np.array(inside, np.int64)
            failed[ia] = True
            finish[ia] = crash_at
        trace.add(crash_at, 0, 0, 0, pre_cum)

    tr = trace.arrays()
    return InstanceResult(
        start=start, first_token=first, finish=finish, generated=gen, preemptions=npre,
        failed=failed,
        st_ts=tr["ts"], st_running=tr["running"], st_waiting=tr["waiting"], st_blocks=tr["blocks"],
        st_preempt_cum=tr["preempt_cum"], st_ctx_reqs=tr["ctx_reqs"], st_ctx_tokens=tr["ctx_tokens"],
        st_gen_tokens=tr["gen_tokens"], st_dt=tr["dt"], st_iter=tr["iter"],
        preempt_log=preempt_log, crash_ts=crash_ts, crash_batch=crash_batch,
    )


FF_MAX = 256  # iterations one fast-forward may cover
FAST_FORWARD = True  # tests turn it off to check it changes nothing


def _fast_forward_len(t, r_id, r_len, gen, target, qstart, nxt, waiting, cfg, stop, crash_at, free, blocked):
    """Iterations in which nothing but decoding happens (no arrival can be admitted, nobody
    finishes, the KV cache suffices), computed in one go. Returns None when fewer than 2.

    Equivalent to stepping the main loop: the same dt per iteration, the same state rows."""
    nb = len(r_id)
    rem_min = int((target[r_id] - gen[r_id]).min())
    kmax = min(rem_min - 1, FF_MAX)  # iteration j leaves every sequence unfinished iff j <= rem-2
    if kmax < 2:
        return None
    j = np.arange(kmax)
    ctx0 = int(r_len.sum()) + nb  # after the first iteration's growth
    dt_j = cfg.t_base + cfg.t_seq * nb + cfg.t_ctx * (ctx0 + j * nb)
    t_j = np.cumsum(np.concatenate([[t], dt_j[:-1]]))  # sequential adds, as the main loop does
    ok = t_j < stop
    if crash_at is not None:
        ok &= t_j + dt_j <= crash_at
    if not blocked and nxt < len(qstart):
        ok &= t_j < qstart[nxt]  # an arrival to an idle queue is admitted at once
    bad = np.nonzero(~ok)[0]
    kmax = int(bad[0]) if len(bad) else kmax
    if kmax < 2:
        return None
    j, ok, t_j, dt_j = j[:kmax], ok[:kmax], t_j[:kmax], dt_j[:kmax]
    # KV growth: sequence s takes a block at iteration j when r_len + j is a multiple of bs
    bs = cfg.block_size
    lens = r_len[None, :] + j[:, None]  # tokens stored before iteration j's growth
    if cfg.reserve_full:
        used_j = (-(-(lens + 1) // bs)).sum(axis=1)
        need_cum = None
    else:
        take = (lens % bs == 0)
        need_cum = np.cumsum(take.sum(axis=1))
        ok &= need_cum <= free
        used_j = None
    bad = np.nonzero(~ok)[0]
    k = int(bad[0]) if len(bad) else kmax
    if k < 2:
        return None
    waits = np.full(k, len(waiting), np.int64)
    if blocked and nxt < len(qstart):
        waits += np.searchsorted(qstart, t_j[:k], side="right") - nxt
    if cfg.reserve_full:
        return k, t_j[:k], dt_j[:k], waits, used_j[:k], 0, None
    total = cfg.num_gpu_blocks
    used = total - (free - need_cum[:k])
    need_seq = take[:k].sum(axis=0).astype(np.int64)
    return k, t_j[:k], dt_j[:k], waits, used, int(need_cum[k - 1]), need_seq
