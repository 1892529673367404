"""Shapes of SGLang and llama.cpp lines as people paste and export them, each from a posted
log: a viewer's RFC 3339 time and a tab before each line, an access line whose `INFO:` the
paste dropped, llama-server's router lines printed without a level letter, and one log call
printed over several lines (the chat template's example, the sampler parameters). Expected
values are written from the lines and the engines' formats."""

from __future__ import annotations

import datetime as dt
import json

import polars as pl

from servelens.parsers import wrappers
from servelens.parsers.text import parse_text

UTC = dt.timezone.utc


def _attrs(row: dict) -> dict:
    return json.loads(row["attrs"] or "{}")


def _by_line(ev: pl.DataFrame) -> dict[int, dict]:
    return {r["line"]: r for r in reversed(ev.sort("line").to_dicts())}


# sgl-project/sglang#7639: a log viewer's time (+08:00) and a tab, the traceback's frames
# printed before their header (newest first)
TAB_FRAMES = """\
2025-07-01T00:57:53+08:00\t  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1645, in prepare_dp_attn_batch
2025-07-01T00:57:53+08:00\t    batch, _ = self.prepare_dp_attn_batch(batch)
2025-07-01T00:57:53+08:00\t  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/disaggregation/decode.py", line 592, in _prepare_idle_batch_and_run
2025-07-01T00:57:53+08:00\t    batch, result = self._prepare_idle_batch_and_run(
2025-07-01T00:57:53+08:00\t[2025-06-30 16:57:53 DP7 TP7] Scheduler hit an exception: Traceback (most recent call last):
"""


def test_rfc3339_time_and_tab_is_a_wrapper_whose_time_the_frames_take():
    sample = wrappers.head_sample(TAB_FRAMES.encode())
    assert wrappers.detect(sample) == ("docker-ts",)
    ev = _by_line(parse_text("sglang", TAB_FRAMES))
    viewer = dt.datetime(2025, 6, 30, 16, 57, 53, tzinfo=UTC)
    # the frames before any header are one record of their own, at the viewer's time
    assert ev[1]["n_lines"] == 4 and ev[1]["wrapper_ts"] == viewer and ev[1]["ts"] == viewer
    head = ev[5]
    assert head["event"] == "error" and head["level"] == "ERROR" and head["ts"] == viewer
    assert _attrs(head)["dp_rank"] == 7 and _attrs(head)["tp_rank"] == 7
    # the indentation of a frame is the engine's, not the wrapper's: only the tab went
    assert all(not r["message"] or not r["message"].startswith("\t") for r in ev.values())


# sgl-project/sglang#19712: messages pasted without SGLang's prefix and uvicorn's `INFO:`
BARE_ACCESS = """\
Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, token usage: 0.04, #running-req: 3, #queue-req: 0, input throughput (token/s): 8491.29, cuda graph: False
127.0.0.1:39394 - "POST /v1/chat/completions HTTP/1.1" 200 OK
"""


def test_access_line_without_its_level_word_is_read():
    ev = _by_line(parse_text("sglang", BARE_ACCESS))
    row = ev[2]
    assert row["event"] == "http_access" and row["http_status"] == 200
    a = _attrs(row)
    assert (a["method"], a["path"], a["client"]) == ("POST", "/v1/chat/completions", "127.0.0.1:39394")
    # uvicorn's access logger writes at INFO
    assert row["level"] == "INFO"
    assert ev[1]["event"] == "batch" and ev[1]["batch_tokens"] == 2048


def test_a_message_that_only_looks_like_access_is_not_one():
    # no port after the host: not uvicorn's client field
    ev = _by_line(parse_text("sglang", 'client - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'))
    assert ev[1]["event"] != "http_access"


# ggml-org/llama.cpp#19493: the router's `load` lines, printed without a level letter
ROUTER_LOAD = """\
srv          load: spawning server instance with name=qwen3.5-397b-ud-q4-k-xl:thinking-coding-vision on port 53279
srv          load: spawning server instance with args:
srv          load:   /home/drros/llama.cpp/build/bin/llama-server
srv          load:   --draft-max
srv  params_from_: Chat format: peg-native
"""


def test_router_load_lines_without_a_level_letter_are_info():
    ev = _by_line(parse_text("llamacpp", ROUTER_LOAD))
    # server-models prints these with SRV_INF
    assert [ev[n]["level"] for n in (1, 2, 3, 4)] == ["INFO"] * 4
    # a line the format leaves without a level, from another function, stays without one
    assert ev[5]["level"] is None


# ggml-org/llama.cpp#25121: the chat template's example printed by one log call
TEMPLATE = """\
0.08.500.814 I srv          init: idle slots will be saved to prompt cache and cleared upon starting a new task
0.08.515.111 I srv          init: init: chat template, example_format: '<|im_start|>system
You are a helpful assistant<|im_end|>
<|im_start|>user
Hello<|im_end|>
<|im_start|>assistant
Hi there<|im_end|>
<|im_start|>user
How are you?<|im_end|>
<|im_start|>assistant
<think>
'
0.08.526.730 I srv          init: init: chat template, thinking = 1
0.08.526.747 I srv  llama_server: model loaded
"""

# ollama/ollama#18123: llama-server without timestamps, `sampler params: \n%s`
SAMPLER = """\
slot launch_slot_: id  0 | task -1 | sampler params: 
        repeat_last_n = 64, repeat_penalty = 1.100, frequency_penalty = 0.000, presence_penalty = 0.000
        dry_multiplier = 0.000, dry_base = 1.750, dry_allowed_length = 2, dry_penalty_last_n = 64
        top_k = 64, top_p = 0.950, min_p = 0.000, xtc_probability = 0.000, xtc_threshold = 0.100, typical_p = 1.000, top_n_sigma = -1.000, temp = 1.000
        mirostat = 0, mirostat_lr = 0.100, mirostat_ent = 5.000, adaptive_target = -1.000, adaptive_decay = 0.900
slot launch_slot_: id  0 | task 0 | processing task, is_child = 0
"""

# a router forwards its child's output a line at a time under the child's port: each one
# is a log call of the router's own
ROUTER_CHILD = """\
[42751] 107.53.530.578 I slot launch_slot_: id  0 | task -1 | sampler params: 
[42751]         repeat_last_n = 0, repeat_penalty = 1.000, frequency_penalty = 0.000, presence_penalty = 0.000
[42751] 107.53.530.600 I slot launch_slot_: id  0 | task 7 | processing task, is_child = 0
"""


def test_chat_template_example_over_several_lines_is_one_record():
    ev = parse_text("llamacpp", TEMPLATE).sort("line")
    assert ev["line"].to_list() == [1, 2, 13, 14]
    assert ev["n_lines"].to_list() == [1, 11, 1, 1]
    assert set(ev["event"].to_list()) == {"log"} and set(ev["level"].to_list()) == {"INFO"}


def test_sampler_params_over_several_lines_is_one_record():
    ev = _by_line(parse_text("llamacpp", SAMPLER))
    assert sorted(ev) == [1, 6]
    assert ev[1]["n_lines"] == 5 and _attrs(ev[1])["slot"] == 0
    assert ev[6]["event"] == "request_arrived" and ev[6]["request_id"] == "0"


def test_router_child_lines_stay_lines_of_their_own():
    ev = _by_line(parse_text("llamacpp", ROUTER_CHILD))
    assert sorted(ev) == [1, 2, 3]
    assert ev[3]["event"] == "request_arrived"


# sgl-project/sglang#13023: `logger.info("\nBenchmark...")` between prefill batches
NEWLINE_FIRST = """\
[2025-11-11 04:27:59] Prefill batch, #new-seq: 13, #new-token: 3341, #cached-token: 0, token usage: 0.00, #running-req: 3, #queue-req: 0, 
[2025-11-11 04:28:01] 
Benchmark...
[2025-11-11 04:28:01] Prefill batch, #new-seq: 4, #new-token: 895, #cached-token: 4, token usage: 0.00, #running-req: 0, #queue-req: 0, 
"""


def test_a_message_opening_with_a_newline_is_one_record():
    ev = _by_line(parse_text("sglang", NEWLINE_FIRST))
    assert sorted(ev) == [1, 2, 4]
    assert ev[2]["n_lines"] == 2 and ev[2]["event"] == "log"
    assert ev[2]["ts"] == dt.datetime(2025, 11, 11, 4, 28, 1, tzinfo=UTC)
    assert ev[4]["event"] == "batch" and ev[4]["batch_size"] == 4


# ggml-org/llama.cpp#5104: the January 2024 server's plain slot lines
EARLY_SLOT = """\
slot 0 is processing [task id: 0]
slot 0 : in cache: 0 tokens | to process: 492 tokens
slot 0 : kv cache rm - [0, end)
"""


def test_early_2024_kv_cache_line_gives_the_cached_tokens():
    ev = _by_line(parse_text("llamacpp", EARLY_SLOT))
    assert ev[1]["event"] == "request_arrived" and ev[1]["request_id"] == "0"
    assert _attrs(ev[3])["slot"] == 0 and _attrs(ev[3])["cached_tokens"] == 0
