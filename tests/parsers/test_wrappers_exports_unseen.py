"""Log-platform exports written here from the platforms' documented output shapes, apart from
the writers the decoders were built against (tests/helpers/wrapping_exports.py): real lines of all
five engines, each export ingested as a user would (`ingest` on a directory, no flags), its
events compared with the ingest of the same lines as the server's own file.

Shapes, as documented: `gcloud logging read --format=json` (an array indented by 2, keys
sorted, newest first); `aws logs filter-log-events` / `get-log-events` (indented by 4;
`events[]` with `timestamp` ms, `message`, `logStreamName`, `ingestionTime`, `eventId`;
paging tokens); `aws logs get-query-results` (`results` a list of rows, each a list of
`{"field", "value"}`, `@ptr` added; `statistics`, `status`); the Logs Insights console's
CSV and JSON (`@timestamp` as `2026-06-10 14:23:45.123`); `logcli query` default output
(RFC 3339 seconds, the labels common to every stream left out of the lines), `--output jsonl`
(RFC3339Nano in the user's zone); Grafana Explore's download; the Datadog Logs Search API
(`data[].attributes`, indented by 4, `meta.page.after`); Elasticsearch `_search?pretty` hits
and `_source` NDJSON with ECS `kubernetes.*`; Kibana Discover CSV (`MMM D, YYYY @
HH:mm:ss.SSS`); OpenSearch Dashboards CSV of Fluent Bit records (`log`,
`kubernetes.pod_name`); the OpenTelemetry Collector file exporter (one
ExportLogsServiceRequest a line, `timeUnixNano` a string, attributes as key / value lists);
`kubectl logs --prefix --timestamps`.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[2]
# one real log per engine (a traceback or a backtrace among them), and a second vLLM server's
# log for the exports that hold two pods
LOGS = {
    "vllm": "sample_logs/vllm/real/v0_4.log",
    "sglang": "sample_logs/sglang/real/startup_and_crash.log",
    "llamacpp": "sample_logs/llamacpp/real/era_c_2026_proxmox_club3090_362.log",
    "trtllm": "sample_logs/trtllm/real/backtraces.log",
    "tgi": "sample_logs/tgi/real/launcher_traceback.log",
    "vllm2": "sample_logs/vllm/real/v1_0_11.log",
}
POD = {k: f"{k}-7c9d8b6f4-x2k9p" for k in LOGS}
POD["vllm2"] = "vllm-1"
NS, CONTAINER, NODE = "inference", "engine", "gke-c1-pool-1-9f8e7d6c-abcd"
T0 = int(dt.datetime(2026, 6, 10, 14, 0, tzinfo=dt.timezone.utc).timestamp()) * 10**9
# more than a second apart so a whole-second export still orders them; an odd ns part
STEP = 1_234_567_891

# columns of an event that say where or when it sits, not what the engine said
PLACE = {"t", "line", "byte_offset", "ts_inferred", "n_lines", "ts", "ts_noyear", "wrapper_ts", "stream", "labels", "instance", "source", "attrs",
         "file_id", "ingested_at", "engine_ts", "prefix", "source_id", "chunk"}


def lines_of(key: str) -> list[str]:
    text = (ROOT / LOGS[key]).read_text()
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


# ---- what each platform stores: entries (time ns, message, pod) -------------------------------

def entries(key: str, offset: int = 0, multiline: bool = False) -> list[tuple[int, str, str, int]]:
    """(time ns, message, pod, first line number) of one server's lines; with `multiline`, an
    indented line (a traceback's frames) joins the entry before it, as a log agent's
    multi-line rule stores a traceback."""
    out: list[list] = []
    for i, ln in enumerate(lines_of(key)):
        if multiline and out and ln[:1] in (" ", "\t"):
            out[-1][1] += "\n" + ln
            continue
        out.append([T0 + i * STEP + offset, ln, POD[key], i + 1])
    return [tuple(e) for e in out]


def two_pods(multiline: bool = False):
    return sorted(entries("vllm", 0, multiline) + entries("vllm2", STEP // 2, multiline))


def rfc3339(ns: int, digits: int = 9, tz: dt.timezone = dt.timezone.utc) -> str:
    sec, frac = divmod(ns, 10**9)
    t = dt.datetime.fromtimestamp(sec, tz)
    s = t.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        s += "." + f"{frac:09d}"[:digits]
    off = t.strftime("%z")
    return s + ("Z" if off == "+0000" else f"{off[:3]}:{off[3:]}")


def go_nano(ns: int, tz: dt.timezone) -> str:
    """Go's RFC3339Nano: trailing zeros of the fraction dropped."""
    s = rfc3339(ns, 9, tz)
    head, _, rest = s.partition(".")
    frac, zone = rest[:9].rstrip("0"), rest[9:]
    return f"{head}.{frac}{zone}" if frac else head + zone


def ms(ns: int) -> int:
    return ns // 1_000_000


def insights_time(ns: int) -> str:
    return dt.datetime.fromtimestamp(ms(ns) / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def kibana_time(ns: int) -> str:
    t = dt.datetime.fromtimestamp(ms(ns) / 1000, dt.timezone.utc)
    return t.strftime("%b ") + str(t.day) + t.strftime(", %Y @ %H:%M:%S.%f")[:-3]


def to_csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def gcloud_json(es):
    out = []
    for k, (t, msg, pod, _) in enumerate(reversed(es)):
        out.append({
            "insertId": f"{k:x}abcdef", "labels": {"compute.googleapis.com/resource_name": NODE, "k8s-pod/app": "llm"},
            "logName": "projects/p1/logs/stderr" if "Error" in msg else "projects/p1/logs/stdout",
            "receiveTimestamp": rfc3339(t + 2_345_678_901), "severity": "ERROR" if "Error" in msg else "INFO",
            "resource": {"labels": {"cluster_name": "c1", "container_name": CONTAINER, "location": "us-central1",
                                    "namespace_name": NS, "pod_name": pod, "project_id": "p1"}, "type": "k8s_container"},
            "textPayload": msg + "\n", "timestamp": rfc3339(t),
        })
    return json.dumps(out, indent=2, sort_keys=True) + "\n"


def gcloud_compact(es):
    """The same array saved on one line (`jq -c .`, a browser's save of the download)."""
    return json.dumps(json.loads(gcloud_json(es)), separators=(",", ":"))


def compact(writer):
    """The same export saved on one line (`jq -c .`, an SDK's `json.dumps`)."""
    def write(es):
        return json.dumps(json.loads(writer(es)), separators=(",", ":"))
    write.__name__ = writer.__name__ + "_compact"
    return write


def gcp_explorer_csv(es):
    head = ["insertId", "logName", "receiveTimestamp", "resource.labels.cluster_name", "resource.labels.container_name",
            "resource.labels.namespace_name", "resource.labels.pod_name", "resource.type", "severity", "textPayload", "timestamp"]
    rows = [[f"{k:x}", "projects/p1/logs/stdout", rfc3339(t + 10**9), "c1", CONTAINER, NS, pod, "k8s_container", "INFO", msg, rfc3339(t)]
            for k, (t, msg, pod, _) in enumerate(reversed(es))]
    return to_csv(head, rows)


def gcloud_csv(es):
    """`gcloud logging read --format="csv(timestamp,resource.labels.pod_name,textPayload)"`:
    the projection's last keys in snake case head the columns, newest first."""
    return to_csv(["timestamp", "pod_name", "text_payload"], [[rfc3339(t), pod, msg] for t, msg, pod, _ in reversed(es)])


def fluent_stream(pod: str) -> str:
    return f"ip-10-0-1-23.ec2.internal-application.var.log.containers.{pod}_{NS}_{CONTAINER}-{'0a1b2c3d' * 8}.log"


def cw_filter(es):
    ev = [{"logStreamName": fluent_stream(pod), "timestamp": ms(t), "message": msg, "ingestionTime": ms(t) + 512,
           "eventId": f"3{k:055d}"} for k, (t, msg, pod, _) in enumerate(es)]
    streams = sorted({e["logStreamName"] for e in ev})
    return json.dumps({"events": ev, "searchedLogStreams": [{"logStreamName": s, "searchedCompletely": True} for s in streams]},
                      indent=4) + "\n"


def cw_get(es):
    ev = [{"timestamp": ms(t), "message": msg, "ingestionTime": ms(t) + 512} for t, msg, _, _ in es]
    return json.dumps({"events": ev, "nextForwardToken": "f/3" + "1" * 55, "nextBackwardToken": "b/3" + "0" * 55}, indent=4) + "\n"


def cw_filter_text(es):
    """`aws logs filter-log-events --output text`: a tab-separated EVENTS row per event, its
    members in the order of their names, then the searched streams."""
    rows = [f"EVENTS\t3{k:055d}\t{ms(t) + 512}\t{fluent_stream(pod)}\t{msg}\t{ms(t)}\n" for k, (t, msg, pod, _) in enumerate(es)]
    streams = sorted({fluent_stream(pod) for _, _, pod, _ in es})
    return "".join(rows) + "".join(f"SEARCHEDLOGSTREAMS\t{s}\tTrue\n" for s in streams)


def cw_get_text(es):
    """`aws logs get-log-events --output text`: the paging tokens, then EVENTS rows."""
    return (f"NEXTBACKWARDTOKEN\tb/3{'0' * 55}\nNEXTFORWARDTOKEN\tf/3{'1' * 55}\n"
            + "".join(f"EVENTS\t{ms(t) + 512}\t{msg}\t{ms(t)}\n" for t, msg, _, _ in es))


def cw_query_results(es):
    rows = [[{"field": "@timestamp", "value": insights_time(t)}, {"field": "@message", "value": msg},
             {"field": "@logStream", "value": fluent_stream(pod)}, {"field": "@ptr", "value": f"CmAKJwoj{k:08d}"}]
            for k, (t, msg, pod, _) in enumerate(reversed(es))]
    return json.dumps({"results": rows, "statistics": {"recordsMatched": float(len(rows)), "recordsScanned": 9.0e3,
                                                        "bytesScanned": 1.0e6}, "status": "Complete"}, indent=4) + "\n"


def cw_insights_csv(es):
    return to_csv(["@timestamp", "@message", "@logStream", "@log"],
                  [[insights_time(t), msg, fluent_stream(pod), "123456789012:/aws/containerinsights/c1/application"]
                   for t, msg, pod, _ in reversed(es)])


def cw_insights_json(es):
    return json.dumps([{"@timestamp": insights_time(t), "@message": msg, "@logStream": fluent_stream(pod),
                        "@log": "123456789012:/aws/containerinsights/c1/application"} for t, msg, pod, _ in reversed(es)], indent=2)


def cli_time(ns: int) -> dt.datetime:
    # the CLI's datetime of an event's milliseconds, in UTC
    m = ms(ns)
    return dt.datetime.fromtimestamp(m // 1000, dt.timezone.utc).replace(microsecond=m % 1000 * 1000)


def aws_tail(es):
    """`aws logs tail GROUP > file` (`--format detailed`): `isoformat(timespec='microseconds')`,
    the stream, the message; each event's text right-stripped and one newline added."""
    return "".join(f"{cli_time(t).isoformat(timespec='microseconds')} {fluent_stream(pod)} {msg}".rstrip() + "\n"
                   for t, msg, pod, _ in es)


def aws_tail_short(es):
    """`aws logs tail --format short`: the time to the second, no zone, no stream."""
    return "".join(f"{cli_time(t).strftime('%Y-%m-%dT%H:%M:%S')} {msg}".rstrip() + "\n" for t, msg, _, _ in es)


def cw_console_csv(es):
    return to_csv(["timestamp", "message"], [[ms(t), msg] for t, msg, _, _ in es])


def logcli_default(es):
    """`logcli query --forward`: labels shared by every stream go to stderr, not the lines."""
    pods = {pod for _, _, pod, _ in es}
    def labels(pod):
        return "{}" if len(pods) == 1 else f'{{pod="{pod}"}}'
    width = max(len(labels(p)) for p in pods)
    return "".join(f"{rfc3339(t, 0)} {labels(pod).ljust(width)} {msg}\n" for t, msg, pod, _ in es)


def logcli_jsonl(es):
    tz = dt.timezone(dt.timedelta(hours=2))
    return "".join(json.dumps({"labels": {"app": "llm", "container": CONTAINER, "namespace": NS, "pod": pod},
                               "line": msg, "timestamp": go_nano(t, tz)}, separators=(",", ":")) + "\n"
                   for t, msg, pod, _ in reversed(es))


def loki_api(es, indent: int | None = None):
    """`curl /loki/api/v1/query_range` (one line, no final newline) or piped through `jq .`:
    a stream per label set with its `[ns, line]` pairs, newest first (`direction=backward`)."""
    streams: dict[str, list] = {}
    for t, msg, pod, _ in reversed(es):
        streams.setdefault(pod, []).append([str(t), msg])
    result = [{"stream": {"app": "llm", "container": CONTAINER, "namespace": NS, "pod": pod}, "values": v} for pod, v in streams.items()]
    body = {"status": "success", "data": {"resultType": "streams", "result": result,
                                          "stats": {"summary": {"bytesProcessedPerSecond": 53_123, "execTime": 0.0123,
                                                                "totalEntriesReturned": len(es)}, "querier": {"store": {"totalChunksRef": 2}}}}}
    if indent is None:
        return json.dumps(body, separators=(",", ":"))
    return json.dumps(body, indent=indent) + "\n"


def splunk_json(es):
    """Splunk's REST export (`search/jobs/export?output_mode=json`): one result a line, newest
    first, `_time` with its offset, Splunk Connect for Kubernetes' fields."""
    return "".join(json.dumps({"preview": False, "offset": k, "result": {
        "_raw": msg, "_time": rfc3339(t, 3).replace("Z", "+00:00"), "host": NODE, "index": "k8s", "linecount": str(msg.count("\n") + 1),
        "source": f"/var/log/containers/{pod}_{NS}_{CONTAINER}-0a1b.log", "sourcetype": "kube:container:engine",
        "pod": pod, "namespace": NS, "container_name": CONTAINER, "splunk_server": "idx-1"}}, separators=(",", ":")) + "\n"
        for k, (t, msg, pod, _) in enumerate(reversed(es)))


def splunk_csv(es):
    """Splunk Web's CSV export: `_raw`, `_time` (ISO with `+0000`), host, source, and the fields."""
    return to_csv(["_raw", "_time", "host", "source", "sourcetype", "pod", "namespace", "container_name"],
                  [[msg, rfc3339(t, 3).replace("Z", "+0000"), NODE, f"/var/log/containers/{pod}.log", "kube:container:engine",
                    pod, NS, CONTAINER] for t, msg, pod, _ in reversed(es)])


def grafana_txt(es):
    """`label: JSON.stringify(value)` per meta item, two blank lines, then `ms\tISO\tentry`."""
    meta = {"Common labels": {"namespace": NS, "container": CONTAINER}, "Line limit": f"1000 ({len(es)} returned)",
            "Total bytes processed": "12.4 kB"}
    head = "".join(f"{k}: {json.dumps(v, separators=(',', ':'))}\n" for k, v in meta.items()) + "\n\n"
    return head + "".join(f"{ms(t)}\t{rfc3339(t, 3)}\t{msg}\n" for t, msg, _, _ in reversed(es))


def grafana_json(es):
    """`JSON.stringify` (no spaces) of `{line, timestamp: timeEpochNs (a string), date, fields}`."""
    return json.dumps([{"line": msg, "timestamp": str(t), "date": rfc3339(t, 3),
                        "fields": {"namespace": NS, "pod": pod, "container": CONTAINER}} for t, msg, pod, _ in reversed(es)],
                      separators=(",", ":"))


def grafana_csv(es, excel: bool = False):
    """Grafana's logs "Download csv": the Loki frame (`Time` ms, `Line`, `tsNs`, `id`) with the
    labels as columns, every field quoted, CRLF; for Excel, UTF-16LE with a byte order mark and
    tabs."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter="\t" if excel else ",", quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    w.writerow(["Time", "Line", "tsNs", "id", "app", "container", "namespace", "pod"])
    w.writerows([ms(t), msg, t, f"{t}_{k:x}", "llm", CONTAINER, NS, pod] for k, (t, msg, pod, _) in enumerate(reversed(es)))
    return ("\ufeff" + buf.getvalue()).encode("utf-16-le") if excel else buf.getvalue()


def datadog_json(es):
    data = [{"attributes": {"status": "info", "service": "llm", "tags": [f"pod_name:{pod}", f"kube_namespace:{NS}",
                                                                          f"kube_container_name:{CONTAINER}", "env:prod"],
                            "timestamp": rfc3339(t, 3), "host": NODE, "attributes": {"service": "llm"}, "message": msg},
             "type": "log", "id": f"AQAAAY{k:012d}"} for k, (t, msg, pod, _) in enumerate(reversed(es))]
    return json.dumps({"data": data, "meta": {"page": {"after": "eyJhZnRlciI6IkFRQUFBWFVBWFJZVkpH"}}, "links": {"next": "https://x"}},
                      indent=4) + "\n"


def datadog_csv(es):
    return to_csv(["date", "host", "service", "status", "pod_name", "message"],
                  [[rfc3339(t, 3), NODE, "llm", "info", pod, msg] for t, msg, pod, _ in reversed(es)])


def es_source(t, msg, pod):
    return {"@timestamp": rfc3339(t, 3), "message": msg, "stream": "stdout",
            "kubernetes": {"pod": {"name": pod, "uid": "u1"}, "namespace": NS, "container": {"name": CONTAINER},
                           "node": {"name": NODE}}, "host": {"name": NODE}, "ecs": {"version": "8.0.0"}}


def es_search(es):
    hits = [{"_index": ".ds-logs-kubernetes.container_logs-default-2026.06.10-000001", "_id": f"id{k}", "_score": None,
             "_source": es_source(t, msg, pod), "sort": [ms(t)]} for k, (t, msg, pod, _) in enumerate(reversed(es))]
    return json.dumps({"took": 5, "timed_out": False, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                       "hits": {"total": {"value": len(hits), "relation": "eq"}, "max_score": None, "hits": hits}}, indent=2) + "\n"


def es_source_ndjson(es):
    return "".join(json.dumps(es_source(t, msg, pod)) + "\n" for t, msg, pod, _ in es)


def kibana_csv(es):
    return to_csv(["@timestamp", "kubernetes.pod.name", "kubernetes.namespace", "kubernetes.container.name", "message"],
                  [[kibana_time(t), pod, NS, CONTAINER, msg] for t, msg, pod, _ in reversed(es)])


def opensearch_csv(es):
    return to_csv(["@timestamp", "kubernetes.pod_name", "kubernetes.namespace_name", "kubernetes.container_name", "log"],
                  [[kibana_time(t), pod, NS, CONTAINER, msg + "\n"] for t, msg, pod, _ in reversed(es)])


def otel_file(es, batch: int = 7):
    out = []
    for b in range(0, len(es), batch):
        res = {}
        for t, msg, pod, _ in es[b:b + batch]:
            res.setdefault(pod, []).append({"timeUnixNano": str(t), "observedTimeUnixNano": str(t + 1000), "severityNumber": 9,
                                            "severityText": "INFO", "body": {"stringValue": msg}, "attributes": [
                                                {"key": "log.iostream", "value": {"stringValue": "stdout"}}],
                                            "traceId": "", "spanId": ""})
        rl = [{"resource": {"attributes": [{"key": "k8s.pod.name", "value": {"stringValue": pod}},
                                           {"key": "k8s.namespace.name", "value": {"stringValue": NS}},
                                           {"key": "k8s.container.name", "value": {"stringValue": CONTAINER}},
                                           {"key": "k8s.node.name", "value": {"stringValue": NODE}}]},
               "scopeLogs": [{"scope": {}, "logRecords": recs}]} for pod, recs in res.items()]
        out.append(json.dumps({"resourceLogs": rl}, separators=(",", ":")))
    return "\n".join(out) + "\n"


def kubectl_prefix(es):
    return "".join(f"[pod/{pod}/{CONTAINER}] {rfc3339(t)} {msg}\n" for t, msg, pod, _ in es)


def gcloud_cut(es):
    """A download cut short in the middle of its last (oldest) object."""
    text = gcloud_json(es)
    return text[: text.rindex('"textPayload"')]


# name -> (writer, the time's precision in ns, whether entries name a pod, multi-line entries)
VARIANTS = {
    "gcloud-json": (gcloud_json, 1, True, False),
    "gcloud-json-one-line": (gcloud_compact, 1, True, False),
    # saved by a Windows tool (PowerShell's `Set-Content -Encoding UTF8`): a byte order mark first
    "gcloud-json-bom": (lambda es: "\ufeff" + gcloud_json(es), 1, True, False),
    "gcloud-json-cut-short": (gcloud_cut, 1, True, False),
    "gcp-explorer-csv": (gcp_explorer_csv, 1, True, True),
    "gcloud-format-csv": (gcloud_csv, 1, True, True),
    "cw-filter-log-events": (cw_filter, 10**6, True, False),
    "cw-get-log-events": (cw_get, 10**6, False, False),
    "cw-filter-log-events-text": (cw_filter_text, 10**6, True, True),
    "cw-get-log-events-text": (cw_get_text, 10**6, False, True),
    "cw-filter-log-events-one-line": (compact(cw_filter), 10**6, True, False),
    "cw-get-log-events-one-line": (compact(cw_get), 10**6, False, False),
    "cw-get-query-results-one-line": (compact(cw_query_results), 10**6, True, False),
    "datadog-json-one-line": (compact(datadog_json), 10**6, True, False),
    "es-search-one-line": (compact(es_search), 10**6, True, False),
    "cw-get-query-results": (cw_query_results, 10**6, True, False),
    "cw-insights-csv": (cw_insights_csv, 10**6, True, True),
    "cw-insights-json": (cw_insights_json, 10**6, True, False),
    "cw-console-csv": (cw_console_csv, 10**6, False, False),
    "aws-logs-tail": (aws_tail, 10**6, True, False),
    "aws-logs-tail-short": (aws_tail_short, 10**9, False, False),
    "logcli-default-forward": (logcli_default, 10**9, None, False),
    "logcli-jsonl-local-zone": (logcli_jsonl, 1, True, False),
    "grafana-txt": (grafana_txt, 10**6, False, False),
    "grafana-json": (grafana_json, 1, True, False),
    "loki-api-curl": (loki_api, 1, True, False),
    "splunk-json": (splunk_json, 10**6, True, True),
    "splunk-csv": (splunk_csv, 10**6, True, True),
    "loki-api-jq": (lambda es: loki_api(es, indent=2), 1, True, False),
    "grafana-csv": (grafana_csv, 10**6, True, True),
    "grafana-csv-excel-utf16": (lambda es: grafana_csv(es, excel=True), 10**6, True, True),
    "datadog-json": (datadog_json, 10**6, True, False),
    "datadog-csv": (datadog_csv, 10**6, True, True),
    "es-search-pretty": (es_search, 10**6, True, False),
    "es-source-ndjson": (es_source_ndjson, 10**6, True, False),
    "kibana-csv": (kibana_csv, 10**6, True, True),
    "opensearch-csv-fluentbit": (opensearch_csv, 10**6, True, True),
    "otel-file-exporter": (otel_file, 1, True, False),
    "kubectl-prefix-timestamps": (kubectl_prefix, 1, True, False),
}
ENGINES = ["vllm", "sglang", "llamacpp", "trtllm", "tgi"]


def ingest_into(directory: Path, store: Path) -> None:
    from servelens.pipeline.ingest import ingest

    ingest([directory], store, year=2026, keep_lines=True, rollups=False)


def read_events(store: Path) -> pl.DataFrame:
    from servelens.pipeline.query.connect import run

    return run(store, "select * from events order by source, line")


def ingest_dir(directory: Path) -> pl.DataFrame:
    store = directory.parent / (directory.name + "-store")
    ingest_into(directory, store)
    return read_events(store)


def build_plain(store: Path) -> None:
    d = store.parent / "plain"
    d.mkdir(parents=True, exist_ok=True)
    for key in LOGS:
        (d / f"{key}.log").write_text("\n".join(lines_of(key)) + "\n")
        # what is left of a download cut inside its oldest entry (the file's first line)
        (d / f"{key}.cut.log").write_text("\n".join(lines_of(key)[1:]) + "\n")
    ingest_into(d, store)


def build_wrapped(variant: str, store: Path) -> None:
    write, _, _, multiline = VARIANTS[variant]
    d = store.parent / variant
    d.mkdir(parents=True, exist_ok=True)

    def save(path: Path, content: str | bytes) -> None:
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)

    for key in ENGINES:
        save(d / f"{key}.export", write(entries(key, multiline=multiline)))
    if VARIANTS[variant][2] is not False:
        save(d / "two-pods.export", write(two_pods(multiline)))
    ingest_into(d, store)


class Ingested:
    """The plain files' and each export variant's events, each ingested once per test run:
    under pytest-xdist the first worker that needs a store builds it and the others read
    it (tests/helpers/run_store.py); the events are read once per process."""

    def __init__(self, tmp_path_factory):
        self._factory = tmp_path_factory
        self.stores: dict[str, Path] = {}
        self._events: dict[str, pl.DataFrame] = {}
        self._trees: dict[str, dict] = {}

    def _get(self, name: str, build) -> pl.DataFrame:
        from tests.helpers.run_store import built_once, tree

        if name not in self._events:
            store = built_once(self._factory, f"unseen-{name}", build)
            self.stores[name] = store
            self._events[name] = read_events(store)
            self._trees[name] = tree(store)
        return self._events[name]

    def plain(self) -> pl.DataFrame:
        return self._get("plain", build_plain)

    def wrapped(self, variant: str) -> pl.DataFrame:
        return self._get(variant, lambda store: build_wrapped(variant, store))

    def unchanged(self) -> None:
        from tests.helpers.run_store import tree

        for name, store in self.stores.items():
            assert tree(store) == self._trees[name], f"a test changed the shared store of {name}"


def _what(ev: pl.DataFrame) -> list[str]:
    return sorted(c for c in ev.columns if c not in PLACE and not c.startswith("_"))


def check(ingested: Ingested, variant: str, name: str, key: str, pod: str | None):
    """The events of one server's lines in an export against the plain file's."""
    _, precision, named, multiline = VARIANTS[variant]
    cut = variant == "gcloud-json-cut-short" and key != "vllm2"  # (the cut entry is the oldest of all)
    base = ingested.plain().filter(pl.col("source").str.ends_with(f"/{key}.cut.log" if cut else f"/{key}.log"))
    if cut:
        base = base.with_columns(pl.col("line") + 1)
    got = ingested.wrapped(variant).filter(pl.col("source").str.ends_with(f"/{name}.export"))
    if pod is not None and name == "two-pods":
        got = got.filter(pl.col("instance") == pod)
    es = entries(key, STEP // 2 if key == "vllm2" else 0, multiline)
    # the platform time of each plain line: that of the entry holding it
    first = pl.DataFrame({"line": [e[3] for e in es], "t": [e[0] for e in es]}, schema={"line": pl.Int64, "t": pl.Int64})
    n = len(lines_of(key))
    per_line = pl.DataFrame({"line": pl.int_range(1, n + 1, eager=True, dtype=pl.Int64)}).join(first, on="line", how="left").with_columns(
        pl.col("t").forward_fill())
    base = base.with_columns(pl.col("line").cast(pl.Int64)).join(per_line, on="line", how="left")
    if cut:
        # the oldest entry is the one cut: the rest gives the events of the lines after it,
        # and the cut text is kept, unparsed
        assert got.filter(pl.col("event") == "unparsed").height >= 1
        got = got.filter(pl.col("wrapper_ts").is_not_null())
    cols = [c for c in _what(base) if c in got.columns]
    assert set(_what(base)) <= set(got.columns), set(_what(base)) - set(got.columns)
    want_t = (pl.col("t") // precision * precision)
    # the plain file's time of each event: the engine's own when it is finer than a second and
    # not inferred; a relative clock (llama.cpp) anchored on the file's mtime there
    anchored = pl.col("attrs").str.contains('"ts_anchor"').fill_null(False)
    fine = (pl.col("ts").dt.microsecond() != 0) & ~pl.col("ts_inferred")
    b = base.select(*cols, want_t.alias("_t"), pl.col("ts").cast(pl.Int64).alias("_ts"), fine.fill_null(False).alias("_fine"),
                    anchored.alias("_rel"))
    g = got.select(*cols, pl.col("wrapper_ts").cast(pl.Int64).alias("_t"), pl.col("ts").cast(pl.Int64).alias("_ts"), "instance")
    order = ["_t", *cols]
    b = b.sort(order, nulls_last=True)
    g = g.sort(order, nulls_last=True)
    assert g.height == b.height, (g.height, b.height, g.group_by("event").len().sort("event").rows(),
                                  b.group_by("event").len().sort("event").rows())
    assert g.select(cols).equals(b.select(cols)), _diff(g.select(cols), b.select(cols))
    assert g["_t"].equals(b["_t"]), "platform times differ"
    # an engine time finer than a second is the event's time; else the platform's; a relative
    # clock is anchored on the platform's time of its first event instead of the mtime
    rel = b.filter("_rel")
    anchor = (rel["_t"][0] // 1000 - rel["_ts"][0]) if rel.height else 0
    want_ts = b.select(pl.when("_rel").then(pl.col("_ts") + anchor).when("_fine").then("_ts")
                       .otherwise(pl.col("_t") // 1000)).to_series()
    assert g["_ts"].equals(want_ts, check_names=False), _diff(g.select("_ts"), want_ts.to_frame("_ts"))
    if pod is not None:
        assert g["instance"].unique().to_list() == [pod]


def _diff(g: pl.DataFrame, b: pl.DataFrame) -> str:
    for i in range(min(g.height, b.height)):
        if g.row(i) != b.row(i):
            return f"row {i}: got {g.row(i, named=True)}\nwant {b.row(i, named=True)}"
    return "heights"


CASES = [(v, e) for v in VARIANTS for e in ENGINES] + [(v, "two-pods") for v in VARIANTS if VARIANTS[v][2] is not False]


@pytest.mark.parametrize("variant,case", CASES, ids=[f"{v}-{c}" for v, c in CASES])
def test_an_unseen_export_gives_the_servers_events(ingested, variant, case):
    named = VARIANTS[variant][2]
    if case == "two-pods":
        for key in ("vllm", "vllm2"):
            check(ingested, variant, "two-pods", key, POD[key])
    else:
        # logcli leaves out labels common to a whole single-stream export: no pod to name
        check(ingested, variant, case, case, POD[case] if named else None)


# the platform's own severity of each entry, as each writer above puts it
SEVERITY = {"gcloud-json": {"INFO", "ERROR"}, "otel-file-exporter": {"INFO"}, "datadog-json": {"info"},
            "datadog-csv": {"info"}, "gcp-explorer-csv": {"INFO"}}


@pytest.mark.parametrize("variant", list(SEVERITY))
def test_the_platforms_severity_is_kept_with_each_event(ingested, variant):
    got = ingested.wrapped(variant)
    sev = got.select(pl.col("labels").str.json_path_match("$.severity").alias("s"))["s"]
    assert sev.null_count() == 0 and set(sev.unique().to_list()) == SEVERITY[variant]
