"""The tailer reads wrapped logs live: a CRI `P` fragment or a docker json-file piece at the
end of one poll joins the rest of its line in the next one."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from tests.tail.test_tail import Harness, _no_waits  # noqa: F401 - the fixture applies here too

from servelens.pipeline.store.manifest import committed_parts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "wrapped"


@pytest.mark.parametrize("name", ["vllm_v1_0_11.cri.log", "vllm_v1_0_11.docker-json.log"])
def test_split_line_spans_two_polls(tmp_path, name):
    data = (FIXTURES / name).read_bytes()
    cut = sum(len(x) + 1 for x in data.split(b"\n")[:11])  # ten lines and the first piece of the 11th
    h = Harness(tmp_path, engine="vllm", quiet_s=3600.0)
    # a store that keeps every line's text (ingest --keep-lines): the prompt shows the pieces joined
    h.store.manifest["keep_lines"] = True
    log = h.logs / "pod.log"
    log.write_bytes(data[:cut])
    h.poll()
    first = pl.read_parquet(committed_parts(h.store_dir))
    assert first["line"].to_list() == list(range(1, 11))
    with open(log, "ab") as f:
        f.write(data[cut:])
    h.poll(2)  # the second poll finds the file quiet and reads its last record
    ev = pl.read_parquet(committed_parts(h.store_dir)).sort("line")
    long = ev.filter(pl.col("request_id") == "cmpl-long-0")
    assert long.select("line", "n_lines", "event").rows() == [(11, 3, "request_arrived")]
    assert long["message"][0].count("quick brown fox") == 900
    # every physical line once (52 lines, the long one in three pieces)
    assert ev.select(pl.col("n_lines").sum()).item() == data.count(b"\n") == 54
    assert ev["wrapper_ts"].null_count() == 0
    entry = next(iter(h.store.manifest["files"].values()))
    assert entry["offset"] == len(data) and entry["decode"] == [name.split(".")[1]]
    h.stop()
