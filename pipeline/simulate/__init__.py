"""The log simulator: a discrete-event model of continuous-batching inference servers that
writes each engine's real log format together with the ground truth.

    simulate("vllm", "incident", 600, seed=7, out_dir="out/")  ->  summary dict

writes `out/vllm-a.log`, `out/vllm-b.log`, ... plus `truth_requests.parquet` and
`truth_state.parquet`. The same seed and options always give byte-identical files.
See docs/simulator.md.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from servelens.parsers import SERVERS

from .model import InstanceResult, ServerConfig, run_instance
from .scenarios import SCENARIOS, Scenario, make_traffic, server_config
from .truth import request_frame, state_frame, truth_requests

VARIANTS = {"vllm": ("v0", "v1", "v1_outputs"), "tgi": ("text", "json"), "trtllm": ("triton", "executor"),
            "sglang": ("v0_5", "v0_4", "pd"), "llamacpp": ("v2026", "v2024")}
# the registry's servers the simulator has a writer for (writers_<engine>.py, VARIANTS)
ENGINES = tuple(e for e in SERVERS if e in VARIANTS)
DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_START = "2026-05-12T08:00:00Z"


class SimulateError(ValueError):
    """A bad request from the user (unknown engine, scenario, variant, duration)."""


@dataclass
class InstanceData:
    """Everything a writer needs about one simulated server."""

    name: str  # instance name, also the log file stem
    index: int
    engine: str
    variant: str
    model: str
    cfg: ServerConfig
    req: pl.DataFrame  # request_frame(): integer-ns times
    res: InstanceResult
    start_ns: int  # epoch ns of simulated t = 0
    end_ns: int
    max_model_len: int
    rng: np.random.Generator  # cosmetic values only (pids, ports, memory numbers)
    opts: dict = field(default_factory=dict)

    def ns(self, t: float) -> int:
        return self.start_ns + int(round(t * 1e9))


def parse_duration(text: str | float | int) -> float:
    """`20m`, `90s`, `1h30m`, `1.5h`, or plain seconds -> seconds."""
    if isinstance(text, (int, float)):
        secs = float(text)
    else:
        import re

        s = text.strip().lower()
        m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", s)
        if not s or not m or not any(m.groups()):
            raise SimulateError(f"bad duration {text!r}: use e.g. 90s, 20m, 1h30m")
        h, mi, se = (float(g) if g else 0.0 for g in m.groups())
        secs = h * 3600 + mi * 60 + se
    if not secs > 0:
        raise SimulateError(f"bad duration {text!r}: must be positive")
    return secs


def parse_start(text: str) -> int:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise SimulateError(f"bad start time {text!r}: use ISO 8601, e.g. {DEFAULT_START}") from e
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def _writer(engine: str):
    import importlib

    return importlib.import_module(f"{__name__}.writers_{engine}")


def _request_ids(engine: str, variant: str, name: str, rng: np.random.Generator, n: int) -> list[str]:
    if engine == "vllm" and variant == "v1_outputs":
        # a `vllm bench serve` run: its `--request-id-prefix` (default `bench-<8hex>-`) and
        # the request's index, behind the chat endpoint's `chatcmpl-`
        prefix = f"bench-{rng.bytes(4).hex()}-"
        return [f"chatcmpl-{prefix}{i}" for i in range(n)]
    if engine == "vllm":
        hexes = rng.bytes(16 * n).hex()
        return [f"chatcmpl-{hexes[32 * i:32 * i + 32]}" for i in range(n)]
    if engine == "sglang":  # the tokenizer manager's uuid4().hex rids
        hexes = rng.bytes(16 * n).hex()
        return [hexes[32 * i:32 * i + 32] for i in range(n)]
    if engine == "trtllm":
        # the executor numbers requests 1, 2, ... in the order they are enqueued
        return [str(i + 1) for i in range(n)]
    if engine == "llamacpp":
        # llama-server's task ids: 0, 1, ... in the order requests reach the server
        return [str(i) for i in range(n)]
    # TGI prints no request id: the truth numbers requests per instance in arrival order
    # (join on finish time and order instead, see docs/simulator.md)
    return [f"{name}-{i:06d}" for i in range(n)]


def _run_one(job: dict) -> dict:
    """Model, logs and truth of one instance (a process-pool worker when --workers > 1)."""
    engine, i, seed = job["engine"], job["index"], job["seed"]
    name = f"{engine}-{chr(ord('a') + i)}"
    arrival = job["arrival"]
    qstart = arrival + job["validation"]
    cfg = job["cfg"]
    t0 = time.perf_counter()
    res = run_instance(qstart, job["prompt"], job["target"], job["max_tokens"], cfg, job["duration"],
                       job["crash_at"])
    t_model = time.perf_counter() - t0
    ids = _request_ids(engine, job["variant"], name, np.random.default_rng([seed, i, 1]), len(arrival))
    req = request_frame(name, ids, job["start_ns"], arrival, qstart, res, job["prompt"],
                        job["max_tokens"], job["target"])
    data = InstanceData(
        name=name, index=i, engine=engine, variant=job["variant"], model=job["model"], cfg=cfg,
        req=req, res=res, start_ns=job["start_ns"],
        end_ns=job["start_ns"] + int(round(job["duration"] * 1e9)), max_model_len=job["max_model_len"],
        rng=np.random.default_rng([seed, i, 2]), opts=job["opts"],
    )
    t0 = time.perf_counter()
    writer = _writer(engine)
    written = writer.write(data)
    raw = written.render(docker_timestamps=job["docker_timestamps"]).encode("utf-8")
    path = Path(job["out"]) / f"{name}.log"
    path.write_bytes(raw)
    if getattr(writer, "FILE_MTIME_IS_LAST_LINE", False):
        # a log of relative times is placed by its mtime: the time its last line was written
        last_ns = int(written.frame()["ts"].max())
        last_ns -= last_ns % 1000
        os.utime(path, ns=(last_ns, last_ns))
    # files an engine writes beside its log (SGLang's per-request metrics export)
    for rel, blob in getattr(writer, "extra_files", lambda _d: {})(data).items():
        extra = Path(job["out"]) / rel
        extra.parent.mkdir(parents=True, exist_ok=True)
        extra.write_bytes(blob)
    t_write = time.perf_counter() - t0
    state = state_frame(name, job["start_ns"], res, cfg.num_gpu_blocks, job["state_grid"])
    return {"file": path.name, "req": req, "state": state, "bytes": len(raw),
            "t_model": t_model, "t_write": t_write}


def simulate(
    engine: str,
    scenario: str,
    duration_s: float | str,
    seed: int,
    out_dir: str | Path,
    *,
    rate: float | None = None,
    model: str | None = None,
    instances: int | None = None,
    variant: str | None = None,
    docker_timestamps: bool = False,
    start: str = DEFAULT_START,
    stats_period: float | None = None,
    max_log_len: int | None = None,
    state_grid: float | None = None,
    max_num_seqs: int | None = None,
    num_gpu_blocks: int | None = None,
    workers: int = 1,
) -> dict:
    """Simulate `scenario` on `instances` servers of `engine` and write logs + truth into
    `out_dir`. Returns a summary (files, bytes, request counts, timings). `workers` > 1 (0 =
    one per CPU) simulates instances in parallel processes; the output is the same."""
    t_wall = time.perf_counter()
    if engine not in ENGINES:
        raise SimulateError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")
    if scenario not in SCENARIOS:
        raise SimulateError(f"unknown scenario {scenario!r}: choose one of {', '.join(SCENARIOS)}")
    variant = variant or VARIANTS[engine][0]
    if variant not in VARIANTS[engine]:
        raise SimulateError(
            f"unknown variant {variant!r} for {engine}: choose one of {', '.join(VARIANTS[engine])}"
        )
    duration = parse_duration(duration_s)
    if rate is not None and not rate > 0:
        raise SimulateError("rate must be positive")
    scen: Scenario = SCENARIOS[scenario]
    n_inst = instances or scen.default_instances
    if not 1 <= n_inst <= 26:
        raise SimulateError("instances must be between 1 and 26")
    start_ns = parse_start(start)
    cfg = server_config(engine, scen, max_num_seqs=max_num_seqs, num_gpu_blocks=num_gpu_blocks)
    if cfg.num_gpu_blocks * cfg.block_size < scen.max_model_len:
        raise SimulateError("the KV cache must hold at least one max-length sequence")

    rng = np.random.default_rng(seed)
    crash_at = crash_inst = None
    if scen.crash is not None:
        crash_inst, frac = scen.crash
        crash_inst = min(crash_inst, n_inst - 1)
        crash_at = frac * duration
    traffic = make_traffic(scen, rng, duration, n_inst, rate, crash_at, crash_inst)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    opts = {"stats_period": stats_period, "max_log_len": max_log_len}
    jobs = []
    for i in range(n_inst):
        m = traffic.instance == i
        jobs.append(dict(
            engine=engine, variant=variant, model=model or DEFAULT_MODEL, index=i, seed=seed,
            cfg=cfg, arrival=traffic.arrival[m], validation=traffic.validation[m],
            prompt=traffic.prompt[m], target=traffic.target[m], max_tokens=traffic.max_tokens[m],
            duration=duration, crash_at=crash_at if i == crash_inst else None, start_ns=start_ns,
            max_model_len=scen.max_model_len, opts=opts, docker_timestamps=docker_timestamps,
            state_grid=state_grid, out=str(out),
        ))
    if workers == 0:
        workers = os.cpu_count() or 1
    if workers > 1 and n_inst > 1:
        # instances are independent once the traffic is split: run them side by side
        # spawn, not fork: forking a process that runs polars' thread pool can deadlock
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(workers, n_inst), mp_context=ctx) as pool:
            results = list(pool.map(_run_one, jobs))
    else:
        results = [_run_one(j) for j in jobs]
    files = [r["file"] for r in results]
    req_frames = [r["req"] for r in results]
    state_frames = [r["state"] for r in results]
    total_bytes = sum(r["bytes"] for r in results)
    t_model = sum(r["t_model"] for r in results)
    t_write = sum(r["t_write"] for r in results)

    truth_req = truth_requests(pl.concat(req_frames))
    truth_state = pl.concat(state_frames).sort("ts", "instance", maintain_order=True)
    # fixed Parquet settings so that the files are byte-identical for a seed
    truth_req.write_parquet(out / "truth_requests.parquet", compression="zstd", statistics=False)
    truth_state.write_parquet(out / "truth_state.parquet", compression="zstd", statistics=False)
    wall = time.perf_counter() - t_wall
    counts = truth_req.group_by("status").len().sort("status")
    return {
        "engine": engine,
        "variant": variant,
        "scenario": scenario,
        "seed": seed,
        "duration_s": duration,
        "instances": n_inst,
        "files": files,
        "log_bytes": total_bytes,
        "requests": dict(counts.iter_rows()),
        "server": asdict(cfg),
        # model/write are summed over instances (CPU seconds when run in parallel)
        "seconds": {"model": round(t_model, 3), "write": round(t_write, 3), "total": round(wall, 3)},
        "log_mb_per_s": round(total_bytes / 1e6 / wall, 1) if wall > 0 else None,
    }


__all__ = ["simulate", "SCENARIOS", "ENGINES", "VARIANTS", "SimulateError", "parse_duration"]
