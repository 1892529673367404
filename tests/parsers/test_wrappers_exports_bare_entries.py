"""An export entry that holds no engine line (a Loki pair without its line, an Elasticsearch
hit whose document has no `message`, a Cloud Logging entry whose `textPayload` is null) is
kept: one `unparsed` row holding the entry's own JSON, at the entry's time, beside the engine
lines of the other entries, in every form the platform writes it (one line, indented)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from servelens.pipeline.ingest import ingest

from tests.helpers.common import events

STATS = ("INFO 06-10 14:23:{s:02d} engine.py:100] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
         "Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 1.0%, CPU KV cache usage: 0.0%.")
T0 = 1781101380  # 2026-06-10 14:23:00 UTC


def _loki(indent: int | None) -> str:
    values = []
    for i in range(20):
        ns = str((T0 + i) * 10**9)
        # every fifth pair without its line: a one-member pair, then a line of null
        values.append([ns, STATS.format(s=i)] if i % 5 != 2 else ([ns] if i < 10 else [ns, None]))
    body = {"status": "success", "data": {"resultType": "streams", "result": [{"stream": {"pod": "vllm-0"}, "values": values[::-1]}]}}
    return json.dumps(body, indent=indent)


def _elastic(indent: int | None) -> str:
    hits = []
    for i in range(20):
        doc = {"@timestamp": f"2026-06-10T14:23:{i:02d}.000Z", "kubernetes": {"pod": {"name": "vllm-0"}}, "host": {"name": "n1"}}
        if i % 5 != 2:
            doc["message"] = STATS.format(s=i)
        hits.append({"_index": "logs", "_id": str(i), "_source": doc})
    return json.dumps({"took": 1, "hits": {"total": {"value": 20}, "hits": hits[::-1]}}, indent=indent)


def _bare_entries(tmp_path, name: str, text: str) -> pl.DataFrame:
    """The unparsed rows of `text` ingested as `name`, in time order, after checking that
    the other 16 entries are the stats lines and the bare ones the four at 2, 7, 12, 17 s."""
    path = tmp_path / name
    path.write_text(text)
    ingest([path], tmp_path / "store", rollups=False)
    ev = events(tmp_path / "store").sort("wrapper_ts")
    assert ev.height == 20
    assert ev["event"].value_counts().sort("event").rows() == [("engine_stats", 16), ("unparsed", 4)]
    bare = ev.filter(pl.col("event") == "unparsed")
    assert [t.second for t in bare["wrapper_ts"].to_list()] == [2, 7, 12, 17]
    return bare


@pytest.mark.parametrize("indent", [None, 2], ids=["one line", "indented"])
def test_loki_pairs_without_their_line_are_kept(tmp_path, indent):
    bare = _bare_entries(tmp_path, "loki.json", _loki(indent))
    assert bare["message"].to_list() == [f'["{(T0 + 2) * 10**9}"]', f'["{(T0 + 7) * 10**9}"]',
                                         f'["{(T0 + 12) * 10**9}",null]', f'["{(T0 + 17) * 10**9}",null]']


def test_elasticsearch_hits_without_a_message_are_kept(tmp_path):
    bare = _bare_entries(tmp_path, "search.json", _elastic(None))
    assert all('"kubernetes"' in m and '"message":null' in m for m in bare["message"].to_list())


def test_cloud_logging_entries_with_a_null_text_payload_are_kept(tmp_path):
    from tests.helpers.wrapping_exports import gcloud_json, gcp_entry

    entries = [gcp_entry(STATS.format(s=i), (T0 + i) * 10**9, i=i) for i in range(20)]
    for i in (2, 7, 12, 17):
        entries[i]["textPayload"] = None
    bare = _bare_entries(tmp_path, "gcloud.json", gcloud_json(entries))
    assert all('"textPayload": null' in m and '"insertId"' in m for m in bare["message"].to_list())
