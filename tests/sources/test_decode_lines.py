"""A block's bytes cut into lines (pipeline/sources/lines.py `decode_lines`): each line's
text is the bytes between two newlines, whatever its length (a short line is held inside
its string view, a long one points into the block) and wherever it starts (a line in the
block's last bytes included)."""

from __future__ import annotations

import random

import polars as pl
import pytest

from servelens.pipeline.sources.lines import decode_lines

# pieces of text around the 12 bytes a string view holds itself, multi-byte characters,
# empty lines and carriage returns
PIECES = ["", "a", "{", "  },", "ab\r", "0123456789a", "0123456789ab", "0123456789abc", "é", "日本語テキスト",
          '    "textPayload": "INFO 06-10 14:23:45 [loggers.py:123] Engine 000"', "x" * 40]


def _expected(data: bytes) -> list[str]:
    # (Python's own split: the truth; a line's last \r is no part of its text)
    lines = data.decode("utf-8").split("\n")
    if data.endswith(b"\n"):
        lines = lines[:-1]
    return [ln.removesuffix("\r") for ln in lines]


@pytest.mark.parametrize("seed", range(40))
def test_each_line_is_the_text_between_its_newlines(seed):
    rng = random.Random(seed)
    for _ in range(25):
        text = "\n".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 60)))
        data = (text + rng.choice(["", "\n"])).encode()
        df, bad = decode_lines(data, 7)
        assert not bad
        assert df["text"].to_list() == _expected(data)
        # (compared as polars compares strings too: a short string's view holds nothing else)
        assert (df["text"] == pl.Series(_expected(data), dtype=pl.String)).all()
        assert df["line"].to_list() == list(range(7, 7 + df.height))


@pytest.mark.parametrize("tail", ["", "a", "ab", "abcdefghijk", "abcdefghijkl", "abcdefghijklm", "é", "\n", "a\n"])
def test_a_line_in_the_last_bytes_of_a_block_keeps_its_own_bytes(tail):
    data = ("x" * 30 + "\n" + "0123456789\n" + tail).encode()
    assert decode_lines(data, 1)[0]["text"].to_list() == _expected(data)
