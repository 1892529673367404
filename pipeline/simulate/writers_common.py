"""Pieces several writers share: stats sampling from the state trace, the synthetic prompt
text, the PyTorch OOM message and the uvicorn access line."""

from __future__ import annotations

import numpy as np
import polars as pl

OOM_MSG = (
    "CUDA out of memory. Tried to allocate {alloc:.2f} GiB. GPU 0 has a total capacity of 79.25 GiB "
    "of which {free:.2f} GiB is free. Process {pid} has {inuse:.2f} GiB memory in use. Of the allocated "
    "memory {alloc_pt:.2f} GiB is allocated by PyTorch, and {resv:.2f} GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
    "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def oom_message(rng: np.random.Generator, pid: int = 1) -> str:
    free = float(rng.uniform(0.3, 1.5))
    return OOM_MSG.format(
        alloc=float(rng.uniform(1.0, 3.0)), free=free, pid=pid, inuse=79.25 - free - 0.05,
        alloc_pt=float(rng.uniform(72.0, 75.0)), resv=float(rng.uniform(1.0, 3.0)),
    )


WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her all she there would their we him been has when who will more no "
    "if out so said what up its about into than them can only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many "
    "before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here between "
    "both life being under never day same another know while last might us great old year off come "
    "since against go came right used take three summarize translate explain document report table "
    "customer invoice query model server latency throughput request response cache memory"
).split()


def word_pool(rng: np.random.Generator, n_chars: int) -> str:
    words = np.array(WORDS)[rng.integers(0, len(WORDS), n_chars // 4 + 16)]
    return " ".join(words.tolist())[:n_chars]


def prompt_body(pool: str, offsets: pl.Expr, lengths: pl.Expr) -> pl.Expr:
    """A slice of the pool per request (column-wise)."""
    return pl.lit(pool).str.slice(offsets, lengths)


def state_at(res, t: np.ndarray) -> np.ndarray:
    """Index of the state row in force at each time."""
    return np.clip(np.searchsorted(res.st_ts, t, side="right") - 1, 0, len(res.st_ts) - 1)


def cum_tokens(res):
    """Iteration end times and cumulative prompt/generation tokens done by then."""
    ends = res.st_ts + res.st_dt
    order = np.argsort(ends, kind="stable")
    return ends[order], np.cumsum(res.st_ctx_tokens[order]), np.cumsum(res.st_gen_tokens[order])


def tokens_between(cum, t0: float, t1: float) -> tuple[int, int]:
    ends, cp, cg = cum
    a = np.searchsorted(ends, t0, side="right")
    b = np.searchsorted(ends, t1, side="right")
    p0 = cp[a - 1] if a > 0 else 0
    g0 = cg[a - 1] if a > 0 else 0
    p1 = cp[b - 1] if b > 0 else 0
    g1 = cg[b - 1] if b > 0 else 0
    return int(p1 - p0), int(g1 - g0)


def client_ports(rng: np.random.Generator, n: int) -> pl.Series:
    return pl.Series(rng.integers(32768, 61000, n)).cast(pl.String)
