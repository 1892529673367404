"""Loading the metric views: the one place that turns `sql/*.sql` into views on a DuckDB
connection and sets the parameters (window size, signal thresholds) they read.

The views read parameters with `getvariable('name')` and fall back to a default in SQL, so
they also work on a bare connection. `sql/thresholds.toml` is the documented source of those
defaults; a user file (`--thresholds FILE`) overrides single keys. TOML top-level keys become
variables of the same name; a key inside a `[section]` becomes `section_key`.
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path
from typing import Any, Mapping

import duckdb

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

DEFAULT_THRESHOLDS_NAME = "thresholds.toml"
PRESET_PREFIX = "preset:"  # `--thresholds preset:NAME` names sql/preset-NAME.toml
_VIEW_RE = re.compile(r"^\s*create\s+or\s+replace\s+view\s+(\w+)\s+as\b", re.I | re.M)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sql_dir() -> Path:
    """The directory holding the view files (inside the installed package)."""
    try:
        return Path(str(importlib.resources.files("servelens.sql")))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - running from a bare checkout
        return Path(__file__).resolve().parent.parent / "sql"


def sql_files(directory: Path | None = None) -> list[Path]:
    """The view files in load order (file name order: the numeric prefix)."""
    return sorted((directory or sql_dir()).glob("*.sql"), key=lambda p: p.name)


def view_name(path: Path) -> str:
    """The view a file defines; raises if the file is not one `create or replace view`."""
    text = path.read_text(encoding="utf-8")
    names = _VIEW_RE.findall(text)
    if len(names) != 1:
        raise ValueError(f"{path.name}: expected exactly one `create or replace view`, found {len(names)}")
    return names[0]


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}_"))
        else:
            out[name] = value
    return out


def read_thresholds(path: Path | str | None = None) -> dict[str, Any]:
    """Variables from a thresholds TOML file (the packaged defaults when `path` is None)."""
    p = Path(path) if path is not None else sql_dir() / DEFAULT_THRESHOLDS_NAME
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"thresholds file not found: {p}") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"thresholds file {p} is not valid TOML: {e}") from None
    return _flatten(data)


def presets() -> list[str]:
    """The autoscaler presets shipped beside thresholds.toml (sql/preset-NAME.toml)."""
    return sorted(p.name[len("preset-"):-len(".toml")] for p in sql_dir().glob("preset-*.toml"))


def preset_path(name: str) -> Path:
    """The file of preset `name`; a ValueError naming the presets when there is none."""
    if name in presets():
        return sql_dir() / f"preset-{name}.toml"
    raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(presets())} (e.g. --thresholds preset:{presets()[0]})")


def resolve_variables(
    variables: Mapping[str, Any] | None = None, thresholds: Path | str | None = None
) -> dict[str, Any]:
    """Packaged defaults, then a user thresholds file (or `preset:NAME`), then explicit
    variables.

    A user file may only set keys the defaults know (a typo must not silently do nothing)."""
    merged = read_thresholds()
    if thresholds is not None and str(thresholds).startswith(PRESET_PREFIX):
        thresholds = preset_path(str(thresholds)[len(PRESET_PREFIX):])
    if thresholds is not None:
        user = read_thresholds(thresholds)
        unknown = sorted(set(user) - set(merged))
        if unknown:
            raise ValueError(f"unknown threshold(s) in {thresholds}: {', '.join(unknown)}")
        merged.update(user)
    merged.update(variables or {})
    return merged


def set_variables(con: duckdb.DuckDBPyConnection, variables: Mapping[str, Any]) -> None:
    for name, value in variables.items():
        if not _NAME_RE.match(name):
            raise ValueError(f"bad variable name {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"variable {name} must be a number or a string, not {value!r}")
        # A parameter binds the value safely; the name was checked above.
        con.execute(f"set variable {name} = ?", [value])


def _tune(con: duckdb.DuckDBPyConnection) -> None:
    # The store's Parquet views give the optimizer tiny cardinality estimates, and below
    # this threshold DuckDB runs an ASOF join as a nested loop: 80k TGI requests took minutes
    # in request_state instead of a second. Always use the real ASOF join.
    try:
        con.execute("set asof_loop_join_threshold = 0")
    except duckdb.Error:  # pragma: no cover - a DuckDB without the setting has no loop path
        pass


def load_views(
    con: duckdb.DuckDBPyConnection,
    sql_dir: Path | str | None = None,
    variables: Mapping[str, Any] | None = None,
    thresholds: Path | str | None = None,
) -> list[str]:
    """Set the variables and create every view of `sql/*.sql` on `con`, in file-name order.

    `con` must already have an `events` table or view with the event schema. Returns the
    view names created."""
    set_variables(con, resolve_variables(variables, thresholds))
    _tune(con)
    names = []
    for path in sql_files(Path(sql_dir) if sql_dir is not None else None):
        names.append(view_name(path))
        try:
            con.execute(path.read_text(encoding="utf-8"))
        except duckdb.Error as e:
            raise RuntimeError(f"{path.name}: {e}") from e
    return names
