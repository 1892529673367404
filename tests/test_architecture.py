"""The rooms of the code and the one-way arrows between them (docs/architecture.md), checked
on the import statements themselves: every import counts, inside functions too (an import
moved into a function still ties two modules together); only `if TYPE_CHECKING:` ones do not.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("parsers", "pipeline", "dashboards")

# room -> the rooms it may import (besides itself); a room is a package under pipeline/, a
# flat module of pipeline/ (`pipeline:NAME`), or a top-level package
MAY_IMPORT = {
    "parsers": set(),
    "pipeline.sources": {"parsers"},
    "pipeline.store": {"parsers", "pipeline.sources"},
    "pipeline.query": {"parsers", "pipeline.sources", "pipeline.store"},
    "pipeline.simulate": {"parsers"},
    "pipeline.tail": {"parsers", "pipeline.sources", "pipeline.store", "pipeline.query"},
    "pipeline.report": {"parsers", "pipeline.sources", "pipeline.store", "pipeline.query"},
    "pipeline.serve": {"parsers", "pipeline.sources", "pipeline.store", "pipeline.query"},
    "dashboards": {"parsers", "pipeline.sources", "pipeline.store", "pipeline.query", "pipeline.report"},
}
# leaves every room may import: safe output files, safe terminal text
LEAVES = {"pipeline:outfile", "pipeline:termsafe"}
# the flat modules of pipeline/ (the ingest side: files, samples, scrapes) may import the
# rooms below them and each other
FLAT = {"parsers", "pipeline.sources", "pipeline.store", "pipeline.query"}


def modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for top in PACKAGES:
        for p in (ROOT / top).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def runtime_imports(tree: ast.AST):
    for node in list(ast.walk(tree)):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


@cache
def graph() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """(module -> the modules it imports, the private names imported across modules); read
    once per process, and only read by the tests."""
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for mod, (path, is_pkg) in mods.items():
        for node in runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for a in node.names:
                    name = a.name.removeprefix("servelens.")
                    if name in mods:
                        edges[mod].add(name)
                continue
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = (node.module or "").removeprefix("servelens.")
            for a in node.names:
                if f"{target}.{a.name}" in mods:
                    edges[mod].add(f"{target}.{a.name}")
                elif target in mods:
                    edges[mod].add(target)
                    if a.name.startswith("_") and not a.name.startswith("__") and target != mod:
                        private.append((mod, target, a.name))
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w == v:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def room(mod: str) -> str:
    parts = mod.split(".")
    if parts[0] != "pipeline":
        return parts[0]
    if len(parts) == 1:
        return "pipeline"
    return f"pipeline.{parts[1]}" if (ROOT / "pipeline" / parts[1]).is_dir() else f"pipeline:{parts[1]}"


def test_the_graph_sees_the_imports():
    edges, _ = graph()
    # the check below must not pass on an empty graph
    assert "pipeline.store.manifest" in edges["pipeline.store.commit"]
    assert "parsers.base" in edges["parsers.engines.vllm.parser"]


def test_no_import_cycle():
    edges, _ = graph()
    assert cycles(edges) == []


def test_a_made_up_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_modules_private_names():
    _, private = graph()
    assert private == []


def test_dependencies_point_one_way():
    edges, _ = graph()
    wrong = defaultdict(set)
    for mod, targets in edges.items():
        here = room(mod)
        allowed = MAY_IMPORT.get(here)
        if allowed is None and here.startswith("pipeline:"):
            allowed = FLAT | {r for r in (room(m) for m in edges) if r.startswith("pipeline:")}
        if allowed is None:  # the command layer (cli) may import everything
            continue
        for t in targets:
            there = room(t)
            if there != here and there not in allowed and there not in LEAVES:
                wrong[here].add(f"{mod} -> {t}")
    assert dict(wrong) == {}


def test_pipeline_holds_at_most_twelve_modules_and_each_room_says_what_it_may_import():
    flat = sorted(p.name for p in (ROOT / "pipeline").glob("*.py") if p.name != "__init__.py")
    assert len(flat) <= 12, flat
    for init in sorted((ROOT / "pipeline").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc, f"{init.parent.name}/ has no docstring saying what it owns"
        if init.parent.name not in ("cli", "simulate"):
            assert "May import" in doc or "may import" in doc, init.parent.name


@pytest.mark.parametrize("name", ["parsers", "pipeline.sources", "pipeline.store", "pipeline.query"])
def test_lower_rooms_never_import_the_rooms_above(name):
    edges, _ = graph()
    above = {"pipeline.cli", "pipeline.report", "pipeline.serve", "pipeline.tail", "dashboards"}
    hits = sorted(f"{m} -> {t}" for m, ts in edges.items() if room(m) == name for t in ts if room(t) in above)
    assert hits == []


def test_sql_views_read_only_their_layer_or_below_and_load_after_what_they_read():
    from servelens.pipeline.query.views import LAYERS, sql_files, view_dependencies, view_name

    files = sql_files()
    layer = {view_name(p): LAYERS.index(p.parent.name) for p in files}
    assert len(layer) >= 20 and set(LAYERS) == {p.parent.name for p in files}
    upward = sorted((v, d) for v, ds in view_dependencies().items() for d in ds if layer[d] > layer[v])
    assert upward == []
    seen: set[str] = set()
    for p in files:
        assert view_dependencies()[view_name(p)] <= seen, view_name(p)
        seen.add(view_name(p))


def test_the_load_order_is_computed_not_named(tmp_path):
    """A view file that sorts first by name but reads another is loaded after it."""
    from servelens.pipeline.query.views import sql_files, view_name

    (tmp_path / "a_top.sql").write_text("create or replace view a_top as select * from z_base")
    (tmp_path / "z_base.sql").write_text("create or replace view z_base as select 1 as x")
    assert [view_name(p) for p in sql_files(tmp_path)] == ["z_base", "a_top"]


def test_tests_live_in_rooms_that_mirror_the_code_and_never_edit_sys_path():
    tests = ROOT / "tests"
    flat = sorted(p.name for p in tests.glob("test_*.py"))
    # only the project-wide checks sit at the top: architecture, docs, packaging, bench
    assert flat == ["test_architecture.py", "test_bench.py", "test_docs.py", "test_packaging.py"]
    code_rooms = {p.parent.name for p in (ROOT / "pipeline").glob("*/__init__.py")} | {"parsers", "sql", "dashboards", "ingest"}
    for init in sorted(tests.glob("*/__init__.py")):
        name = init.parent.name
        assert name in code_rooms | {"helpers"}, f"tests/{name}/ mirrors no room of the code"
        assert ast.get_docstring(ast.parse(init.read_text())), f"tests/{name}/ says nothing about itself"
    edits = sorted(str(p.relative_to(ROOT)) for p in tests.rglob("*.py")
                   if p.name != "test_architecture.py" and "sys.path" in p.read_text())
    assert edits == []
