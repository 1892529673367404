"""A log one of whose lines quotes a platform's JSON record (a user's prompt holding a log
entry, logged by vLLM's `Received request`) is read as the log it is: detection finds no
export around it. An export is a file whose lines are its entries, or a pretty-printed
document; one line holding JSON makes neither. Likewise inside an export: one entry cut
short, left as its raw JSON among the engine lines, adds no second export layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelens.parsers import wrappers as W

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "sample_logs/vllm/real/v1_0_11.log"

# one record of each platform, as someone would paste it into a prompt
RECORDS = {
    "cloudwatch": {"timestamp": 1781101425123, "message": "INFO ready", "ingestionTime": 1781101425500, "eventId": "1"},
    "gcp": {"textPayload": "INFO ready", "insertId": "abc", "timestamp": "2026-06-10T14:23:45Z", "logName": "projects/p/logs/stdout"},
    "elastic": {"@timestamp": "2026-06-10T14:23:45Z", "message": "INFO ready", "host": {"name": "n1"}, "kubernetes": {"pod": {"name": "p"}}},
    "datadog": {"type": "log", "attributes": {"message": "INFO ready", "service": "vllm"}, "id": "AQ"},
    "loki": {"status": "success", "data": {"resultType": "streams", "result": [{"stream": {"pod": "p"}, "values": [["1781101425123456789", "INFO ready"]]}]}},
}


def _with_prompt(lines: list[str], record: dict) -> list[str]:
    prompt = json.dumps(record)
    line = (f"(APIServer pid=1) INFO 01-23 15:50:01 [logger.py:43] Received request cmpl-quoted-0: prompt: '{prompt}', "
            "params: SamplingParams(n=1, temperature=0.7, max_tokens=16), prompt_token_ids: [1, 2, 3], lora_request: None.")
    return lines[:40] + [line] + lines[40:]


@pytest.mark.parametrize("platform", sorted(RECORDS))
def test_a_prompt_quoting_a_platform_record_leaves_the_log_as_it_is(platform):
    lines = REAL.read_text().splitlines()[:200]
    plain = W.detect(lines)
    assert W.detect(_with_prompt(lines, RECORDS[platform])) == plain


def test_one_entry_cut_short_inside_an_export_adds_no_layer():
    engine = [ln for ln in REAL.read_text().splitlines() if " INFO " in ln][:50]
    docs = [json.dumps({"@timestamp": f"2026-01-23T15:48:{i % 60:02d}.000Z", "message": ln,
                        "kubernetes": {"pod": {"name": "vllm-0"}}, "host": {"name": "n1"}}) for i, ln in enumerate(engine)]
    docs[2] = docs[2][:60]
    assert W.detect(docs) == ("elastic",)
