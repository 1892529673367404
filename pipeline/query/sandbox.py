"""The guarded path for SQL a user typed: what may reach DuckDB, the sandbox it runs in, and the
limits that bound it.

Two layers, so that neither has to be perfect on its own:

1. `check_statement` parses the text with DuckDB's own parser and lets through only statements
   that read: SELECT (with WITH, FROM-first, VALUES, DESCRIBE, SHOW, SUMMARIZE), EXPLAIN [ANALYZE]
   of such a statement (the explained statement is checked too: `EXPLAIN ANALYZE COPY ...` is
   typed EXPLAIN but runs the COPY), and a few PRAGMAs that only show things. Anything else
   (COPY, ATTACH, IMPORT/EXPORT DATABASE, INSTALL/LOAD, SET/RESET, CALL, CREATE, macros, ...)
   is refused before a connection exists, and so is a text holding several statements when any
   one of them is refused.
2. `lock_down` turns DuckDB's own sandbox on once the views are bound: external access off with
   only the committed part files allowed (so `read_text('/etc/passwd')`, `glob('/root/*')`, a COPY
   or ATTACH elsewhere, or reaching the network fail inside DuckDB whatever the statement looked
   like), extension installing and loading off, and the configuration locked so that no later
   statement can give any of it back.

`execute` then runs the statement under a watchdog (`Limits.timeout_s`: DuckDB has no statement
timeout, so a timer thread calls `interrupt()`), with DuckDB's memory limit, a private spill
directory with a size cap, and a cap on the result's size; past a limit the user gets one line
naming it and how to raise it. Results are made convertible whatever their type (intervals,
unions, bit strings become text; nested values holding such leaves become JSON text) so that
every output format can show them.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import duckdb

if TYPE_CHECKING:  # imported where a result becomes a DataFrame: `servelens sql` needs neither
    import polars as pl
    import pyarrow as pa


class QueryError(Exception):
    """A query DuckDB or servelens refused; the message is one line."""


REFUSED_HINT = (
    "servelens sql is read-only: use SELECT (or WITH ... SELECT, FROM, DESCRIBE, SHOW, SUMMARIZE, "
    "EXPLAIN)"
)
# PRAGMAs that only show something (PRAGMA is also how IMPORT DATABASE and settings parse).
READ_ONLY_PRAGMAS = frozenset(
    {"table_info", "show", "show_tables", "show_tables_expanded", "database_list", "database_size",
     "version", "platform", "functions", "collations"}
)

# --- limits ------------------------------------------------------------------------------------

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY = "4GB"
DEFAULT_SPILL = "8GB"
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.I)
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6,
               "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12,
               "tib": 2**40}


def parse_size(text: str | int) -> int:
    """Bytes from `4GB`, `512MiB`, `1.5g` or a plain number of bytes."""
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _SIZE_UNITS or float(m.group(1)) <= 0:
        raise ValueError(f"bad size {text!r}: use a number with a unit, e.g. 512MB or 4GB")
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


def parse_timeout(text: str | float | None) -> float | None:
    """Seconds from `60`, `2.5`; 0 or `none` means no time limit."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        if str(text).strip().lower() in ("none", "off", "0", ""):
            return None
        try:
            value = float(str(text).strip().rstrip("s"))
        except ValueError:
            raise ValueError(f"bad time limit {text!r}: give seconds, e.g. 60 (0 for no limit)") from None
    if value < 0 or value != value:
        raise ValueError(f"bad time limit {text!r}: give seconds, e.g. 60 (0 for no limit)")
    return value or None


def parse_threads(text: str | int | None) -> int | None:
    """A thread count; None, 0 or empty for DuckDB's default (one per core)."""
    if text is None or str(text).strip() in ("", "0"):
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"bad thread count {text!r}: give a whole number (0 for one per core)")
    return value


def human_size(n: int) -> str:
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class Limits:
    """What bounds one query, and the words telling a user how to raise each bound."""

    timeout_s: float | None = DEFAULT_TIMEOUT_S
    memory_bytes: int = parse_size(DEFAULT_MEMORY)
    spill_bytes: int = parse_size(DEFAULT_SPILL)
    threads: int | None = None  # None: DuckDB's default (one per core)
    raise_timeout: str = "--timeout SECONDS or $SERVELENS_QUERY_TIMEOUT"
    raise_memory: str = "--memory-limit SIZE or $SERVELENS_QUERY_MEMORY"
    raise_spill: str = "$SERVELENS_SPILL_SIZE"

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        prefix: str = "SERVELENS_QUERY_",
        base: "Limits | None" = None,
        **overrides: Any,
    ) -> "Limits":
        """`base` (default: the CLI's defaults), then the environment (`<prefix>TIMEOUT`,
        `<prefix>MEMORY`, `SERVELENS_SPILL_SIZE`), then explicit overrides (a CLI option's
        value, as text or number). Raises ValueError naming the bad value."""
        env = os.environ if env is None else env
        limits = base or cls()
        timeout = overrides.get("timeout_s", env.get(f"{prefix}TIMEOUT", limits.timeout_s))
        memory = overrides.get("memory_bytes", env.get(f"{prefix}MEMORY", limits.memory_bytes))
        spill = overrides.get("spill_bytes", env.get("SERVELENS_SPILL_SIZE", limits.spill_bytes))
        threads = overrides.get("threads", env.get(f"{prefix}THREADS", limits.threads))
        return replace(limits, timeout_s=parse_timeout(timeout), memory_bytes=parse_size(memory),
                       spill_bytes=parse_size(spill), threads=parse_threads(threads))


# --- the private spill directory --------------------------------------------------------------


def spill_dir() -> Path:
    """The user's own spill directory for DuckDB ($SERVELENS_SPILL_DIR, else
    <tmp>/servelens-<uid>): created 0700; refused if it is a symlink or belongs to someone else
    (another user could then read or fill what a query spills)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    path = Path(os.environ.get("SERVELENS_SPILL_DIR") or Path(tempfile.gettempdir()) / f"servelens-{uid}")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        raise QueryError(f"cannot create the spill directory {path}: {e.strerror}; set $SERVELENS_SPILL_DIR") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise QueryError(f"spill directory {path} is not a plain directory; remove it or set $SERVELENS_SPILL_DIR")
    if hasattr(os, "getuid") and st.st_uid != uid:
        raise QueryError(f"spill directory {path} belongs to another user; set $SERVELENS_SPILL_DIR to a directory of yours")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    global _swept
    if not _swept:
        _swept = True
        _sweep(path)
    return path


_swept = False


def _sweep(base: Path) -> None:
    """Remove what connections of dead processes left (a killed process cannot clean up)."""
    for entry in base.iterdir():
        pid = entry.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:  # alive, someone else's
            pass


def connection_config(limits: Limits) -> dict[str, Any]:
    """Settings a connection must be created with (they cannot be changed once it runs).

    Each connection spills to a directory of its own inside the private spill directory
    (`<pid>-<random>`: DuckDB creates it on the first spill and removes it when the connection
    closes), so that concurrent queries never share temporary files and each has its own cap."""
    config: dict[str, Any] = {
        "memory_limit": f"{max(limits.memory_bytes // 1024, 1)}KiB",
        "temp_directory": str(spill_dir() / f"{os.getpid()}-{secrets.token_hex(6)}"),
        "max_temp_directory_size": f"{max(limits.spill_bytes // 1024, 1)}KiB",
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
        # a bare name in user SQL must not find a Python object of the calling code
        "python_enable_replacements": False,
    }
    if limits.threads:
        config["threads"] = limits.threads
    return config


def lock_down(con: duckdb.DuckDBPyConnection, readable: Iterable[Path | str]) -> None:
    """DuckDB's sandbox: from now on `con` opens no file but `readable` (the committed parts the
    `events` view reads), loads no extension and changes no setting. Call it after the views are
    bound and the variables set."""
    # stderr carries servelens' own one-line messages: a long query (a report over a big store,
    # an exporter refresh) must not draw DuckDB's progress bar over them (a session setting,
    # so it is set here, before the lock, rather than in connection_config)
    con.execute("set enable_progress_bar = false")
    con.execute("set allowed_paths = ?", [[str(p) for p in readable]])
    con.execute("set allowed_directories = []")
    con.execute("set enable_external_access = false")
    con.execute("set lock_configuration = true")


# --- the statement check ----------------------------------------------------------------------

_parser_lock = threading.Lock()
_parser: duckdb.DuckDBPyConnection | None = None


def parse_statements(sql: str) -> list[Any]:
    """The statements of `sql`, parsed on this process's one parsing connection (no store, no
    file, no extension); QueryError when it does not parse."""
    return _statements(sql)


def _statements(sql: str, parser: duckdb.DuckDBPyConnection | None = None) -> list[Any]:
    if parser is not None:
        return _extract(parser, sql)
    global _parser
    with _parser_lock:  # one parsing connection, used by one thread at a time
        if _parser is None:
            _parser = duckdb.connect(":memory:", config={"enable_external_access": False, "autoload_known_extensions": False, "autoinstall_known_extensions": False})
        return _extract(_parser, sql)


def _extract(con: duckdb.DuckDBPyConnection, sql: str) -> list[Any]:
    try:
        return list(con.extract_statements(sql))
    except duckdb.Error as e:
        raise QueryError(clean_message(e)) from None
    except ValueError as e:  # a statement type this Python client has no name for
        raise QueryError(f"{REFUSED_HINT} (got a statement servelens cannot check: {e})") from None


def _kind(statement: Any) -> str:
    try:
        kind = statement.type
    except ValueError:  # a statement type this Python client has no name for: refused below
        return "a statement servelens cannot check"
    return (kind.name if hasattr(kind, "name") else str(kind)).upper()


def _words(sql: str) -> list[tuple[str, str, int]]:
    """(lowercased text, token type, start) of every token that is not a comment."""
    tokens = duckdb.tokenize(sql)
    out = []
    for i, (start, kind) in enumerate(tokens):
        name = kind.name if hasattr(kind, "name") else str(kind)
        if name == "comment":
            continue
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        out.append((sql[start:end].strip().lower(), name, start))
    return out


def _explained(sql: str) -> str:
    """The statement an EXPLAIN statement explains: the text after `EXPLAIN`, `ANALYZE` and
    an `( options )` list."""
    words = _words(sql)
    if not words or words[0][0] != "explain":
        raise QueryError(f"{REFUSED_HINT} (cannot read this EXPLAIN)")
    i = 1
    if i < len(words) and words[i][0] == "analyze":
        i += 1
    if i < len(words) and words[i][0] == "(":
        depth = 0
        while i < len(words):
            depth += words[i][0].count("(") - words[i][0].count(")")
            i += 1
            if depth <= 0:
                break
    if i >= len(words):
        raise QueryError(f"{REFUSED_HINT} (EXPLAIN of nothing)")
    return sql[words[i][2]:]


def _check_one(statement: Any, depth: int = 0, parser: duckdb.DuckDBPyConnection | None = None) -> None:
    kind = _kind(statement)
    if kind == "SELECT":
        return
    if kind == "EXPLAIN" and depth < 4:
        inner = _statements(_explained(statement.query), parser)
        if len(inner) != 1:
            raise QueryError(f"{REFUSED_HINT} (EXPLAIN of several statements)")
        _check_one(inner[0], depth + 1, parser)
        return
    if kind == "PRAGMA":
        words = _words(statement.query)
        name = words[1][0] if len(words) > 1 and words[0][0] == "pragma" else ""
        if name in READ_ONLY_PRAGMAS:
            return
        if words and words[0][0] != "pragma":  # a statement DuckDB runs as a pragma (IMPORT DATABASE, COPY FROM DATABASE)
            raise QueryError(f"{REFUSED_HINT} (got {words[0][0].upper()})")
        raise QueryError(f"{REFUSED_HINT} (PRAGMA {name or '?'} is not one that only shows something)")
    if kind == "MULTI":  # PIVOT without an IN list creates types first
        raise QueryError(f"{REFUSED_HINT} (PIVOT needs an explicit IN list here: ... on col in (a, b) ...)")
    raise QueryError(f"{REFUSED_HINT} (got {kind})")


# A query a person writes is a few kilobytes; a text of megabytes (pasted into the dashboard's
# page) costs the parser memory and time before any limit of the query applies.
MAX_SQL_CHARS = 1_000_000


def check_statement(sql: str, parser: duckdb.DuckDBPyConnection | None = None) -> int:
    """Raise QueryError unless every statement of `sql` only reads; returns how many there are.
    `parser`: a connection to parse with (parsing runs nothing: `run` parses on the fresh
    connection the query will run on, one DuckDB database fewer to start), else a shared one."""
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(f"the query text is {len(sql):,} characters; at most {MAX_SQL_CHARS:,} are read")
    statements = _statements(sql, parser)
    if not statements:
        raise QueryError("empty query: give a SELECT statement")
    for st in statements:
        _check_one(st, 0, parser)
    return len(statements)


# --- running ----------------------------------------------------------------------------------

# Where DuckDB starts appending detail a user does not need on one line (the CSV sniffer's dump
# of the lines it read, the candidate list of a failed cast).
_DETAIL_MARKERS = ("Possible Solution", "Possible fixes", "Original Line", "Parser options", "* ")
MAX_MESSAGE = 300


def clean_message(e: BaseException) -> str:
    """DuckDB's error in one line of at most MAX_MESSAGE characters, without the sections that
    quote file lines."""
    text = str(e)
    for marker in _DETAIL_MARKERS:
        cut = text.find(marker)
        if cut > 0:
            text = text[:cut]
    line = " ".join(text.split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 3] + "..."


class _Watchdog:
    """Interrupts `con` after `seconds` (DuckDB has no statement timeout of its own)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float | None) -> None:
        self.fired = False
        self._con = con
        self._timer = threading.Timer(seconds, self._fire) if seconds else None
        if self._timer is not None:
            self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        self._con.interrupt()

    def __enter__(self) -> "_Watchdog":
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()


# Types polars cannot take from Arrow (or takes losing part of the value): shown as DuckDB's text.
_AS_TEXT = ("INTERVAL", "BIT", "BIGNUM", "VARINT", "TIME WITH TIME ZONE", "UNION(")
# Leaves that make a nested value unrenderable by CSV/JSON writers: the value becomes JSON text.
_NESTED_TROUBLE = _AS_TEXT + ("BLOB", "HUGEINT", "DECIMAL", "UHUGEINT")
# A map keyed by anything but text has no JSON form in polars' writers: DuckDB's JSON instead.
_NON_TEXT_KEY = re.compile(r"MAP\((?!VARCHAR,)")


def renderable(rel: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    exprs, changed = [], False
    # positional references (#1, #2, ...): a result may hold two columns of the same name
    for i, (name, typ) in enumerate(zip(unique_names(rel.columns), rel.types), start=1):
        t = str(typ).upper()
        q = '"' + name.replace('"', '""') + '"'
        nested = t.startswith(("STRUCT(", "MAP(")) or t.endswith("]")
        if nested and (any(k in t for k in _NESTED_TROUBLE) or _NON_TEXT_KEY.search(t)):
            exprs.append(f"to_json(#{i})::varchar as {q}")
            changed = True
        elif not nested and t.startswith(_AS_TEXT):
            exprs.append(f"#{i}::varchar as {q}")
            changed = True
        else:
            exprs.append(f"#{i} as {q}")
    return rel.project(", ".join(exprs)) if changed else rel


class _ReadFailed(Exception):
    """DuckDB's error met while the result's batches were read: Arrow's reader hands it on as
    an OSError (ArrowIOError) holding DuckDB's text, not as DuckDB's own exception."""


def _batches(reader: pa.RecordBatchReader):
    import pyarrow as pa

    it = iter(reader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as e:
            raise _ReadFailed(str(e)) from None
        yield batch


def _fetch(rel: duckdb.DuckDBPyRelation, max_bytes: int, limits: Limits) -> pa.Table:
    import pyarrow as pa

    reader = rel.to_arrow_reader(64 * 1024)
    batches, size = [], 0
    for batch in _batches(reader):
        size += batch.nbytes
        if size > max_bytes:
            raise QueryError(
                f"the result is larger than the memory limit ({human_size(max_bytes)}): add a LIMIT or "
                f"aggregate, or raise the limit with {limits.raise_memory}"
            )
        batches.append(batch)
    table = pa.Table.from_batches(batches, schema=reader.schema)
    names = unique_names(table.column_names)
    return _dates_in_range(table.rename_columns(names) if names != table.column_names else table)


# polars (chrono) holds dates and times of years -262,143 to 262,142; DuckDB's go further
# (`'infinity'::timestamp`, year 294,247, a date of year 5,000,000) and polars panics on them
# when it prints or writes the value. A column holding one is shown as DuckDB's own text.
_DAYS_MAX = 95_000_000  # about year 262,000 either side of 1970
_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": None}  # ns: int64 is always in range


def _out_of_range(arr: pa.Array) -> bool:
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        per_day = 1 if pa.types.is_date32(t) else 86_400_000 if pa.types.is_date64(t) else _PER_DAY[t.unit]
        if per_day is None or arr.null_count == len(arr):
            return False
        raw = arr.view(pa.int32() if pa.types.is_date32(t) else pa.int64())
        lo, hi = pc.min_max(raw).values()
        return lo.as_py() < -_DAYS_MAX * per_day or hi.as_py() > _DAYS_MAX * per_day
    if pa.types.is_map(t):
        return _out_of_range(arr.keys) or _out_of_range(arr.items)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _out_of_range(arr.flatten())
    if pa.types.is_struct(t):
        return any(_out_of_range(arr.field(i)) for i in range(t.num_fields))
    if pa.types.is_dictionary(t):
        return _out_of_range(arr.dictionary)
    return False


def _dates_in_range(table: pa.Table) -> pa.Table:
    import pyarrow as pa

    exprs, changed = [], False
    for i, col in enumerate(table.columns, start=1):
        q = '"' + table.column_names[i - 1].replace('"', '""') + '"'
        if any(_out_of_range(chunk) for chunk in col.chunks):
            flat = pa.types.is_timestamp(col.type) or pa.types.is_date(col.type)
            exprs.append(f"#{i}::varchar as {q}" if flat else f"to_json(#{i})::varchar as {q}")
            changed = True
        else:
            exprs.append(f"#{i} as {q}")
    if not changed:
        return table
    # DuckDB's text for these values (`infinity`, `294247-01-10 04:00:54.775807`), on a
    # connection of its own that opens nothing
    con = duckdb.connect(":memory:", config={"enable_external_access": False, "autoload_known_extensions": False,
                                             "autoinstall_known_extensions": False, "threads": 1})
    try:
        return con.from_arrow(table).project(", ".join(exprs)).to_arrow_table()
    finally:
        con.close()


def unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        k = seen.get(n, 0)
        seen[n] = k + 1
        out.append(n if k == 0 else f"{n}_{k}")
    return out


def _limit_message(e: duckdb.Error, limits: Limits) -> str:
    text = str(e)
    if "max_temp_directory_size" in text:
        return (f"the query spilled more than its {human_size(limits.spill_bytes)} of temporary disk; "
                f"raise the cap with {limits.raise_spill}, or add filters")
    return (f"the query needs more than its {human_size(limits.memory_bytes)} memory limit; raise it with "
            f"{limits.raise_memory}, or add filters or a LIMIT")


def execute(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: list[Any] | dict[str, Any] | None = None,
    limits: Limits | None = None,
    fetch: Callable[[duckdb.DuckDBPyRelation | None, Limits], Any] | None = None,
) -> pl.DataFrame | Any:
    """Run `sql` (already checked) on `con` within `limits`; the result as a DataFrame, or
    QueryError with one line. `fetch`: what to make of the result instead, called with its
    relation (None for a statement without one) and the limits (pipeline/query/textresult.py
    writes it as text); DuckDB's errors while it reads are told as the query's."""
    limits = limits or Limits()
    with _Watchdog(con, limits.timeout_s) as dog:
        try:
            rel = con.sql(sql, params=params) if params is not None else con.sql(sql)
            if fetch is not None:
                return fetch(rel, limits)
            import polars as pl

            if rel is None:  # a statement with no result (e.g. a PRAGMA with no output)
                return pl.DataFrame()
            table = _fetch(renderable(rel), limits.memory_bytes, limits)
        except duckdb.InterruptException:
            if dog.fired:
                raise QueryError(
                    f"the query ran past its {limits.timeout_s:g} s time limit and was stopped; "
                    f"raise it with {limits.raise_timeout}"
                ) from None
            raise QueryError("the query was interrupted") from None
        except duckdb.OutOfMemoryException as e:
            raise QueryError(_limit_message(e, limits)) from None
        except duckdb.PermissionException as e:
            vanished = _vanished_part(e)
            if vanished:  # a part moved by a concurrent commit: the caller reads the manifest again
                raise QueryError(f'No files found that match the pattern "{vanished}"') from None
            raise QueryError(_permission_message(e)) from None
        except duckdb.IOException as e:
            # a part moved by a concurrent commit: keep the whole line so that the caller sees
            # which kind of failure it was and reads the manifest again
            text = " ".join(str(e).split())
            raise QueryError(text if any(v in text for v in _VANISHED) else clean_message(e)) from None
        except duckdb.Error as e:
            raise QueryError(clean_message(e)) from None
        except _ReadFailed as e:
            text = str(e)
            if "Out of Memory Error" in text or "max_temp_directory_size" in text:
                raise QueryError(_limit_message(e, limits)) from None  # type: ignore[arg-type]
            if "INTERRUPT" in text.upper() and dog.fired:
                raise QueryError(
                    f"the query ran past its {limits.timeout_s:g} s time limit and was stopped; "
                    f"raise it with {limits.raise_timeout}"
                ) from None
            raise QueryError(clean_message(e)) from None
    from .quiet import is_panic, panics_hidden

    try:
        with panics_hidden():
            return pl.from_arrow(table)  # type: ignore[return-value]
    except BaseException as e:  # a type polars cannot take that renderable did not foresee (a panic too)
        if not isinstance(e, Exception) and not is_panic(e):
            raise
        raise QueryError(f"cannot show this result's column types ({clean_message(e)}); cast the column to varchar") from None


_VANISHED = ("No files found", "No such file")
_PERM_PATH = re.compile(r'(?:file|directory) "([^"]*)"')


def _vanished_part(e: duckdb.Error) -> str | None:
    """The part a query could not find, when DuckDB, not finding it, went on to list it as a
    directory (`<part>.parquet/**/*.parquet`) and the sandbox refused that: the part was
    moved or collected by a concurrent commit."""
    m = _PERM_PATH.search(str(e))
    if m and m.group(1).endswith(".parquet/**/*.parquet"):
        return m.group(1)[: -len("/**/*.parquet")]
    return None


def _permission_message(e: duckdb.Error) -> str:
    m = _PERM_PATH.search(str(e))
    what = f" (refused: {m.group(1)})" if m else ""
    return ("user SQL reads only the store's committed data: it cannot read or write other files, "
            f"reach the network, load extensions or change settings{what}")
