"""Grafana Explore downloads, Elasticsearch / OpenSearch documents and Datadog's Logs Search
JSON (parsers/wrappers/grafana.py, elastic.py, datadog.py): real engine lines inside each
give the events of the server's own file, with the platform's time and the pod's labels."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import get_parser
from servelens.parsers import wrappers as W
from servelens.parsers.base import ParseContext
from servelens.parsers.text import parse_text

from tests.helpers import wrapping as wr
from tests.parsers.test_wrappers_exports import SAME, SAMPLES, parse, truth
from tests.parsers.test_wrappers_exports_csv import check
from tests.helpers.wrapping_exports import POD, datadog_json, datadog_ndjson, elastic_hits, elastic_ndjson, grafana_json, grafana_txt

K8S = {"pod": POD, "namespace": "serving", "container": "server"}
# export -> (writer, its layer, its time's precision in ns, labels)
EXPORTS = {
    "grafana-txt": (grafana_txt, "grafana-explore", 1_000_000, K8S),
    "grafana-json": (grafana_json, "grafana-explore", 1, K8S),
    "elastic-source-ndjson": (elastic_ndjson, "elastic", 1_000_000, K8S | {"host": "gke-c1-pool-1-node", "node": "gke-c1-pool-1-node"}),
    "elastic-hits-indented": (elastic_hits, "elastic", 1_000_000, K8S),
    "datadog-api-indented": (datadog_json, "datadog", 1_000_000, K8S | {"service": "llm"}),
    "datadog-ndjson": (datadog_ndjson, "datadog", 1_000_000, K8S),
}


@pytest.mark.parametrize("engine,rel", SAMPLES, ids=[Path(r).name for _, r in SAMPLES])
@pytest.mark.parametrize("export", list(EXPORTS))
def test_export_gives_the_servers_events(engine, rel, export):
    lines, times, base = truth(rel, engine)
    write, layer, precision, labels = EXPORTS[export]
    layers, texts, ev = parse(engine, write(lines, times))
    assert layers[0].partition(":")[0] == layer
    check(ev, base, times, precision, labels)
    assert ev["line"].min() >= 1 and (ev["line"] + ev["n_lines"]).max() <= len(texts) + 1


def test_grafana_text_keeps_its_common_labels_with_the_layer():
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    layers = W.detect(wr.split_lines(grafana_txt(lines, times))[:300])
    assert layers[0] == 'grafana-explore:{"container":"server","namespace":"serving","pod":"%s"}' % POD


@pytest.mark.parametrize("export", ["elastic-source-ndjson", "datadog-ndjson", "elastic-hits-indented", "datadog-api-indented"])
def test_a_document_cut_short_is_unparsed_and_the_rest_ingests(export):
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = EXPORTS[export][0](lines, times)
    cut = text.rfind('"message"')
    layers, texts, ev = parse("vllm", text[:cut] + "\n")
    broken = ev.filter(pl.col("message").str.starts_with("{"))
    assert broken["event"].to_list() == ["unparsed"]
    assert "not a whole JSON object" in broken["labels"][0]
    # newest first: the entry cut is the file's last, the server's first line
    rest = ev.filter(~pl.col("message").str.starts_with("{")).sort("wrapper_ts", maintain_order=True)
    assert rest.select(SAME).equals(base.filter(pl.col("line") != 1).select(SAME))


@pytest.mark.parametrize("export", list(EXPORTS))
def test_read_blocks_never_split_an_entry(export):
    import io

    from servelens.pipeline.sources.lines import parse_stream

    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    data = EXPORTS[export][0](lines, times).encode()
    layers = W.detect(wr.split_lines(data[:65536].decode(errors="replace"))[:300])
    ctx = ParseContext(engine="vllm", source="t", instance="t", year=2026, keep_lines=True)
    chunks = parse_stream(io.BytesIO(data), W.wrap(get_parser("vllm"), layers), ctx, offset=0, next_line=1, block_bytes=4096)
    ev = pl.concat([c.events for c in chunks])
    assert ev.height == base.height
    assert ev["event"].value_counts().sort("event").equals(base["event"].value_counts().sort("event"))


def two_pod_entries(writer_entry):
    """Two vLLM servers' lines interleaved in time, one export of their namespace."""
    a_lines, a_times, a_base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    b_lines, _, b_base = truth("sample_logs/vllm/real/v0_4.log", "vllm")
    b_times = [a_times[0] + i * wr.STEP_NS + wr.STEP_NS // 2 for i in range(len(b_lines))]
    ents = [(t, writer_entry(ln, t, "vllm-a")) for ln, t in zip(a_lines, a_times)]
    ents += [(t, writer_entry(ln, t, "vllm-b")) for ln, t in zip(b_lines, b_times)]
    ents.sort(key=lambda p: p[0], reverse=True)  # newest first, as a search returns them
    return [e for _, e in ents], {"vllm-a": a_base, "vllm-b": b_base}


@pytest.mark.parametrize("explicit", [False, True])
def test_a_namespace_export_gives_one_instance_per_pod(tmp_path, explicit):
    """`servelens ingest` of one Elastic export holding two pods: an instance per pod, named
    as Kubernetes names it, each with its own server's events and nothing of the other's;
    `--instance` still names the whole file."""
    import json

    from typer.testing import CliRunner

    from tests.helpers.common import events, write
    from servelens.pipeline.cli.app import app, build_app
    from tests.helpers.wrapping_exports import elastic_doc

    build_app()
    docs, bases = two_pod_entries(lambda ln, t, pod: elastic_doc(ln, t, pod=pod))
    write(tmp_path / "exports" / "serving.ndjson", "".join(json.dumps(d) + "\n" for d in docs))
    args = ["ingest", str(tmp_path / "exports"), "--store", str(tmp_path / "store"), "-q"] + (["--instance", "mine"] if explicit else [])
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    got = events(tmp_path / "store")
    assert got["engine"].unique().to_list() == ["vllm"]
    if explicit:
        assert got["instance"].unique().to_list() == ["mine"]
        return
    assert sorted(got["instance"].unique().to_list()) == ["vllm-a", "vllm-b"]
    key = [c for c in SAME if c not in ("message", "model")]
    for pod, base in bases.items():
        mine = got.filter(pl.col("instance") == pod)
        assert mine.select(key).sort(key, nulls_last=True).equals(base.select(key).sort(key, nulls_last=True)), pod


@cache
def _copies(engine: str, rel: str, k: int) -> tuple[tuple[str, ...], pl.DataFrame]:
    """The sample written k times over, and the events of that plain text (the same for
    every export of it: once per process)."""
    lines, _, _ = truth(rel, engine)
    lines = lines * k
    return tuple(lines), parse_text(engine, "\n".join(lines) + "\n")


def _export_of_copies(engine: str, rel: str, export: str, block: int):
    """The fewest copies (two at least: a seam where the sample starts over) whose export
    spans three blocks, so that it is read in several blocks; the export's bytes, lines and
    the events of the plain text."""
    from tests.helpers import wrapping_exports as X

    k = 2
    while True:
        copies, base = _copies(engine, rel, k)
        lines = list(copies)
        # (the copies' own times go back at each copy: the platform's are its arrival times)
        times = [1_781_101_425_000_000_000 + i * 1_500_000 for i in range(len(lines))]
        data = getattr(X, export)(lines, times).encode()
        if len(data) > 3 * block:
            return data, base
        k += 1


@pytest.mark.parametrize("engine,rel", [("tgi", "sample_logs/tgi/real/launcher_traceback.log"), ("sglang", "sample_logs/sglang/real/startup_and_crash.log"),
                                        ("trtllm", "sample_logs/trtllm/real/backtraces.log"), ("vllm", "sample_logs/vllm/real/v1_0_11.log")])
@pytest.mark.parametrize("export", ["gcp_array", "cw_insights", "loki_jsonl", "cw_insights_csv", "datadog_json", "elastic_ndjson", "grafana_txt",
                                    "kibana_csv"])
@pytest.mark.parametrize("block", [4096])
def test_a_newest_first_export_bigger_than_a_block_gives_the_servers_events(engine, rel, export, block):
    """Read in blocks smaller than the export (every block put in order on its own), a
    newest-first export gives the events of the server's file: no traceback cut between
    blocks. (The model a vLLM file names once reaches only the blocks after it on disk.)"""
    import io

    from servelens.pipeline.sources.lines import parse_stream

    data, base = _export_of_copies(engine, rel, export, block)
    assert len(data) > 2 * block
    layers = W.detect(wr.split_lines(data[:65536].decode(errors="replace"))[:300])
    ctx = ParseContext(engine=engine, source="t", instance="t", year=2026, keep_lines=True)
    chunks = list(parse_stream(io.BytesIO(data), W.wrap(get_parser(engine), layers), ctx, offset=0, next_line=1, block_bytes=block))
    # (a parser with no bounded look-back, TensorRT-LLM's, holds a newest-first export's
    # blocks back until a record start is certain: at this size, the whole file)
    assert len(chunks) > 1 or getattr(get_parser(engine), "RECORD_LOOKBACK", None) is None
    # (events of one time at the export's precision: the older is further down on disk)
    ev = pl.concat([c.events for c in chunks]).sort(["wrapper_ts", "line"], descending=[False, True])
    key = [c for c in SAME if c != "model"]
    assert ev.select(key).equals(base.select(key))


def test_a_grafana_json_download_cut_short_keeps_its_whole_entries():
    """The JSON download is one line: cut inside its oldest entry (the array's last), every
    whole entry still gives its events, the broken one is `unparsed`; and a download larger
    than what detection reads of a file's head is still found."""
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = grafana_json(lines, times)
    layers, texts, ev = parse("vllm", text[: text.rfind('"line"') + 20])
    assert layers[0] == "grafana-explore" and len(texts) == 1
    broken = ev.filter(pl.col("message").str.starts_with('{"line"'))
    assert broken["event"].to_list() == ["unparsed"]
    rest = ev.filter(~pl.col("message").str.starts_with('{"line"')).sort("wrapper_ts", maintain_order=True)
    assert rest.select(SAME).equals(base.filter(pl.col("line") != 1).select(SAME))
    big = grafana_json(lines * 40, list(range(times[0], times[0] + 40 * len(lines) * 1_000_000, 1_000_000)))
    assert len(big) > W.SAMPLE_BYTES
    head = W.head_sample(big.encode()[: W.SAMPLE_BYTES])
    assert W.detect(head) == ("grafana-explore",)
    from servelens.parsers import detect_engine

    assert detect_engine(W.decode_texts(head, ("grafana-explore",)))[0] == "vllm"


def test_a_grafana_json_download_cut_short_is_not_held_once_per_entry():
    """Cut short, the one-line download is split into its entries: each keeps its own text
    (the broken one its piece), never the download's whole line, which for a download of
    many entries would be held as many times as it has entries."""
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    text = grafana_json(lines, times)
    cut = text[: text.rfind('"line"') + 20]
    df = pl.DataFrame({"line": [1], "text": [cut]})
    dec = W.decode(df, ("grafana-explore",))
    assert dec.height == len(lines)
    assert dec["text"].str.len_bytes().sum() < len(cut.encode())
    assert dec.filter(pl.col("text").str.starts_with('{"line"')).height == 1  # the broken one
    from servelens.parsers.wrappers import grafana

    entries = grafana._entries(W.start(df).with_columns(pl.col("text").str.contains(grafana._JSON).alias("_isj")))
    assert entries.height == len(lines)
    assert entries["text"].str.len_bytes().sum() < len(cut.encode())


def test_ingest_of_a_directory_of_new_exports_needs_no_flag(tmp_path):
    """`servelens ingest DIR` of files just downloaded (a Grafana JSON download ends without a
    newline, and is still read whole): each format and engine found from content."""
    from typer.testing import CliRunner

    from tests.helpers.common import events, write
    from servelens.pipeline.cli.app import app, build_app
    from tests.helpers.wrapping_exports import cw_console_csv, kibana_csv

    build_app()
    cases = {
        "a.json": ("vllm", "sample_logs/vllm/real/v1_0_11.log", grafana_json),
        "b.csv": ("tgi", "sample_logs/tgi/real/launcher_traceback.log", kibana_csv),
        "c.json": ("sglang", "sample_logs/sglang/real/v0_4_2025.log", datadog_json),
        "d.csv": ("trtllm", "sample_logs/trtllm/real/backtraces.log", cw_console_csv),
        "e.json": ("llamacpp", "sample_logs/llamacpp/real/era_b_2024_startup_9928.log", elastic_hits),
    }
    bases = {}
    for name, (engine, rel, writer) in cases.items():
        lines, times, bases[name] = truth(rel, engine)
        write(tmp_path / "exports" / name, writer(lines, times), age_s=1)  # (downloaded a second ago)
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "exports"), "--store", str(tmp_path / "store"), "-q"])
    assert r.exit_code == 0, r.output
    got = events(tmp_path / "store")
    for name, (engine, _, _) in cases.items():
        mine = got.filter(pl.col("source").str.ends_with(name))
        assert mine["engine"].unique().to_list() == [engine], name
        key = [c for c in SAME if c not in ("message", "model")]
        assert mine.select(key).sort(key, nulls_last=True).equals(bases[name].select(key).sort(key, nulls_last=True)), name
