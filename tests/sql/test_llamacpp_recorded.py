"""A real `llama-server` recorded on this machine (tools/record_llamacpp.py; the runs are
tests/fixtures/llamacpp/recorded/, see its SOURCES.md), checked against what the server and
the client knew, not against what servelens computed:

- requests and aborts: one task per client request; a client that hung up is aborted exactly
  where the log has `cancel task, id_task = N` (counted by a separate regex);
- e2e and tokens: each finished request's e2e is the server's own `timings` (prompt_ms +
  predicted_ms, as the client received them), its tokens predicted_n and prompt_n;
- busy slots against `/metrics` requests_processing (scraped each second), within 2%;
- nothing invented: no queue, no error, no failed or unfinished request;
- the same log inside CRI and docker json-file wrappers (tests/helpers/wrapping.py) gives the same
  events, and a reader that stamps batches of lines late moves no finish.

Both runs: the 2026 default format (relative times) and `--no-log-timestamps
--no-log-prefix` (no clock at all: requests, aborts, tokens and capacity, but no times)."""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest
from tests.helpers.wrapping import split_lines, to_cri, to_docker_json

from servelens.pipeline.ingest import ingest
from servelens.pipeline.query.connect import connect, run_on
from servelens.pipeline.query.connect import run as query
from servelens.pipeline.store.manifest import committed_parts

REC = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp" / "recorded"
RUNS = ("default", "no_timestamps")
REL = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) [IWED] ")


def results(name: str) -> list[dict]:
    return [json.loads(x) for x in (REC / name / "results.jsonl").read_text().splitlines()]


def run_info(name: str) -> dict:
    return json.loads((REC / name / "run.json").read_text())


def log_text(name: str) -> str:
    return (REC / name / "server.log").read_text()


def rel_s(line: str) -> float | None:
    m = REL.match(line)
    return None if not m else (int(m[1]) * 60 + int(m[2])) + int(m[3]) / 1e3 + int(m[4]) / 1e6


def write_times_ns(name: str) -> list[int]:
    """When each line of the default run was written: the log's relative times placed so that
    its last line is the file's last write (the recorder's `log_mtime`)."""
    lines = split_lines(log_text(name))
    rels = [rel_s(t) for t in lines]
    t0 = run_info(name)["log_mtime"] - rels[-1]
    return [round((t0 + r) * 1e9) for r in rels]


@lru_cache(maxsize=None)
def store(tmp_root: str, key: str, text: str, mtime: float) -> Path:
    """Ingest `text` as a file named like a container log (the wrapper is detected)."""
    d = Path(tmp_root) / key
    d.mkdir(parents=True, exist_ok=True)
    f = d / "llama-server.log"
    f.write_text(text)
    os.utime(f, (mtime, mtime))
    # no rollups: the checks read the views as the events give them (tests/store/
    # test_rollups.py checks the rollups answer the same), and some read the events alone
    ingest([f], d / "store", engine="llamacpp", rollups=False)
    return d / "store"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("recorded"))


def verbatim(root: str, name: str) -> Path:
    return store(root, name, log_text(name), run_info(name)["log_mtime"])


def requests(st: Path) -> pl.DataFrame:
    return _requests(st).clone()


@lru_cache(maxsize=None)
def _requests(st: Path) -> pl.DataFrame:
    """The requests view of a store (each store only read: computed once per module)."""
    return query(st, "select * from requests order by request_id")


# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RUNS)
def test_requests_aborts_tokens_and_e2e_are_the_servers(root, name):
    res = results(name)
    req = requests(verbatim(root, name))
    cancels = len(re.findall(r"cancel task, id_task = \d+", log_text(name)))
    hung_up = [r for r in res if r.get("aborted")]
    done = [r for r in res if r.get("timings") and not r.get("aborted") and r["status"] == 200]
    assert len(res) == 42 and cancels == len(hung_up) > 0  # each hang-up came before its task ended
    counts = dict(req.group_by("status").len().iter_rows())
    assert counts == {"finished": len(done), "aborted": cancels}
    # every finished request is one the client saw end, with the server's own timings
    got = sorted(req.filter(pl.col("status") == "finished")
                 .select((pl.col("e2e_s") * 1000).round(2), "output_tokens", "prompt_tokens").rows())
    want = sorted((round(r["timings"]["prompt_ms"] + r["timings"]["predicted_ms"], 2),
                   r["timings"]["predicted_n"], r["timings"]["prompt_n"]) for r in done)
    assert got == want
    # what the client received: max_tokens with ignore_eos
    assert sorted(r["usage"]["completion_tokens"] for r in done) == sorted(o for _, o, _ in got)


@pytest.mark.parametrize("name", RUNS)
def test_capacity_is_the_command_lines(root, name):
    cmd = run_info(name)["command"]
    slots, ctx = int(cmd[cmd.index("-np") + 1]), int(cmd[cmd.index("-c") + 1])
    cap = query(verbatim(root, name), "select max_num_seqs, kv_capacity_tokens from capacity")
    assert cap.rows() == [(slots, ctx)]


@pytest.mark.parametrize("name", RUNS)
def test_no_queue_no_error_no_failure_invented(root, name):
    st = verbatim(root, name)
    # the four queries on one connection (the views read by several computed once:
    # tests/sql/test_shared_views.py shows that answers the same as `run`)
    con = connect(st, views={"queue_depth", "errors", "metric_availability"}, shared=True)
    try:
        assert run_on(con, "select count(*) as n from queue_depth where waiting is not null")["n"][0] == 0
        assert run_on(con, "select count(*) as n from errors")["n"][0] == 0
        avail = dict(run_on(con, "select metric, available from metric_availability where engine = 'llamacpp'").rows())
        reason = run_on(con, "select reason from metric_availability where engine = 'llamacpp' and metric = 'queue_s'")
    finally:
        con.close()
    req = requests(st)
    assert req["queue_s"].null_count() == req.height and req["ttft_s"].null_count() == req.height
    assert avail["waiting"] is False and avail["queue_s"] is False and avail["e2e_s"] is True
    assert "client results file" in reason["reason"][0]


def busy_against_metrics(st: Path, name: str) -> tuple[float, float, int]:
    """Busy slots at each `/metrics` scrape, from the request intervals (a slot is busy from
    the line where it took the task to its release), against requests_processing."""
    req = requests(st)
    m = pl.read_csv(REC / name / "metrics.csv").filter(pl.col("requests_processing").is_not_null())
    iv = req.select(pl.col("arrival_ts").dt.epoch("us") / 1e6, pl.col("finish_ts").dt.epoch("us") / 1e6)
    busy = [iv.filter((pl.col("arrival_ts") <= t) & (pl.col("finish_ts") > t)).height for t in m["ts"]]
    return sum(busy) / len(busy), m["requests_processing"].mean(), max(busy)


def test_busy_slots_follow_requests_processing(root):
    st = verbatim(root, "default")
    mean_busy, mean_proc, most = busy_against_metrics(st, "default")
    assert abs(mean_busy - mean_proc) <= 0.02 * mean_proc and most == 4
    # the overload phase queued tasks the log never shows (the scraper saw them deferred)
    assert pl.read_csv(REC / "default" / "metrics.csv")["requests_deferred"].max() > 0
    assert query(st, "select max(running) as r from batch_fill")["r"][0] == 4


# --- wrapped copies ----------------------------------------------------------------------


def _core(st: Path) -> pl.DataFrame:
    ev = pl.read_parquet(committed_parts(st)).sort("line")
    attrs = ev["attrs"].map_elements(
        lambda a: json.dumps({k: v for k, v in json.loads(a).items() if k != "ts_anchor"}, sort_keys=True) if a else None,
        return_dtype=pl.String)
    return ev.select("line", "ts", "level", "event", "request_id", "prompt_tokens", "output_tokens",
                     "e2e_s", "tpot_s", "max_num_seqs", "kv_capacity_tokens", "message").with_columns(attrs.alias("attrs"))


@pytest.mark.parametrize("wrap", [to_cri, to_docker_json], ids=["cri", "docker_json"])
def test_wrapped_copies_give_the_verbatim_events(root, wrap):
    name = "default"
    times = write_times_ns(name)
    wrapped = store(root, f"{name}-{wrap.__name__}", wrap(split_lines(log_text(name)), times=times), times[-1] / 1e9)
    assert _core(wrapped).equals(_core(verbatim(root, name)))


def _without_clock(text: str) -> list[str]:
    """The default run as `--no-log-timestamps --no-log-prefix` would have printed it."""
    return [REL.sub("", t) for t in split_lines(text)]


def test_a_log_without_a_clock_in_a_container_takes_the_wrappers_time(root):
    """No line has a clock of its own: the wrapper's exact stamps place every request where
    the timestamped log does."""
    name = "default"
    times = write_times_ns(name)
    st = store(root, "noclock-exact", to_docker_json(_without_clock(log_text(name)), times=times), times[-1] / 1e9)
    got, want = requests(st), requests(verbatim(root, name))
    cols = ["request_id", "status", "e2e_s", "output_tokens", "prompt_tokens"]
    assert got.select(cols).equals(want.select(cols))
    # stamps are whole microseconds of the relative times: the same instants
    diff = (got["finish_ts"].dt.epoch("us") - want["finish_ts"].dt.epoch("us")).abs().max()
    assert diff <= 1
    mean_busy, mean_proc, most = busy_against_metrics(st, name)
    assert abs(mean_busy - mean_proc) <= 0.02 * mean_proc and most == 4


def _starved(times: list[int], every: int = 20) -> list[int]:
    """A reader starved of CPU: each batch of `every` lines stamped with one time, when the
    reader took them: after the batch's last write, by a delay that cycles (0.73 s at most;
    the first batch read at once)."""
    delays_ms = [0, 730, 210, 480, 90]
    out = []
    for b in range(0, len(times), every):
        batch = times[b:b + every]
        out += [batch[-1] + delays_ms[(b // every) % len(delays_ms)] * 1_000_000] * len(batch)
    return out


def _finish_lines(lines: list[str]) -> dict[str, int]:
    """Each task's end: its timing block's last line (`graphs reused`, after `total time`),
    else (a hang-up, no timing block) its release."""
    timing, release = {}, {}
    for i, t in enumerate(lines):
        if m := re.search(r"task (\d+) \| +(?:total time|graphs reused) =", t):
            timing[m[1]] = i
        elif m := re.search(r"task (\d+) \| stop processing", t):
            release[m[1]] = i
    return release | timing


@pytest.mark.parametrize("clock", ["relative", "none"])
def test_late_batched_stamps_move_no_finish(root, clock):
    """The line's own clock wins over a late stamp (relative times). Without one the stamp is
    all there is: each request ends at the stamp of its own last line, and since a slot's
    next task is written (and so stamped) after the previous one's end, never more slots are
    busy than the server has."""
    name = "default"
    times = write_times_ns(name)
    lines = split_lines(log_text(name)) if clock == "relative" else _without_clock(log_text(name))
    stamps = _starved(times)
    st = store(root, f"starved-{clock}", to_docker_json(lines, times=stamps), stamps[-1] / 1e9)
    got, want = requests(st), requests(verbatim(root, name))
    cols = ["request_id", "status", "e2e_s", "output_tokens"]
    assert got.select(cols).equals(want.select(cols))
    if clock == "relative":
        late = (got["finish_ts"].dt.epoch("us") - want["finish_ts"].dt.epoch("us")) / 1e6
        assert late.abs().max() <= 1e-6  # the first batch, read at once, anchors the run
    else:
        last = _finish_lines(lines)
        assert len(last) == got.height
        stamped = {t: stamps[i] // 1000 for t, i in last.items()}
        assert dict(zip(got["request_id"], got["finish_ts"].dt.epoch("us"))) == stamped
    _, _, most = busy_against_metrics(st, name)
    assert most <= 4
