"""Scenarios: what traffic arrives (rate over time, prompt and output lengths), how big the
servers are, and which instance fails when. Everything is drawn from one numpy Generator, so
a seed fixes the whole run."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .model import ServerConfig


@dataclass
class Scenario:
    name: str
    doc: str
    # (fraction of duration where the segment starts, rate multiplier); piecewise constant
    rate_profile: tuple[tuple[float, float], ...] = ((0.0, 1.0),)
    base_rate: float = 2.0  # requests/s per instance at multiplier 1
    prompt_median: float = 350.0
    prompt_sigma: float = 0.9
    output_median: float = 160.0
    output_sigma: float = 0.8
    max_tokens_choices: tuple[int, ...] = (256, 512, 1024, 2048)
    max_model_len: int = 8192
    default_instances: int = 1
    crash: tuple[int, float] | None = None  # (instance index, fraction of duration)
    kv_scale: float = 1.0  # KV cache size relative to the engine default
    hot_share: float | None = None  # share of all traffic the load balancer sends to instance 0


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "steady",
            "healthy traffic well under capacity: the queue stays near empty",
            base_rate=2.0,
        ),
        Scenario(
            "spike",
            "a surge to ~4x the base rate for a quarter of the run: the waiting queue grows "
            "past 10 for minutes, then drains",
            rate_profile=((0.0, 1.0), (0.3, 4.0), (0.55, 1.0)),
            base_rate=2.0,
        ),
        Scenario(
            "kv-pressure",
            "long prompts fill the KV cache: usage near 100%, preemptions, a growing latency tail",
            rate_profile=((0.0, 0.6), (0.25, 1.3), (0.75, 0.6)),
            base_rate=1.0,
            prompt_median=2600.0,
            prompt_sigma=0.45,
            output_median=300.0,
            output_sigma=0.6,
            max_tokens_choices=(1024, 2048),
            kv_scale=0.5,
        ),
        Scenario(
            "incident",
            "a surge on several instances that ends in a CUDA out-of-memory crash of one of "
            "them; the survivors take its traffic",
            rate_profile=((0.0, 1.0), (0.35, 3.0), (0.8, 1.0)),
            base_rate=2.0,
            default_instances=3,
            crash=(0, 0.6),
        ),
        Scenario(
            "imbalance",
            "a load balancer that sends most of the traffic to one replica: it queues for "
            "minutes while its siblings serving the same model idle (route better, not scale out)",
            base_rate=4.0,
            default_instances=3,
            hot_share=0.8,
        ),
    )
}


# Engine flavours of the server (what each engine's scheduler does, not its speed).
ENGINE_SERVER: dict[str, dict] = {
    # vLLM: KV on demand, preempt by recompute when it runs out.
    "vllm": {"block_size": 16, "max_num_seqs": 256, "max_batched_tokens": 8192},
    # TGI: admission against max_batch_total_tokens (prompt + max_new_tokens), no preemption.
    "tgi": {"block_size": 16, "num_gpu_blocks": 6144, "max_num_seqs": 1024, "max_batched_tokens": 4096,
            "reserve_full": True},
    # TensorRT-LLM GUARANTEED_NO_EVICT: reserve the whole sequence, 64-token blocks.
    "trtllm": {"block_size": 64, "num_gpu_blocks": 1536, "max_num_seqs": 256,
               "max_batched_tokens": 8192, "reserve_full": True},
    # SGLang: KV on demand (radix cache, --page-size 16 here), retract when it runs out.
    "sglang": {"block_size": 16, "max_num_seqs": 256, "max_batched_tokens": 8192},
    # llama.cpp llama-server --parallel 16: a fixed context per slot (n_ctx / n_slots), a
    # slot holds its whole context, no preemption; n_batch 2048 prompt tokens per step.
    "llamacpp": {"block_size": 16, "num_gpu_blocks": 8192, "max_num_seqs": 16,
                 "max_batched_tokens": 2048, "reserve_full": True},
}


def server_config(engine: str, scen: Scenario, **over) -> ServerConfig:
    cfg = ServerConfig(**ENGINE_SERVER[engine])
    cfg = replace(cfg, num_gpu_blocks=int(cfg.num_gpu_blocks * scen.kv_scale))
    return replace(cfg, **{k: v for k, v in over.items() if v is not None})


@dataclass
class Traffic:
    arrival: np.ndarray  # s from start, sorted
    instance: np.ndarray  # index of the instance that receives it
    prompt: np.ndarray
    max_tokens: np.ndarray
    target: np.ndarray  # tokens it will generate (<= max_tokens)
    validation: np.ndarray  # s spent tokenizing/validating before it can queue


def rate_segments(scen: Scenario, duration: float, rate: float, n_inst: int):
    """[(t0, t1, total rate)] over the run."""
    prof = list(scen.rate_profile)
    out = []
    for k, (f0, m) in enumerate(prof):
        f1 = prof[k + 1][0] if k + 1 < len(prof) else 1.0
        out.append((f0 * duration, f1 * duration, rate * m * n_inst))
    return out


def make_traffic(
    scen: Scenario,
    rng: np.random.Generator,
    duration: float,
    n_inst: int,
    rate: float | None,
    crash_at: float | None,
    crash_inst: int | None,
) -> Traffic:
    rate = scen.base_rate if rate is None else rate
    times = []
    for t0, t1, lam in rate_segments(scen, duration, rate, n_inst):
        k = rng.poisson(lam * (t1 - t0))
        times.append(np.sort(rng.uniform(t0, t1, k)))
    arrival = np.concatenate(times) if times else np.zeros(0)
    n = len(arrival)
    if scen.hot_share is not None and n_inst > 1:
        share = np.full(n_inst, (1.0 - scen.hot_share) / (n_inst - 1))
        share[0] = scen.hot_share
        inst = rng.choice(n_inst, n, p=share)
    else:
        inst = rng.integers(0, n_inst, n)
    if crash_at is not None and n_inst > 1:
        # after the crash the load balancer sends its share to the survivors
        late = (arrival >= crash_at) & (inst == crash_inst)
        alt = rng.integers(0, n_inst - 1, int(late.sum()))
        inst[late] = alt + (alt >= crash_inst)
    mlen = scen.max_model_len
    prompt = np.clip(
        np.round(rng.lognormal(np.log(scen.prompt_median), scen.prompt_sigma, n)), 4, mlen // 2
    ).astype(np.int64)
    max_tokens = rng.choice(np.array(scen.max_tokens_choices, np.int64), n)
    max_tokens = np.minimum(max_tokens, mlen - prompt)
    want = np.round(rng.lognormal(np.log(scen.output_median), scen.output_sigma, n)).astype(np.int64)
    target = np.clip(want, 1, max_tokens)
    validation = rng.gamma(2.0, 0.0004, n) + 0.0002 + prompt * 2e-7
    return Traffic(arrival, inst, prompt, max_tokens, target, validation)
