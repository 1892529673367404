"""`servelens simulate`: write simulated engine logs plus their ground truth (issue 6).

A thin command over `servelens.pipeline.simulate.simulate`; see docs/simulator.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)


def simulate_cmd(
    engine: Annotated[str, typer.Option("--engine", "-e", help="vllm, tgi, trtllm, sglang or llamacpp")],
    out: Annotated[Path, typer.Option("--out", "-o", help="directory for the logs and truth Parquet")],
    scenario: Annotated[str, typer.Option(help="steady, spike, kv-pressure, incident or imbalance")] = "steady",
    duration: Annotated[str, typer.Option(help="simulated time, e.g. 90s, 20m, 1h30m")] = "20m",
    seed: Annotated[int, typer.Option(help="random seed; same seed + options = same bytes")] = 7,
    rate: Annotated[Optional[float], typer.Option(
        help="base arrival rate per instance, requests/s (scenario default if unset)")] = None,
    instances: Annotated[Optional[int], typer.Option(
        help="number of servers (scenario default if unset)")] = None,
    model: Annotated[Optional[str], typer.Option(help="model name the logs mention")] = None,
    variant: Annotated[Optional[str], typer.Option(
        help="log format: vllm v0|v1|v1_outputs, tgi text|json, trtllm triton|executor, sglang v0_5|v0_4|pd, llamacpp v2026|v2024")] = None,
    docker_timestamps: Annotated[bool, typer.Option(
        "--docker-timestamps",
        help="prefix every line with an RFC 3339 ns time, as `docker logs --timestamps`")] = False,
    start: Annotated[str, typer.Option(help="wall-clock time of simulated t=0 (ISO 8601)")] = "2026-05-12T08:00:00Z",
    stats_period: Annotated[Optional[float], typer.Option(
        help="trtllm: seconds between iteration-stats lines (0 = every iteration)")] = None,
    max_log_len: Annotated[Optional[int], typer.Option(
        help="vllm v0: truncate logged prompts to this many characters (--max-log-len)")] = None,
    state_grid: Annotated[Optional[float], typer.Option(
        help="sample truth_state on this grid (s) instead of every iteration")] = None,
    max_num_seqs: Annotated[Optional[int], typer.Option(help="batch limit (engine default if unset)")] = None,
    num_gpu_blocks: Annotated[Optional[int], typer.Option(help="KV cache blocks (engine default if unset)")] = None,
    workers: Annotated[int, typer.Option(
        help="simulate instances in this many processes (0 = one per CPU); same output")] = 1,
) -> None:
    """Simulate an LLM inference server under load and write its logs with the ground truth.

    Writes <out>/<engine>-a.log, <engine>-b.log, ... in the engine's real log format, plus
    truth_requests.parquet (every request's true timings) and truth_state.parquet (the true
    running/waiting/KV state over time). Deterministic for a seed.

    \b
    Example:
      servelens simulate --engine vllm --scenario spike --duration 20m --seed 7 --out /tmp/sim
    """
    from .options import fail
    from ..simulate import SimulateError, simulate

    try:
        summary = simulate(
            engine, scenario, duration, seed, out, rate=rate, model=model, instances=instances,
            variant=variant, docker_timestamps=docker_timestamps, start=start,
            stats_period=stats_period, max_log_len=max_log_len, state_grid=state_grid,
            max_num_seqs=max_num_seqs, num_gpu_blocks=num_gpu_blocks, workers=workers,
        )
    except SimulateError as e:
        raise fail(str(e)) from None
    reqs = ", ".join(f"{v} {k}" for k, v in summary["requests"].items())
    mb = summary["log_bytes"] / 1e6
    typer.echo(
        f"{summary['engine']} {summary['variant']} {summary['scenario']}: {summary['instances']} instance(s), "
        f"{reqs} requests, {mb:.1f} MB of logs in {summary['seconds']['total']:.1f} s "
        f"({summary['log_mb_per_s']} MB/s) -> {out}",
        err=True,  # stdout stays clean, as for the other commands
    )
