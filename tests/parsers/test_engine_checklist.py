"""The checklist for adding an engine (docs/architecture.md, "Adding a sixth engine"): each
inference server of the registry has its folder with its pieces, its sample logs and its
tests, and nothing in pipeline/ or sql/ names one engine except the few places listed below,
each with why."""

from __future__ import annotations

import ast
import importlib
import re

import pytest
from tests.helpers.common import REPO, SAMPLE_LOGS

from servelens.parsers import ENGINES, SERVERS
from servelens.parsers.availability import availability_file, availability_rows

ENGINES_DIR = REPO / "parsers" / "engines"
# the metrics of metric_availability: a server's availability.toml says something of each
METRICS = {"e2e_s", "ttft_s", "tpot_s", "queue_s", "waiting", "running", "fill", "kv_usage", "preemptions", "gen_tps"}

# The files outside parsers/engines/ that may name an inference server in their code (a
# string literal equal to its registry name; comments, docstrings and help examples are not
# counted), each with why. A new engine needs none of them to be ingested, queried and shown.
ALLOWED = {
    "pipeline/simulate/__init__.py": "the simulator's log variants and request-id styles per engine it can write",
    "pipeline/simulate/scenarios.py": "the simulator's server configuration per engine",
    "pipeline/sources/samples.py": "which /metrics families of each engine mean what (the scrape side)",
    "pipeline/report/chart_specs.py": "a one-row frame that warms the chart renderer up; any engine value does",
    "sql/staging/vllm_request_ids.sql": "vLLM's request-id suffix, joined back to its arrival",
    "sql/staging/engine_stats.sql": "vLLM data-parallel engines, summed per stats line",
    "sql/metrics/queue_depth.sql": "TensorRT-LLM's queued requests, active minus scheduled",
    "sql/signals/scaling_signals.sql": "the advice names each engine's own flag",
}
# the simulator's writers are per engine by nature (one log format each)
ALLOWED_GLOBS = ("pipeline/simulate/writers_*.py",)


def named_engines_py(text: str) -> set[str]:
    tree = ast.parse(text)
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in SERVERS}


def named_engines_sql(text: str) -> set[str]:
    code = re.sub(r"--[^\n]*", "", text)
    return set(re.findall(r"'([a-z0-9_]+)'", code)) & set(SERVERS)


def test_the_registry_and_the_folders_agree():
    folders = {p.name for p in ENGINES_DIR.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(SERVERS), "every folder of parsers/engines/ is one registry line, and back"
    assert set(SERVERS) <= set(ENGINES)
    assert len(SERVERS) >= 5


@pytest.mark.parametrize("engine", sorted(SERVERS))
def test_an_engine_folder_holds_its_pieces(engine):
    folder = ENGINES_DIR / engine
    assert ENGINES[engine] == f"servelens.parsers.engines.{engine}.parser"
    package = importlib.import_module(f"servelens.parsers.engines.{engine}")
    assert (package.__doc__ or "").strip(), f"{engine}/__init__.py: say what the folder owns"
    assert package.SERVER == SERVERS[engine]
    parser = importlib.import_module(ENGINES[engine])
    assert parser.NAME == engine
    assert all(callable(getattr(parser, f, None)) for f in ("detect", "record_starts", "parse"))
    assert availability_file(engine) == folder / "availability.toml"
    assert {r["metric"] for r in availability_rows(engine)} == METRICS
    assert (REPO / "tests" / "parsers" / f"test_parse_{engine}.py").exists(), "the engine's own parser tests"
    samples = [p for p in (SAMPLE_LOGS / engine).rglob("*.log*") if not p.name.startswith("_")]
    assert samples, f"sample_logs/{engine}/ holds no log"
    readme = (REPO / "README.md").read_text()
    assert re.search(rf"^\| {engine} \|", readme, re.M), "a row in the README's engine table"


@pytest.mark.parametrize("engine", sorted(SERVERS))
def test_an_engine_imports_only_the_shared_parser_pieces(engine):
    others = set(SERVERS) - {engine}
    for path in (ENGINES_DIR / engine).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                assert not mod.startswith("servelens.pipeline"), f"{path.name}: parsers never import pipeline"
                assert node.level <= 3, path.name
                if node.level == 2:  # parsers.engines.<other>
                    assert mod.split(".")[0] not in others, f"{path.name} imports engine {mod}"
                if node.level == 0 and mod.startswith("servelens.parsers.engines."):
                    assert mod.split(".")[3] == engine, f"{path.name} imports engine {mod}"


def test_nothing_outside_the_folders_names_an_engine():
    allowed = set(ALLOWED) | {str(p.relative_to(REPO)) for g in ALLOWED_GLOBS for p in REPO.glob(g)}
    found = {}
    for path in [*(REPO / "pipeline").rglob("*.py"), *(REPO / "sql").rglob("*.sql")]:
        text = path.read_text(encoding="utf-8")
        names = named_engines_py(text) if path.suffix == ".py" else named_engines_sql(text)
        if names:
            found[str(path.relative_to(REPO))] = names
    assert set(found) - allowed == set(), "move engine-specific code into parsers/engines/<engine>/"
    assert set(ALLOWED) - set(found) == set(), "an allowed file no longer names an engine: drop it from ALLOWED"


def test_the_checklist_is_written_down():
    text = (REPO / "docs" / "architecture.md").read_text()
    assert "## Adding a sixth engine" in text
    checklist = text.split("## Adding a sixth engine", 1)[1]
    for piece in ("parser.py", "availability.toml", "sample_logs/", "ENGINES", "SERVER"):
        assert piece in checklist, piece
