"""A query's result written as text by DuckDB itself: what `servelens sql` prints, without
polars, pyarrow or numpy in its process.

Each value becomes its text inside DuckDB, vectorised over the result (one SQL expression a
column), so that Python only joins lines:

- csv: one line a row, built in SQL; binary as hex, nested values as JSON text, a text cell
  a spreadsheet would run as a formula prefixed with `'` (FORMULA_START), quoted as
  RFC 4180 asks;
- json: one object a row (DuckDB's `to_json`): exact numbers (DECIMAL, HUGEINT) as JSON
  numbers, nested values as JSON, binary as hex text, infinities and NaN as null;
- table: one text a cell, made safe for a terminal (pipeline/termsafe.py) and aligned.

Times with a zone are written in UTC whatever the session's zone. The types DuckDB has and
JSON has not (INTERVAL, UNION, BIT, ...) are already text (sandbox.renderable). The result is
read in chunks and stops with one line once its text passes the memory limit; a table reads
`limit` rows and only counts the rest.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from ..termsafe import shown
from .sandbox import Limits, QueryError, human_size, renderable, unique_names

CHUNK = 10_000
# a table cell longer than this is cut, with an ellipsis (the whole value: --format csv/json)
CELL_CHARS = 80
# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection): a log
# line such as `=HYPERLINK(...)` must arrive as text. OWASP's advice: prefix a single quote.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class TextResult:
    text: str
    rows: int  # rows of the whole result (a table may show fewer)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _nested(t: str) -> bool:
    return t.startswith(("STRUCT(", "MAP(")) or t.endswith("]")


def _zoned(t: str) -> bool:
    return t.startswith("TIMESTAMP") and ("WITH TIME ZONE" in t or t.startswith("TIMESTAMPTZ"))


def _utc(c: str, t: str, fmt: str) -> str:
    """A time with a zone as UTC text, `fmt` with its fraction of a second ({frac}) at the
    type's precision; an infinity has no fields to format: DuckDB's own word for it."""
    fmt = fmt.format(frac="%n" if "NS" in t else "%f")
    return f"case when isfinite({c}::timestamptz) then strftime(timezone('UTC', {c}), '{fmt}') else {c}::varchar end"


# Types whose text is a number: a leading `-` is its sign, not a formula.
_NUMBERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
            "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "REAL", "DECIMAL")


def _csv_cell(c: str, t: str, safe: bool) -> str:
    if _nested(t):
        text = f"to_json({c})::varchar"
    elif t == "BLOB":
        text = f"lower(hex({c}))"
    elif _zoned(t):
        text = _utc(c, t, "%Y-%m-%dT%H:%M:%S.{frac}+0000")
    else:
        text = f"{c}::varchar"
    if safe and not t.startswith(_NUMBERS):  # text (or a time such as `-infinity`) a spreadsheet would run
        starts = ", ".join(_lit(s) for s in FORMULA_START)
        text = f"case when left({text}, 1) in ({starts}) then {_lit(chr(39))} || {text} else {text} end"
    v = f"({text})"
    return (f"case when {v} is null then '' when {v} = '' or regexp_matches({v}, '[\",\\r\\n]') "
            f"then '\"' || replace({v}, '\"', '\"\"') || '\"' else {v} end")


def _csv_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"' if name == "" or any(ch in name for ch in ',"\r\n') else name


def _json_value(c: str, t: str) -> str:
    if _nested(t):
        value = f"to_json({c})"
    elif t == "BLOB":
        value = f"to_json(lower(hex({c})))"
    elif t in ("DOUBLE", "FLOAT", "REAL"):
        value = f"to_json(case when isfinite({c}) then {c} end)"
    elif _zoned(t):
        value = f"to_json({_utc(c, t, '%Y-%m-%dT%H:%M:%S.{frac}+00:00')})"
    elif t.startswith(("TIMESTAMP", "DATE", "TIME")):
        value = f"to_json({c}::varchar)"
    else:
        value = f"to_json({c})"
    return f"coalesce({value}::varchar, 'null')"


def _table_cell(c: str, t: str) -> str:
    if _nested(t):
        return f"to_json({c})::varchar"
    if t == "BLOB":
        return f"lower(hex({c}))"
    if _zoned(t):
        return f"case when isfinite({c}::timestamptz) then timezone('UTC', {c})::varchar || ' UTC' else {c}::varchar end"
    return f"{c}::varchar"


def fetcher(fmt: str, *, limit: int = 0, safe_csv: bool = True):
    """What sandbox.execute calls with the query's relation to make its text: `fmt` table, csv
    or json; `limit` rows of a table (0: all), the others only counted."""
    def fetch(rel: Any, limits: Limits) -> TextResult:
        if rel is None:  # a statement with no result
            return TextResult({"table": "(no result)\n", "csv": "", "json": "[]\n"}[fmt], 0)
        rel = renderable(rel)
        names = unique_names(rel.columns)
        types = [str(t).upper() for t in rel.types]
        cols = [f"#{i}" for i in range(1, len(names) + 1)]
        if fmt == "csv":
            line = "concat_ws(',', " + ", ".join(_csv_cell(c, t, safe_csv) for c, t in zip(cols, types)) + ")"
            lines, rows = _read(rel.project(line), limits)
            head = ",".join(_csv_name(n) for n in names)
            return TextResult("\n".join([head, *(r[0] for r in lines)]) + "\n", rows)
        if fmt == "json":
            parts = [f"{_lit(json.dumps(n, ensure_ascii=False) + ':')}, {_json_value(c, t)}" for n, c, t in zip(names, cols, types)]
            obj = "concat('{', " + ", ',', ".join(parts) + ", '}')"
            lines, rows = _read(rel.project(obj), limits)
            return TextResult("[" + ",".join(r[0] for r in lines) + "]\n", rows)
        cells, rows = _read(rel.project(", ".join(_table_cell(c, t) for c, t in zip(cols, types))), limits, limit)
        return TextResult(table(names, cells, rows, limit), rows)

    return fetch


def _read(rel: Any, limits: Limits, keep: int = 0) -> tuple[list[tuple], int]:
    """The rows of `rel` (the first `keep` when not 0) and how many there are; QueryError once
    the text kept passes the memory limit."""
    kept: list[tuple] = []
    size = rows = 0
    it = rel.iter_rows(CHUNK)
    while True:
        chunk = list(itertools.islice(it, CHUNK))
        if not chunk:
            return kept, rows
        rows += len(chunk)
        room = len(chunk) if not keep else max(0, keep - len(kept))
        if room:
            take = chunk[:room]
            size += sum(len(v) for row in take for v in row if v is not None)
            if size > limits.memory_bytes:
                raise QueryError(
                    f"the result is larger than the memory limit ({human_size(limits.memory_bytes)}): add a LIMIT or "
                    f"aggregate, or raise the limit with {limits.raise_memory}")
            kept.extend(take)


def _cell(v: str | None) -> str:
    if v is None:
        return "null"
    s = shown(v)  # a newline that would forge a row, an escape that would drive the terminal
    return s if len(s) <= CELL_CHARS else s[:CELL_CHARS] + "…"


def table(names: list[str], cells: list[tuple], rows: int, limit: int = 0) -> str:
    """An aligned Markdown-style table of these rows, with a last line saying how many rows
    there are (and, when fewer are shown, how to see them all)."""
    head = [shown(n) for n in names]
    body = [[_cell(v) for v in row] for row in cells]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(head)]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in body)]
    if limit and rows > len(cells):
        out.append(f"({rows:,} rows; the first {len(cells):,} shown: --limit 0 shows all, "
                   f"--format csv or json writes them all)")
    else:
        out.append(f"({rows} row{'s' if rows != 1 else ''})")
    return "\n".join(out) + "\n"
