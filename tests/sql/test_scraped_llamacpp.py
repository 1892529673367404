"""A real llama-server overloaded with its /metrics scraped: its log says nothing of the
requests waiting for a free slot, its `llamacpp:requests_deferred` gauge does, and that gauge
is the queue the views, the queue signal and metric_availability give (checked against the
scrape bodies read with a plain regex, window averages counted here)."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest

from tests.sql.test_scraped_views import WINDOW_S, invoke, rows


LLAMA = Path(__file__).parents[1] / "fixtures" / "llamacpp" / "scraped_overload"


def llama_gauge(name: str) -> list[tuple[float, float]]:
    out = []
    for line in gzip.open(LLAMA / "scrapes.prom.gz", "rt").read().splitlines():
        if m := re.match(r"# scrape at ([\d.]+)$", line):
            t = float(m[1])
        elif m := re.match(rf"{name} (\S+)$", line):
            out.append((t, float(m[1])))
    return out


@pytest.fixture(scope="module")
def llama_store(tmp_path_factory) -> Path:
    """The overloaded llama-server's log, its relative times anchored by its last write as
    recorded, and its scrapes."""
    d = tmp_path_factory.mktemp("llama-scraped")
    (d / "in").mkdir()
    log = d / "in" / "server.log"
    log.write_bytes((LLAMA / "server.log").read_bytes())
    t = json.loads((LLAMA / "run.json").read_text())["log_mtime"]
    os.utime(log, (t, t))
    (d / "in" / "scrapes.prom.gz").write_bytes((LLAMA / "scrapes.prom.gz").read_bytes())
    r = invoke("ingest", d / "in", "--store", d / "store", "-q")
    assert r.exit_code == 0, r.output
    return d / "store"


def test_llama_server_slot_wait_is_the_queue_and_its_signal(llama_store):
    s = llama_store
    log = (LLAMA / "server.log").read_text()
    assert "defer" not in log  # nothing in the log says a task waited
    deferred = llama_gauge("llamacpp:requests_deferred")
    assert len(deferred) == 21 and max(v for _, v in deferred) == 8
    # one instance: the log's and the scrapes'
    assert rows(s, "select count(distinct instance) as n from (select instance from events "
                   "union all select instance from samples)")[0]["n"] == 1
    queue = rows(s, "select epoch_ms(ts) / 1000.0 as t, waiting, source from queue_depth order by ts")
    assert [(round(q["t"], 3), q["waiting"]) for q in queue] == [(round(t, 3), v) for t, v in deferred]
    assert {q["source"] for q in queue} == {"scraped"}
    # slots busy: the server's requests_processing, against the 2 slots its log announces
    processing = llama_gauge("llamacpp:requests_processing")
    assert "n_slots = 2" in log
    run_rows = rows(s, "select running, fill, source from batch_fill order by ts")
    assert [(x["running"], x["fill"], x["source"]) for x in run_rows] == [(v, v / 2, "scraped") for _, v in processing]
    # window averages of the deferred count, counted here, and the queue signal they raise
    by_window: dict[int, list[float]] = {}
    for t, v in deferred:
        by_window.setdefault(int(t // WINDOW_S), []).append(v)
    wm = {int(r["w"]) // WINDOW_S: r for r in rows(s, "select epoch(window_start) as w, * from window_metrics")}
    assert set(by_window) <= set(wm)
    for w, vals in by_window.items():
        assert wm[w]["waiting_avg"] == pytest.approx(sum(vals) / len(vals)) and wm[w]["waiting_estimated"] is False
    peak = max(sum(v) / len(v) for v in by_window.values())
    assert peak > 2
    sig = rows(s, "select value from scaling_signals where signal = 'queue_backlog'", queue_waiting=2, queue_sustain_s=WINDOW_S)
    assert [x["value"] for x in sig] == [pytest.approx(peak)]
    avail = {r["metric"]: r for r in rows(s, "select * from metric_availability where engine = 'llamacpp'")}
    assert avail["waiting"]["available"] and avail["waiting"]["sources"] == "scrape 21"
    assert "llamacpp:requests_deferred" in avail["waiting"]["reason"]
