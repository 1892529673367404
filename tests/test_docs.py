"""Docs cannot drift: the schema doc is generated from the schema, and every command is in
the README with an example."""

from __future__ import annotations

import re

import typer.main
from tests.helpers.common import REPO

from servelens.parsers.schema import COLUMN_NAMES, schema_markdown
from servelens.pipeline.cli.app import app, build_app


def test_schema_doc_is_generated_from_the_schema():
    doc = (REPO / "docs" / "schema.md").read_text()
    assert doc == schema_markdown(), "regenerate: python -m servelens.parsers.schema > docs/schema.md"
    for name in COLUMN_NAMES:
        assert f"| `{name}` |" in doc


def test_every_command_is_in_the_readme_with_an_example():
    build_app()
    readme = (REPO / "README.md").read_text()
    for name in typer.main.get_command(app).commands:
        assert re.search(rf"^\s*(\$ )?servelens {name}\b", readme, re.M), f"README has no example of `servelens {name}`"


def _quick_start_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```", 2)[1]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_ci_runs_the_readme_test_command():
    """.ci/run runs exactly the quick start's test command, and nothing else does the work."""
    commands = _quick_start_commands()
    assert commands == ["make demo", "make test"], commands
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == commands[1], ci
    # what precedes it only sets the shell up
    assert all(line.startswith(("set ", "cd ")) for line in ci[:-1] if not line.startswith("#!")), ci


def _sections(doc: str) -> dict[str, str]:
    """Each view's documentation: the text under every heading that names it in backticks."""
    out: dict[str, str] = {}
    parts = re.split(r"^#{2,4} ", doc, flags=re.M)
    for part in parts[1:]:
        heading, _, body = part.partition("\n")
        for name in re.findall(r"`([a-z_]+)`", heading):
            out[name] = out.get(name, "") + body
    return out


def test_every_view_is_documented_with_its_columns(tmp_path):
    from servelens.pipeline.ingest import ingest
    from servelens.pipeline.query.views import view_dependencies
    from servelens.pipeline.query.connect import connect

    ingest(sorted((REPO / "sample_logs" / "incident" / "vllm").glob("*.log")), tmp_path / "store", year=2026)
    sections = _sections((REPO / "docs" / "metrics.md").read_text())
    con = connect(tmp_path / "store", shared=True)
    missing = []
    for view in sorted(view_dependencies()):
        if view not in sections:
            missing.append(f"{view}: no section in docs/metrics.md")
            continue
        quoted = set(re.findall(r"[a-z_0-9]+", " ".join(re.findall(r"`([^`]*)`", sections[view]))))
        columns = [r[0] for r in con.execute(f"describe {view}").fetchall()]
        undocumented = [c for c in columns if c not in quoted]
        if undocumented:
            missing.append(f"{view}: {', '.join(undocumented)}")
    assert not missing, "docs/metrics.md lacks:\n" + "\n".join(missing)


def test_engine_lists_come_from_the_registry():
    from servelens.parsers import ENGINES, SERVERS

    assert set(SERVERS) <= set(ENGINES)
    build_app()
    top = typer.main.get_command(app)
    names = ", ".join(SERVERS.values())
    assert names in " ".join((top.help or "").split())
    pyproject = (REPO / "pyproject.toml").read_text()
    assert names in re.search(r'^description = "(.*)"$', pyproject, re.M).group(1)
    readme = (REPO / "README.md").read_text()
    table = {m for m in re.findall(r"^\| ([a-z]+) \|", readme, re.M)}
    assert set(ENGINES) <= table, f"README engine table lacks {set(ENGINES) - table}"
    for cmd in ("ingest", "tail"):
        engine_opt = next(p for p in top.commands[cmd].params if p.name == "engine")
        assert all(e in engine_opt.help for e in ENGINES), (cmd, engine_opt.help)
