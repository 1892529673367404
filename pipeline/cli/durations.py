"""Human durations on the command line: `90s`, `5m`, `1h30m`, `20m`, `1.5h`, `300`."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Seconds in `text`; a bare number is seconds. Raises ValueError with a hint."""
    t = text.strip().lower()
    try:
        value = float(t)
    except ValueError:
        parts = _PART.findall(t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise ValueError(f"cannot read duration {text!r}; write it like 30s, 5m, 1h30m") from None
        value = sum(float(n) * _UNITS[u] for n, u in parts)
    if value <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    return value
