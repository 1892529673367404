"""`gcloud logging read`'s default output (parsers/wrappers/gcp_yaml.py): real engine lines
in the YAML gcloud prints (tests/fixtures/gcloud_yaml, written by tests/helpers/gen_gcloud_yaml.py
with a YAML emitter, newest first, strings folded at width 80 in every scalar style) give
the events of the server's own file, with the platform's time and the pod's labels."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import wrappers as W

from tests.helpers import wrapping as wr
from tests.parsers.test_wrappers_exports import SAME, in_time_order, parse, truth
from tests.helpers.wrapping_exports import POD

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gcloud_yaml"
CASES = {
    "vllm_v1_0_11": ("vllm", "sample_logs/vllm/real/v1_0_11.log"),
    "vllm_v1_0_11_jsonpayload": ("vllm", "sample_logs/vllm/real/v1_0_11.log"),
    "sglang_v0_4_2025": ("sglang", "sample_logs/sglang/real/v0_4_2025.log"),
    "llamacpp_era_b": ("llamacpp", "sample_logs/llamacpp/real/era_b_2024_startup_9928.log"),
    "tgi_launcher_traceback": ("tgi", "sample_logs/tgi/real/launcher_traceback.log"),
    "trtllm_backtraces": ("trtllm", "sample_logs/trtllm/real/backtraces.log"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gcloud_yaml_gives_the_servers_events_with_its_time_and_pod(name):
    engine, rel = CASES[name]
    lines, times, base = truth(rel, engine)
    text = (FIXTURES / f"{name}.yaml").read_text()
    layers, texts, ev = parse(engine, text)
    assert layers[0] == "gcp-logging-yaml"
    ev = in_time_order(ev)
    assert ev.select(SAME).equals(base.select(SAME))
    want = pl.Series([times[k - 1] for k in base["line"]], dtype=pl.Int64)
    assert ev["wrapper_ts"].cast(pl.Int64).equals(want, check_names=False)
    labels = ev["labels"].str.json_decode().struct.unnest()
    assert labels["pod"].unique().to_list() == [POD]
    assert labels["namespace"].unique().to_list() == ["serving"]
    assert labels["container"].unique().to_list() == ["server"]
    # every event points at the export's own lines: one document is 16-20 of them
    assert ev["line"].min() >= 1 and (ev["line"] + ev["n_lines"]).max() <= len(texts) + 1
    assert (ev["n_lines"] >= 16).all()


def test_gcloud_yaml_is_told_from_its_content_only():
    text = (FIXTURES / "tgi_launcher_traceback.yaml").read_text()
    assert W.detect(wr.split_lines(text)[:300])[0] == "gcp-logging-yaml"
    # a YAML file that is not a log export, and a plain log, are not taken for one
    other = "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: vllm-0\n"
    assert "gcp-logging-yaml" not in W.detect(wr.split_lines(other))
    lines = wr.split_lines((Path(__file__).resolve().parents[2] / "sample_logs/vllm/real/v1_0_11.log").read_text())
    assert "gcp-logging-yaml" not in W.detect(lines[:300])


def test_scalar_styles_are_read_as_yaml_reads_them():
    """Each style gcloud's emitter writes, with the string it stands for."""
    want = {
        "plain: a b": "INFO 01-01 00:00:00 a b",
        "single quoted, it's": "[2025-01-01 00:00:00] it's 'quoted': yes",
        "double quoted, trailing space": 'x: "y" \\ z\ttab ',
        "block": "Traceback (most recent call last):\n  File \"a.py\", line 1\nValueError: no",
    }
    docs = [
        "textPayload: INFO 01-01 00:00:00\n  a b\n",
        "textPayload: '[2025-01-01 00:00:00] it''s ''quoted'':\n  yes'\n",
        'textPayload: "x: \\"y\\" \\\\ z\\ttab\\\n  \\ "\n',
        "textPayload: |-\n  Traceback (most recent call last):\n    File \"a.py\", line 1\n  ValueError: no\n",
    ]
    text = ""
    for i, d in enumerate(docs):
        text += (f"---\ninsertId: {i:04d}\nlogName: projects/p/logs/stdout\n"
                 f"resource:\n  labels:\n    pod_name: p-{i}\n  type: k8s_container\n{d}"
                 f"timestamp: '2026-01-01T00:00:0{i}.000000001Z'\n")
    lines = wr.split_lines(text)
    dec = W.decode(pl.DataFrame({"line": pl.int_range(1, len(lines) + 1, eager=True), "text": lines}), ("gcp-logging-yaml",))
    assert dec["text"].to_list() == list(want.values())
    assert dec["_lab_pod"].to_list() == ["p-0", "p-1", "p-2", "p-3"]
    assert dec["_wts"].dt.nanosecond().to_list() == [1, 1, 1, 1]
