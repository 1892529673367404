"""Docs cannot drift: the schema doc is generated from the schema, and every command is in
the README with an example."""

from __future__ import annotations

import re

import typer.main
from conftest import REPO

from servelens.parsers.schema import COLUMN_NAMES, schema_markdown
from servelens.pipeline.cli import _register_commands, app


def test_schema_doc_is_generated_from_the_schema():
    doc = (REPO / "docs" / "schema.md").read_text()
    assert doc == schema_markdown(), "regenerate: python -m servelens.parsers.schema > docs/schema.md"
    for name in COLUMN_NAMES:
        assert f"| `{name}` |" in doc


def test_every_command_is_in_the_readme_with_an_example():
    _register_commands()
    readme = (REPO / "README.md").read_text()
    for name in typer.main.get_command(app).commands:
        assert re.search(rf"^\s*(\$ )?servelens {name}\b", readme, re.M), f"README has no example of `servelens {name}`"


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in readme and "make test" in ci
    assert "make demo" in readme
