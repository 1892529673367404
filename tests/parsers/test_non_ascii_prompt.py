"""A prompt of characters of several bytes (Chinese, emoji) before vLLM's `SamplingParams(...)`
repr: the repr is cut where it starts, not that many bytes or characters away (`str.find`
counts bytes before polars 2.2, characters from it). Expected fields written from the line
itself."""

from __future__ import annotations

import json

import pytest

import polars as pl

from servelens.parsers.base import find_len, find_slice
from servelens.parsers.text import parse_text

REPR = ("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.5, repetition_penalty=1.0, "
        "temperature=0.7, top_p=0.9, top_k=-1, min_p=0.0, seed=42, stop=['。'], stop_token_ids=[], "
        "include_stop_str_in_output=False, ignore_eos=False, max_tokens=256, min_tokens=0, logprobs=None, "
        "skip_special_tokens=True)")
EXPECTED = {"n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.5, "repetition_penalty": 1.0,
            "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.0, "include_stop_str_in_output": False,
            "ignore_eos": False, "min_tokens": 0, "skip_special_tokens": True}


@pytest.mark.parametrize("prompt", ["plain ascii", "你好，世界。请解释一下量子计算的基本原理。", "🙂" * 40, "naïve café"],
                         ids=["ascii", "chinese", "emoji", "accents"])
def test_sampling_params_behind_any_prompt(prompt):
    line = (f"INFO 05-12 08:00:01 [logger.py:39] Received request chatcmpl-a1: prompt: '{prompt}', "
            f"params: {REPR}, prompt_token_ids: None, lora_request: None, prompt_adapter_request: None.")
    ev = parse_text("vllm", line + "\n", year=2026)
    row = ev.filter(ev["request_id"] == "chatcmpl-a1").row(0, named=True)
    assert json.loads(row["sampling_params"]) == EXPECTED
    assert row["max_tokens"] == 256 and json.loads(row["attrs"])["param_seed"] == "42"


@pytest.mark.parametrize("head", ["ab", "你好", "🙂🙂", "naïve"])
def test_slices_land_where_find_points_whatever_it_counts(head):
    s = pl.DataFrame({"t": [f"{head}: tail"]})
    at = pl.col("t").str.find(": ", literal=True)
    row = s.select(
        find_slice(pl.col("t"), 0, at).alias("head"), find_slice(pl.col("t"), at + 2).alias("tail"),
        find_slice(pl.col("t"), at + 2, find_len(pl.col("t")) - at - 3, binary=True).alias("bytes"),
    ).row(0)
    assert row == (head, "tail", b"tai")
