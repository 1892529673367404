"""The carry scan's search of a newest-first export for the lines naming a model
(pipeline/sources/carry_scan.py): the file's pieces asked at once, then the pieces holding
a hint searched, find each hint where a plain search of the whole file finds it, whether
the hint lies inside a piece, across two, or at the file's very end."""

from __future__ import annotations

import mmap
import os
import random

import pytest

from servelens.pipeline.sources import carry_scan as cs

HINTS = [b"with config:", b"args:", b"ab", b"Namespace("]


@pytest.mark.parametrize("piece", [1, 3, 16, 64, 1024 * 1024])
@pytest.mark.parametrize("seed", range(6))
def test_the_search_finds_what_a_plain_search_finds(tmp_path, monkeypatch, piece, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(cs, "PIECE", piece)
    # (several segments, the last one short)
    monkeypatch.setattr(cs, "SEGMENT", 5 * piece + 3)
    size = rng.randrange(200, 3000)
    body = bytearray(rng.choice(b"abc \n") for _ in range(size))
    for _ in range(rng.randrange(0, 12)):
        h = rng.choice(HINTS)
        at = rng.randrange(0, size - len(h))
        body[at:at + len(h)] = h
    body[-len(HINTS[0]):] = HINTS[0]  # one at the very end
    # (a file name need not be UTF-8)
    path = tmp_path / (os.fsdecode(b"export-\xff.log") if seed % 2 else "export.log")
    path.write_bytes(bytes(body))
    offset = rng.randrange(0, size // 3)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        finder = cs._Finder(data, path, HINTS, offset)
        for h in HINTS:
            for start in [offset, *sorted(rng.randrange(offset, size + 2) for _ in range(40))]:
                assert finder.find(h, start) == bytes(body).find(h, start)
        del finder
