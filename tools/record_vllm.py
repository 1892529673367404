"""Record a real vLLM server under load: its log verbatim, its /metrics as truth, and the
benchmark client's per-request results.

What a run does, in order:

1. builds the tiny random-weight model (tools/tiny_model.py) if `--model` does not exist;
2. starts `vllm serve` (through tools/vllm_shim.py, on 127.0.0.1) with request and output
   logging, the stats line every `--stats-interval` seconds, and `--max-num-seqs` small so
   the queue builds; stdout and stderr go to `server.log` unchanged;
3. scrapes `/metrics` once a second into `metrics.csv` (time, waiting, running, KV cache
   usage, finished / aborted counters): what the server itself knew, the truth the log's
   series are checked against; with `--raw-metrics` also each scrape whole, in
   `metrics.prom.gz`;
4. runs `vllm bench serve` (random dataset, `--ignore-eos`, Poisson arrivals,
   `--save-result --save-detailed`, chat endpoint so output logging reaches it) for a
   low-load phase and then an overload phase (`bench-low.json`, `bench-over.json`);
5. during the overload phase, sends a few streaming requests that hang up after a few
   chunks (the server aborts them) and a few non-streaming requests (`extra_clients.csv`);
6. sends SIGTERM to the server, waits for it to stop, and writes `run.json` (what was run,
   the load average before and after, and a wall-clock/monotonic pair that places the
   bench client's `start_times`, which are `time.perf_counter()` values, on the epoch).

CPU isolation (`--pin ENGINE_CPU,API_CPU`): on a machine whose few cores are shared, the
API server's single asyncio loop (HTTP, chat template, tokenizing, `Received request`,
detokenizing, output logging) can be starved, and then it logs requests late. vLLM 0.32's
CPU backend binds the worker's OpenMP threads (`VLLM_CPU_OMP_THREADS_BIND`, default `auto`:
one core for the worker, the rest reserved for the engine core process, which busy-polls the
worker's queue) but leaves the API server wherever the kernel puts it. With `--pin` the
worker's OpenMP threads are bound to ENGINE_CPU (`VLLM_CPU_OMP_THREADS_BIND=ENGINE_CPU`, so
one OpenMP thread, and `OMP_NUM_THREADS=1` everywhere), and once the server is healthy every
thread of its engine core and worker processes is moved to ENGINE_CPU and every thread of
the API server to API_CPU (`sched_setaffinity`, as `taskset -a -p`); the bench client, the
extra clients and the /metrics scraper run on API_CPU too. Server and client run at
`--nice` (default -10, needs root) so other work on the machine does not starve them. The
affinities and niceness actually in force are read back from /proc into `run.json`.

It needs a Python environment with `vllm-cpu` (outside this repository; see
docs/vllm-v1.md, "Recording a real server"), never the test suite's. A run takes a few
minutes on two cores.

Examples:
    python3 tools/record_vllm.py --out /tmp/rec
    python3 tools/record_vllm.py --out /tmp/rec --low-rate 1 --low-prompts 30 \\
        --over-rate 12 --over-prompts 200 --max-num-seqs 4
    python3 tools/record_vllm.py --out /tmp/rec --no-log-outputs   # a default V1 log
    python3 tools/record_vllm.py --out /tmp/rec --pin 0,1           # engine on CPU 0, API server on CPU 1
    python3 tools/record_vllm.py --out /tmp/rec --no-log-requests --raw-metrics   # default log, whole scrapes
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import urllib.request

TOOLS = pathlib.Path(__file__).resolve().parent
# the /metrics series kept as truth (V1 names; the KV gauge was `gpu_cache_usage_perc` before)
GAUGES = {
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
}
COUNTERS = {
    "vllm:request_success_total": "finished_total",
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
}
CSV_FIELDS = ["ts", "waiting", "running", "kv_usage", *dict.fromkeys(COUNTERS.values())]


def fetch(port: int) -> str:
    """One /metrics scrape, as the server wrote it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def scrape(port: int) -> dict[str, float]:
    return truth(fetch(port))


def truth(text: str) -> dict[str, float]:
    """The series of GAUGES and COUNTERS of one scrape, summed over their labels."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        col = GAUGES.get(name) or COUNTERS.get(name)
        if col:
            out[col] = out.get(col, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


class Scraper(threading.Thread):
    """Scrapes /metrics every `every` seconds into the CSV of truth and, with `raw`, the whole
    text of each scrape into a gzip file, each scrape after a `# scrape at <epoch s>` line
    (what a `curl` loop beside a server leaves; `servelens ingest` reads it)."""

    def __init__(self, port: int, path: pathlib.Path, every: float = 1.0, raw: pathlib.Path | None = None):
        super().__init__(daemon=True)
        self.port, self.path, self.every, self.raw = port, path, every, raw
        self.stop = threading.Event()

    def run(self) -> None:
        import gzip

        raw = gzip.open(self.raw, "wt") if self.raw else None
        with self.path.open("w", newline="") as f:
            w = csv.DictWriter(f, CSV_FIELDS)
            w.writeheader()
            next_at = time.time()
            while not self.stop.is_set():
                ts = time.time()
                try:
                    text = fetch(self.port)
                except OSError:
                    text = None  # the server is going away; the gap shows in the file
                if text is not None and time.time() - ts > 0.5:
                    # answered late (a stalled API server): what it says is of the moment it
                    # answered, not of `ts`; the gap shows in the file
                    text = None
                if text is not None:
                    w.writerow({"ts": f"{ts:.3f}", **truth(text)})
                    f.flush()
                    if raw is not None:
                        raw.write(f"# scrape at {ts:.3f}\n{text}")
                next_at += self.every
                self.stop.wait(max(0.0, next_at - time.time()))
        if raw is not None:
            raw.close()


def chat_body(model: str, text: str, max_tokens: int, stream: bool, request_id: str) -> bytes:
    return json.dumps({
        "model": model, "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens, "stream": stream, "ignore_eos": True,
        "request_id": request_id,
    }).encode()


def disconnecting_client(port: int, model: str, rid: str, chunks: int, log: list) -> None:
    """Stream a long answer and hang up after `chunks` chunks (the server aborts it)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    conn.request("POST", "/v1/chat/completions", chat_body(model, "tell me everything " * 8, 400, True, rid),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    got = 0
    while got < chunks:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            got += 1
    conn.sock.close()  # hang up mid-stream, as a client that gave up would
    conn.close()
    log.append({"request_id": rid, "kind": "disconnect", "start": f"{t0:.3f}",
                "end": f"{time.time():.3f}", "chunks": got, "status": resp.status})


def non_streaming_client(port: int, model: str, rid: str, max_tokens: int, log: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    conn.request("POST", "/v1/chat/completions", chat_body(model, "a short answer please", max_tokens, False, rid),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = resp.read()
    tokens = None
    try:
        tokens = json.loads(body)["usage"]["completion_tokens"]
    except (ValueError, KeyError, TypeError):
        pass
    log.append({"request_id": rid, "kind": "non_streaming", "start": f"{t0:.3f}",
                "end": f"{time.time():.3f}", "chunks": tokens, "status": resp.status})


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: the server exited with code {proc.returncode} before it was ready; see server.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"error: the server was not healthy after {timeout:.0f} s; see server.log")


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (its children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def pin_process(pid: int, cpu: int) -> None:
    """Move every thread of `pid` to `cpu` (taskset -a -p)."""
    for t in (pathlib.Path("/proc") / str(pid) / "task").iterdir():
        try:
            os.sched_setaffinity(int(t.name), {cpu})
        except (ProcessLookupError, PermissionError):
            pass  # a thread that ended meanwhile


def process_facts(pid: int) -> dict:
    """What /proc says of a process: its name, the CPUs its threads may run on, its niceness
    and CPU seconds so far."""
    d = pathlib.Path("/proc") / str(pid)
    try:
        stat = (d / "stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        cpus = sorted({(t / "status").read_text().split("Cpus_allowed_list:", 1)[1].split()[0]
                       for t in (d / "task").iterdir()})
        return {"pid": pid, "name": (d / "comm").read_text().strip(), "threads": len(list((d / "task").iterdir())),
                "cpus": cpus, "nice": int(fields[16]),
                "cpu_s": round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)}
    except (OSError, IndexError, ValueError):
        return {"pid": pid, "gone": True}


def stall(pid: int, after: float, seconds: float, run: dict) -> None:
    """Stop the API server process for `seconds` (the engine core runs on); when, in `run`."""
    time.sleep(after)
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
    run["stall"] = {"pid": pid, "start": t0, "end": time.time()}


def loadavg() -> list[float]:
    return [float(x) for x in pathlib.Path("/proc/loadavg").read_text().split()[:3]]


def bench(a, out: pathlib.Path, name: str, rate: float, prompts: int, seed: int) -> list[str]:
    return [
        a.python, str(TOOLS / "vllm_shim.py"), "bench", "serve",
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", f"http://127.0.0.1:{a.port}", "--model", a.served_name,
        "--tokenizer", str(a.model), "--dataset-name", "random",
        "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
        "--ignore-eos", "--num-prompts", str(prompts), "--request-rate", str(rate),
        "--burstiness", "1.0", "--seed", str(seed), "--request-id-prefix", f"{name}-",
        "--save-result", "--save-detailed", "--result-dir", str(out),
        "--result-filename", f"bench-{name}.json", "--disable-tqdm",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__[__doc__.index("What a run does"):],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, required=True, help="directory for the recording")
    ap.add_argument("--python", default=os.environ.get("SERVELENS_VLLM_PYTHON", "python3"),
                    help="Python of the vllm-cpu environment (default: $SERVELENS_VLLM_PYTHON or python3)")
    ap.add_argument("--model", type=pathlib.Path,
                    default=pathlib.Path(os.environ.get("SERVELENS_VLLM_MODEL", "~/.cache/servelens/vllm-model")).expanduser(),
                    help="model directory, built by tools/tiny_model.py when missing "
                         "(default: $SERVELENS_VLLM_MODEL or ~/.cache/servelens/vllm-model)")
    ap.add_argument("--served-name", default="tiny-llama")
    ap.add_argument("--port", type=int, default=8417)
    ap.add_argument("--stats-interval", type=float, default=1.0, help="VLLM_LOG_STATS_INTERVAL (s)")
    ap.add_argument("--no-log-outputs", action="store_true", help="leave --enable-log-outputs off")
    ap.add_argument("--no-log-requests", action="store_true",
                    help="leave --enable-log-requests off too: vLLM V1's default log (stats lines only)")
    ap.add_argument("--raw-metrics", action="store_true",
                    help="also keep each /metrics scrape whole, in metrics.prom.gz (`# scrape at <epoch>` before each)")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between /metrics scrapes")
    ap.add_argument("--compile", action="store_true",
                    help="let vLLM compile the model (off: --enforce-eager; compiling on a CPU takes minutes)")
    ap.add_argument("--data-parallel-size", type=int, default=1,
                    help="engines behind the one API server (vLLM --data-parallel-size): one stats line each per period")
    ap.add_argument("--max-num-seqs", type=int, default=4)
    ap.add_argument("--kv-blocks", type=int, default=None,
                    help="--num-gpu-blocks-override: a small KV cache, so its usage means something")
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--low-rate", type=float, default=1.0)
    ap.add_argument("--low-prompts", type=int, default=30)
    ap.add_argument("--over-rate", type=float, default=12.0)
    ap.add_argument("--over-prompts", type=int, default=200)
    ap.add_argument("--after-prompts", type=int, default=0,
                    help="a second low-load phase after the overload (`bench-low2.json`, ids `low2-`), "
                         "at --low-rate: the server's recovery")
    ap.add_argument("--over-nofile", type=int, default=None,
                    help="cap the overload client's open files (prlimit --nofile): past that many open "
                         "connections its requests fail in the client and never reach the server")
    ap.add_argument("--stall-api", type=float, default=0.0, metavar="SECONDS",
                    help="stop the API server (SIGSTOP, then SIGCONT) for SECONDS, 3 s into the overload: "
                         "a front end starved of CPU; the kernel still accepts connections, which it logs late")
    ap.add_argument("--disconnects", type=int, default=3)
    ap.add_argument("--non-streaming", type=int, default=3)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--pin", metavar="ENGINE_CPU,API_CPU", default=None,
                    help="CPU isolation (see above): the engine core and its worker on ENGINE_CPU, the API server, "
                         "the clients and the scraper on API_CPU, all at --nice; e.g. --pin 0,1")
    ap.add_argument("--nice", type=int, default=-10,
                    help="with --pin: the niceness of the server and the clients (negative needs root)")
    a = ap.parse_args(argv)
    if not pathlib.Path(a.python).exists():
        ap.error(f"no Python at {a.python}; install vllm-cpu in a venv (docs/vllm-v1.md) and pass --python")
    pin = None
    if a.pin:
        try:
            pin = [int(x) for x in a.pin.split(",")]
        except ValueError:
            pin = []
        if len(pin) != 2 or pin[0] == pin[1] or not set(pin) <= os.sched_getaffinity(0):
            ap.error(f"--pin wants two different CPUs this process may use "
                     f"({sorted(os.sched_getaffinity(0))}), as ENGINE_CPU,API_CPU; got {a.pin!r}")
        if a.nice < 0 and os.geteuid() != 0:
            ap.error(f"--nice {a.nice} needs root; pass --nice 0")
    a.out.mkdir(parents=True, exist_ok=True)

    if not a.model.exists():
        subprocess.run([a.python, str(TOOLS / "tiny_model.py"), str(a.model)], check=True)

    env = dict(os.environ, VLLM_LOG_STATS_INTERVAL=str(a.stats_interval), VLLM_CPU_KVCACHE_SPACE="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_TARGET_DEVICE="cpu")
    serve = [a.python, str(TOOLS / "vllm_shim.py"), "serve", str(a.model), "--host", "127.0.0.1",
             "--port", str(a.port), "--served-model-name", a.served_name,
             "--max-model-len", str(a.max_model_len), "--max-num-seqs", str(a.max_num_seqs),
             "--seed", str(a.seed)]
    if not a.no_log_requests:
        serve.append("--enable-log-requests")
    if not a.no_log_outputs and not a.no_log_requests:
        serve.append("--enable-log-outputs")
    if not a.compile:
        serve.append("--enforce-eager")
    if a.kv_blocks:
        serve += ["--num-gpu-blocks-override", str(a.kv_blocks)]
    if a.data_parallel_size > 1:
        # one API server (0.32 defaults to one per engine, and then logs no stats lines)
        serve += ["--data-parallel-size", str(a.data_parallel_size), "--api-server-count", "1"]
    if pin:
        env.update(VLLM_CPU_OMP_THREADS_BIND=str(pin[0]), OMP_NUM_THREADS="1")
        # no taskset at launch: the worker binds its OpenMP thread to ENGINE_CPU itself
        # (OMP_PLACES), which libgomp only does inside the CPUs it was started with. The
        # niceness is this recorder's (set below), inherited.
    run = {"server": serve, "env": {k: env[k] for k in ("VLLM_LOG_STATS_INTERVAL", "VLLM_CPU_KVCACHE_SPACE",
                                                         "VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS") if k in env},
           "phases": [], "loadavg_start": loadavg(),
           # `vllm bench serve` writes time.perf_counter() as start_times: CLOCK_MONOTONIC, the
           # same clock in every process, so this pair puts them on the epoch
           "clock": {"time": time.time(), "perf_counter": time.perf_counter()}}
    if pin:
        run["pin"] = {"engine_cpu": pin[0], "api_cpu": pin[1], "nice": a.nice}
        os.setpriority(os.PRIO_PROCESS, 0, a.nice)  # inherited by the server and the clients
    # a SIGTERM to this recorder still stops the server and writes run.json
    signal.signal(signal.SIGTERM,
                  lambda *_: sys.exit(f"error: stopped by SIGTERM; the recording in {a.out} is partial"))
    log = (a.out / "server.log").open("wb")
    proc = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=env)
    if pin:  # after the server started with every CPU: the scraper and the extra clients
        os.sched_setaffinity(0, {pin[1]})
    scraper = Scraper(a.port, a.out / "metrics.csv", a.scrape_every,
                      a.out / "metrics.prom.gz" if a.raw_metrics else None)
    extra: list[dict] = []
    try:
        wait_healthy(a.port, proc, a.startup_timeout)
        if pin:
            # proc.pid is the API server, its descendants the engine core and its worker
            engine = descendants(proc.pid)
            pin_process(proc.pid, pin[1])
            for pid in engine:
                pin_process(pid, pin[0])
            run["pin"]["processes"] = [process_facts(p) for p in (proc.pid, *engine)]
        scraper.start()
        time.sleep(3)  # a few idle scrapes and stats lines first
        phases = [("low", a.low_rate, a.low_prompts), ("over", a.over_rate, a.over_prompts)]
        if a.after_prompts:
            phases.append(("low2", a.low_rate, a.after_prompts))
        for name, rate, prompts in phases:
            cmd = bench(a, a.out, name, rate, prompts, a.seed + len(run["phases"]))
            if name == "over" and a.over_nofile:
                cmd = ["prlimit", f"--nofile={a.over_nofile}", "--", *cmd]
            if pin:
                cmd = ["taskset", "-c", str(pin[1]), *cmd]
            t0 = time.time()
            b = subprocess.Popen(cmd, stdout=(a.out / f"bench-{name}.out").open("wb"), stderr=subprocess.STDOUT, env=env)
            threads = []
            if name == "over":
                # into the overload, so the queue is long when they come: the bench client
                # takes a while to start, so wait for its first requests to reach the server
                while b.poll() is None and (scrape(a.port).get("waiting") or 0) < 2 * a.max_num_seqs:
                    time.sleep(0.5)
                for i in range(a.disconnects):
                    threads.append(threading.Thread(target=disconnecting_client,
                                                    args=(a.port, a.served_name, f"disc-{i}", 3 + i, extra)))
                for i in range(a.non_streaming):
                    threads.append(threading.Thread(target=non_streaming_client,
                                                    args=(a.port, a.served_name, f"nostream-{i}", 16 + 8 * i, extra)))
                if a.stall_api > 0:
                    threads.append(threading.Thread(target=stall, args=(proc.pid, 3.0, a.stall_api, run)))
                for t in threads:
                    t.start()
                    time.sleep(0.5)
            rc = b.wait()
            for t in threads:
                t.join(timeout=300)
            run["phases"].append({"name": name, "rate": rate, "prompts": prompts, "start": t0,
                                  "end": time.time(), "bench": cmd, "rc": rc})
            if rc != 0:
                print(f"warning: bench phase {name} exited {rc}; see bench-{name}.out", file=sys.stderr)
            time.sleep(3)
    finally:
        run["loadavg_end"] = loadavg()
        if pin:  # CPU seconds each process used, and that the pinning held
            run["pin"]["processes_end"] = [process_facts(p) for p in (proc.pid, *descendants(proc.pid))]
        run["sigterm_at"] = time.time()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
        scraper.stop.set()
        scraper.join(timeout=10)
        log.close()
        run["server_rc"] = proc.returncode
        with (a.out / "extra_clients.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, ["request_id", "kind", "start", "end", "chunks", "status"])
            w.writeheader()
            w.writerows(extra)
        (a.out / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    print(f"recorded {a.out}: server.log, metrics.csv, bench-low.json, bench-over.json, extra_clients.csv, run.json")


if __name__ == "__main__":
    main()
