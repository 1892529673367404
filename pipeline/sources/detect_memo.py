"""Engine and wrapper detection, once per shape of a file's first lines.

Detecting a file's wrappers and engine runs every decoder's and every parser's sniffing over
its sample: a few hundred small polars operations, a fixed cost of tens of milliseconds per
file whatever its size. A fleet's directory of thousands of small files (one per pod, each a
few lines) paid it for every file, although their first lines differ only in their numbers
(times, pids, request ids). Files whose samples have the same shape, every run of hex digits
that holds a decimal digit written as zeros of the same length, get the detection of the
first of them. Only small samples are remembered: a large file's parse costs far more than
its detection, and its sample rarely shares a shape with another's.
"""

from __future__ import annotations

import re

from servelens.parsers import detect_engine, wrappers

# a run of hex digits holding at least one decimal digit: a number, a time, a hex id
_NUMBERS = re.compile(rb"[0-9A-Fa-f]*[0-9][0-9A-Fa-f]*")
MAX_SAMPLE_BYTES = 16 * 1024
MAX_SHAPES = 4096


def shape(head: bytes) -> bytes | None:
    """The sample's shape, or None when it is too large to be worth remembering."""
    if len(head) > MAX_SAMPLE_BYTES:
        return None
    return _NUMBERS.sub(lambda m: b"0" * len(m.group()), head)


Detected = tuple[tuple[str, ...], tuple[str, float | None]]


def detect(head: bytes, engine: bool = True) -> Detected:
    """A file's wrapper layers, outside in, and (`engine`) its engine and score, from its
    first bytes; ("unknown", None) when the engine is not asked for."""
    layers, lines = wrappers.detect_lines(wrappers.head_sample(head))
    return layers, detect_engine(lines) if engine else ("unknown", None)


class DetectMemo:
    """`detect` by shape, for one command (`engine`: detect the engine too)."""

    def __init__(self, engine: bool = True):
        self._engine = engine
        self._by_shape: dict[bytes, Detected] = {}

    def __call__(self, head: bytes) -> Detected:
        key = shape(head)
        if key is None:
            return detect(head, self._engine)
        found = self._by_shape.get(key)
        if found is None:
            found = detect(head, self._engine)
            if len(self._by_shape) < MAX_SHAPES:
                self._by_shape[key] = found
        return found
