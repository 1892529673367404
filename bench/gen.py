"""Benchmark input: large logs in each engine's real format, from the simulator.

Running the simulator's server model for gigabytes of logs takes far longer than writing
them, so the model runs once per instance (`steady` scenario, the simulator's defaults) and
its run is written out again and again, each repeat shifted in time after the previous one
(as if the server had been restarted, start-up banner included) with fresh request ids. Each
instance's repeats go into one file, so a 1 GB input is a few files of a few hundred MB: long
logs of long-running servers. Two worker processes share the instances (the machine has two
cores). A stamp file beside the directory records the parameters, so an unchanged input is
not generated again.

If the simulator's internals this relies on change, it falls back to calling the public
`simulate()` with a different seed per repeat (slower, same format).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

SCENARIO = "steady"
START = "2026-05-12T08:00:00Z"
GAP_S = 120.0  # between repeats: room for the start-up lines written before t = 0
# Per engine: simulated seconds per repeat and options. TensorRT-LLM's Triton backend polls
# iteration stats every 100 ms by default (stats_check_period_ms), so its log is written at
# that period; vLLM keeps its 10 s stats interval.
ENGINE_OPTS = {
    "vllm": {"duration": 1800.0, "opts": {}},
    "tgi": {"duration": 1800.0, "opts": {}},
    "trtllm": {"duration": 1800.0, "opts": {"stats_period": 0.1}},
    # each repeat is a server restart: llama.cpp's relative times and task ids start again
    "sglang": {"duration": 1800.0, "opts": {}},
    "llamacpp": {"duration": 1800.0, "opts": {}},
}
VERSION = 2  # bump when the generated content changes


@dataclass
class Generated:
    engine: str
    dir: Path
    files: list[Path]
    bytes: int
    lines: int
    seconds: float
    cached: bool


# below this many bytes the input is written in this process, without a pool of workers
IN_PROCESS_BYTES = 32 * 2**20


def _stamp(engine: str, target: int, instances: int, seed: int, duration: float) -> dict:
    return {"version": VERSION, "engine": engine, "target_bytes": target, "instances": instances,
            "seed": seed, "scenario": SCENARIO, **ENGINE_OPTS[engine], "duration": duration}


def generate(engine: str, target_bytes: int, out_dir: Path, *, seed: int = 1, instances: int = 4,
             workers: int = 2, duration: float | None = None) -> Generated:
    """At least `target_bytes` of `engine` logs in `out_dir` (reused when already there).
    `duration`: simulated seconds per repeat (default per engine)."""
    out_dir = Path(out_dir)
    # beside the directory, not in it: `servelens ingest DIR` would read it as a log
    stamp_path = out_dir.with_name(out_dir.name + ".stamp.json")
    duration = duration or ENGINE_OPTS[engine]["duration"]
    want = _stamp(engine, target_bytes, instances, seed, duration)
    if stamp_path.exists():
        try:
            have = json.loads(stamp_path.read_text())
        except ValueError:
            have = {}
        files = sorted(out_dir.glob("*.log"))
        if {k: have.get(k) for k in want} == want and files:
            return Generated(engine, out_dir, files, have["bytes"], have["lines"], have["seconds"], True)
    if out_dir.exists():
        # only an earlier input of this generator is replaced: a directory holding anything
        # else (a parent of other inputs, a store) is not this function's to delete
        foreign = [p.name for p in out_dir.iterdir() if not (p.is_file() and p.suffix == ".log")]
        if foreign:
            raise SystemExit(f"{out_dir} holds more than generated logs ({', '.join(sorted(foreign)[:3])}); "
                             "give generate() a directory of its own")
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    per_file = math.ceil(target_bytes / instances)
    jobs = [(engine, i, instances, seed, per_file, str(out_dir), duration) for i in range(instances)]
    if target_bytes < IN_PROCESS_BYTES:
        # a worker's start (an interpreter importing the simulator) costs more than a small input
        results = [_instance_job(job) for job in jobs]
    else:
        ctx = get_context("spawn")  # polars' thread pools do not survive fork
        with ProcessPoolExecutor(max_workers=min(workers, instances), mp_context=ctx) as pool:
            results = list(pool.map(_instance_job, jobs))
    seconds = time.perf_counter() - t0
    files = sorted(out_dir.glob("*.log"))
    total = sum(b for b, _ in results)
    lines = sum(n for _, n in results)
    stamp_path.write_text(json.dumps({**want, "bytes": total, "lines": lines, "seconds": round(seconds, 1),
                                      "method": "model once per instance, repeats shifted in time"}))
    return Generated(engine, out_dir, files, total, lines, seconds, False)


def _instance_job(job: tuple) -> tuple[int, int]:
    engine, i, n_inst, seed, target, out_dir, duration = job
    path = Path(out_dir) / f"{engine}-{chr(ord('a') + i)}.log"
    try:
        render = _repeat_renderer(engine, i, n_inst, seed, duration)
    except (ImportError, AttributeError, TypeError):
        render = _fallback_renderer(engine, i, seed, Path(out_dir), duration)
    written = lines = 0
    k = 0
    with open(path, "wb") as f:
        while written < target:
            raw = render(k)
            f.write(raw)
            written += len(raw)
            lines += raw.count(b"\n")
            k += 1
    return written, lines


def _repeat_renderer(engine: str, i: int, n_inst: int, seed: int, duration: float):
    """Model instance `i` once; return k -> the bytes of repeat k."""
    import numpy as np

    from servelens.pipeline import simulate as sim
    from servelens.pipeline.simulate.model import run_instance
    from servelens.pipeline.simulate.scenarios import SCENARIOS, make_traffic, server_config
    from servelens.pipeline.simulate.truth import request_frame

    conf = ENGINE_OPTS[engine]
    scen = SCENARIOS[SCENARIO]
    cfg = server_config(engine, scen)
    rng = np.random.default_rng(seed)
    traffic = make_traffic(scen, rng, duration, n_inst, None, None, None)
    m = traffic.instance == i
    arrival = traffic.arrival[m]
    qstart = arrival + traffic.validation[m]
    res = run_instance(qstart, traffic.prompt[m], traffic.target[m], traffic.max_tokens[m], cfg, duration, None)
    writer = sim._writer(engine)
    variant = sim.VARIANTS[engine][0]
    name = f"{engine}-{chr(ord('a') + i)}"
    start0 = sim.parse_start(START)
    period = int((duration + GAP_S) * 1e9)
    opts = {"stats_period": None, "max_log_len": None, **conf["opts"]}

    def render(k: int) -> bytes:
        start_ns = start0 + k * period
        ids = sim._request_ids(engine, variant, name, np.random.default_rng([seed, i, 1, k]), int(m.sum()))
        req = request_frame(name, ids, start_ns, arrival, qstart, res, traffic.prompt[m],
                            traffic.max_tokens[m], traffic.target[m])
        data = sim.InstanceData(
            name=name, index=i, engine=engine, variant=variant, model=sim.DEFAULT_MODEL, cfg=cfg,
            req=req, res=res, start_ns=start_ns, end_ns=start_ns + int(round(duration * 1e9)),
            max_model_len=scen.max_model_len, rng=np.random.default_rng([seed, i, 2, k]), opts=opts,
        )
        return writer.write(data).render().encode("utf-8")

    return render


def _fallback_renderer(engine: str, i: int, seed: int, out_dir: Path, duration: float):
    from servelens.pipeline.simulate import simulate

    conf = ENGINE_OPTS[engine]
    tmp = out_dir / f"_tmp{i}"

    def render(k: int) -> bytes:
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(
            time.mktime(time.strptime(START, "%Y-%m-%dT%H:%M:%SZ")) + k * (duration + GAP_S)))
        simulate(engine, SCENARIO, duration, seed * 1000 + i * 100 + k, tmp, instances=1,
                 start=start, **conf["opts"])
        raw = (tmp / f"{engine}-a.log").read_bytes()
        shutil.rmtree(tmp, ignore_errors=True)
        return raw

    return render


def disk_free(path: Path) -> int:
    path.mkdir(parents=True, exist_ok=True)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
