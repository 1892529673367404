"""Platform exports as a user downloads them, holding a real vLLM 0.32 recording
(sample_logs/vllm/real-0.32): newest first, whose first entries are the server's last lines
(a shutdown's leak report, no engine in sight); several pods interleaved line by line by
`kubectl logs -f --prefix --timestamps`; an OpenTelemetry export of lines that carry a
compose prefix. Each gives the events of the server's own file; the requests are counted
in the text with a regex."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re

import pytest

from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import run
from tests.helpers.common import SAMPLE_LOGS, write

REAL = gzip.decompress((SAMPLE_LOGS / "vllm" / "real-0.32" / "vllm-cpu.log.gz").read_bytes()).decode()
LINES = REAL.split("\n")[:-1]  # the container runtime's lines: split at \n only
T0 = dt.datetime(2026, 12, 1, 23, 38, tzinfo=dt.timezone.utc)
Q = "select event, request_id, level, message from events order by all"


def stamp(k: int, pod: int = 0) -> dt.datetime:
    return T0 + dt.timedelta(milliseconds=k, microseconds=100 * pod)


def rfc(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture(scope="module")
def verbatim(tmp_path_factory):
    d = tmp_path_factory.mktemp("verbatim")
    ingest([write(d / "vllm.log", REAL)], d / "store", rollups=False)
    return run(d / "store", Q)


def arrivals() -> int:
    return sum(1 for ln in LINES if re.search(r"\] (Added|Received) request chatcmpl-", ln))


def test_a_newest_first_cloud_logging_export_whose_head_is_shutdown_noise(tmp_path, verbatim):
    # the head of the reversed export: no line of vLLM's own format
    assert not any(re.search(r"(INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:", ln) for ln in LINES[-30:])
    entries = [{"insertId": f"i{k}", "logName": "projects/p/logs/stdout", "severity": "INFO",
                "resource": {"type": "k8s_container", "labels": {"pod_name": "vllm-0", "namespace_name": "llm",
                                                                  "container_name": "vllm", "project_id": "p"}},
                "textPayload": ln + "\n", "timestamp": rfc(stamp(k)), "receiveTimestamp": rfc(stamp(k + 2000))}
               for k, ln in enumerate(LINES)][::-1]
    path = write(tmp_path / "downloaded-logs-20261202.json", json.dumps(entries, indent=2))
    summary = ingest([path], tmp_path / "store", rollups=False)
    assert [(f.engine, f.decode) for f in summary.files] == [("vllm", ("gcp-logging",))]
    got = run(tmp_path / "store", Q)
    assert got.equals(verbatim)
    assert got.filter(got["event"] == "request_arrived").height == arrivals() > 400
    assert set(run(tmp_path / "store", "select distinct instance from events")["instance"]) == {"vllm-0"}


def test_two_pods_interleaved_by_kubectl_follow_join_each_pods_records(tmp_path, verbatim):
    other = (SAMPLE_LOGS / "vllm" / "real" / "v1_0_11.log").read_text().split("\n")[:-1]
    lines = sorted([(stamp(k, 0), "vllm-a", ln) for k, ln in enumerate(LINES)]
                   + [(stamp(k, 1), "vllm-b", ln) for k, ln in enumerate(other)])
    text = "".join(f"[pod/{pod}/server] {rfc(t)} {ln}\n" for t, pod, ln in lines)
    summary = ingest([write(tmp_path / "kubectl.log", text)], tmp_path / "store", rollups=False)
    assert [f.engine for f in summary.files] == ["vllm"]
    got = run(tmp_path / "store", Q.replace("from events", "from events where instance = 'vllm-a'"))
    # the banner and the OpenMP binding lines are multi-line records: joined as in the file
    banner = [m for m in verbatim["message"] if m and "version 0.32.0" in m]
    assert len(banner) == 1 and banner[0].count("\n") == 5
    assert [m for m in got["message"] if m and "version 0.32.0" in m] == banner
    assert got.equals(verbatim)
    assert got.filter(got["event"] == "request_arrived").height == arrivals()
    assert set(run(tmp_path / "store", "select distinct instance from events")["instance"]) == {"vllm-a", "vllm-b"}


def test_an_otlp_export_of_compose_prefixed_tgi_lines(tmp_path):
    # a real TGI router log in which one line carries docker compose's service prefix
    tgi = (SAMPLE_LOGS / "tgi" / "real" / "router_text.log").read_text().split("\n")[:-1]
    assert sum(" | " in ln[:60] for ln in tgi) == 1
    recs = [{"timeUnixNano": str(int(stamp(k).timestamp() * 1e9)), "severityText": "INFO", "body": {"stringValue": ln}}
            for k, ln in enumerate(tgi)]
    doc = {"resourceLogs": [{"resource": {"attributes": [{"key": "k8s.pod.name", "value": {"stringValue": "tgi-0"}}]},
                             "scopeLogs": [{"scope": {}, "logRecords": recs}]}]}
    summary = ingest([write(tmp_path / "otel.jsonl", json.dumps(doc) + "\n")], tmp_path / "store", rollups=False)
    assert [(f.engine, f.failed, f.status) for f in summary.files] == [("tgi", False, "ingested")]
    got = run(tmp_path / "store", "select instance, labels from events where labels like '%service%'")
    assert got.height == 1 and got["instance"].to_list() == ["tgi-0"]
    assert json.loads(got["labels"][0])["service"] == "chat_inference-text_generation_inference-1"


NAMESPACE = {  # pod -> a real log of its engine
    "vllm-0": ("vllm", LINES),
    "sglang-0": ("sglang", (SAMPLE_LOGS / "sglang" / "real" / "v0_5_2026.log").read_text().split("\n")[:-1]),
    "llama-0": ("llamacpp", (SAMPLE_LOGS / "llamacpp" / "real" / "era_c_2026_router_hip_26222.log").read_text().split("\n")[:-1]),
    "trtllm-0": ("trtllm", (SAMPLE_LOGS / "trtllm" / "real" / "pytorch_backend.log").read_text().split("\n")[:-1]),
}


def test_one_export_of_a_namespace_serving_with_four_engines(tmp_path):
    # each pod's own file, as the server wrote it
    want = {}
    for pod, (engine, lines) in NAMESPACE.items():
        d = tmp_path / pod
        summary = ingest([write(d / f"{pod}.log", "\n".join(lines) + "\n")], d / "store", rollups=False)
        assert [f.engine for f in summary.files] == [engine]
        want[pod] = run(d / "store", Q)
    # one Cloud Logging download of the namespace, its pods interleaved, newest first
    entries = sorted(((stamp(k, i), pod, ln) for i, (pod, (_e, lines)) in enumerate(NAMESPACE.items())
                      for k, ln in enumerate(lines)), reverse=True)
    doc = [{"insertId": f"i{n}", "severity": "INFO", "timestamp": rfc(t), "textPayload": ln + "\n",
            "resource": {"type": "k8s_container", "labels": {"pod_name": pod, "namespace_name": "llm"}}}
           for n, (t, pod, ln) in enumerate(entries)]
    ingest([write(tmp_path / "namespace.json", json.dumps(doc, indent=2))], tmp_path / "all", rollups=False)
    engines = run(tmp_path / "all", "select instance, any_value(engine) as e, count(distinct engine) as n from events group by all")
    assert {r["instance"]: (r["e"], r["n"]) for r in engines.iter_rows(named=True)} == {
        pod: (engine, 1) for pod, (engine, _l) in NAMESPACE.items()}
    for pod in NAMESPACE:
        got = run(tmp_path / "all", Q.replace("from events", f"from events where instance = '{pod}'"))
        assert got.equals(want[pod]), pod
    assert run(tmp_path / "all", "select count(*) from events where event = 'request_arrived'").item() == arrivals() + sum(
        want[p].filter(want[p]["event"] == "request_arrived").height for p in ("sglang-0", "llama-0", "trtllm-0"))
