"""The store the dashboard tests read: `sample_logs/incident/` ingested once per session.

Until the simulator's sample logs are in the tree, a small deterministic vLLM incident is
written instead (real V0 log line formats): gpu-0 surges (queue > 10, KV > 90% with
preemption warnings) and then dies of a CUDA out-of-memory error; gpu-1 stays calm.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INCIDENT = REPO / "sample_logs" / "incident"


def _has_logs(d: Path) -> bool:
    return d.is_dir() and any(p.is_file() for p in d.rglob("*"))


def fallback_logs(dest: Path) -> Path:
    t0 = dt.datetime(2026, 5, 12, 8, 0, 0)

    def ts(s: int) -> str:
        return (t0 + dt.timedelta(seconds=s)).strftime("%m-%d %H:%M:%S")

    def instance(name: str, surge: tuple[int, int] | None, crash_min: int | None) -> None:
        out = [f"INFO {ts(0)} gpu_executor.py:122] # GPU blocks: 2048, # CPU blocks: 512"]
        rid = 0
        for k, t in enumerate(range(0, 20 * 60, 5)):
            hot = surge is not None and surge[0] * 60 <= t < surge[1] * 60
            for _ in range(3 if hot else 1):
                rid += 1
                out.append(f"INFO {ts(t)} async_llm_engine.py:529] Received request cmpl-{rid}: prompt: 'x', "
                           "params: SamplingParams(max_tokens=256), prompt_token_ids: [1, 2], lora_request: None.")
                if rid > 3:
                    out.append(f"INFO {ts(t + (30 if hot else 2))} async_llm_engine.py:140] Finished request cmpl-{rid - 3}.")
            pending = 20 + k % 7 if hot else k % 2
            running = 256 if hot else 10 + k % 9
            kv = 95.5 if hot else 30.0 + k % 5
            if hot and t % 30 == 0:
                out.append(f"WARNING {ts(t)} scheduler.py:1560] Sequence group cmpl-{rid} is preempted by "
                           "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
                           "affect the end-to-end performance. Increase gpu_memory_utilization or "
                           "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51")
            out.append(f"INFO {ts(t)} metrics.py:455] Avg prompt throughput: {100 + k % 50:.1f} tokens/s, "
                       f"Avg generation throughput: {200 + k % 40:.1f} tokens/s, Running: {running} reqs, "
                       f"Swapped: 0 reqs, Pending: {pending} reqs, GPU KV cache usage: {kv:.1f}%, "
                       "CPU KV cache usage: 0.0%.")
            if crash_min is not None and t >= crash_min * 60:
                out.append(f"ERROR {ts(t)} async_llm_engine.py:57] Engine background task failed")
                out.append("Traceback (most recent call last):")
                out.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
                break
        path = dest / "vllm" / f"{name}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(out) + "\n")

    instance("gpu-0", (6, 12), 13)
    instance("gpu-1", None, None)
    return dest


def build_store(tmp: Path) -> Path:
    """Ingest the incident sample (or the fallback) into `tmp/store`; returns the store."""
    from servelens.pipeline.ingest import ingest

    logs = INCIDENT if _has_logs(INCIDENT) else fallback_logs(tmp / "logs")
    store = tmp / "store"
    ingest([logs], store, year=2026)
    return store
