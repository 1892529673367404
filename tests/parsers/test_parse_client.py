"""The client parser (engine `client`): benchmark clients' per-request results files, read as
their sources write them (vLLM benchmarks/serve.py, AIPerf profile_export.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from servelens.parsers import client, detect_engine
from servelens.parsers.base import check_events, uncovered_lines
from servelens.parsers.text import parse_text

SAMPLES = Path(__file__).resolve().parents[2] / "sample_logs" / "client"


def _attrs(ev: pl.DataFrame) -> list[dict]:
    return [json.loads(a) if a else {} for a in ev["attrs"]]


def test_vllm_bench_results_become_one_event_per_request() -> None:
    text = (SAMPLES / "vllm-bench-results.json").read_text()
    assert detect_engine(text.splitlines())[0] == "client"
    ev = parse_text("client", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, 1) == [] and ev.height == 5 and set(ev["event"]) == {"client_request"}
    assert ev["ttft_s"].to_list() == [0.212, 0.305, 1.874, 2.406, None]
    # e2e = ttft + the inter-token latencies; tpot = the decode part per token after the first
    assert ev["e2e_s"][0] == pytest.approx(0.212 + 63 * 0.031)
    assert ev["tpot_s"][0] == pytest.approx(63 * 0.031 / 63)
    a = _attrs(ev)
    assert [x["index"] for x in a] == [0, 1, 2, 3, 4] and a[2]["itl_s"] == pytest.approx(0.052)
    assert [x["success"] for x in a] == [True, True, True, True, False]
    assert ev["message"][4].startswith("Traceback") and ev["output_tokens"][4] is None
    # `date` is when the last answer came (request 3: start 5212.902 + 5.493 s), 7.391 s
    # after the first request's start (`duration` also holds the run's gap before it)
    assert ev["ts"][0].isoformat() == "2026-05-12T08:01:22.609000+00:00"
    assert (ev["ts"][3] - ev["ts"][0]).total_seconds() == pytest.approx(1.898)
    assert ev["request_id"].null_count() == 5 and ev["model"][0] == "tiny-llama"


def test_aiperf_records() -> None:
    text = (SAMPLES / "profile_export.jsonl").read_text()
    assert detect_engine(text.splitlines()[:5])[0] == "client"
    ev = parse_text("client", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, 4) == []
    assert ev["request_id"][0] == "7609a2e7-aa53-4ab1-98f4-f35ecafe0000"
    assert ev["ttft_s"][:3].to_list() == pytest.approx([0.2559, 0.3012, 1.8744])
    assert ev["e2e_s"][0] == pytest.approx(0.5975) and ev["output_tokens"][0] == 64
    assert ev["ts"][1].isoformat() == "2026-05-12T08:00:00.500000+00:00"
    failed = ev.row(3, named=True)
    assert (failed["http_status"], failed["message"], failed["ttft_s"]) == (499, "Request was cancelled after 0.000 seconds", None)
    assert _attrs(ev)[3]["error_type"] == "RequestCancellationError"


def test_other_json_is_kept_unparsed() -> None:
    assert client.detect(['{"level": "info", "msg": "hello"}']) == 0.0
    assert client.detect(["INFO 05-12 08:00:00 [loggers.py:1] x"]) == 0.0
    # a results file saved without --save-detailed has no per-request lists: kept whole
    ev = parse_text("client", json.dumps({"date": "20260512-080000", "model_id": "m", "num_prompts": 3, "duration": 1.0}) + "\n")
    assert ev["event"].to_list() == ["unparsed"]
    ev = parse_text("client", '{"metadata": {"x_request_id": "a", "request_start_ns": 1}, "metrics": \n')
    check_events(ev)
    assert "unparsed" in ev["event"].to_list() and uncovered_lines(ev, 1, 1) == []


def test_guidellm_report_requests() -> None:
    text = (SAMPLES / "guidellm-benchmarks.json").read_text()
    # the report opens with `{"metadata": {` like an AIPerf record: its `benchmarks` tell it apart
    assert detect_engine(text.splitlines())[0] == "client"
    ev = parse_text("client", text)
    check_events(ev)
    assert uncovered_lines(ev, 1, 1) == [] and ev.height == 3 and set(ev["event"]) == {"client_request"}
    # the server's id (`response_id`) when GuideLLM has it, its own request id otherwise
    assert ev["request_id"].to_list() == [
        "chatcmpl-5b0e6f3aa1d24c1f8f9d2e6c7b1a0c11", "chatcmpl-9d1c2b3a4e5f40718293a4b5c6d7e8f9",
        "3f1c9a52-0b7d-4c1e-9a55-000000000002",
    ]
    assert ev["ttft_s"].to_list()[:2] == pytest.approx([0.25, 1.5]) and ev["ttft_s"][2] is None
    assert ev["e2e_s"].to_list()[:2] == pytest.approx([2.25, 4.0]) and ev["e2e_s"][2] is None
    assert ev["tpot_s"][0] == pytest.approx((2.25 - 0.25) / 63)
    # request_start is epoch seconds: exact wall-clock placement
    assert ev["ts"][1].isoformat() == "2026-05-12T08:00:01.250000+00:00"
    a = _attrs(ev)
    assert [x["client"] for x in a] == ["guidellm"] * 3 and [x["success"] for x in a] == [True, True, False]
    assert a[0]["itl_s"] == pytest.approx((2.25 - 0.001 - 0.25) / 63)
    assert ev["message"][2].startswith("HTTPStatusError") and a[2]["error_type"] == "errored"


def test_guidellm_report_of_the_older_schema() -> None:
    # guidellm <= 0.3: flat start_time / first_token_time / end_time (epoch s) per request
    req = {"type_": "generative_text_response", "request_id": "r-1", "request_type": "chat_completions",
           "prompt_tokens": 10, "output_tokens": 5, "start_time": 1778572800.0, "end_time": 1778572801.0,
           "first_token_time": 1778572800.2, "last_token_time": 1778572800.999}
    err = dict(req, type_="generative_text_error", request_id="r-2", error="timeout", first_token_time=None,
               output_tokens=0)
    doc = {"benchmarks": [{"type_": "generative_benchmark", "requests": {"successful": [req], "incomplete": [err], "errored": []}}]}
    text = json.dumps(doc)
    assert detect_engine([text])[0] == "client"
    ev = parse_text("client", text + "\n")
    assert ev["request_id"].to_list() == ["r-1", "r-2"]
    assert ev["ttft_s"][0] == pytest.approx(0.2) and ev["e2e_s"][0] == pytest.approx(1.0)
    assert ev["e2e_s"][1] is None and ev["message"][1] == "timeout"
    assert _attrs(ev)[1]["error_type"] == "incomplete"
