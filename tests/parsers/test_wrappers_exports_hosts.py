"""Log-platform exports of servers outside Kubernetes: two vLLM servers in one export, named by
what the platform names them by when there is no pod: an ECS task's or an EC2 instance's
CloudWatch log stream (`<prefix>/<container>/<task id>`, the agent's default `{instance_id}`),
the Datadog Agent's `host`, Filebeat's `host.name`, the OpenTelemetry resource's `host.name`,
a Loki stream's `host` label, a Compute Engine VM's `compute.googleapis.com/resource_name`.

Each export, ingested as a user would (`ingest` on a directory, no flag), must give each server's
events as the server's own file does, under one instance per server named as the platform names
it, and nothing of one server's lines in the other's records. Shapes as documented by each
platform; the entries are those of tests/parsers/test_wrappers_exports_unseen.py.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from tests.parsers.test_wrappers_exports_unseen import (
    PLACE, STEP, cli_time, ingest_dir, entries, insights_time, kibana_time, ms, rfc3339, to_csv)

KEYS = ("vllm", "vllm2")
TASK = {"vllm": "0f2b6c1e9a8d4b7c8e5f3a2b1c0d9e8f", "vllm2": "7d1e3a9b5c2f4e6a8b0c1d2e3f4a5b6c"}
EC2 = {"vllm": "i-0a1b2c3d4e5f67890", "vllm2": "i-0f9e8d7c6b5a43210"}
HOST = {"vllm": "gpu-a.internal", "vllm2": "gpu-b.internal"}


def two_servers(names: dict[str, str]):
    """Both servers' entries in time order, each named `names[key]` where the pod was."""
    out = []
    for key, offset in (("vllm", 0), ("vllm2", STEP // 2)):
        out += [(t, msg, names[key], n) for t, msg, _, n in entries(key, offset)]
    return sorted(out)


def ecs_stream(task: str) -> str:
    # the awslogs driver: `<awslogs-stream-prefix>/<container name>/<ECS task id>`
    return f"vllm/server/{task}"


def cw_filter(es):
    ev = [{"logStreamName": s, "timestamp": ms(t), "message": msg, "ingestionTime": ms(t) + 380, "eventId": f"3{k:055d}"}
          for k, (t, msg, s, _) in enumerate(es)]
    streams = sorted({e["logStreamName"] for e in ev})
    return json.dumps({"events": ev, "searchedLogStreams": [{"logStreamName": s, "searchedCompletely": True} for s in streams]},
                      indent=4) + "\n"


def aws_tail(es):
    # `aws logs tail /ecs/vllm > file`: the streams of the group interleaved by time
    return "".join(f"{cli_time(t).isoformat(timespec='microseconds')} {s} {msg}".rstrip() + "\n" for t, msg, s, _ in es)


def cw_filter_text(es):
    # `aws logs filter-log-events --output text`
    return "".join(f"EVENTS\t3{k:055d}\t{ms(t) + 380}\t{s}\t{msg}\t{ms(t)}\n" for k, (t, msg, s, _) in enumerate(es))


def cw_insights_json(es):
    return json.dumps([{"@timestamp": insights_time(t), "@message": msg, "@logStream": s, "@log": "123456789012:/ecs/vllm"}
                       for t, msg, s, _ in reversed(es)], indent=2)


def cw_insights_csv(es):
    return to_csv(["@timestamp", "@message", "@logStream", "@log"],
                  [[insights_time(t), msg, s, "123456789012:/ecs/vllm"] for t, msg, s, _ in reversed(es)])


def datadog_json(es):
    data = [{"attributes": {"status": "info", "service": "vllm", "tags": ["env:prod", "source:vllm", f"host:{h}"],
                            "timestamp": rfc3339(t, 3), "host": h, "attributes": {"service": "vllm"}, "message": msg},
             "type": "log", "id": f"AQAAAY{k:012d}"} for k, (t, msg, h, _) in enumerate(reversed(es))]
    return json.dumps({"data": data, "meta": {"page": {"after": "eyJhZnRlciI6IkFRQUFBWFVBWFJZVkpH"}}}, indent=4) + "\n"


def datadog_csv(es):
    return to_csv(["date", "host", "service", "status", "message"],
                  [[rfc3339(t, 3), h, "vllm", "info", msg] for t, msg, h, _ in reversed(es)])


def filebeat_ndjson(es):
    # Filebeat's log input on a VM: ECS `host.*`, `log.file.path`, no `kubernetes.*`
    return "".join(json.dumps({"@timestamp": rfc3339(t, 3), "message": msg, "host": {"name": h, "hostname": h},
                               "log": {"file": {"path": "/var/log/vllm/server.log"}, "offset": n * 100, "level": "info"},
                               "input": {"type": "log"}, "agent": {"type": "filebeat"}, "ecs": {"version": "8.0.0"}}) + "\n"
                   for t, msg, h, n in es)


def logstash_ndjson(es):
    # Logstash's file input before ECS: `host` a string, `path`, `@version`
    return "".join(json.dumps({"@timestamp": rfc3339(t, 3), "@version": "1", "host": h, "path": "/var/log/vllm/server.log",
                               "message": msg}) + "\n" for t, msg, h, _ in es)


def kibana_csv(es):
    return to_csv(["@timestamp", "host.name", "log.file.path", "message"],
                  [[kibana_time(t), h, "/var/log/vllm/server.log", msg] for t, msg, h, _ in reversed(es)])


def otel_file(es, batch: int = 7):
    out = []
    for b in range(0, len(es), batch):
        res: dict[str, list] = {}
        for t, msg, h, _ in es[b:b + batch]:
            res.setdefault(h, []).append({"timeUnixNano": str(t), "observedTimeUnixNano": str(t + 1000), "severityNumber": 9,
                                          "body": {"stringValue": msg}, "attributes": [
                                              {"key": "log.file.name", "value": {"stringValue": "server.log"}}]})
        rl = [{"resource": {"attributes": [{"key": "host.name", "value": {"stringValue": h}},
                                           {"key": "service.name", "value": {"stringValue": "vllm"}},
                                           {"key": "os.type", "value": {"stringValue": "linux"}}]},
               "scopeLogs": [{"scope": {}, "logRecords": recs}]} for h, recs in res.items()]
        out.append(json.dumps({"resourceLogs": rl}, separators=(",", ":")))
    return "\n".join(out) + "\n"


def logcli_jsonl(es):
    return "".join(json.dumps({"labels": {"filename": "/var/log/vllm/server.log", "host": h, "job": "vllm", "level": "info"},
                               "line": msg, "timestamp": rfc3339(t)}, separators=(",", ":")) + "\n"
                   for t, msg, h, _ in reversed(es))


def logcli_default(es):
    """`logcli query --forward`: the labels common to both streams left out of the lines."""
    width = max(len(f'{{host="{h}"}}') for _, _, h, _ in es)
    return "".join(f"{rfc3339(t, 0)} {('{host=' + json.dumps(h) + '}').ljust(width)} {msg}\n" for t, msg, h, _ in es)


def grafana_json(es):
    return json.dumps([{"line": msg, "timestamp": str(t), "date": rfc3339(t, 3), "fields": {"host": h, "job": "vllm"}}
                       for t, msg, h, _ in reversed(es)], separators=(",", ":"))


def gce_json(es):
    # the Ops Agent on Compute Engine: resource `gce_instance`, the VM's name in the entry's labels
    ids = {}
    out = []
    for k, (t, msg, h, _) in enumerate(reversed(es)):
        vid = ids.setdefault(h, str(4_000_000_000_000_000_000 + len(ids) * 7_777))
        out.append({"insertId": f"{k:x}abcdef", "labels": {"compute.googleapis.com/resource_name": h},
                    "logName": "projects/p1/logs/vllm", "receiveTimestamp": rfc3339(t + 2_345_678_901), "severity": "INFO",
                    "resource": {"labels": {"instance_id": vid, "project_id": "p1", "zone": "us-central1-a"}, "type": "gce_instance"},
                    "textPayload": msg, "timestamp": rfc3339(t)})
    return json.dumps(out, indent=2, sort_keys=True) + "\n"


# name -> (writer, the time's precision in ns, each server's name in the export, its instance)
ECS = {k: ecs_stream(TASK[k]) for k in KEYS}
VARIANTS = {
    "cw-filter-log-events-ecs": (cw_filter, 10**6, ECS),
    "cw-filter-log-events-ec2": (cw_filter, 10**6, EC2),
    "cw-insights-json-ecs": (cw_insights_json, 10**6, ECS),
    "aws-logs-tail-ecs": (aws_tail, 10**6, ECS),
    "aws-logs-tail-ec2": (aws_tail, 10**6, EC2),
    "cw-filter-text-ecs": (cw_filter_text, 10**6, ECS),
    "cw-insights-csv-ecs": (cw_insights_csv, 10**6, ECS),
    "datadog-json-hosts": (datadog_json, 10**6, HOST),
    "datadog-csv-hosts": (datadog_csv, 10**6, HOST),
    "filebeat-ndjson-hosts": (filebeat_ndjson, 10**6, HOST),
    "logstash-ndjson-hosts": (logstash_ndjson, 10**6, HOST),
    "kibana-csv-hosts": (kibana_csv, 10**6, HOST),
    "otel-file-hosts": (otel_file, 1, HOST),
    "logcli-jsonl-hosts": (logcli_jsonl, 1, HOST),
    "logcli-default-hosts": (logcli_default, 10**9, HOST),
    "grafana-json-hosts": (grafana_json, 1, HOST),
    "gce-json-vms": (gce_json, 1, HOST),
}


SEVERITY = {"filebeat-ndjson-hosts": "info", "logcli-jsonl-hosts": "info"}


@cache
def wrapped(variant: str, d: Path) -> pl.DataFrame:
    write, _, names = VARIANTS[variant]
    d.mkdir()
    (d / "export.json").write_text(write(two_servers(names)))
    return ingest_dir(d)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_two_servers_outside_kubernetes_are_two_instances(variant, ingested, tmp_path):
    _, precision, names = VARIANTS[variant]
    got = wrapped(variant, tmp_path / f"hosts-{variant}")
    assert sorted(got["instance"].unique().to_list()) == sorted(names.values())
    for key in KEYS:
        base = ingested.plain().filter(pl.col("source").str.ends_with(f"/{key}.log"))
        mine = got.filter(pl.col("instance") == names[key])
        cols = sorted(c for c in base.columns if c not in PLACE and not c.startswith("_") and c in got.columns)
        assert mine.height == base.height, (key, mine.group_by("event").len().sort("event").rows(),
                                            base.group_by("event").len().sort("event").rows())
        assert mine.select(cols).sort(cols, nulls_last=True).equals(base.select(cols).sort(cols, nulls_last=True))
        # the platform's time of each event is that of its server's own entries
        offset = STEP // 2 if key == "vllm2" else 0
        times = {t // precision * precision for t, *_ in entries(key, offset)}
        assert set(mine["wrapper_ts"].cast(pl.Int64).to_list()) <= times
    if variant in SEVERITY:
        # the level the shipper read (ECS `log.level`, a Loki stream's `level` label) is kept
        assert got.select(pl.col("labels").str.json_path_match("$.severity").alias("s"))["s"].unique().to_list() == [SEVERITY[variant]]



def test_a_member_of_another_type_than_usual_costs_that_member_not_the_file(tmp_path, ingested):
    """An entry whose member has another type than the platform's usual one (here `host` a
    list, `stream` an object) keeps its line; the file's other entries are read as usual."""
    es = [(t, msg, HOST["vllm"], n) for t, msg, _, n in entries("vllm")]
    docs = [json.loads(x) for x in filebeat_ndjson(es).splitlines()]
    docs[2]["host"] = [HOST["vllm"]]
    docs[5]["stream"] = {"type": "stdout"}
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "export.json").write_text("".join(json.dumps(d) + "\n" for d in docs))
    got = ingest_dir(tmp_path / "logs")
    base = ingested.plain().filter(pl.col("source").str.ends_with("/vllm.log"))
    cols = sorted(c for c in base.columns if c not in PLACE and not c.startswith("_") and c in got.columns)
    assert got.select(cols).sort(cols, nulls_last=True).equals(base.select(cols).sort(cols, nulls_last=True))
    # the entry without its host is still the file's server's (the only one it names)
    assert got["instance"].unique().to_list() == [HOST["vllm"]]
