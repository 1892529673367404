"""The export decoders' shortcuts (parsers/wrappers/csvexport.py, grafana.py) give what the
general reading gives: a CSV block whose lines all balance their quotes is read a record a
line without the record joining, which the same block forced through the joining matches;
a Grafana text download's rows are cut as a reading of each line on its own (a Python
pattern per line, not the decoder's) says, older-form rows and continued messages
included."""

from __future__ import annotations

import re

import polars as pl
import pytest

from servelens.parsers import wrappers as W
from servelens.parsers.wrappers import csvexport, grafana

from tests.helpers import wrapping as wr
from tests.helpers.wrapping_exports import POD, cw_insights_csv, datadog_csv, gcp_csv, kibana_csv
from tests.parsers.test_wrappers_exports import SAMPLES, truth

CSVS = {"kibana": kibana_csv, "datadog": datadog_csv, "cw-insights": cw_insights_csv, "gcp": gcp_csv}


def frame(text: str) -> pl.DataFrame:
    texts = wr.split_lines(text)
    return pl.DataFrame({"line": pl.int_range(1, len(texts) + 1, eager=True), "text": pl.Series(texts, dtype=pl.String)})


def csv_blocks():
    """(name, layer, physical lines) of real CSV exports and near misses of the shortcut:
    a message with doubled quotes, a header again mid-file, a byte order mark, a block that
    starts and ends mid-file, a line whose quotes do not balance."""
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    lines[3] = lines[3] + ' said "hi" and ""x""'
    for name, write in CSVS.items():
        text = write(lines, times)
        rows = wr.split_lines(text)
        layer = W.detect(rows[:300])[0]
        yield name, layer, text
        yield name + "-bom", layer, "\ufeff" + text
        yield name + "-header-again", layer, "\n".join(rows + rows) + "\n"
        yield name + "-middle", layer, "\n".join(rows[5:-5]) + "\n"
        odd = list(rows)
        odd[7] = odd[7] + '"'
        yield name + "-odd", layer, "\n".join(odd) + "\n"


@pytest.mark.parametrize("name,layer,text", list(csv_blocks()), ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_a_csv_block_a_record_a_line_reads_as_the_record_joining_does(name, layer, text, monkeypatch):
    df = frame(text)
    fast = W.decode(df, (layer,))
    monkeypatch.setattr(csvexport, "_one_record_a_line", lambda df: False)
    general = W.decode(df, (layer,))
    assert fast.height > 0
    assert fast.equals(general)


def test_the_shortcut_is_taken_only_where_every_line_balances_its_quotes():
    lines, times, _ = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    df = frame(kibana_csv(lines, times)).with_columns(pl.col("text").str.count_matches('"', literal=True).alias("_q"))
    assert csvexport._one_record_a_line(df)
    assert not csvexport._one_record_a_line(df.with_columns(pl.when(pl.col("line") == 9).then(3).otherwise(pl.col("_q")).alias("_q")))


_ROW = re.compile(r"([0-9]{10,16})\t([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z)\t")
_OLD = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3})\t")


def stamp(ns: int, fmt: str) -> str:
    import datetime as dt

    sec, frac = divmod(ns, 1_000_000_000)
    return dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime(fmt) + f".{frac // 1_000_000:03d}"


def cut_by_hand(row: str) -> tuple[str, int | None]:
    """A Grafana text row's line and its time (ms since the epoch), read on its own."""
    import datetime as dt

    if m := _ROW.match(row):
        return row[m.end():], int(m.group(1))
    if m := _OLD.match(row):
        t = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
        return row[m.end():], round(t.timestamp() * 1000)
    return row, None


@pytest.mark.parametrize("engine,rel", SAMPLES[:4])
def test_grafana_text_rows_are_cut_as_each_line_read_alone_says(engine, rel):
    lines, times, _ = truth(rel, engine)
    meta = 'Common labels: {"container":"server","namespace":"serving","pod":"%s"}\nLine limit: "1000"\n\n\n' % POD
    rows = []
    for i, (ln, t) in enumerate(zip(lines, times)):
        if i % 7 == 3:  # an older Grafana's row: its time in the browser's form, no ms
            rows.append(f"{stamp(t, '%Y-%m-%d %H:%M:%S')}\t{ln}")
        elif i % 11 == 5:  # a message over two lines: the second is no row
            rows += [f"{t // 1_000_000}\t{stamp(t, '%Y-%m-%dT%H:%M:%S')}Z\t{ln}", f"  continued {i}"]
        else:
            rows.append(f"{t // 1_000_000}\t{stamp(t, '%Y-%m-%dT%H:%M:%S')}Z\t{ln}")
    text = meta + "\n".join(rows) + "\n"
    layer = grafana.layer(wr.split_lines(text)[:300])
    out = W.decode(frame(text), (layer,)).sort("line")
    expect = [cut_by_hand(r) for r in rows]
    assert out["text"].to_list() == [e[0] for e in expect]
    ms = out["_wts"].dt.epoch("ms").to_list()
    assert ms == [e[1] for e in expect]
    assert set(out["_lab_pod"].to_list()) == {POD}


def test_stray_quotes_in_a_csv_whose_time_comes_last_are_unparsed_and_the_rest_ingests():
    from tests.parsers.test_wrappers_exports import SAME, in_time_order, parse

    lines, times, base = truth("sample_logs/vllm/real/v1_0_11.log", "vllm")
    rows = wr.split_lines(gcp_csv(lines, times))
    # a quote before a row and another three rows on (the Logs Explorer download puts the
    # time last, so no row start ends what the first opens): the four rows balance as one
    # record with bare line breaks, which no CSV reader takes
    k = 6
    rows[k], rows[k + 3] = '"' + rows[k], '"' + rows[k + 3]
    _, _, ev = parse("vllm", "\n".join(rows) + "\n")
    bad = ev.filter(pl.col("labels").str.contains("stray quote"))
    assert bad.height >= 1 and set(bad["line"].to_list()) == {k + 1}
    # the rows before them (the newest entries) and after them give the server's events
    # (newest first: data row i holds the server's line len(lines) - i + 1)
    newer = in_time_order(ev.filter(pl.col("line") < k + 1))
    assert newer.select(SAME).equals(base.filter(pl.col("line") > len(lines) - k + 1).select(SAME))
    older = in_time_order(ev.filter(pl.col("line") > k + 4))
    assert older.select(SAME).equals(base.filter(pl.col("line") <= len(lines) - k - 3).select(SAME))
