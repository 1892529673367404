"""Log-platform CSV downloads (parsers/wrappers/csvexport.py): real engine lines inside each
platform's CSV give the events of the server's own file, with the platform's time (ms, or
ns for Cloud Logging) and instance labels; newest-first downloads, messages quoted over
several lines, rows with a broken quote and reads in small blocks included."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import get_parser
from servelens.parsers import wrappers as W
from servelens.parsers.base import ParseContext

from tests.helpers import wrapping as wr
from tests.parsers.test_wrappers_exports import SAME, SAMPLES, in_time_order, parse, truth
from tests.helpers.wrapping_exports import CW_STREAM, POD, cw_console_csv, cw_insights_csv, datadog_csv, gcp_csv, kibana_csv

# export -> (writer, its time's precision in ns, the labels it names the instance by)
CSVS = {
    "gcp-logs-explorer": (gcp_csv, 1, {"pod": POD, "namespace": "serving", "container": "server"}),
    "cw-console": (cw_console_csv, 1_000_000, {}),
    "cw-insights-newest-first": (cw_insights_csv, 1_000_000, {"pod": POD, "namespace": "serving", "container": "server", "log_stream": CW_STREAM}),
    "datadog-newest-first": (datadog_csv, 1_000_000, {"pod": POD, "namespace": "serving", "container": "server", "service": "llm"}),
    "kibana-newest-first": (kibana_csv, 1_000_000, {"pod": POD, "namespace": "serving", "container": "server", "host": "gke-c1-pool-1-node"}),
}


def check(ev, base, times, precision, labels):
    ev = in_time_order(ev)
    assert ev.select(SAME).equals(base.select(SAME))
    want = pl.Series([times[k - 1] // precision * precision for k in base["line"]], dtype=pl.Int64)
    assert ev["wrapper_ts"].cast(pl.Int64).equals(want, check_names=False)
    if labels:
        got = ev["labels"].str.json_decode().struct.unnest()
        for k, v in labels.items():
            assert got[k].unique().to_list() == [v], k


@pytest.mark.parametrize("engine,rel", SAMPLES, ids=[Path(r).name for _, r in SAMPLES])
@pytest.mark.parametrize("export", list(CSVS))
def test_csv_export_gives_the_servers_events(engine, rel, export):
    lines, times, base = truth(rel, engine)
    write, precision, labels = CSVS[export]
    layers, texts, ev = parse(engine, write(lines, times))
    assert layers[0].startswith("csv-export:")
    check(ev, base, times, precision, labels)
    assert ev["line"].min() >= 2 and (ev["line"] + ev["n_lines"]).max() <= len(texts) + 1


def joined_records(base: pl.DataFrame, lines: list[str]) -> list[tuple[int, int]]:
    """(first index, count) per event of the plain file: the lines a log agent's multiline
    rule would have sent as one entry (blank lines at its end sent on their own: a message's
    last newline is the agent's, not the server's)."""
    out = []
    for a, n in zip(base["line"], base["n_lines"]):
        a, whole = int(a) - 1, int(n)
        n = whole
        while n > 1 and not lines[a + n - 1].strip():
            n -= 1
        out += [(a, n)] + [(i, 1) for i in range(a + n, a + whole)]
    return out


@pytest.mark.parametrize("engine,rel", [("vllm", "sample_logs/incident/vllm/vllm-a.log"), ("tgi", "sample_logs/tgi/real/launcher_traceback.log"),
                                        ("trtllm", "sample_logs/trtllm/real/backtraces.log"), ("sglang", "sample_logs/sglang/real/startup_and_crash.log")])
@pytest.mark.parametrize("export", list(CSVS))
def test_a_traceback_in_one_quoted_multiline_message(engine, rel, export):
    lines, times, base = truth(rel, engine)
    groups = joined_records(base, lines)
    assert any(n > 1 for _, n in groups)
    write, precision, labels = CSVS[export]
    text = write(lines, times, groups)
    assert len(wr.split_lines(text)) > len(groups) + 1  # some row runs over several lines
    _, _, ev = parse(engine, text)
    check(ev, base, times, precision, labels)


def test_a_row_with_an_unclosed_quote_is_unparsed_and_the_rest_ingests():
    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    rows = wr.split_lines(cw_insights_csv(lines, times))
    # the newest entry's message loses its closing quote: `...,"INFO ...` to the line end
    k = 5
    assert rows[k].count(",") >= 3
    broken = rows[k].split(",")[0] + ',"' + rows[k].split(",", 1)[1]
    rows[k] = broken
    layers, texts, ev = parse("vllm", "\n".join(rows) + "\n")
    bad = ev.filter(pl.col("labels").str.contains("decode_error"))
    # one event at its row, its text the row as written (an engine line inside may still be
    # recognised by the engine parser), the reason in its labels
    assert bad.height == 1 and bad["line"].to_list() == [k + 1]
    assert bad["event"][0] in ("unparsed", "log")
    assert "unclosed quote" in bad["labels"][0]
    lost = len(lines) - (k - 1)  # the row's line in the server's file (newest first)
    rest = in_time_order(ev.filter(~pl.col("labels").str.contains("decode_error")))
    assert rest.select(SAME).equals(base.filter(pl.col("line") != lost).select(SAME))


def test_an_export_cut_inside_a_quoted_message_keeps_the_rest():
    lines, times, base = truth("sample_logs/tgi/real/launcher_traceback.log", "tgi")
    text = cw_console_csv(lines, times, joined_records(base, lines))
    # cut inside the last traceback quoted over several lines
    cut = text.rfind('\n  File ""')
    _, texts, ev = parse("tgi", text[:cut] + "\n")
    bad = ev.filter(pl.col("labels").str.contains("decode_error"))
    assert bad.height == 1 and bad["line"][0] < len(texts)
    assert "Traceback" in bad["message"][0]
    # every entry before it gives the events of the server's file, in order
    kept = in_time_order(ev.filter(pl.col("line") < bad["line"][0]))
    assert kept.height >= 1 and kept.select(SAME).equals(base.head(kept.height).select(SAME))
    assert ev.height == kept.height + 1


def test_csv_detection_is_from_content_only():
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    for write, _, _ in CSVS.values():
        assert W.detect(wr.split_lines(write(lines, times))[:300])[0].startswith("csv-export:")
    # a plain log, and a CSV naming no message and time column, are no export
    assert not any(x.startswith("csv") for x in W.detect(lines[:300]))
    assert not any(x.startswith("csv") for x in W.detect(["name,count", "a,1", "b,2"]))


@pytest.mark.parametrize("export", list(CSVS))
@pytest.mark.parametrize("block", [4096, 20_000])
def test_read_blocks_never_split_a_row(export, block):
    import io

    from servelens.pipeline.sources.lines import parse_stream

    lines, times, base = truth("sample_logs/tgi/real/launcher_traceback.log", "tgi")
    data = CSVS[export][0](lines, times, joined_records(base, lines)).encode()
    layers = W.detect(wr.split_lines(data[:65536].decode(errors="replace"))[:300])
    ctx = ParseContext(engine="tgi", source="t", instance="t", year=2026, keep_lines=True)
    chunks = parse_stream(io.BytesIO(data), W.wrap(get_parser("tgi"), layers), ctx, offset=0, next_line=1, block_bytes=block)
    ev = pl.concat([c.events for c in chunks])
    assert ev.height == base.height
    assert ev["event"].value_counts().sort("event").equals(base["event"].value_counts().sort("event"))
    if "newest-first" not in export:
        assert in_time_order(ev).select(SAME).equals(base.select(SAME))


def test_a_json_payload_column_gives_its_message():
    """An OpenSearch Dashboards CSV of structured logs: the whole payload, pretty-printed over
    several lines, in one `json_payload` column; its `message` is the engine line."""
    import json

    from tests.helpers.wrapping_exports import _csv

    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    rows = [[f"{t // 1_000_000}", "server", json.dumps({"message": ln, "severity": "INFO", "logger": "vllm"}, indent=2)]
            for ln, t in zip(lines, times)]
    text = _csv(["@timestamp", "kubernetes.container_name", "json_payload"], rows[::-1])
    layers, _, ev = parse("vllm", text)
    assert layers[0].startswith("csv-export:")
    check(ev, base, times, 1_000_000, {"container": "server"})


def test_a_two_pod_kibana_csv_keeps_each_pods_records_apart():
    """One Discover CSV of a namespace: two pods' lines interleaved, newest first; each pod's
    events are its server's, and each pod is its own instance."""
    from tests.helpers.wrapping_exports import _csv

    a_lines, a_times, a_base = truth("sample_logs/incident/vllm/vllm-a.log", "vllm")
    b_lines, _, b_base = truth("sample_logs/vllm/real/v0_4.log", "vllm")
    b_times = [a_times[0] + i * wr.STEP_NS + wr.STEP_NS // 2 for i in range(len(b_lines))]
    rows = [(t, [str(t // 1_000_000), "serving", "vllm-a", ln]) for ln, t in zip(a_lines, a_times)]
    rows += [(t, [str(t // 1_000_000), "serving", "vllm-b", ln]) for ln, t in zip(b_lines, b_times)]
    rows.sort(key=lambda r: r[0], reverse=True)
    text = _csv(["@timestamp", "kubernetes.namespace", "kubernetes.pod.name", "message"], [r for _, r in rows])
    _, _, ev = parse("vllm", text)
    key = [c for c in SAME if c != "model"]
    for pod, base in (("vllm-a", a_base), ("vllm-b", b_base)):
        mine = in_time_order(ev.filter(pl.col("instance") == pod))
        assert mine.select(key).equals(base.select(key)), pod
    assert ev.height == a_base.height + b_base.height
