"""Log-platform exports (parsers/wrappers/gcp.py, _export.py): real engine lines handed back
inside a platform's documented export shape give the events of the server's own file, with
the platform's time and instance labels, newest-first exports included."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import get_parser
from servelens.parsers import wrappers as W
from servelens.parsers.base import ParseContext, lines_frame, parse_lines
from servelens.parsers.text import parse_text

from tests.helpers import wrapping as wr
from tests.helpers.wrapping_exports import (
    POD, cw_filter_log_events, cw_get_log_events, cw_insights, gcloud_json, gcp_array, gcp_entry, gcp_ndjson, loki_default, loki_jsonl, ndjson, otlp_file,
)

ROOT = Path(__file__).resolve().parents[2]
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


def parse(engine: str, text: str):
    texts = wr.split_lines(text)
    layers = W.detect(texts[:300])
    ctx = ParseContext(engine=engine, source="t.json", instance="t", year=2026)
    return layers, texts, parse_lines(W.wrap(get_parser(engine), layers), lines_frame(texts), ctx)


def truth(rel: str, engine: str):
    """The lines, a platform time per line (ns), and the events of the plain file. A
    platform stamps a stream's lines as they arrive: the times never go backwards."""
    lines, times, base = _truth(rel, engine)
    return list(lines), list(times), base


@cache
def _truth(rel: str, engine: str):
    # the plain file's parse is the same for every export of it: once per process
    lines = wr.split_lines((ROOT / rel).read_text())
    times = wr.line_times(lines, engine)
    for i in range(1, len(times)):
        times[i] = max(times[i], times[i - 1] + 1_000)
    return tuple(lines), tuple(times), parse_text(engine, "\n".join(lines) + "\n")


def in_time_order(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.sort("wrapper_ts", maintain_order=True)


# export -> (writer, its layer, its time's precision in ns, whether lines keep their numbers)
EXPORTS = {
    "gcloud-newest-first": (gcp_array, "gcp-logging", 1, False),
    "gcp-ndjson": (gcp_ndjson, "gcp-logging", 1, True),
    "cw-filter-log-events": (cw_filter_log_events, "cloudwatch", 1_000_000, False),
    "cw-get-log-events": (cw_get_log_events, "cloudwatch", 1_000_000, False),
    "cw-insights-newest-first": (cw_insights, "cloudwatch", 1_000_000, False),
    "loki-jsonl-newest-first": (loki_jsonl, "loki", 1, False),
    # (`--forward`: whole seconds cannot tell the order of a sample's lines printed in one second)
    "loki-default-forward": (loki_default, "loki", 1_000_000_000, False),
    "otel-file-exporter": (otlp_file, "otlp", 1, False),
}


@pytest.mark.parametrize("engine,rel", SAMPLES, ids=[Path(r).name for _, r in SAMPLES])
@pytest.mark.parametrize("export", list(EXPORTS))
def test_export_gives_the_servers_events_with_its_time_and_pod(engine, rel, export):
    lines, times, base = truth(rel, engine)
    write, layer, precision, same_lines = EXPORTS[export]
    layers, texts, ev = parse(engine, write(lines, times))
    assert layers[0] == layer
    ev = in_time_order(ev)
    assert ev.select(SAME).equals(base.select(SAME))
    # the platform's time of the event's first line on the server, to its precision
    want = pl.Series([times[k - 1] // precision * precision for k in base["line"]], dtype=pl.Int64)
    assert ev["wrapper_ts"].cast(pl.Int64).equals(want, check_names=False)
    if export != "cw-get-log-events":  # (its events name no stream)
        labels = ev["labels"].str.json_decode().struct.unnest()
        assert labels["pod"].unique().to_list() == [POD]
        assert labels["namespace"].unique().to_list() == ["serving"]
        assert labels["container"].unique().to_list() == ["server"]
    # each event points at the export's own lines
    assert ev["line"].min() >= 1 and (ev["line"] + ev["n_lines"]).max() <= len(texts) + 1
    if same_lines:
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


def _two_pods(a_lines, a_times, a_pod, b_lines, b_pod):
    """Two pods' Cloud Logging entries in one export, in time order: pod b's lines written at
    the same moments as pod a's, shifted by half a step."""
    b_times = [a_times[0] + i * wr.STEP_NS + wr.STEP_NS // 2 for i in range(len(b_lines))]
    ents = [(t, gcp_entry(ln, t, pod=a_pod, i=i)) for i, (ln, t) in enumerate(zip(a_lines, a_times))]
    ents += [(t, gcp_entry(ln, t, pod=b_pod, i=10_000 + i)) for i, (ln, t) in enumerate(zip(b_lines, b_times))]
    ents.sort(key=lambda p: p[0])
    return [e for _, e in ents]


def test_a_two_pod_export_keeps_each_pods_records_apart():
    """Two servers' lines interleaved in one namespace export: each pod's tracebacks and
    requests stay whole, labelled with its pod."""
    a_lines, a_times, a_base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    b_lines, _, b_base = truth("sample_logs/vllm/real/v0_4.log", "vllm")
    _, _, ev = parse("vllm", gcloud_json(_two_pods(a_lines, a_times, "vllm-a", b_lines, "vllm-b")))
    pod = ev["labels"].str.json_decode().struct.field("pod")
    for name, base in (("vllm-a", a_base), ("vllm-b", b_base)):
        mine = in_time_order(ev.filter(pod == name))
        assert mine.select(SAME).equals(base.select(SAME)), name


# (the JSON ones of one entry an object; an OTLP batch is below)
@pytest.mark.parametrize("export", [e for e in EXPORTS if not e.startswith(("loki-default", "otel"))])
def test_an_export_cut_short_keeps_the_rest(export):
    """A download that stops inside its last entry: every whole entry gives its events, the
    broken part is one `unparsed` event holding its text."""
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    write, layer, _, _ = EXPORTS[export]
    text = write(lines, times)
    cut = max(text.rfind(k) for k in ('"textPayload"', '"message"', '"@message"', '"line"'))
    layers, texts, ev = parse("vllm", text[:cut] + "\n")
    assert layers[0] == layer
    # the entry cut is the file's last written (oldest first) or its first (newest first)
    lost = 1 if "newest-first" in export else len(lines)
    assert base.filter(pl.col("line") == lost).height == 1
    broken = ev.filter(pl.col("message").str.starts_with("{"))
    assert broken["event"].to_list() == ["unparsed"]
    assert "not a whole JSON object" in broken["labels"][0]  # (with the reason)
    assert len(texts) - broken["line"][0] <= 30  # it is the tail of the download
    rest = in_time_order(ev.filter(~pl.col("message").str.starts_with("{")))
    assert rest.select(SAME).equals(base.filter(pl.col("line") != lost).select(SAME))


def test_a_loki_jsonl_download_cut_inside_a_line_keeps_the_rest():
    """`logcli --output jsonl` stopped inside the text of its last entry (the entry's line
    then still looks like an entry, but is no whole object): the other entries give their
    events, the broken one is `unparsed` with the reason."""
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = loki_jsonl(lines, times)
    cut = text.rfind('"line": "') + len('"line": "') + 5
    layers, texts, ev = parse("vllm", text[:cut] + "\n")
    assert layers[0] == "loki"
    broken = ev.filter(pl.col("message").str.starts_with("{"))
    assert broken["event"].to_list() == ["unparsed"]
    assert "not a whole JSON object" in broken["labels"][0]
    # (newest first: the entry cut is the server's first line)
    rest = in_time_order(ev.filter(~pl.col("message").str.starts_with("{")))
    assert rest.select(SAME).equals(base.filter(pl.col("line") != 1).select(SAME))


def test_an_otlp_file_cut_inside_its_last_batch_keeps_the_batches_before():
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = otlp_file(lines, times, batch=7)
    layers, texts, ev = parse("vllm", text[: text.rfind('"body"')] + "\n")
    assert layers == ("otlp",)
    whole = (len(lines) - 1) // 7 * 7  # the lines of the batches written whole
    broken = ev.filter(pl.col("message").str.starts_with('{"resourceLogs"'))
    assert broken["event"].to_list() == ["unparsed"] and broken["line"].to_list() == [len(texts)]
    assert "not a whole JSON object" in broken["labels"][0]
    rest = in_time_order(ev.filter(~pl.col("message").str.starts_with("{")))
    assert rest.select(SAME).equals(base.filter(pl.col("line") <= whole).select(SAME))


@pytest.mark.parametrize("bare", ["record", "scope", "resource"])
def test_otlp_parts_without_a_line_keep_their_own_json(bare):
    """A record without a body (or a scope without records, a resource without scopes) once
    copied the batch's whole line as its text: 20,000 of them in one batch made tens of GB."""
    import json

    line = "INFO 06-10 14:23:45 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s"
    rec = {"timeUnixNano": "1781101425123000000", "body": {"stringValue": line}}
    n = 20_000
    shapes = {
        "record": ([{"scopeLogs": [{"logRecords": [rec] + [{"timeUnixNano": "1"}] * n}]}],
                   '{"timeUnixNano":"1","observedTimeUnixNano":null,"severityText":null,"body":null}'),
        "scope": ([{"scopeLogs": [{"logRecords": [rec]}] + [{}] * n}], '{"logRecords":null}'),
        "resource": ([{"scopeLogs": [{"logRecords": [rec]}]}] + [{}] * n, '{"resource":null,"scopeLogs":null}'),
    }
    resources, own = shapes[bare]
    text = json.dumps({"resourceLogs": resources}) + "\n"
    layers, _, ev = parse("vllm", text)
    assert layers == ("otlp",)
    assert ev.filter(pl.col("event") == "engine_stats").height == 1
    kept = ev.filter(pl.col("event") == "unparsed")
    assert kept.height == n and kept["message"].unique().to_list() == [own]


def test_an_otlp_batch_nested_past_pythons_stack_is_kept_unparsed():
    """polars refuses the nesting, Python's json then runs out of stack: the line is kept
    as not a whole object, and the batch before it is read."""
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = otlp_file(lines, times, batch=len(lines)) + '{"resourceLogs":' + "[" * 200_000 + "\n"
    layers, texts, ev = parse("vllm", text)
    assert layers == ("otlp",)
    deep = ev.filter(pl.col("line") == len(texts))
    assert deep["event"].to_list() == ["unparsed"] and "not a whole JSON object" in deep["labels"][0]
    assert in_time_order(ev.filter(pl.col("line") < len(texts))).select(SAME).equals(base.select(SAME))


def test_detection_is_from_content_only():
    lines, times, _ = truth("sample_logs/tgi/real/launcher_traceback.log", "tgi")
    entries = [gcp_entry(ln, t, i=i) for i, (ln, t) in enumerate(zip(lines, times))]
    assert W.detect(wr.split_lines(gcloud_json(entries))[:300])[0] == "gcp-logging"
    # a plain log and a docker json-file log are not taken for an export
    assert "gcp-logging" not in W.detect(lines[:300])
    assert W.detect(wr.split_lines(wr.to_docker_json(lines))[:300])[0] == "docker-json"


def test_ingest_of_a_directory_of_exports_needs_no_flag(tmp_path):
    """`servelens ingest DIR`: each export's format and engine are found from its content
    (file names say nothing), and its events are those of the server's own file."""
    from typer.testing import CliRunner

    from tests.helpers.common import events, write
    from servelens.pipeline.cli.app import app, build_app

    build_app()
    cases = {
        "a.json": ("vllm", "sample_logs/vllm/real/v1_0_11.log", gcp_array),
        "b.json": ("tgi", "sample_logs/tgi/real/launcher_traceback.log", cw_insights),
        "c.json": ("sglang", "sample_logs/sglang/real/v0_4_2025.log", cw_filter_log_events),
        "d.json": ("trtllm", "sample_logs/trtllm/real/backtraces.log", otlp_file),
        "e.log": ("llamacpp", "sample_logs/llamacpp/real/era_b_2024_startup_9928.log", loki_jsonl),
    }
    bases = {}
    for name, (engine, rel, writer) in cases.items():
        lines, times, bases[name] = truth(rel, engine)
        write(tmp_path / "exports" / name, writer(lines, times))
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "exports"), "--store", str(tmp_path / "store"), "-q"])
    assert r.exit_code == 0, r.output
    got = events(tmp_path / "store")
    for name, (engine, _, _) in cases.items():
        mine = got.filter(pl.col("source").str.ends_with(name))
        assert mine["engine"].unique().to_list() == [engine]
        # (the store keeps events in line order: a newest-first export's lines run backwards)
        # (the store keeps a message only where it says more than the event's fields)
        key = [c for c in SAME if c != "message"]
        assert mine.select(key).sort(key, nulls_last=True).equals(bases[name].select(key).sort(key, nulls_last=True))


@pytest.mark.parametrize("export", list(EXPORTS))
@pytest.mark.parametrize("block", [4096, 20_000])
def test_read_blocks_never_split_an_entry(export, block):
    """The reader's blocks (and the windows it asks about record starts) begin and end
    anywhere in an indented export: every entry still gives its events once."""
    import io

    from servelens.pipeline.sources.lines import parse_stream

    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    data = EXPORTS[export][0](lines, times).encode()
    layers = W.detect(wr.split_lines(data[:65536].decode(errors="replace"))[:300])
    ctx = ParseContext(engine="vllm", source="t", instance="t", year=2026, keep_lines=True)
    chunks = parse_stream(io.BytesIO(data), W.wrap(get_parser("vllm"), layers), ctx, offset=0, next_line=1, block_bytes=block)
    ev = pl.concat([c.events for c in chunks])
    key = [c for c in SAME if c != "model"]
    assert ev.height == base.height
    assert ev["event"].value_counts().sort("event").equals(base["event"].value_counts().sort("event"))
    if "newest-first" not in export:  # (blocks of a newest-first export are each put in order)
        assert in_time_order(ev).select(key).equals(base.select(key))


def kubectl_prefix(lines, pod=POD, times=None):
    """`kubectl logs --prefix` (and `--timestamps` when `times` are given)."""
    stamp = (lambda i: wr.rfc3339_ns(times[i]) + " ") if times else (lambda i: "")
    return "".join(f"[pod/{pod}/server] {stamp(i)}{ln}\n" for i, ln in enumerate(lines))


@pytest.mark.parametrize("engine,rel", [("vllm", "sample_logs/incident/vllm/vllm-a.log"), ("tgi", "sample_logs/tgi/real/router_text.log"),
                                        ("vllm", "sample_logs/vllm/real/v1_0_11.log")])
@pytest.mark.parametrize("timestamps", [False, True])
def test_kubectl_prefix_in_front_of_every_kind_of_line(engine, rel, timestamps):
    """uvicorn's access and shutdown lines included: the events of the plain file."""
    lines, times, base = truth(rel, engine)
    # (a log wrapped already, docker-ts or compose, gets kubectl's time in front of the line
    # as read: the same events still)
    layers, texts, ev = parse(engine, kubectl_prefix(lines, times=times if timestamps else None))
    assert layers[0] == "kubectl-prefix"
    assert ("docker-ts" in layers) == (timestamps or "docker-ts" in W.detect(lines[:300]))
    assert ev.select(["line", "n_lines", *SAME]).equals(base.select(["line", "n_lines", *SAME]))
    assert set(ev["labels"].str.json_decode().struct.field("pod").unique()) == {POD}
    assert (ev["event"] == "unparsed").sum() == (base["event"] == "unparsed").sum()


def test_kubectl_prefix_of_two_pods_interleaved_keeps_them_apart():
    a_lines, _, a_base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    b_lines, _, b_base = truth("sample_logs/vllm/real/v0_4.log", "vllm")
    a = kubectl_prefix(a_lines, pod="vllm-a").splitlines(keepends=True)
    b = kubectl_prefix(b_lines, pod="vllm-b").splitlines(keepends=True)
    mixed = [x for pair in zip(a, b) for x in pair] + a[len(b):] + b[len(a):]
    _, _, ev = parse("vllm", "".join(mixed))
    pod = ev["labels"].str.json_decode().struct.field("pod")
    key = [c for c in SAME if c != "model"]  # (a carried model is per file, not per pod)
    for name, base in (("vllm-a", a_base), ("vllm-b", b_base)):
        assert ev.filter(pod == name).select(key).equals(base.select(key)), name


def test_a_namespace_export_of_two_engines_gives_each_pod_its_engines_events():
    """A vLLM pod's and an SGLang pod's lines interleaved in one export, read as one block:
    the block names two streams, so each pod's lines go to its own engine's parser and
    give the events of that server's own file (a block naming one stream is one run)."""
    a_lines, a_times, a_base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    b_lines, _, b_base = truth("sample_logs/sglang/real/v0_4_2025.log", "sglang")
    layers, _, ev = parse("vllm", ndjson(_two_pods(a_lines, a_times, "vllm-a", b_lines, "sglang-b")))
    assert layers == ("gcp-logging",)
    pod = ev["labels"].str.json_decode().struct.field("pod")
    assert set(ev.filter(pod == "sglang-b")["engine"].unique().to_list()) == {"sglang"}
    for name, base in (("vllm-a", a_base), ("sglang-b", b_base)):
        mine = in_time_order(ev.filter(pod == name))
        assert mine.select(SAME).equals(base.select(SAME)), name

