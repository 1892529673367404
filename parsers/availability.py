"""Each engine's availability rows: which metric its logs carry, where a value comes from and
why it is null (the catalogue `metric_availability` joins). They live beside the engine's
parser, `availability.toml` in its folder (`<module>.availability.toml` for a parser that is
one module), so the view holds no engine-specific row."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from . import ENGINES

FIELDS = ("metric", "view", "estimated", "provides", "missing")


def availability_file(engine: str) -> Path | None:
    """Where `engine`'s rows live (found without importing the parser itself); None when its
    module is not found."""
    spec = importlib.util.find_spec(ENGINES[engine])
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin)
    if origin.stem == "parser":
        return origin.with_name("availability.toml")
    return origin.with_name(f"{origin.stem}.availability.toml")


def availability_rows(engine: str) -> list[dict]:
    """`engine`'s rows, in file order: none when it has no file (an engine registered from
    outside may have none: its metrics are then not listed); a ValueError naming the file
    when one is malformed."""
    path = availability_file(engine)
    if path is None or not path.is_file():
        return []
    try:
        rows = tomllib.loads(path.read_text(encoding="utf-8")).get("metric", [])
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    for row in rows:
        if set(row) != set(FIELDS) or not isinstance(row["estimated"], bool):
            raise ValueError(f"{path}: each [[metric]] needs exactly {', '.join(FIELDS)} (estimated true or false)")
    return rows


def catalogue() -> tuple[tuple, ...]:
    """Every registered engine's rows as (engine, metric, view, estimated, provides, missing),
    engines in registry order."""
    return _catalogue(tuple(ENGINES.items()))


@functools.lru_cache(maxsize=4)
def _catalogue(engines: tuple[tuple[str, str], ...]) -> tuple[tuple, ...]:
    return tuple((engine, *(row[f] for f in FIELDS)) for engine, _ in engines for row in availability_rows(engine))
