"""The simulator's writers print each engine's real formats, with values that agree with the
truth (checked here with regexes from the format specs, independent of the parsers)."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
from typer.testing import CliRunner

from servelens.pipeline.simulate import simulate
from servelens.pipeline.simulate.lines import rust_duration, rust_duration_py

DUR = r"(\d+)(?:\.(\d{1,9}))?(s|ms|µs|ns)"
UNIT = {"s": 10**9, "ms": 10**6, "µs": 10**3, "ns": 1}


def dur_ns(s: str) -> int:
    m = re.fullmatch(DUR, s)
    assert m, s
    whole, frac, unit = m.groups()
    scale = UNIT[unit]
    digits = {"s": 9, "ms": 6, "µs": 3, "ns": 0}[unit]
    return int(whole) * scale + (int((frac or "").ljust(digits, "0")) if digits else 0)


@pytest.mark.parametrize(
    "ns,text",
    [  # strings seen in real TGI logs, and the edges of each unit
        (611_286_748, "611.286748ms"), (754_500, "754.5µs"), (127_337, "127.337µs"), (70_000, "70µs"),
        (2_458_150_804, "2.458150804s"), (161_454_300_714, "161.454300714s"), (10**9, "1s"),
        (999, "999ns"), (0, "0ns"), (1_000, "1µs"), (1_000_001, "1.000001ms"), (1_500_000_000, "1.5s"),
    ],
)
def test_rust_duration_debug_format(ns, text):
    assert rust_duration_py(ns) == text
    got = pl.select(rust_duration(pl.lit(ns, pl.Int64))).item()
    assert got == text
    assert dur_ns(text) == ns


def tgi_success(path):
    rx = re.compile(
        r'^(\S+)  INFO generate\{parameters=GenerateParameters \{ .*max_new_tokens: Some\((\d+)\).* \} '
        r'total_time="([^"]+)" validation_time="([^"]+)" queue_time="([^"]+)" inference_time="([^"]+)" '
        r'time_per_token="([^"]+)" seed="Some\(\d+\)"\}: text_generation_router::server: '
        r"router/src/server.rs:\d+: Success$"
    )
    rows = [rx.match(line) for line in path.read_text(encoding="utf-8").splitlines() if line.endswith("Success")]
    assert rows and all(rows)
    return [m.groups() for m in rows]


def test_tgi_durations_sum_exactly_and_match_the_truth(tmp_path):
    simulate("tgi", "spike", "3m", 5, tmp_path)
    rows = tgi_success(tmp_path / "tgi-a.log")
    truth = (
        pl.read_parquet(tmp_path / "truth_requests.parquet")
        .filter(pl.col("status") == "ok")
        .sort("finish_ts", "arrival_ts")
    )
    assert len(rows) == truth.height
    ns = lambda c: (truth[c].dt.epoch("ns")).to_list()  # noqa: E731
    arr, qs, st, fin = ns("arrival_ts"), ns("queue_start"), ns("start_ts"), ns("finish_ts")
    for i, (when, max_new, total, valid, queue, inf, tpt) in enumerate(rows):
        t, v, q, n = dur_ns(total), dur_ns(valid), dur_ns(queue), dur_ns(inf)
        assert t == v + q + n
        assert dur_ns(tpt) == n // truth["output_tokens"][i]
        assert (t, v, q, n) == (fin[i] - arr[i], qs[i] - arr[i], st[i] - qs[i], fin[i] - st[i])
        assert int(max_new) == truth["max_tokens"][i]
        # the line is written when the request finishes (µs resolution)
        assert when == truth["finish_ts"][i].strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_tgi_json_variant_is_one_object_per_line(tmp_path):
    simulate("tgi", "incident", "2m", 5, tmp_path, variant="json", instances=2)
    lines = (tmp_path / "tgi-a.log").read_text(encoding="utf-8").splitlines()
    objs = [json.loads(line) for line in lines]
    ok = [o for o in objs if o.get("message") == "Success"]
    assert ok and all(list(o["span"]) == sorted(o["span"]) for o in ok)
    assert all(dur_ns(o["span"]["total_time"]) == sum(dur_ns(o["span"][k]) for k in
               ("validation_time", "queue_time", "inference_time")) for o in ok)
    assert any(o.get("fields", {}).get("message", "").startswith("Args {") for o in objs)
    assert any("Setting max batch total tokens to" in o.get("message", "") for o in objs)
    errs = [o for o in objs if o["level"] == "ERROR"]
    assert any(o.get("message", "").startswith("Request failed during generation: Server error: CUDA out of memory")
               for o in errs)


V0_STATS = re.compile(
    r"^INFO \d\d-\d\d \d\d:\d\d:\d\d metrics\.py:\d+\] Avg prompt throughput: \d+\.\d tokens/s, "
    r"Avg generation throughput: \d+\.\d tokens/s, Running: (\d+) reqs, Swapped: 0 reqs, Pending: (\d+) reqs, "
    r"GPU KV cache usage: (\d+\.\d)%, CPU KV cache usage: 0\.0%\.$"
)
V1_STATS = re.compile(
    r"^\(APIServer pid=1\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[loggers\.py:\d+\] Engine 000: Avg prompt throughput: "
    r"\d+\.\d tokens/s, Avg generation throughput: \d+\.\d tokens/s, Running: \d+ reqs, Waiting: \d+ reqs, "
    r"(?:Preemptions: [1-9]\d*, )?GPU KV cache usage: \d+\.\d%, Prefix cache hit rate: 0\.0%$"
)


def test_vllm_v0_lines(tmp_path):
    simulate("vllm", "kv-pressure", "6m", 5, tmp_path, max_log_len=40)
    text = (tmp_path / "vllm-a.log").read_text(encoding="utf-8")
    lines = text.splitlines()
    truth = pl.read_parquet(tmp_path / "truth_requests.parquet")
    stats = [V0_STATS.match(x) for x in lines if "metrics.py" in x]
    assert len(stats) > 40 and all(stats)
    assert max(int(m.group(2)) for m in stats) > 0
    assert max(float(m.group(3)) for m in stats) > 95.0
    assert "# GPU blocks: 2048, # CPU blocks: 2048" in text
    assert "'max_num_seqs'" not in text and "max_num_seqs=256" in text
    assert "Maximum concurrency for 8192 tokens per request: 4.00x" in text
    received = re.findall(r"Received request (chatcmpl-[0-9a-f]{32}): prompt: '(.*?)', params: SamplingParams\(", text)
    assert [r for r, _ in received] == truth.sort("queue_start")["request_id"].to_list()
    assert all(len(p.replace("\\n", "\n")) <= 40 for _, p in received)  # --max-log-len
    finished = re.findall(r"Finished request (\S+)\.", text)
    assert sorted(finished) == sorted(truth.filter(pl.col("status") == "ok")["request_id"].to_list())
    access = re.findall(r'INFO:     10\.0\.0\.\d+:\d+ - "POST /v1/chat/completions HTTP/1\.1" 200 OK', text)
    assert len(access) == len(finished)
    # only every 50th preemption is logged, with the cumulative count
    counts = [int(c) for c in re.findall(r"is preempted by PreemptionMode\.RECOMPUTE mode .* "
                                         r"total_num_cumulative_preemption=(\d+)$", text, re.M)]
    total = pl.read_parquet(tmp_path / "truth_state.parquet")["preemptions_cum"].max()
    assert counts == list(range(1, total + 1, 50))


def test_vllm_v1_lines_and_docker_timestamps(tmp_path):
    simulate("vllm", "spike", "4m", 5, tmp_path, variant="v1", docker_timestamps=True)
    lines = (tmp_path / "vllm-a.log").read_text(encoding="utf-8").splitlines()
    rx = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:(\d\d)\.\d{9}Z) (.*)$")
    parts = [rx.match(x) for x in lines]
    assert all(parts)
    body = [m.group(3) for m in parts]
    stats = [b for b in body if "loggers.py" in b]
    assert len(stats) >= 20 and all(V1_STATS.match(b) for b in stats)
    assert any("Preemptions:" in b for b in stats)
    # the header's second is the docker stamp's second
    for m in parts:
        hdr = re.search(r" \d\d-\d\d \d\d:\d\d:(\d\d) \[", m.group(3))
        if hdr:
            assert hdr.group(1) == m.group(2)
    text = "\n".join(body)
    assert "non-default args: {" in text and "'max_num_seqs': 256" in text
    assert "Chunked prefill is enabled with max_num_batched_tokens=8192." in text
    assert "GPU KV cache size: 65,536 tokens" in text
    assert "Finished request" not in text  # V1 never logs it
    access = r'^\(APIServer pid=1\) INFO:     10\.0\.0\.\d+:\d+ - "POST /v1/chat/completions HTTP/1\.1" 200 OK$'
    assert re.search(access, text, re.M)


TRITON_KEYS = [
    "Active Request Count", "Iteration Counter", "Max Request Count", "Runtime CPU Memory Usage",
    "Runtime GPU Memory Usage", "Runtime Pinned Memory Usage", "Timestamp", "Context Requests",
    "Generation Requests", "MicroBatch ID", "Paused Requests", "Scheduled Requests", "Total Context Tokens",
    "Free KV cache blocks", "Max KV cache blocks", "Tokens per KV cache block", "Used KV cache blocks",
]


def test_trtllm_triton_iteration_stats(tmp_path):
    simulate("trtllm", "spike", "3m", 5, tmp_path)
    text = (tmp_path / "trtllm-a.log").read_text(encoding="utf-8")
    rx = re.compile(r"^I(\d{4}) (\d\d:\d\d:\d\d\.\d{6}) \d+ model_instance_state\.cc:\d+\] (\{.*\})$", re.M)
    stats = [json.loads(m.group(3)) for m in rx.finditer(text)]
    assert 100 < len(stats) <= 180  # one per second while busy
    assert all(list(s) == TRITON_KEYS for s in stats)
    assert all(s["Used KV cache blocks"] + s["Free KV cache blocks"] == s["Max KV cache blocks"] == 1536 for s in stats)
    assert all(s["Context Requests"] + s["Generation Requests"] == s["Scheduled Requests"] for s in stats)
    assert max(s["Active Request Count"] - s["Scheduled Requests"] for s in stats) > 10  # the spike queues
    assert all(s["Active Request Count"] <= s["Max Request Count"] for s in stats)
    assert all(re.fullmatch(r"\d\d-\d\d-2026 \d\d:\d\d:\d\d", s["Timestamp"]) for s in stats)
    for line in ("[TensorRT-LLM][INFO] TRTGptModel maxNumSequences: 256",
                 "[TensorRT-LLM][INFO] TRTGptModel maxNumTokens: 8192",
                 "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 1536",
                 "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 12.00 GiB for max tokens in paged KV cache (98304).",
                 "[TensorRT-LLM][INFO] Loaded engine size: 15323 MiB"):
        assert line in text


def test_trtllm_executor_stats_every_iteration(tmp_path):
    simulate("trtllm", "steady", "1m", 5, tmp_path, variant="executor", stats_period=0)
    lines = (tmp_path / "trtllm-a.log").read_text(encoding="utf-8").splitlines()
    stats = [json.loads(x) for x in lines if x.startswith('{"cpuMemUsage"')]
    assert all(list(s) == sorted(s) for s in stats)
    state = pl.read_parquet(tmp_path / "truth_state.parquet").filter(pl.col("iteration") >= 0)
    assert [s["iter"] for s in stats] == state["iteration"].to_list()
    waiting = state["waiting"].to_list()
    assert [s["numActiveRequests"] + s["numQueuedRequests"] - s["inflightBatchingStats"]["numScheduledRequests"]
            for s in stats] == waiting
    assert [s["inflightBatchingStats"]["numScheduledRequests"] for s in stats] == state["running"].to_list()
    assert all(s["numActiveRequests"] <= s["maxNumActiveRequests"] for s in stats)
    assert [s["kvCacheStats"]["usedNumBlocks"] for s in stats] == state["kv_blocks_used"].to_list()
    n_ok = pl.read_parquet(tmp_path / "truth_requests.parquet").filter(pl.col("status") == "ok").height
    assert sum('"POST /v1/chat/completions HTTP/1.1" 200 OK' in x for x in lines) == n_ok


def test_cli_writes_and_reports(tmp_path):
    from servelens.pipeline.cli.app import app, build_app

    build_app()
    runner = CliRunner()
    res = runner.invoke(app, ["simulate", "--engine", "tgi", "--scenario", "steady", "--duration", "30s",
                              "--seed", "3", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "tgi text steady: 1 instance(s)" in res.output and "MB/s" in res.output
    assert (tmp_path / "tgi-a.log").exists() and (tmp_path / "truth_state.parquet").exists()
    help_ = runner.invoke(app, ["simulate", "--help"])
    assert help_.exit_code == 0 and "Example:" in help_.output
    for args, msg in ((["--engine", "foo"], "unknown engine 'foo'"),
                      (["--engine", "vllm", "--duration", "5x"], "bad duration"),
                      (["--engine", "vllm", "--scenario", "chaos"], "unknown scenario")):
        bad = runner.invoke(app, ["simulate", *args, "--out", str(tmp_path / "x")])
        assert bad.exit_code == 1
        assert msg in bad.output and "Traceback" not in bad.output
        assert not (tmp_path / "x").exists()
