"""Every engine keeps the same contract, and every engine has sample logs, tests and a README
row: built-in engines are registered the way an outside one would be."""

from __future__ import annotations

import pytest
from tests.helpers.common import REPO, SAMPLE_LOGS

from servelens.parsers import ENGINES, detect_engine, get_parser, wrappers
from servelens.parsers.base import (
    ParseContext,
    check_events,
    finalize,
    lines_frame,
    uncovered_lines,
)


def sample_files(engine: str):
    files = sorted(
        p
        for d in (SAMPLE_LOGS / engine, SAMPLE_LOGS / "incident" / engine)
        if d.exists()
        for p in d.rglob("*")
        # logs, and the JSON results files of benchmark clients (engine `client`); a leading
        # `_` marks what ingest skips (a recording's truth and notes)
        if p.suffix in (".log", ".json", ".jsonl") and not p.name.startswith("_")
    )
    return files


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_engine_module_follows_the_contract(engine):
    mod = get_parser(engine)
    assert mod.NAME == engine
    for fn in ("detect", "record_starts", "parse"):
        assert callable(getattr(mod, fn)), f"{engine} has no {fn}()"
    assert (REPO / "tests" / "parsers" / f"test_parse_{engine}.py").exists()
    assert f"| {engine} " in (REPO / "README.md").read_text() or f"| `{engine}` " in (REPO / "README.md").read_text()


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_sample_logs_are_detected_parsed_onto_the_schema_and_fully_accounted(engine):
    files = sample_files(engine)
    assert files, f"no sample logs for {engine}"
    mod = get_parser(engine)
    for path in files:
        texts = path.read_text(errors="replace").split("\n")
        if texts and texts[-1] == "":
            texts.pop()
        texts = [t.removesuffix("\r") for t in texts]
        # as ingest reads a file: wrapper layers undone first (parsers/wrappers), then the
        # engine detected on, and parsing, the engine's own lines
        layers = wrappers.detect(texts[:300])
        detected, score = detect_engine(wrappers.decode_texts(texts[:300], layers))
        assert detected == engine, f"{path.name} detected as {detected} ({score:.2f})"
        ctx = ParseContext(engine=engine, source=str(path), instance="x", year=2026)
        events = finalize(wrappers.wrap(mod, layers).parse(lines_frame(texts), ctx), ctx)
        check_events(events)
        assert uncovered_lines(events, 1, len(texts)) == [], path.name
        assert events.height > 0
