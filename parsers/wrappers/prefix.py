"""Recovery of engine lines behind a prefix no decoder knows.

    (task, pid=12148) 2023-10-25T12:24:19.123838Z ERROR text_generation_router: ...   (SkyPilot)
    INFO:tgi-server:         2024-01-15T08:47:27Z  INFO text_generation_router: ...  (a Python logger)
    [text-generation-inference] | 2024-01-15T08:47:27Z  INFO ...                     (a service label)
    user@host:~$ INFO 06-10 14:23:45 llm_engine.py:161] ...                         (a shell prompt)
    ...INFO 06-10 14:23:45 metrics.py:341] ...                                       (leading dots)

A line that does not open with an engine header but has one further on is cut there: the
text before it goes to attrs (`prefix`), the rest to the engine parser. The header forms are
those every engine prints (HEADER_FORMS), plus any registered parser's `HEADER_RE`, so a new
engine's lines are found behind prefixes too. Prefixes an engine reads itself (vLLM's
`(APIServer pid=1) `, torch's `[rank0]: `, Open MPI's `[1,0]<stdout>:`, glog) are left to it.
"""

from __future__ import annotations

import polars as pl

NAME = "prefix"
DOC = "any other prefix before an engine header (SkyPilot `(task, pid=N) `, `INFO:tgi-server: `, `[svc] | `, a shell prompt, leading dots): cut off, kept in attrs `prefix`"
JOINS = False

_LEVEL = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)"
HEADER_FORMS = (
    # vLLM (and Python logging in its format): `INFO 06-10 14:23:45`, NIM `INFO 2025-09-10 16:32:05.957`
    rf"{_LEVEL} +(?:[0-9]{{4}}-)?[0-9]{{2}}-[0-9]{{2}} [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}",
    # TGI (Rust tracing): `2024-01-15T08:47:27.123456Z  INFO target: ...`
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?Z? +(?:TRACE|DEBUG|INFO|WARN|ERROR) ",
    # TGI --json-output
    r'\{"timestamp":"[0-9]{4}-',
    # TensorRT-LLM
    r"\[TensorRT-LLM\]\[|\[TRT-LLM\] \[",
    # SGLang: `[2025-01-15 08:47:27 TP0] ...`
    r"\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(?: [A-Z]+[0-9]+)*\] ",
)
HEADER_AT_START = "^(?:" + "|".join(HEADER_FORMS) + ")"

# prefixes the engines read themselves: the line is theirs as it is
_OWN = (
    r"\((?:[A-Za-z_]\w*)(?: [A-Za-z_]\w*)?(?: rank=[0-9]+)? pid=[0-9]+(?:, ip=[^)\s]+)?\) ?",
    r"\[rank[0-9]+\]: ?",
    r"\[[0-9]+,[0-9]+\]<std(?:out|err)>: ?",
    r"[IWEF][0-9]{4} [0-9:.]+ +[0-9]+ [\w.]+:[0-9]+\] ?",
    # TensorRT-LLM's own times before `[TRT-LLM]`: `[11/16/2024-00:05:44] `, `07-25-2025 16:54:34.140189 `
    r"\[[0-9]{2}/[0-9]{2}/[0-9]{4}-[0-9]{2}:[0-9]{2}:[0-9]{2}\] ?",
    r"[0-9]{2}-[0-9]{2}-[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)? ?",
)
OWN_PREFIX = "^(?:" + "|".join(_OWN) + ")+$"
# the engine's own prefixes at the end of an unknown one (`svc | (APIServer pid=1) `) stay
# with the line: only the text before them is cut
OWN_TAIL = r"(?:(?:" + "|".join(_OWN) + r")\s*)+$"
# not a prefix but the line's own words: an exception naming a header in its message
# (`RuntimeError: [TensorRT-LLM][ERROR] ...`, C++ `  what():  [TensorRT-LLM]...`), or an
# indented continuation line (a traceback frame quoting a log line), or a table row
NOT_PREFIX = r"^\s|^[|+]|(?:Error|Exception|Warning|what\(\)|Caused by|raise|assert|print\(|logger\.\w+\()\W*\s*$"
# how far into a line a header is looked for
_REACH = 200


def header_forms() -> list[str]:
    """HEADER_FORMS plus every registered parser's `HEADER_RE` (an unanchored regex)."""
    from servelens.parsers import ENGINES, get_parser

    forms = list(HEADER_FORMS)
    for name in ENGINES:
        extra = getattr(get_parser(name), "HEADER_RE", None)
        if extra and extra not in forms:
            forms.append(extra)
    return forms


def _patterns() -> tuple[str, str, str]:
    """(a header at the start; the shortest prefix before a later header, captured; where a
    later header starts, after its non-word character)."""
    forms = "|".join(f"(?:{f})" for f in header_forms())
    # a header further on must follow a character that cannot belong to a word of it
    return f"^(?:{forms})", f"^(.*?[^A-Za-z0-9_])(?:{forms})", f"[^A-Za-z0-9_](?:{forms})"


def _cut(df: pl.DataFrame) -> pl.DataFrame:
    """The columns `_pos` (position of the header after a prefix in `text`, or null) and
    `_own` (whether to leave that prefix: an engine's own, or words of the line itself).

    Each step is a column (computed once). On a line whose first _REACH characters are ASCII
    without a newline a byte offset is a character offset and `.` matches every character, so
    the shortest prefix before a header (`later`'s capture) ends where the first header after
    a non-word character starts (a search with no capture, several times cheaper), and the
    engine's own prefixes at its end start where OWN_TAIL's match does. Other lines take the
    captures."""
    at_start, later, later_at = _patterns()
    text, head, plain, found, before = (pl.col(c) for c in ("text", "_head", "_plain", "_found", "_before"))
    df = df.with_columns(text.str.slice(0, _REACH).alias("_head")).with_columns(
        ((head.str.len_bytes() == head.str.len_chars()) & ~head.str.contains("\n", literal=True)).alias("_plain"),
        head.str.contains(at_start).alias("_at_start"),
    )
    fast = pl.when(plain).then(head).str.find(later_at).cast(pl.UInt32) + 1
    slow = pl.when(~plain).then(head).str.extract(later, 1).str.len_chars()
    df = df.with_columns(pl.when(~pl.col("_at_start")).then(pl.coalesce(fast, slow)).alias("_found"))
    df = df.with_columns(text.str.slice(0, found).alias("_before"))
    tail_fast = before.str.len_bytes() - pl.when(plain).then(before).str.find(OWN_TAIL).cast(pl.UInt32)
    tail_slow = pl.when(~plain).then(before).str.extract(f"({OWN_TAIL})", 1).str.len_chars()
    df = df.with_columns((found - pl.coalesce(tail_fast, tail_slow).fill_null(0)).alias("_pos"))
    own = before.str.contains(OWN_PREFIX) | before.str.contains(NOT_PREFIX) | (pl.col("_pos") == 0)
    return df.with_columns(own.alias("_own")).drop("_head", "_plain", "_at_start", "_found", "_before")


def sniff(texts: list[str]) -> float:
    df = pl.DataFrame({"text": pl.Series("text", texts, dtype=pl.String)})
    # `_cut` finds a prefix only on a line that does not open with a header and holds one
    # after a non-word character: a sample without such a line is not taken apart
    at_start, _, later_at = _patterns()
    head = pl.col("text").str.slice(0, _REACH)
    if not df.select((~head.str.contains(at_start) & head.str.contains(later_at)).any()).item():
        return 0.0
    df = _cut(df)
    n = df.select((pl.col("_pos").is_not_null() & ~pl.col("_own")).sum()).item()
    # one line is enough (a shell prompt glued to the first line is one line)
    return 1.0 if n else 0.0


def decode(df: pl.DataFrame) -> pl.DataFrame:
    df = _cut(df)
    df = df.with_columns(pl.when(~pl.col("_own")).then(pl.col("_pos")).alias("_pos")).drop("_own")
    cut = pl.col("_pos").is_not_null()
    return df.with_columns(
        pl.when(cut).then(pl.col("text").str.slice(pl.col("_pos"))).otherwise(pl.col("text")).alias("text"),
        pl.when(cut).then(pl.coalesce(pl.col("_pre") + pl.col("text").str.slice(0, pl.col("_pos")), pl.col("text").str.slice(0, pl.col("_pos")))).otherwise(pl.col("_pre")).alias("_pre"),
    ).drop("_pos")
