"""A task's lines read as that task's, on real lines users posted: the prompt size a
`new prompt` line gives, the task id on prompt-processing and timing lines, a cancel that
comes after the task's own release (finished), and one that comes before its end (aborted,
a warning even where the build printed no level letter). Expected values are the numbers
the lines print."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from tests.parsers.test_parse_llamacpp import attrs, parse

from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import run as query
from servelens.pipeline.store.manifest import committed_parts

HELDOUT = Path(__file__).parents[2] / "sample_logs" / "llamacpp" / "real" / "heldout"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "llamacpp"

# ik_llama.cpp, a 2026 build mixing 2024 `INFO [ func ] msg | k=v` records with tagged lines
# (ikawrakow/ik_llama.cpp pull 1716): the client stopped while the prompt was processed
IK_CANCEL = """\
INFO [    batch_pending_prompt] kv cache rm [p0, end) | tid="140550090498048" timestamp=1777705887 id_slot=0 id_task=4020 p0=44554
srv          stop: cancel task, id_task = 4020
INFO [      log_server_request] request | tid="140539676565504" timestamp=1777705892 remote_addr="127.0.0.1" remote_port=42548 status=200 method="POST" path="/v1/chat/completions" params={}
slot create_check: id  0 | task 4020 | created context checkpoint 11 of 12 (pos_min = 47625, pos_max = 47625, size = 186.694 MiB, took 32.67 ms)
INFO [    batch_pending_prompt] kv cache rm [p0, end) | tid="140550090498048" timestamp=1777705892 id_slot=0 id_task=4020 p0=47626
"""


def test_a_cancel_without_a_level_letter_is_a_warning_and_aborts_its_task():
    ev = parse(IK_CANCEL)
    cancel = ev.filter(pl.col("line") == 2).to_dicts()[0]
    assert (cancel["event"], cancel["level"], cancel["request_id"]) == ("request_aborted", "WARNING", "4020")
    # the task's other lines name it too; the access line names no task
    assert ev.filter(pl.col("line").is_in([1, 4, 5]))["request_id"].to_list() == ["4020"] * 3
    assert ev.filter(pl.col("line") == 3)["event"].to_list() == ["http_access"]
    # 2024 records keep their own unix time
    assert ev.filter(pl.col("line") == 1)["ts"].dt.epoch("s").to_list() == [1777705887]


def test_compose_task_whole_prompt_progress_and_a_late_cancel(tmp_path):
    """docker compose `[ocr] | ` lines: task 0's `new prompt, ... task.n_tokens = 1179`, its
    timing block (1179 prompt tokens, 2917 generated, 4096 in all), its release, and only
    then `cancel task, id_task = 0`: the task had finished."""
    ingest([HELDOUT / "b_compose_ocr.log"], tmp_path / "st", engine="llamacpp", rollups=False)
    ev = pl.read_parquet(committed_parts(tmp_path / "st")).sort("line")
    req = ev.filter(pl.col("event") == "request").to_dicts()
    assert [(r["request_id"], r["prompt_tokens"], r["output_tokens"]) for r in req] == [("0", 1179, 2917)]
    assert ev.filter(pl.col("event") == "request_finished")["request_id"].to_list() == ["0"]
    np_ = ev.filter(pl.col("message").str.contains("new prompt,", literal=True)).to_dicts()
    assert [(r["request_id"], r["prompt_tokens"]) for r in np_] == [("0", 1179)]
    progress = ev.filter(pl.col("message").str.contains("prompt processing progress", literal=True))
    assert progress.height > 0 and progress["request_id"].to_list() == ["0"] * progress.height
    cancel = ev.filter(pl.col("message").str.contains("cancel task, id_task = 0", literal=True)).to_dicts()
    assert len(cancel) == 1 and cancel[0]["level"] == "WARNING"
    # truncated = 1 on the release: the slot's context (4096) ran full
    rel = ev.filter(pl.col("event") == "request_finished").to_dicts()[0]
    assert attrs(rel)["truncated"] is True and attrs(rel)["n_tokens_used"] == 4095


def test_server_log_json_with_sorted_keys_is_read_at_ingest(tmp_path):
    """2024 `server_log` records as ollama's embedded server printed them, keys sorted
    (`{"function":..,"level":..,"line":..,"msg":..}`; a public walkthrough's paste): JSON
    records of the engine's own, not a JSON-lines formatter around it. One task: arrives at
    1714489663, 18 prompt tokens, 22 decoded, `t_total` 4831.581 ms, released."""
    ingest([FIXTURES / "server_log_sorted_keys.log"], tmp_path / "st", engine="llamacpp", rollups=False)
    ev = pl.read_parquet(committed_parts(tmp_path / "st")).sort("line")
    assert ev.height == 8 and ev["level"].to_list() == ["INFO"] * 8
    assert "unparsed" not in ev["event"].to_list()
    assert ev["ts"].dt.epoch("s").to_list() == [1714489663] * 3 + [1714489668] * 5
    req = query(tmp_path / "st", "select request_id, status, prompt_tokens, output_tokens, e2e_s, "
                "epoch(arrival_ts) as arrived from requests").to_dicts()
    assert req == [{"request_id": "6", "status": "finished", "prompt_tokens": 18, "output_tokens": 22,
                    "e2e_s": 4.831581, "arrived": 1714489663.0}]
