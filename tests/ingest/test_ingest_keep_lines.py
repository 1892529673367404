"""Which events keep their text (`message`): by default the bulk kinds whose columns say what
the line said (pipeline/sources/lines.py TRIMMED_KINDS) keep none; unparsed, error, warning and
start-up lines always keep theirs; `--keep-lines` keeps every line's, for the store."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app
from servelens.pipeline.ingest import ingest
from servelens.pipeline.sources.lines import TRIMMED_KINDS
from servelens.pipeline.query.connect import run

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _events(store: Path) -> pl.DataFrame:
    return run(store, "select event, level, http_status, line, source, message from events order by source, line, event")


def _copy(tmp_path: Path, engine: str, *names: str) -> Path:
    d = tmp_path / "logs" / engine
    d.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(FIXTURES / engine / n, d / n)
    return d


def test_bulk_events_keep_no_text_and_the_rest_keep_theirs(tmp_path):
    logs = _copy(tmp_path, "vllm", *[p.name for p in (FIXTURES / "vllm").glob("*.log")])
    ingest([logs], tmp_path / "trimmed", year=2024, rollups=False)
    ingest([logs], tmp_path / "kept", year=2024, rollups=False, keep_lines=True)
    trimmed, kept = _events(tmp_path / "trimmed"), _events(tmp_path / "kept")
    assert trimmed.drop("message").equals(kept.drop("message"))  # only the text differs
    arrived = kept.filter(pl.col("event") == "request_arrived")
    assert arrived.height >= 2 and arrived["message"].str.contains("Received request|Added request").all()
    assert trimmed.filter(pl.col("event") == "request_arrived")["message"].null_count() == arrived.height

    severe = pl.col("level").is_in(["WARNING", "ERROR", "CRITICAL"]).fill_null(False)
    bulk = pl.col("event").is_in(TRIMMED_KINDS) & ~severe & ~((pl.col("http_status") >= 500) | (pl.col("http_status") == 429)).fill_null(False)
    gone = kept.with_columns(trimmed["message"].alias("trimmed")).filter(
        ~pl.col("message").eq_missing(pl.col("trimmed"))
    )
    assert gone.height == kept.filter(bulk & pl.col("message").is_not_null()).height > 0
    assert gone["trimmed"].null_count() == gone.height
    # every other event keeps its text: unparsed lines, errors, warnings, capacity...
    others = trimmed.filter(~bulk)
    assert {"error", "capacity", "unparsed"} <= set(others["event"].to_list())
    assert others["message"].equals(kept.filter(~bulk)["message"])
    assert others.filter(pl.col("event") == "unparsed")["message"].null_count() == 0


def test_keep_lines_is_the_stores_for_later_ingests(tmp_path):
    first = _copy(tmp_path, "vllm", "capacity.log")
    store = tmp_path / "store"
    ingest([first], store, year=2024, rollups=False, keep_lines=True)
    later = _copy(tmp_path, "vllm", "requests.log")
    ingest([later], store, year=2024, rollups=False)  # no flag: the store keeps every line
    arrived = _events(store).filter(pl.col("event") == "request_arrived")
    assert arrived.height >= 2 and arrived["message"].null_count() == 0


def test_cli_keep_lines(tmp_path):
    logs = _copy(tmp_path, "vllm", "requests.log")
    r = CliRunner().invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "s"), "--keep-lines", "--year", "2024", "-q", "--no-rollups"])
    assert r.exit_code == 0, r.output
    arrived = _events(tmp_path / "s").filter(pl.col("event") == "request_arrived")
    assert arrived.height >= 2 and arrived["message"].str.contains("Received request|Added request").all()
