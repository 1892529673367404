"""More of the export decoders' shortcuts (parsers/wrappers/grafana.py, csvexport.py) give
what the general reading gives: a Grafana text download's block read on its own path (a
block with no JSON download line), and a CSV export's times read in the one form the first
time is in. Each is checked against the same input with the shortcut turned off, on the
awkward blocks real downloads hold, and on values written out by hand."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from servelens.parsers import wrappers as W
from servelens.parsers.wrappers import csvexport, grafana
from servelens.parsers.wrappers._frame import start

from tests.helpers import wrapping as wr
from tests.helpers.wrapping_exports import POD, grafana_txt

T0 = 1_781_101_425_123_000_000  # 2026-06-10T14:23:45.123Z


def frame(texts: list[str], first: int = 1) -> pl.DataFrame:
    return pl.DataFrame({"line": pl.int_range(first, first + len(texts), eager=True), "text": pl.Series(texts, dtype=pl.String)})


def ms_row(ns: int, line: str) -> str:
    sec, frac = divmod(ns, 1_000_000_000)
    iso = dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac // 1_000_000:03d}Z"
    return f"{ns // 1_000_000}\t{iso}\t{line}"


def old_row(ns: int, line: str) -> str:
    sec, frac = divmod(ns, 1_000_000_000)
    return dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + f".{frac // 1_000_000:03d}\t{line}"


def grafana_blocks():
    """(name, layer, frame) of Grafana text downloads and near misses of the shortcut."""
    lines = [f"INFO 06-10 14:23:{i % 60:02d} [loggers.py:123] Engine 000: step {i}, \"quoted\"" for i in range(40)]
    times = [T0 + i * 7_000_000 for i in range(40)]
    text = grafana_txt(lines, times)
    rows = wr.split_lines(text)
    layer = grafana.layer(rows[:300])
    yield "newest-first", layer, frame(rows)
    meta, body = rows[:4], rows[4:]
    yield "oldest-first", layer, frame(meta + body[::-1])
    yield "middle", layer, frame(body[5:30], first=10)
    yield "two-rows", layer, frame(body[:2], first=10)
    # an older Grafana's rows among the newer ones, a message's second line, a blank line
    mixed = list(body)
    mixed[3] = old_row(times[-4], lines[-4])
    mixed.insert(6, "  continued")
    mixed.insert(9, "")
    yield "mixed-forms", layer, frame(meta + mixed)
    # more meta lines than the first rows looked at, then the rows
    many = [f'Line limit: "{i}"' for i in range(grafana._HEAD_ROWS + 10)]
    yield "long-meta", layer, frame([rows[0], *many, "", "", *body])
    # two rows out of order in an otherwise oldest-first block: put back in time order
    swapped = body[::-1]
    swapped[10], swapped[11] = swapped[11], swapped[10]
    yield "one-swap", layer, frame(meta + swapped)
    # no common labels: the layer names none
    yield "no-labels", "grafana-explore", frame(body)
    # the last line unfinished (a reader's block cut short)
    yield "open-last", layer, frame(rows).with_columns(pl.lit(False).alias("_open"))


def general(df: pl.DataFrame, layer: str, monkeypatch) -> pl.DataFrame:
    with monkeypatch.context() as m:
        m.setattr(grafana, "_text_rows", lambda df, common: None)
        return W.decode(df, (layer,))


@pytest.mark.parametrize("name,layer,df", list(grafana_blocks()), ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_a_grafana_text_block_reads_as_the_general_reading(name, layer, df, monkeypatch):
    fast = W.decode(df, (layer,))
    assert fast.height >= 2
    assert fast.columns == general(df, layer, monkeypatch).columns
    assert fast.equals(general(df, layer, monkeypatch), null_equal=True)


def test_a_grafana_text_block_keeps_an_outer_layers_labels_in_their_place(monkeypatch):
    _, layer, df = next(grafana_blocks())
    dec = start(df).with_columns(pl.lit("outer").alias("_lab_pod"), pl.lit("x").alias("_lab_other"))
    common = layer.partition(":")[2]
    fast = grafana.decode(dec, common)
    with monkeypatch.context() as m:
        m.setattr(grafana, "_text_rows", lambda df, common: None)
        slow = grafana.decode(dec, common)
    assert fast.columns == slow.columns
    assert fast.equals(slow, null_equal=True)
    assert set(fast["_lab_pod"].to_list()) == {POD}


def test_a_grafana_text_block_gives_each_rows_line_and_time():
    rows = [ms_row(T0 + 2_000_000, "b, later"), old_row(T0 + 1_000_000, "a"), ms_row(T0, "first\tline")]
    text = 'Common labels: {"pod":"vllm-0","app":"llm"}\n\n\n' + "\n".join(rows) + "\n"
    texts = wr.split_lines(text)
    out = W.decode(frame(texts), (grafana.layer(texts),))
    assert out["text"].to_list() == ["first\tline", "a", "b, later"]
    assert out["_wts"].dt.epoch("ms").to_list() == [T0 // 1_000_000, T0 // 1_000_000 + 1, T0 // 1_000_000 + 2]
    assert out["line"].to_list() == [6, 5, 4]
    assert out["_lab_pod"].to_list() == ["vllm-0"] * 3 and out["_lab_app"].to_list() == ["llm"] * 3
    assert out["_lab_container"].null_count() == 3


def test_a_block_with_a_json_download_line_takes_the_general_reading():
    texts = ['[{"line":"x","timestamp":"1781101425123000000","fields":{"pod":"p"}}]', ms_row(T0, "y")]
    assert grafana._text_rows(start(frame(texts)), "") is None
    assert grafana._text_rows(start(frame([ms_row(T0, "y"), ms_row(T0, "z")])), "") is not None


# --- CSV times ---------------------------------------------------------------------------

TIMES = {
    "rfc3339-z": ["2026-06-10T14:23:45.123Z", "2026-06-10T14:23:46.5Z", None, " 2026-06-10T14:23:47Z "],
    "rfc3339-offset": ["2026-06-10T16:23:45.123+02:00", "2026-06-10T14:23:46.123456789Z"],
    "space": ["2026-06-10 14:23:45.123", "2026-06-10 14:23:46.000", "2026-06-10 14:23:47.5"],
    "kibana": ["Jun 10, 2026 @ 14:23:45.123", "Jun 9, 2026 @ 01:02:03.004", "Oct 1, 2026 @ 00:00:00.000"],
    "epoch": ["1781101425", "1781101425123", "1781101425123456", "1781101425123456789"],
    # a file whose times change form: the first form does not read them all
    "kibana-then-epoch": ["Jun 10, 2026 @ 14:23:45.123", "1781101425123"],
    "space-then-rfc3339": ["2026-06-10 14:23:45.123", "2026-06-10T14:23:46.000Z"],
    "epoch-then-junk": ["1781101425123", "soon"],
    "junk-first": ["soon", "2026-06-10T14:23:46.000Z"],
    "all-null": [None, None],
}
EXPECT = {
    "kibana": ["2026-06-10 14:23:45.123", "2026-06-09 01:02:03.004", "2026-10-01 00:00:00.000"],
    "epoch": ["2026-06-10 14:23:45.000", "2026-06-10 14:23:45.123", "2026-06-10 14:23:45.123", "2026-06-10 14:23:45.123"],
    "kibana-then-epoch": ["2026-06-10 14:23:45.123", "2026-06-10 14:23:45.123"],
    "rfc3339-offset": ["2026-06-10 14:23:45.123", "2026-06-10 14:23:46.123"],
}


def times_of(values: list[str | None], monkeypatch, one_form: bool) -> pl.Series:
    df = pl.DataFrame({"t": pl.Series(values, dtype=pl.String)})
    with monkeypatch.context() as m:
        if not one_form:
            m.setattr(csvexport, "_one_form_time", lambda df, s: None)
        return df.select(csvexport.any_time_of(df, pl.col("t")).alias("t"))["t"]


@pytest.mark.parametrize("name", list(TIMES))
def test_csv_times_read_in_one_form_as_the_forms_in_turn_read_them(name, monkeypatch):
    fast, slow = times_of(TIMES[name], monkeypatch, True), times_of(TIMES[name], monkeypatch, False)
    assert fast.dtype == slow.dtype == pl.Datetime("ns", "UTC")
    assert fast.equals(slow, null_equal=True)
    if name in EXPECT:
        assert fast.dt.strftime("%Y-%m-%d %H:%M:%S%.3f").to_list() == EXPECT[name]


def test_the_one_form_reading_is_taken_only_where_it_reads_every_time():
    def one(values):
        df = pl.DataFrame({"t": pl.Series(values, dtype=pl.String)})
        return csvexport._one_form_time(df, pl.col("t").str.strip_chars())

    assert one(TIMES["kibana"]) is not None and one(TIMES["epoch"]) is not None
    assert one(TIMES["kibana-then-epoch"]) is None
    assert one(TIMES["junk-first"]) is None and one(TIMES["all-null"]) is None


# --- CSV time order of one stream ----------------------------------------------------------

def order_frame(pods: list[str | None], ms: list[int | None], open_last: bool = False, containers=None) -> pl.DataFrame:
    n = len(pods)
    return pl.DataFrame({
        "line": pl.int_range(1, n + 1, eager=True),
        "text": [f"l{i}" for i in range(n)],
        "_wts": pl.Series([None if m is None else T0 + m * 1_000_000 for m in ms], dtype=pl.Int64).cast(pl.Datetime("ns", "UTC")),
        "_open": [False] * (n - 1) + [open_last],
        "_lab_pod": pl.Series(pods, dtype=pl.String),
        "_lab_container": pl.Series(containers or ["server"] * n, dtype=pl.String),
    })


ORDERS = {
    "newest-first": (["a"] * 6, [6, 5, 4, 3, 2, 1]),
    "oldest-first": (["a"] * 4, [1, 2, 3, 4]),
    "ties-newest-first": (["a"] * 5, [3, 3, 2, 2, 1]),
    "one-late": (["a"] * 5, [1, 2, 4, 3, 5]),
    "no-time-rows": (["a"] * 5, [3, None, 2, None, 1]),
    "null-and-empty-pod": ([None, "", None, ""], [4, 3, 2, 1]),
    "two-pods": (["a", "b", "a", "b", "a"], [5, 5, 4, 3, 1]),
    "two-pods-in-runs": (["b", "b", "a", "a"], [4, 3, 2, 1]),
    "pod-then-null": (["a", None, "a"], [3, 2, 1]),
    "no-times": (["a", "a", "a"], [None, None, None]),
}


@pytest.mark.parametrize("name", list(ORDERS))
@pytest.mark.parametrize("open_last", [False, True])
def test_time_order_of_one_stream_is_the_grouped_ones(name, open_last, monkeypatch):
    from servelens.parsers.wrappers import _export

    pods, ms = ORDERS[name]
    keys = ["_lab_namespace", "_lab_pod", "_lab_container"]
    df = order_frame(pods, ms, open_last)
    varied = order_frame(pods, ms, open_last, containers=["server", "sidecar"] * (len(pods) // 2) + ["server"] * (len(pods) % 2))
    fast = [_export.time_order(df, keys), _export.time_order(varied, keys)]
    monkeypatch.setattr(_export, "_one_stream", lambda df, keys: False)
    grouped = [_export.time_order(df, keys), _export.time_order(varied, keys)]
    assert fast[0].equals(grouped[0], null_equal=True)
    assert fast[1].equals(grouped[1], null_equal=True)


def test_time_order_of_one_stream_puts_a_newest_first_block_in_order():
    from servelens.parsers.wrappers._export import time_order

    out = time_order(order_frame(["a"] * 4, [4, 3, 3, 1], open_last=True), ["_lab_pod"])
    # the unfinished last line stays last; the rest oldest first, equal times as written
    assert out["text"].to_list() == ["l2", "l1", "l0", "l3"]


def test_a_csv_of_several_pods_reads_as_with_the_general_time_order(monkeypatch):
    from servelens.parsers.wrappers import _export
    from tests.helpers.wrapping_exports import _csv, _ms_utc

    lines = [f"INFO 06-10 14:23:{i % 60:02d} [loggers.py:123] step {i}, \"q\"" for i in range(30)]
    rows = [[_ms_utc(T0 + i * 5_000_000, "%Y-%m-%dT%H:%M:%S") + "Z", ["vllm-0", "vllm-1"][i % 2 if i > 10 else 0], m]
            for i, m in enumerate(lines)]
    text = _csv(["date", "pod_name", "message"], rows[::-1])
    texts = wr.split_lines(text)
    layer = W.detect(texts)[0]
    fast = W.decode(frame(texts), (layer,))
    monkeypatch.setattr(_export, "_one_stream", lambda df, keys: False)
    slow = W.decode(frame(texts), (layer,))
    assert fast.equals(slow, null_equal=True)
    assert fast.filter(pl.col("_lab_pod") == "vllm-1")["text"].to_list() == [lines[i] for i in range(11, 30, 2)]
