"""Format gaps of issue 16 found in real logs: TensorRT-LLM's PyTorch-backend start-up
summary as capacity; TGI's `--json-output` router and launcher shapes read the same bare
and inside a container runtime's JSON (JSON in JSON)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import wrapping as wr
from servelens.parsers.text import parse_text
from tests.parsers.test_wrappers import parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wrapped"


def test_trtllm_executor_summary_is_capacity():
    # tensorrt_llm/_torch/pyexecutor/py_executor_creator.py logs this at start-up
    ev = parse_text("trtllm", (
        "[04/28/2025-09:56:44] [TRT-LLM] [I] max_seq_len=131072, max_num_requests=2048, max_num_tokens=8192, max_batch_size=2048\n"
        "[04/28/2025-09:56:45] [TRT-LLM] [I] max_seq_len=4096, max_num_requests=64, max_num_tokens=None\n"
    ))
    assert ev.select("event", "max_num_seqs", "max_batch_tokens").rows() == [("capacity", 2048, 8192), ("capacity", 64, None)]
    assert ev["attrs"].str.json_path_match("$.max_seq_len").to_list() == ["131072", "4096"]


@pytest.mark.parametrize("wrap", [None, wr.to_docker_json, wr.to_cri])
def test_tgi_json_router_and_launcher_shapes(wrap):
    text = (FIXTURES / "tgi_json_shapes.log").read_text()
    if wrap is not None:
        text = wrap(wr.split_lines(text))
    layers, _, ev = parse("tgi", text)
    assert "jsonfmt" not in layers  # TGI's own JSON is the TGI parser's
    assert ev.select("event", "level").rows() == [("capacity", "INFO"), ("request", "INFO"), ("log", "INFO"), ("error", "ERROR")]
    assert ev["max_batch_tokens"][0] == 133696
    assert ev["e2e_s"][1] == pytest.approx(0.288108202)
    assert ev["tpot_s"][1] == pytest.approx(0.01432489)
    assert ev["message"].to_list()[2:] == ["Shard ready in 12.3s", "Shard 0 failed to start"]
    # TGI's own microsecond times stay the event times
    assert ev["ts"][1].isoformat() == "2024-03-09T05:09:01.123456+00:00"
