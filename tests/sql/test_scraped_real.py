"""A real llama-server's /metrics scrapes ingested beside its log: the scraped views give
what the exposition text says (read here with a plain regex), and the counters agree with
the per-request token counts the same server's log gives."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run as run_query

build_app()
REC = Path(__file__).parents[1] / "fixtures" / "llamacpp" / "scraped"


def scrapes() -> list[tuple[float, dict[str, float]]]:
    """(time, {metric: value}) per scrape, straight from the text."""
    out: list[tuple[float, dict[str, float]]] = []
    for line in (REC / "scrapes.prom").read_text().splitlines():
        if m := re.match(r"# scrape at ([\d.]+)$", line):
            out.append((float(m[1]), {}))
        elif m := re.match(r"(llamacpp:\w+) ([\d.e+-]+)$", line):
            out[-1][1][m[1]] = float(m[2])
    return out


def run(store: Path, sql: str) -> list[dict]:
    return run_query(store, sql).to_dicts()


def test_scrapes_beside_the_log_read_as_the_server_said(tmp_path):
    for f in ("server.log", "scrapes.prom"):
        shutil.copy(REC / f, tmp_path / f)
    store = tmp_path / "store"
    r = CliRunner().invoke(app, ["ingest", str(tmp_path), "--store", str(store)])
    assert r.exit_code == 0, r.output
    truth = scrapes()
    assert len(truth) == 6
    # one instance: the scrapes are the log's server
    log_instances = {row["instance"] for row in run(store, "select distinct instance from events")}
    assert len(log_instances) == 1
    assert {row["instance"] for row in run(store, "select distinct instance from scraped_gauges")} == log_instances
    got = run(store, "select epoch_ms(ts) / 1000.0 as t, meaning, value from scraped_gauges order by t")
    for meaning, metric in (("running", "llamacpp:requests_processing"), ("waiting", "llamacpp:requests_deferred")):
        series = [(round(x["t"], 3), x["value"]) for x in got if x["meaning"] == meaning]
        assert series == [(round(t, 3), v[metric]) for t, v in truth], meaning
    assert max(v["llamacpp:requests_processing"] for _, v in truth) >= 1  # the run was not idle
    inc = {x["meaning"]: x["n"] for x in run(store, "select meaning, sum(increase) as n from scraped_counters group by all")}
    for meaning, metric in (("prompt_tokens", "llamacpp:prompt_tokens_total"),
                            ("generation_tokens", "llamacpp:tokens_predicted_total")):
        assert inc[meaning] == truth[-1][1][metric] - truth[0][1][metric]
    # the log's own per-request counts (its timing blocks) agree with the server's counters
    log = (REC / "server.log").read_text()
    prompt = sum(int(n) for n in re.findall(r"prompt eval time = +[\d.]+ ms / +(\d+) tokens", log))
    output = sum(int(n) for n in re.findall(r"\|        eval time = +[\d.]+ ms / +(\d+) tokens", log))
    assert (prompt, output) == (inc["prompt_tokens"], inc["generation_tokens"]) == (80, 315)
