"""Text from logs and file names, made safe to print on a terminal: a control character (a
newline that would forge a line of servelens' own output, an ANSI escape that would recolour
or move the cursor, retitle the window or hide what follows) is shown as its escape (`\\n`,
`\\x1b`) instead of being sent to the terminal.

Imports only the standard library: the ingest summary, the query table and the Markdown
report use it.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (8-bit CSI and OSC included); a tab is one too in a table
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
CONTROL_PATTERN = _CONTROL.pattern


def shown(text: object) -> str:
    """`text` with every control character written as its escape (`\\n`, `\\x1b`)."""
    s = "" if text is None else str(text)
    if not _CONTROL.search(s):
        return s
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(0)) or f"\\x{ord(m.group(0)):02x}", s)
