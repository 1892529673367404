"""The pretty-printed JSON exports' shortcuts (parsers/wrappers/_export.py `Shape`,
`json_values`; gcp.py, cloudwatch.py and datadog.py read through them): a block whose
entries are all printed alike has each member read from the same row of every entry, found
in the first two entries; that gives what reading every line gives (the shortcut turned
off), for blocks printed alike and for near misses of it: members in another order on the
same number of lines, an entry missing a member, a `jsonPayload`, several pods, a message
with escapes and a newline, a block cut inside an entry, the envelope after the entries."""

from __future__ import annotations

import json

import polars as pl
import pytest

from servelens.parsers import wrappers as W
from servelens.parsers.wrappers import _export

from tests.helpers import wrapping as wr
from tests.helpers import wrapping_exports as wx
from tests.parsers.test_wrappers_exports import truth


def frame(text: str) -> pl.DataFrame:
    texts = wr.split_lines(text)
    return pl.DataFrame({"line": pl.int_range(1, len(texts) + 1, eager=True), "text": pl.Series(texts, dtype=pl.String)})


def _lines():
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    lines = list(lines)
    lines[2] = lines[2] + ' said "hi" \\ caf\u00e9 \u2603'
    return lines, times


def _gcp(lines, times, **kw):
    return [wx.gcp_entry(ln, t, i=i, **kw) for i, (ln, t) in enumerate(zip(lines, times))]


def blocks():
    """(name, layer, text) of exports printed alike and near misses of it."""
    lines, times = _lines()
    yield "gcloud", "gcp-logging", wx.gcp_array(lines, times)
    ents = _gcp(lines, times)
    ents[4]["textPayload"] = "INFO 05-12 08:19:59 x.py:1] two\nlines\n"
    # members in another order on as many lines: read by their keys, not their rows
    ents[5] = {k: ents[5][k] for k in ["insertId", "labels", "logName", "receiveTimestamp", "resource", "timestamp", "textPayload", "severity"]}
    yield "gcloud-order", "gcp-logging", wx.gcloud_json(ents)
    ents = _gcp(lines, times)
    for i, e in enumerate(ents):
        e["resource"]["labels"]["pod_name"] = f"vllm-{i % 2}"
    ents[6].pop("severity")
    yield "gcloud-2pods-missing", "gcp-logging", wx.gcloud_json(ents)
    ents = _gcp(lines, times)
    ents[7] = {k: v for k, v in ents[7].items() if k != "textPayload"} | {"jsonPayload": {"message": lines[7]}}
    yield "gcloud-jsonpayload", "gcp-logging", wx.gcloud_json(ents)
    # the pod's name where another entry has it under the entry's own labels, on the same row
    ents = _gcp(lines, times)
    ents[8]["labels"] = {"pod_name": "not-the-pod", "k8s-pod/app": "llm"}
    ents[8]["resource"]["labels"] = {"cluster_name": "c1", "container_name": "server", "location": "us-central1",
                                     "namespace_name": "serving", "project_id": "proj", "zone": "z"}
    yield "gcloud-label-moved", "gcp-logging", wx.gcloud_json(ents)
    yield "gcloud-cut", "gcp-logging", wx.gcp_array(lines, times)[:-300]
    yield "cw-filter", "cloudwatch", wx.cw_filter_log_events(lines, times)
    yield "cw-get", "cloudwatch", wx.cw_get_log_events(lines, times)
    yield "cw-insights", "cloudwatch", wx.cw_insights(lines, times)
    ev = [wx.cw_event(ln, t, i) for i, (ln, t) in enumerate(zip(lines, times))]
    ev[3] = {"message": ev[3]["message"], "logStreamName": ev[3]["logStreamName"], "timestamp": ev[3]["timestamp"],
             "ingestionTime": ev[3]["ingestionTime"], "eventId": ev[3]["eventId"]}
    ev[9]["message"] += "\n"
    yield "cw-order", "cloudwatch", json.dumps({"events": ev}, indent=4) + "\n"
    # the last entries printed otherwise: the first ones read by rows, the others line by line
    ev = [wx.cw_event(ln, t, i) for i, (ln, t) in enumerate(zip(lines, times))]
    ev[-4]["extra"] = {"a": 1}
    ev[-2].pop("logStreamName")
    yield "cw-tail-otherwise", "cloudwatch", json.dumps({"events": ev, "nextForwardToken": "f/1"}, indent=4) + "\n"
    yield "datadog", "datadog", wx.datadog_json(lines, times)
    dd = json.loads(wx.datadog_json(lines, times))
    dd["data"][-3]["attributes"]["tags"].append("pod_name:late")
    yield "datadog-tail-otherwise", "datadog", json.dumps(dd, indent=4) + "\n"
    dd = json.loads(wx.datadog_json(lines, times))
    dd["data"][3]["attributes"]["tags"] = ["kube_namespace:x", "pod_name:other", "source:vllm", "kube_container_name:c"]
    dd["data"][6]["attributes"]["tags"] = ["kube_namespace:x", "pod_name:other", "pod_name:again", "kube_container_name:c"]
    dd["data"][5]["attributes"]["service"] = None
    yield "datadog-varied", "datadog", json.dumps(dd, indent=4) + "\n"
    yield "datadog-cut", "datadog", json.dumps(dd, indent=4)[:-2000]


@pytest.mark.parametrize("name,layer,text", list(blocks()), ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_entries_printed_alike_read_as_every_line_read_says(name, layer, text, monkeypatch):
    df = frame(text)
    fast = W.decode(df, (layer,))
    monkeypatch.setattr(_export.Shape, "of", classmethod(lambda cls, *a, **k: None))
    general = W.decode(df, (layer,))
    assert fast.height > 0
    assert fast.equals(general)


def test_each_member_is_read_from_its_own_row():
    lines, times = _lines()
    ents = _gcp(lines, times)
    ents[5] = {k: ents[5][k] for k in ["insertId", "labels", "logName", "receiveTimestamp", "resource", "timestamp", "textPayload", "severity"]}
    ents[6]["resource"]["labels"]["pod_name"] = "vllm-other"
    dec = W.decode(frame(wx.gcloud_json(ents)), ("gcp-logging",)).sort("line", descending=True)
    assert dec["text"].to_list()[:8] == lines[:8]
    assert dec["_lab_pod"].to_list()[5:8] == [wx.POD, "vllm-other", wx.POD]
    assert dec["_wts"].dt.epoch("ns").to_list()[:8] == times[:8]
    ev = [wx.cw_event(ln, t, i) for i, (ln, t) in enumerate(zip(lines, times))]
    ev[3] = {"message": ev[3]["message"], "timestamp": ev[3]["timestamp"], "logStreamName": "other_ns_c-" + "0" * 64,
             "ingestionTime": ev[3]["ingestionTime"], "eventId": ev[3]["eventId"]}
    dec = W.decode(frame(json.dumps({"events": ev}, indent=4) + "\n"), ("cloudwatch",)).sort("line")
    assert dec["text"].to_list()[:6] == lines[:6]
    assert dec["_lab_pod"].to_list()[:5] == [wx.POD, wx.POD, wx.POD, "other", wx.POD]


def _shape(text: str) -> _export.Shape | None:
    df = frame(text)
    pad = " " * _export.indent_of(df)
    t = df["text"]
    return _export.Shape.of(df, pad, t == pad + "{", (t == pad + "}") | (t == pad + "},"))


def test_a_shape_is_only_where_every_entry_begins_its_lines_alike():
    lines, times = _lines()
    sh = _shape(wx.cw_insights(lines[:6], times[:6]))
    assert sh is not None and (sh.o0, sh.n, sh.count) == (1, 6, 6)
    assert sh.heads[1:5] == ['    "@timestamp": ', '    "@message": ', '    "@logStream": ', '    "@log": ']
    assert sh.rows([2]).tolist() == [3, 9, 15, 21, 27, 33]
    rows = json.loads(wx.cw_insights(lines[:6], times[:6]))
    rows[4] = {"@message": rows[4]["@message"], "@timestamp": rows[4]["@timestamp"], "@logStream": "s", "@log": "g"}
    assert _shape(json.dumps(rows, indent=2)) is None
    rows[4] = dict(rows[3], extra=1)
    assert _shape(json.dumps(rows, indent=2)) is None


def test_a_shape_decides_only_tests_a_shared_beginning_answers():
    sh = _export.Shape(0, 4, 2, ["  {", '    "tags": ', '      "', "  }"])
    assert sh.decides(['    "', '    "tags": ', '      "'])
    # an item's line may or may not go on as this member's: its beginning does not say
    assert not sh.decides(['      "pod_name": '])
    assert not sh.decides(['    "tags": ["'])


def test_offsets_hold_only_where_the_first_two_entries_agree():
    probe = pl.DataFrame({"_g": [1, 1, 2, 2], "_k": [3, 5, 3, 5]})
    assert _export.same_offsets(probe) == [3, 5]
    assert _export.same_offsets(probe.head(3)) is None
    assert _export.same_offsets(pl.DataFrame({"_g": [1, 2], "_k": [3, 4]})) is None


def test_values_alike_are_decoded_once_and_as_each_alone():
    v = pl.Series(['"a\\u00e9"'] * 3)
    assert _export.json_values(v, pl.String).to_list() == ["a\u00e9"] * 3
    v = pl.Series(['"a"', '"a"', '"b\\n"'])
    assert _export.json_values(v, pl.String).to_list() == ["a", "a", "b\n"]
    assert _export.json_values(pl.Series(["1", "1"]), pl.Int64).to_list() == [1, 1]


def _block(ts: list[int | None], pods: list[str | None], open_last: bool = False) -> pl.DataFrame:
    n = len(ts)
    return pl.DataFrame({
        "line": list(range(1, n + 1)), "text": [f"l{i}" for i in range(n)], "_n": [1] * n,
        "_wts": pl.Series(ts, dtype=pl.Int64).cast(pl.Datetime("ns", "UTC")), "_stream": [None] * n,
        "_open": [False] * (n - 1) + [open_last], "_pre": [None] * n, "_lab_pod": pl.Series(pods, dtype=pl.String),
    })


ORDERS = {
    "in-order": ([1, 2, 2, 3, 5], ["a"] * 5, False),
    "newest-first": ([5, 3, 2, 2, 1], ["a"] * 5, False),
    "newest-first-open": ([5, 3, 2, 2, 1, 9], ["a"] * 6, True),
    "newest-first-untimed": ([5, None, 3, 3, None, 1], ["a"] * 6, False),
    "mostly-newest-first": ([5, 4, 6, 2, 1, 3], ["a"] * 6, False),
    "mostly-in-order": ([1, 2, 0, 4, 5, 3, 6], ["a"] * 7, False),
    "two-pods": ([5, 3, 4, 1, 2, 0], ["a", "b", "a", "b", "a", "b"], False),
    "a-pod-missing": ([5, 3, 4, 1], ["a", None, "a", "a"], False),
    "no-pod-named": ([5, 3, 4, 1], [None] * 4, False),
    "empty-or-none": ([5, 3, 4, 1], ["", None, "", None], False),
}


@pytest.mark.parametrize("name", list(ORDERS))
def test_one_streams_time_order_is_the_grouped_one(name, monkeypatch):
    ts, pods, open_last = ORDERS[name]
    df = _block(ts, pods, open_last)
    fast = _export.time_order(df, ["_lab_namespace", "_lab_pod"])
    monkeypatch.setattr(_export, "_one_stream", lambda df, keys: False)
    grouped = _export.time_order(df, ["_lab_namespace", "_lab_pod"])
    assert fast.equals(grouped)
    if name == "newest-first":
        # entries of one time keep the order the server wrote them in
        assert fast["text"].to_list() == ["l4", "l3", "l2", "l1", "l0"]
    if name == "newest-first-open":
        assert fast["text"].to_list()[-1] == "l5"


def test_member_values_are_each_lines_value():
    pre = '    "k": '
    same = pl.Series([pre + '"a\\u00e9",'] * 3)
    mixed = pl.Series([pre + '"x",', pre + '"y\\n",', pre + '"x"'])
    nums = pl.Series([pre + "1,", pre + "2,", pre + "3"])
    out = _export.member_values({"s": (same, len(pre), pl.String), "m": (mixed, len(pre), pl.String), "n": (nums, len(pre), pl.Int64)})
    assert out.columns == ["s", "m", "n"]
    assert out["s"].to_list() == ["a\u00e9"] * 3
    assert out["m"].to_list() == ["x", "y\n", "x"]
    assert out["n"].to_list() == [1, 2, 3]
    with pytest.raises(pl.exceptions.PolarsError):
        _export.member_values({"b": (pl.Series([pre + '"a",', pre + "{"]), len(pre), pl.String)})


def test_objects_a_line_decode_as_picked_ones():
    dtype = pl.Struct({"message": pl.String})
    df = W.decode(frame('{"message": "a"}\n{"message": "b"}\n'), ())
    out = _export.decode_objects(df, dtype)
    assert out["_j"].struct.field("message").to_list() == ["a", "b"]
    # a line that is no object beside them is left undecoded, the objects read as before
    df = W.decode(frame('{"message": "a"}\nINFO plain line\n{"message": "b"}\n'), ())
    out = _export.decode_objects(df, dtype)
    assert out["_j"].struct.field("message").to_list() == ["a", None, "b"]
    assert "_lab_decode_error" not in out.columns
