"""Engine lines written the way log platforms hand them back (tests and bench/exports.py
use these), after each platform's documented export shape:

- Google Cloud Logging: `gcloud logging read --format=json` prints the LogEntry objects as an
  indented array, keys sorted, newest first; a sink or `jq -c '.[]'` gives one per line.
- AWS CloudWatch Logs: the AWS CLI prints `filter-log-events` / `get-log-events` as an
  envelope indented by 4 (`events`, then `searchedLogStreams` or the paging tokens), oldest
  first; Logs Insights results come newest first with `@timestamp` in milliseconds, UTC.
- Grafana Loki `logcli query`: newest first; `--output jsonl` one `{"labels","line","timestamp"}`
  a line (nanoseconds), the default output `<RFC 3339 time, seconds> {labels}  <line>`.
- OpenTelemetry Collector file exporter: one OTLP JSON `{"resourceLogs": [...]}` a line per
  export batch (attribute values as `{"stringValue": ...}`, times as decimal strings).
"""

from __future__ import annotations

import json

from tests.helpers import wrapping as wr
POD = "vllm-7d9f8-abcde"
# Fluent Bit's CloudWatch stream for that pod's container: `<pod>_<namespace>_<container>-<id>`
CW_STREAM = f"{POD}_serving_server-" + "0a1b2c3d" * 8


def gcp_entry(line: str, ns: int, pod: str = POD, i: int = 0) -> dict:
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


def cw_event(line: str, ns: int, i: int, stream: bool = True) -> dict:
    e = {"logStreamName": CW_STREAM} if stream else {}
    return e | {"timestamp": ns // 1_000_000, "message": line, "ingestionTime": ns // 1_000_000 + 230,
                "eventId": f"{37820000000000000000000000 + i}"}


def cw_filter_log_events(lines, times):
    """`aws logs filter-log-events` (AWS CLI JSON output: indented by 4, oldest first)."""
    events = [cw_event(ln, t, i) for i, (ln, t) in enumerate(zip(lines, times))]
    return json.dumps({"events": events, "searchedLogStreams": [{"logStreamName": CW_STREAM, "searchedCompletely": True}]}, indent=4) + "\n"


def cw_get_log_events(lines, times):
    """`aws logs get-log-events`: the events carry no stream name; paging tokens follow."""
    events = [cw_event(ln, t, i, stream=False) for i, (ln, t) in enumerate(zip(lines, times))]
    return json.dumps({"events": events, "nextForwardToken": "f/3782", "nextBackwardToken": "b/3782"}, indent=4) + "\n"


def cw_insights(lines, times):
    """Logs Insights results downloaded as JSON: newest first, `@timestamp` in ms, UTC."""
    rows = []
    for ln, t in zip(lines, times):
        sec, frac = divmod(t, 1_000_000_000)
        stamp = wr.rfc3339_ns(sec * 1_000_000_000).replace("T", " ")[:19] + f".{frac // 1_000_000:03d}"
        rows.append({"@timestamp": stamp, "@message": ln, "@logStream": CW_STREAM, "@log": "123456789012:/eks/c1/containers"})
    return json.dumps(rows[::-1], indent=2) + "\n"


def gcp_array(lines, times):
    return gcloud_json([gcp_entry(ln, t, i=i) for i, (ln, t) in enumerate(zip(lines, times))])


def gcp_ndjson(lines, times):
    return ndjson([gcp_entry(ln, t, i=i) for i, (ln, t) in enumerate(zip(lines, times))])


LOKI_LABELS = {"container": "server", "namespace": "serving", "pod": POD}


def loki_jsonl(lines, times):
    rows = [{"labels": LOKI_LABELS, "line": ln, "timestamp": wr.rfc3339_ns(t)} for ln, t in zip(lines, times)]
    return "".join(json.dumps(r) + "\n" for r in rows[::-1])


def loki_default(lines, times):
    """`logcli query --forward`: oldest first."""
    labels = "{" + ", ".join(f'{k}="{v}"' for k, v in LOKI_LABELS.items()) + "}"
    # (one stream: its labels are the widest, so no padding before the space)
    return "".join(f"{wr.rfc3339_ns(t)[:19]}Z {labels} {ln}\n" for ln, t in zip(lines, times))


def otlp_file(lines, times, batch: int = 7):
    """The Collector's file exporter: a batch of up to `batch` records a line, oldest first."""
    attrs = [{"key": k, "value": {"stringValue": v}} for k, v in (
        ("k8s.pod.name", POD), ("k8s.container.name", "server"), ("k8s.namespace.name", "serving"), ("service.name", "llm"))]
    out = []
    for at in range(0, len(lines), batch):
        recs = [{"timeUnixNano": str(t), "observedTimeUnixNano": str(t + 3_000_000), "severityNumber": 9, "severityText": "INFO",
                 "body": {"stringValue": ln}, "attributes": [{"key": "log.iostream", "value": {"stringValue": "stdout"}}],
                 "traceId": "", "spanId": ""}
                for ln, t in zip(lines[at:at + batch], times[at:at + batch])]
        res = {"resource": {"attributes": attrs}, "scopeLogs": [{"scope": {}, "logRecords": recs}]}
        out.append(json.dumps({"resourceLogs": [res]}, separators=(",", ":")) + "\n")
    return "".join(out)


# CSV downloads (parsers/wrappers/csvexport.py). Each writes the entries with the csv module
# (fields with a comma, quote or newline quoted, quotes doubled); `entries` groups lines into
# one entry where a log agent joined them (a traceback), else one line an entry.

def _csv(header, rows) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def entries(lines, times, groups=None):
    """(message, time ns) per entry: `groups` lists (first index, count) of joined lines."""
    groups = groups or [(i, 1) for i in range(len(lines))]
    return [("\n".join(lines[i:i + n]), times[i]) for i, n in groups]


def _ms_utc(ns: int, fmt: str) -> str:
    import datetime as dt

    sec, frac = divmod(ns, 1_000_000_000)
    return dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime(fmt) + f".{frac // 1_000_000:03d}"


def gcp_csv(lines, times, groups=None):
    """Logs Explorer "Download" as CSV: the LogEntry flattened to dotted column names."""
    header = ["insertId", "logName", "receiveTimestamp", "resource.labels.cluster_name", "resource.labels.container_name",
              "resource.labels.namespace_name", "resource.labels.pod_name", "resource.type", "severity", "textPayload", "timestamp"]
    rows = [[f"{i:08x}abc", "projects/proj/logs/stdout", wr.rfc3339_ns(t + 412_000_000), "c1", "server", "serving", POD,
             "k8s_container", "INFO", m, wr.rfc3339_ns(t)] for i, (m, t) in enumerate(entries(lines, times, groups))]
    return _csv(header, rows[::-1])


def cw_console_csv(lines, times, groups=None):
    """The CloudWatch console's log events downloaded as CSV: epoch ms, oldest first."""
    return _csv(["timestamp", "message"], [[t // 1_000_000, m] for m, t in entries(lines, times, groups)])


def cw_insights_csv(lines, times, groups=None):
    """Logs Insights results exported as CSV: newest first, `@timestamp` in ms, UTC."""
    rows = [[_ms_utc(t, "%Y-%m-%d %H:%M:%S"), m, CW_STREAM, "123456789012:/eks/c1/containers"] for m, t in entries(lines, times, groups)]
    return _csv(["@timestamp", "@message", "@logStream", "@log"], rows[::-1])


def datadog_csv(lines, times, groups=None):
    """Datadog Log Explorer "Download as CSV": the list's columns, newest first, ISO ms."""
    rows = [[_ms_utc(t, "%Y-%m-%dT%H:%M:%S") + "Z", "gke-c1-pool-1-node", "llm", "serving", POD, "server", m]
            for m, t in entries(lines, times, groups)]
    return _csv(["date", "host", "service", "kube_namespace", "pod_name", "kube_container_name", "message"], rows[::-1])


def kibana_csv(lines, times, groups=None):
    """Kibana Discover "Download CSV": the document table's columns, newest first, the
    default date format (`MMM D, YYYY @ HH:mm:ss.SSS`, UTC)."""
    import datetime as dt

    def kib(t):
        sec, frac = divmod(t, 1_000_000_000)
        d = dt.datetime.fromtimestamp(sec, dt.timezone.utc)
        return d.strftime("%b ") + str(d.day) + d.strftime(", %Y @ %H:%M:%S") + f".{frac // 1_000_000:03d}"

    rows = [[kib(t), "serving", POD, "server", "gke-c1-pool-1-node", m] for m, t in entries(lines, times, groups)]
    return _csv(["@timestamp", "kubernetes.namespace", "kubernetes.pod.name", "kubernetes.container.name", "host.name", "message"], rows[::-1])


def grafana_txt(lines, times):
    """Grafana Explore "Download logs" as text (Loki): the common labels, two blank lines,
    then `<ms>\\t<ISO ms>\\t<line>`, newest first as the panel shows them."""
    meta = 'Common labels: {"container":"server","namespace":"serving","pod":"%s"}\nLine limit: "1000 (%d returned)"\n' % (POD, len(lines))
    rows = [f"{t // 1_000_000}\t{_ms_utc(t, '%Y-%m-%dT%H:%M:%S')}Z\t{ln}\n" for ln, t in zip(lines, times)]
    return meta + "\n\n" + "".join(rows[::-1])


def grafana_json(lines, times):
    """Grafana Explore "Download logs" as JSON: one line, the rows newest first."""
    rows = [{"line": ln, "timestamp": str(t), "date": _ms_utc(t, "%Y-%m-%dT%H:%M:%S") + "Z",
             "fields": {"container": "server", "namespace": "serving", "pod": POD, "stream": "stdout"}}
            for ln, t in zip(lines, times)]
    return json.dumps(rows[::-1], separators=(",", ":"))  # (as JSON.stringify writes it)


def elastic_doc(line, ns, pod=POD):
    """A Filebeat / Elastic Agent document of a container's line (ECS, Kubernetes metadata)."""
    return {"@timestamp": _ms_utc(ns, "%Y-%m-%dT%H:%M:%S") + "Z", "message": line, "stream": "stdout",
            "kubernetes": {"namespace": "serving", "pod": {"name": pod, "uid": "0a1b"}, "container": {"name": "server"},
                           "node": {"name": "gke-c1-pool-1-node"}},
            "host": {"name": "gke-c1-pool-1-node"}, "ecs": {"version": "8.0.0"}, "agent": {"type": "filebeat"}}


def elastic_ndjson(lines, times):
    """`_source` NDJSON, newest first (the default sort of a search)."""
    return "".join(json.dumps(elastic_doc(ln, t)) + "\n" for ln, t in list(zip(lines, times))[::-1])


def elastic_hits(lines, times):
    """A search response printed indented (`?pretty`): hits newest first."""
    hits = [{"_index": ".ds-logs-2026.06.10", "_id": f"id{i}", "_score": None, "_source": elastic_doc(ln, t), "sort": [t // 1_000_000]}
            for i, (ln, t) in enumerate(zip(lines, times))]
    return json.dumps({"took": 5, "timed_out": False, "hits": {"total": {"value": len(hits), "relation": "eq"}, "hits": hits[::-1]}}, indent=2) + "\n"


def datadog_log(line, ns, i=0):
    return {"attributes": {"attributes": {"logger": {"name": "vllm"}}, "host": "gke-c1-pool-1-node", "message": line, "service": "llm",
                           "status": "error" if "ERROR" in line else "info",
                           "tags": ["kube_namespace:serving", f"pod_name:{POD}", "kube_container_name:server", "source:vllm"],
                           "timestamp": _ms_utc(ns, "%Y-%m-%dT%H:%M:%S") + "Z"},
            "id": f"AQAAAY{i:010d}", "type": "log"}


def datadog_json(lines, times):
    """The Logs Search API's response, indented as its docs print it: newest first."""
    data = [datadog_log(ln, t, i) for i, (ln, t) in enumerate(zip(lines, times))]
    return json.dumps({"data": data[::-1], "links": {"next": "https://api.datadoghq.com/..."}, "meta": {"page": {"after": "eyJ"}}}, indent=4) + "\n"


def datadog_ndjson(lines, times):
    """`jq -c '.data[]'` of the response: one log a line, newest first."""
    return "".join(json.dumps(datadog_log(ln, t, i)) + "\n" for i, (ln, t) in list(enumerate(zip(lines, times)))[::-1])
