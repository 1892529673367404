"""Log text as Markdown text: whatever a log line or a file name holds renders as the same
characters, never as a link, an image, HTML, a heading, a table cell break or a new line.

Imports only pipeline/termsafe.py: the report's Markdown and the dashboard's Streamlit Markdown both use it.
"""

from __future__ import annotations

import re

# CommonMark lets a backslash escape any ASCII punctuation. Escaped here: what opens or closes
# Markdown syntax anywhere in a line (emphasis, code, links and images, raw HTML and entities,
# table cells, strikethrough, Streamlit's $math$ and :color[...] directives), what GitHub-
# flavoured Markdown turns into a link without brackets (a scheme's '://', 'www.', an e-mail
# address's '@'), and a block marker at the start of the text (heading, list, quote). Other
# punctuation is left alone so that the raw Markdown stays readable, and so is an underscore
# between two letters or digits (CommonMark never opens emphasis there: file_name.log).
_SPECIAL = re.compile(r"([\\`*\[\]<>|~$&@]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
_AUTOLINK = re.compile(r"(?i)(:)(?=//)|(?<=www)(\.)")
_BLOCK_START = re.compile(r"^(\d+)([.)])|^([-+#>=])")
_SPACE = re.compile(r"\s+")


def one_line(text: object, limit: int | None = None) -> str:
    """`text` with every run of whitespace (newlines included) made one space, cut to `limit`
    characters with an ellipsis."""
    from ..termsafe import shown

    # whitespace first (a newline is a space here), then what is left of the controls (an
    # ANSI escape) as visible escapes: a report read with `cat` must not drive the terminal
    s = shown(_SPACE.sub(" ", "" if text is None else str(text)).strip())
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


def md_text(text: object, limit: int | None = None) -> str:
    """Plain text for a Markdown paragraph, heading or table cell."""
    s = _SPECIAL.sub(r"\\\1", one_line(text, limit))
    s = _AUTOLINK.sub(lambda m: "\\" + (m.group(1) or m.group(2)), s)
    return _BLOCK_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}" if m.group(1) else "\\" + m.group(3), s)


def md_code(text: object, limit: int | None = None) -> str:
    """Text as an inline code span: a fence longer than any run of backticks inside it."""
    s = one_line(text, limit)
    runs = [len(m) for m in re.findall(r"`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return f"{fence}{pad}{s}{pad}{fence}"
