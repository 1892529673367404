"""TGI's sampling parameters are stored once per distinct value: the `sampling_params`
column (a JSON object per request, a dictionary column in memory and in Parquet, VARCHAR in
SQL), not in every request's attrs. Each request reads back its own parameters; the store's
writes and compaction keep the column dictionary-encoded; a part written before the column
existed still reads (the column null there)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tests.helpers.common import forget_content_record
from typer.testing import CliRunner

from servelens.parsers.schema import DICT_STRING, events_from_arrow, events_to_arrow
from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.store.manifest import committed_parts

if not any((c.callback and c.callback.__name__ == "compact") for c in app.registered_commands):
    build_app()

# K distinct parameter sets; the requested seed differs on every request (a per-request value)
PARAMS = [
    {"temperature": 0.5, "top_k": 40, "max_new_tokens": 64, "do_sample": True},
    {"temperature": 0.9, "top_p": 0.95, "max_new_tokens": 128, "do_sample": True},
    {"repetition_penalty": 1.2, "max_new_tokens": 16, "do_sample": False},
]


def _some(v) -> str:
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "true" if v else "false"
    return f"Some({v})"


def _line(i: int, k: int, minute: int = 0) -> str:
    p = PARAMS[k]
    dump = (
        "GenerateParameters { best_of: None, "
        f"temperature: {_some(p.get('temperature'))}, repetition_penalty: {_some(p.get('repetition_penalty'))}, "
        f"frequency_penalty: None, top_k: {_some(p.get('top_k'))}, top_p: {_some(p.get('top_p'))}, "
        f"typical_p: None, do_sample: {_some(p['do_sample'])}, max_new_tokens: {_some(p['max_new_tokens'])}, "
        "return_full_text: None, stop: [], truncate: None, watermark: false, details: false, "
        f"decoder_input_details: false, seed: Some({1000 + i}), top_n_tokens: None, grammar: None }}"
    )
    return (
        f"2024-02-14T06:{minute:02d}:{i % 60:02d}.{i:06d}Z  INFO generate{{parameters={dump} "
        f'total_time="1.5s" validation_time="1ms" queue_time="2ms" inference_time="1.4s" '
        f'time_per_token="70ms" seed="Some({9000 + i})"}}: text_generation_router::server: '
        "router/src/server.rs:305: Success"
    )


def write_log(path: Path, n: int, minute: int = 0) -> list[int]:
    """A TGI log of `n` requests cycling through PARAMS; returns each line's parameter set."""
    ks = [(i * 7) % len(PARAMS) for i in range(n)]
    path.write_text("".join(_line(i, k, minute) + "\n" for i, k in enumerate(ks)))
    return ks


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def sql(store: Path, query: str) -> list[dict]:
    r = cli("sql", query, "--store", str(store), "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def expected(k: int) -> dict:
    # the parser also reports TGI's own defaults the dump states (watermark, details...)
    return {**PARAMS[k], "watermark": False, "details": False, "decoder_input_details": False}


def _assert_dictionary_encoded(part: Path, distinct: int) -> None:
    meta = pq.read_metadata(part)
    names = [meta.schema.column(c).path for c in range(meta.num_columns)]
    col = names.index("sampling_params")
    for rg in range(meta.num_row_groups):
        chunk = meta.row_group(rg).column(col)
        assert chunk.has_dictionary_page
        assert "RLE_DICTIONARY" in chunk.encodings
    table = pq.read_table(part, columns=["sampling_params"])
    assert table.schema.field("sampling_params").type == DICT_STRING
    values = set()
    for ch in table["sampling_params"].chunks:
        values.update(ch.dictionary.to_pylist())
        assert len(ch.dictionary) <= distinct
    assert len(values - {None}) == distinct


def test_requests_sharing_k_dumps_store_k_values_and_read_back_their_own(tmp_path):
    n = 90
    log = tmp_path / "tgi.log"
    ks = write_log(log, n)
    store = tmp_path / "store"
    r = cli("ingest", str(log), "--store", str(store), "-q")
    assert r.exit_code == 0, r.output

    rows = sql(store, "select line, sampling_params, attrs from events where event = 'request' order by line")
    assert [row["line"] for row in rows] == list(range(1, n + 1))
    for row, k in zip(rows, ks):
        assert json.loads(row["sampling_params"]) == expected(k), row["line"]
        attrs = json.loads(row["attrs"])
        # the per-request values stay in attrs, the shared parameters are not repeated there
        assert attrs["param_seed"] == str(1000 + row["line"] - 1)
        assert attrs["seed"] == str(9000 + row["line"] - 1)
        assert not {"temperature", "top_k", "top_p", "do_sample", "max_new_tokens"} & attrs.keys()

    # queryable as JSON in SQL, per distinct value
    by_temp = sql(store, "select json_extract(sampling_params, '$.temperature')::double as t, count(*) as n, "
                         "count(distinct sampling_params) as d from events where event = 'request' group by 1 order by 1")
    want = {PARAMS[k].get("temperature"): ks.count(k) for k in range(len(PARAMS))}
    assert {row["t"]: row["n"] for row in by_temp} == want
    assert all(row["d"] == 1 for row in by_temp)
    assert sql(store, "select count(distinct sampling_params) as d from events")[0]["d"] == len(PARAMS)
    assert sql(store, "select max_tokens, count(*) as n from events where event = 'request' "
                      "and max_tokens <> json_extract(sampling_params, '$.max_new_tokens')::bigint group by 1") == []

    (part,) = committed_parts(store)
    _assert_dictionary_encoded(part, len(PARAMS))
    r = cli("check", "--store", str(store), "--deep")
    assert r.exit_code == 0, r.output


def test_compaction_keeps_the_column_dictionary_encoded(tmp_path):
    store = tmp_path / "store"
    wants = {}
    for minute in range(3):  # a commit per file: three parts in one partition
        log = tmp_path / f"tgi-{minute}.log"
        ks = write_log(log, 40, minute)
        assert cli("ingest", str(log), "--store", str(store), "-q").exit_code == 0
        wants[str(log)] = ks
    assert len(committed_parts(store)) == 3
    before = sql(store, "select source, line, sampling_params from events order by source, line")
    r = cli("compact", "--store", str(store))
    assert r.exit_code == 0, r.output
    (part,) = committed_parts(store)
    _assert_dictionary_encoded(part, len(PARAMS))
    after = sql(store, "select source, line, sampling_params from events order by source, line")
    assert after == before and len(after) == 120
    for row in after:
        assert json.loads(row["sampling_params"]) == expected(wants[row["source"]][row["line"] - 1])


def _drop_column(part: Path) -> None:
    """Rewrite a part as a servelens before `sampling_params` wrote it."""
    table = pq.read_table(part)
    pq.write_table(table.drop_columns(["sampling_params"]), part)
    forget_content_record(part)


@pytest.mark.parametrize("compact", [False, True])
def test_a_part_written_before_the_column_still_reads(tmp_path, compact):
    store = tmp_path / "store"
    old_log, new_log = tmp_path / "old.log", tmp_path / "new.log"
    write_log(old_log, 30, 0)
    assert cli("ingest", str(old_log), "--store", str(store), "-q").exit_code == 0
    (old_part,) = committed_parts(store)
    _drop_column(old_part)
    assert pq.read_schema(old_part).get_field_index("sampling_params") < 0
    new_ks = write_log(new_log, 30, 1)
    assert cli("ingest", str(new_log), "--store", str(store), "-q").exit_code == 0
    assert len(committed_parts(store)) == 2
    r = cli("check", "--store", str(store))
    assert r.exit_code == 0, r.output
    if compact:
        r = cli("compact", "--store", str(store))
        assert r.exit_code == 0, r.output
        (part,) = committed_parts(store)
        _assert_dictionary_encoded(part, len(PARAMS))
    rows = sql(store, "select source, line, sampling_params, max_tokens from events order by source, line")
    assert len(rows) == 60
    old = [row for row in rows if row["source"] == str(old_log)]
    new = [row for row in rows if row["source"] == str(new_log)]
    assert len(old) == len(new) == 30
    assert all(row["sampling_params"] is None and row["max_tokens"] is not None for row in old)
    assert [json.loads(row["sampling_params"]) for row in new] == [expected(k) for k in new_ks]


def test_arrow_round_trip_keeps_values_and_encodes_once():
    values = [None, '{"a":1}', '{"a":1}', '{"b":2}', None, '{"a":1}']
    df = pl.DataFrame({"line": list(range(6)), "sampling_params": values},
                      schema={"line": pl.Int64, "sampling_params": pl.String})
    table = events_to_arrow(df)
    assert table.schema.field("sampling_params").type == DICT_STRING
    assert sorted(table["sampling_params"].combine_chunks().dictionary.to_pylist()) == ['{"a":1}', '{"b":2}']
    back = events_from_arrow(table)
    assert back.schema["sampling_params"] == pl.String
    assert back["sampling_params"].to_list() == values
    assert back["line"].to_list() == list(range(6))
    # a frame of several chunks (concatenated without rechunking) converts chunk by chunk
    two = pl.concat([df, df], rechunk=False)
    assert events_from_arrow(events_to_arrow(two))["sampling_params"].to_list() == values * 2
    assert isinstance(table, pa.Table)


@pytest.mark.parametrize("query", [
    "select count(*) as n, count(sampling_params) as with_params from events",
    "select count(*) as n, count(sampling_params) as with_params from events where event = 'request'",
])
def test_a_store_written_wholly_before_the_column_reads_it_as_null(tmp_path, query):
    """Every part older than the column: the column is in none of them, and union_by_name
    alone would make no such column (the view named it: a Binder Error with a traceback)."""
    store = tmp_path / "store"
    log = tmp_path / "old.log"
    write_log(log, 30, 0)
    assert cli("ingest", str(log), "--store", str(store), "-q").exit_code == 0
    for part in committed_parts(store):
        _drop_column(part)
    (row,) = sql(store, query)
    assert row["n"] == 30 and row["with_params"] == 0
    # and the views over `events` bind too
    (lat,) = sql(store, "select count(*) as n from requests")
    assert lat["n"] == 30
