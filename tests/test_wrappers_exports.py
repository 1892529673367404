"""Log-platform exports (parsers/wrappers/gcp.py, _export.py): real engine lines handed back
inside a platform's documented export shape give the events of the server's own file, with
the platform's time and instance labels, newest-first exports included."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import get_parser
from servelens.parsers import wrappers as W
from servelens.parsers.base import ParseContext, lines_frame, parse_lines, parse_text

import wrapping as wr

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [
    ("vllm", "sample_logs/vllm/real/v1_0_11.log"),
    ("vllm", "sample_logs/incident/vllm/vllm-b.log"),
    ("sglang", "sample_logs/sglang/real/startup_and_crash.log"),
    ("sglang", "sample_logs/sglang/real/v0_4_2025.log"),
    ("llamacpp", "sample_logs/llamacpp/real/era_b_2024_startup_9928.log"),
    ("tgi", "sample_logs/tgi/real/launcher_traceback.log"),
    ("trtllm", "sample_logs/trtllm/real/backtraces.log"),
]
# what an event says apart from its time and where it sits in the file
SAME = ["event", "level", "request_id", "model", "prompt_tokens", "output_tokens",
        "e2e_s", "running", "waiting", "kv_usage", "max_num_seqs", "http_status", "message"]


def gcp_entry(line: str, ns: int, pod: str = "vllm-7d9f8-abcde", i: int = 0) -> dict:
    """A LogEntry as Cloud Logging returns a GKE container's stdout line (keys sorted, as
    gcloud prints them)."""
    return {
        "insertId": f"{i:08x}abcdef",
        "labels": {"compute.googleapis.com/resource_name": "gke-c1-pool-1-node", "k8s-pod/app": "llm"},
        "logName": "projects/proj/logs/stdout",
        "receiveTimestamp": wr.rfc3339_ns(ns + 412_000_000),
        "resource": {"labels": {"cluster_name": "c1", "container_name": "server", "location": "us-central1",
                                "namespace_name": "serving", "pod_name": pod, "project_id": "proj"},
                     "type": "k8s_container"},
        "severity": "ERROR" if "ERROR" in line else "INFO",
        "textPayload": line + "\n",
        "timestamp": wr.rfc3339_ns(ns),
    }


def gcloud_json(entries: list[dict]) -> str:
    """`gcloud logging read --format=json`: newest first, an indented array."""
    return json.dumps(entries[::-1], indent=2, sort_keys=True) + "\n"


def ndjson(entries: list[dict]) -> str:
    return "".join(json.dumps(e) + "\n" for e in entries)


def parse(engine: str, text: str):
    texts = wr.split_lines(text)
    layers = W.detect(texts[:300])
    ctx = ParseContext(engine=engine, source="t.json", instance="t", year=2026)
    return layers, texts, parse_lines(W.wrap(get_parser(engine), layers), lines_frame(texts), ctx)


def truth(rel: str, engine: str):
    """The lines, a platform time per line (ns), and the events of the plain file. A
    platform stamps a stream's lines as they arrive: the times never go backwards."""
    lines = wr.split_lines((ROOT / rel).read_text())
    times = wr.line_times(lines, engine)
    for i in range(1, len(times)):
        times[i] = max(times[i], times[i - 1] + 1_000)
    return lines, times, parse_text(engine, "\n".join(lines) + "\n")


def in_time_order(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.sort("wrapper_ts", maintain_order=True)


@pytest.mark.parametrize("engine,rel", SAMPLES, ids=[Path(r).name for _, r in SAMPLES])
@pytest.mark.parametrize("shape", ["gcloud-newest-first", "ndjson"])
def test_gcp_export_gives_the_servers_events_with_its_time_and_pod(engine, rel, shape):
    lines, times, base = truth(rel, engine)
    entries = [gcp_entry(ln, t, i=i) for i, (ln, t) in enumerate(zip(lines, times))]
    text = gcloud_json(entries) if shape.startswith("gcloud") else ndjson(entries)
    layers, texts, ev = parse(engine, text)
    assert layers[0] == "gcp-logging"
    ev = in_time_order(ev)
    assert ev.select(SAME).equals(base.select(SAME))
    # the platform's nanosecond time of the event's first line on the server
    want = pl.Series([times[k - 1] for k in base["line"]], dtype=pl.Int64)
    assert ev["wrapper_ts"].cast(pl.Int64).equals(want, check_names=False)
    labels = ev["labels"].str.json_decode().struct.unnest()
    assert labels["pod"].unique().to_list() == ["vllm-7d9f8-abcde"]
    assert labels["namespace"].unique().to_list() == ["serving"]
    assert labels["container"].unique().to_list() == ["server"]
    # each event points at the export's own lines (a pretty-printed entry is 28 of them)
    assert ev["line"].min() >= 1 and (ev["line"] + ev["n_lines"]).max() <= len(texts) + 1
    if shape == "ndjson":
        assert ev["line"].equals(base["line"])


def test_jsonpayload_message_is_the_line():
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    entries = []
    for i, (ln, t) in enumerate(zip(lines, times)):
        e = gcp_entry(ln, t, i=i)
        del e["textPayload"]
        e["jsonPayload"] = {"message": ln, "stream": "stdout"}
        entries.append(e)
    _, _, ev = parse("vllm", gcloud_json(entries))
    assert in_time_order(ev).select(SAME).equals(base.select(SAME))


def test_a_two_pod_export_keeps_each_pods_records_apart():
    """Two servers' lines interleaved in one namespace export: each pod's tracebacks and
    requests stay whole, labelled with its pod."""
    a_lines, a_times, a_base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    b_lines, _, b_base = truth("sample_logs/vllm/real/v0_4.log", "vllm")
    # pod b's lines written at the same moments as pod a's, shifted by half a step
    b_times = [a_times[0] + i * wr.STEP_NS + wr.STEP_NS // 2 for i in range(len(b_lines))]
    ents = [(t, gcp_entry(ln, t, pod="vllm-a", i=i)) for i, (ln, t) in enumerate(zip(a_lines, a_times))]
    ents += [(t, gcp_entry(ln, t, pod="vllm-b", i=10_000 + i)) for i, (ln, t) in enumerate(zip(b_lines, b_times))]
    ents.sort(key=lambda p: p[0])
    _, _, ev = parse("vllm", gcloud_json([e for _, e in ents]))
    pod = ev["labels"].str.json_decode().struct.field("pod")
    for name, base in (("vllm-a", a_base), ("vllm-b", b_base)):
        mine = in_time_order(ev.filter(pod == name))
        assert mine.select(SAME).equals(base.select(SAME)), name


def test_an_export_cut_short_keeps_the_rest():
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    entries = [gcp_entry(ln, t, i=i) for i, (ln, t) in enumerate(zip(lines, times))]
    text = ndjson(entries)
    cut = text.rfind('"textPayload"')  # the last entry stops mid-object
    layers, texts, ev = parse("vllm", text[:cut] + "\n")
    assert layers == ("gcp-logging",)
    whole = base.filter(pl.col("line") < len(lines))
    assert ev.filter(pl.col("line") < len(lines)).select(SAME).equals(whole.select(SAME))
    last = ev.filter(pl.col("line") == len(lines))
    assert last["event"].to_list() == ["unparsed"]
    assert last["message"][0].startswith('{"insertId"') or '"insertId"' in (last["attrs"][0] or "")


def test_detection_is_from_content_only():
    lines, times, _ = truth("sample_logs/tgi/real/launcher_traceback.log", "tgi")
    entries = [gcp_entry(ln, t, i=i) for i, (ln, t) in enumerate(zip(lines, times))]
    assert W.detect(wr.split_lines(gcloud_json(entries))[:300])[0] == "gcp-logging"
    # a plain log and a docker json-file log are not taken for an export
    assert "gcp-logging" not in W.detect(lines[:300])
    assert W.detect(wr.split_lines(wr.to_docker_json(lines))[:300])[0] == "docker-json"
