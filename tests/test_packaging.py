"""The package list in pyproject.toml names every package directory, so a wheel (not only an
editable install) carries every module."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    dirs = {name: Path(d) for name, d in conf["package-dir"].items()}
    found = set()
    for name, top in dirs.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]))
    assert found, "no package directory found: the test would pass on nothing"
    assert found - listed == set(), f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed but not a package directory: {sorted(listed - found)}"
