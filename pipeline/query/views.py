"""Loading the metric views: the one place that turns `sql/*.sql` into views on a DuckDB
connection and sets the parameters (window size, signal thresholds) they read.

The views read parameters with `getvariable('name')` and fall back to a default in SQL, so
they also work on a bare connection. `sql/thresholds.toml` is the documented source of those
defaults; a user file (`--thresholds FILE`) overrides single keys. TOML top-level keys become
variables of the same name; a key inside a `[section]` becomes `section_key`.

Binding a view costs as much as binding every view beneath it (DuckDB binds a view's whole
tree when it is created, and over every Parquet part `events` reads), so a connection for one
query binds only the views that query names and the views those read (`views_for`); a query
over `events` alone binds none.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import duckdb

from servelens.parsers.availability import catalogue

from .sandbox import QueryError, parse_statements

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

DEFAULT_THRESHOLDS_NAME = "thresholds.toml"
PRESET_PREFIX = "preset:"  # `--thresholds preset:NAME` names sql/preset-NAME.toml
_VIEW_RE = re.compile(r"^\s*create\s+or\s+replace\s+view\s+(\w+)\s+as\b", re.I | re.M)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sql_dir() -> Path:
    """The directory holding the view files (inside the installed package)."""
    try:
        return Path(str(importlib.resources.files("servelens.sql")))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - running from a bare checkout
        return Path(__file__).resolve().parent.parent / "sql"


# The folders of sql/, lowest first: a view reads only views of its own layer or below
LAYERS = ("staging", "metrics", "signals", "export")


def sql_files(directory: Path | None = None) -> list[Path]:
    """The view files in load order: each after the views it reads (computed from their
    `from` / `join`), else by layer (LAYERS) and name. A directory without layer folders
    (a test's own views) is one layer."""
    return list(_load_order(directory or sql_dir()))


@functools.lru_cache(maxsize=8)
def _load_order(directory: Path) -> tuple[Path, ...]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    files = sorted([*directory.glob("*.sql"), *directory.glob("*/*.sql")],
                   key=lambda p: (rank.get(p.parent.name, -1) if p.parent != directory else -1, p.name))
    texts = {p: view_sql(p) for p in files}
    names = {p: view_name(p) for p in files}
    by_name = {n: p for p, n in names.items()}
    if len(by_name) < len(files):
        raise ValueError(f"two files of {directory} define the same view")
    reads = {p: sorted((_table_references(texts[p]) & set(by_name)) - {names[p]}) for p in files}
    order: list[Path] = []
    placed: set[Path] = set()

    def place(p: Path, path: tuple[Path, ...]) -> None:
        if p in placed:
            return
        if p in path:
            raise ValueError("views that read each other: " + " -> ".join(names[q] for q in (*path, p)))
        for name in reads[p]:
            place(by_name[name], (*path, p))
        placed.add(p)
        order.append(p)

    for p in files:
        place(p, ())
    return tuple(order)


# The placeholder in metric_availability.sql for the engines' availability rows
AVAILABILITY_ROWS = "$engine_availability"


def _sql_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "'" + str(value).replace("'", "''") + "'"


@functools.lru_cache(maxsize=4)
def _values_sql(rows: tuple[tuple, ...]) -> str:
    return ",\n    ".join("(" + ", ".join(_sql_literal(v) for v in row) + ")" for row in rows)


def _text(path: Path) -> str:
    """A view file's text, read once per version of the file: every connection reads each
    file's name and statement."""
    st = path.stat()
    return _read_text(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _read_text(path: Path, mtime_ns: int, size: int) -> str:
    return path.read_text(encoding="utf-8")


def view_sql(path: Path) -> str:
    """The statement of a view file, with the engines' availability rows (parsers/engines/)
    written in where the file asks for them: what every reader of a view's SQL reads."""
    text = _text(path)
    if AVAILABILITY_ROWS in text:
        text = text.replace(AVAILABILITY_ROWS, _values_sql(catalogue()))
    return text


def view_name(path: Path) -> str:
    """The view a file defines; raises if the file is not one `create or replace view`."""
    names = _names_in(_text(path))
    if len(names) != 1:
        raise ValueError(f"{path.name}: expected exactly one `create or replace view`, found {len(names)}")
    return names[0]


@functools.lru_cache(maxsize=256)
def _names_in(text: str) -> tuple[str, ...]:
    """The views a file's text creates (asked for each file by every connection)."""
    return tuple(_VIEW_RE.findall(text))


def define_view(con: duckdb.DuckDBPyConnection, name: str, directory: Path | None = None) -> None:
    """Create view `name` from its file on `con` (in the current schema)."""
    for path in sql_files(directory):
        if view_name(path) == name:
            try:
                con.execute(view_sql(path))
            except duckdb.Error as e:
                raise RuntimeError(f"{path.name}: {e}") from e
            return
    raise ValueError(f"no view {name!r} in sql/")


def _identifiers(sql: str) -> set[str]:
    """Every word of `sql` that could name a table, lowercased and unquoted (DuckDB's own
    tokenizer: words inside comments and string literals are not names)."""
    tokens = duckdb.tokenize(sql)
    out = set()
    for i, (start, kind) in enumerate(tokens):
        if (kind.name if hasattr(kind, "name") else str(kind)) not in ("identifier", "keyword"):
            continue
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        out.add(sql[start:end].strip().strip('"').lower())
    return out


@functools.lru_cache(maxsize=256)
def _table_references(sql: str) -> frozenset[str]:
    """The words of `sql` that follow `from` or `join`: the tables and views it reads (the
    views of sql/ name what they read that way; a column that shares a view's name, such as
    scaling_signals' `throughput`, is not a dependency). Once per text: the load order and
    the dependencies both ask it of every view file."""
    tokens = duckdb.tokenize(sql)
    starts = [start for start, _kind in tokens] + [len(sql)]

    def word(i: int) -> str:
        return sql[starts[i]:starts[i + 1]].strip().strip('"').lower()

    # only a token that can read `from` or `join` once stripped is cut out and compared: a
    # view file is thousands of tokens, and every process reads them all once
    return frozenset(word(i + 1) for i in range(len(tokens) - 1)
                     if (sql[starts[i]] in _FROM_JOIN_FIRST or sql[starts[i]].isspace()) and word(i) in ("from", "join"))


# what a token reading `from` or `join` (quoted or not, any case) starts with
_FROM_JOIN_FIRST = frozenset('fFjJ"')


def view_dependencies(directory: Path | None = None) -> dict[str, frozenset[str]]:
    """Per view of `directory` (default sql/), the other views it reads (after `from` or
    `join`). Computed once per directory (`view_dependencies()` and `view_dependencies(None)`
    are one entry: every query asks, and tokenizing the view files costs a few ms)."""
    return _view_dependencies(directory)


@functools.lru_cache(maxsize=8)
def _view_dependencies(directory: Path | None) -> dict[str, frozenset[str]]:
    texts = {view_name(p): view_sql(p) for p in sql_files(directory)}
    names = set(texts)
    return {v: frozenset((_table_references(t) & names) - {v}) for v, t in texts.items()}


# Words with which a query asks about the catalog itself (SHOW TABLES, duckdb_views(),
# information_schema, query_table('name')): such a query sees every view.
_CATALOG_WORDS = frozenset({"show", "show_tables", "show_tables_expanded", "tables", "table_info",
                            "duckdb_views", "duckdb_tables", "duckdb_columns", "duckdb_dependencies",
                            "information_schema", "query_table", "query", "pg_catalog", "sqlite_master"})


def named_views(sql: str, directory: Path | None = None) -> set[str] | None:
    """The views a query names (not those they read); None when it asks about the catalog."""
    words = _identifiers(sql)
    if words & _CATALOG_WORDS:
        return None
    return words & view_names(directory)


def reads_variables(sql: str) -> bool:
    """Whether `sql` may read a variable itself (getvariable, duckdb_variables()) or run SQL it
    builds (json_execute_serialized_sql; query() is a catalog word): a look at its words, where
    a false yes costs only setting them. A connection whose views and query read none need
    not set the thresholds, one statement each."""
    text = sql.lower()
    return "variable" in text or "serialized_sql" in text


def view_names(directory: Path | None = None) -> frozenset[str]:
    """The views of `directory` (default sql/), from their files' `create or replace view`
    alone: what a query that names none of them needs, without tokenizing every view."""
    return _view_names(directory or sql_dir())


@functools.lru_cache(maxsize=8)
def _view_names(directory: Path) -> frozenset[str]:
    return frozenset(view_name(p) for p in [*directory.glob("*.sql"), *directory.glob("*/*.sql")])


def closure(names: Iterable[str], directory: Path | None = None, leaves: Iterable[str] = ()) -> set[str]:
    """`names` and the views they read, transitively; a view of `leaves` is kept but what it
    reads is not followed (a view bound over a stored rollup reads no other view)."""
    names = list(names)
    if not names:  # nothing to follow: no view file need be read
        return set()
    deps = view_dependencies(directory)
    stop = set(leaves)
    todo = [n for n in names if n in deps]
    need: set[str] = set()
    while todo:
        v = todo.pop()
        if v not in need:
            need.add(v)
            if v not in stop:
                todo.extend(deps[v])
    return need


def views_for(sql: str, directory: Path | None = None) -> set[str] | None:
    """The views a query needs bound: those it names, and the views they read, transitively.
    None (bind every view) when the query asks about the catalog. A word that merely looks
    like a view name (a column alias) only costs binding that view."""
    named = named_views(sql, directory)
    return None if named is None else closure(named, directory)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}_"))
        else:
            out[name] = value
    return out


def read_thresholds(path: Path | str | None = None) -> dict[str, Any]:
    """Variables from a thresholds TOML file (the packaged defaults when `path` is None)."""
    p = Path(path) if path is not None else sql_dir() / DEFAULT_THRESHOLDS_NAME
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
        if key not in _THRESHOLDS_READ:
            # every connection resolves its variables (a refresh several times): a file is
            # parsed once per version of it, not at each
            if len(_THRESHOLDS_READ) >= 16:
                _THRESHOLDS_READ.clear()
            _THRESHOLDS_READ[key] = _flatten(tomllib.loads(p.read_text(encoding="utf-8")))
        return copy.deepcopy(_THRESHOLDS_READ[key])
    except FileNotFoundError:
        raise ValueError(f"thresholds file not found: {p}") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"thresholds file {p} is not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 text"
        raise ValueError(f"cannot read thresholds file {p}: {reason}") from None


_THRESHOLDS_READ: dict[tuple[str, int, int], dict[str, Any]] = {}


# Lower bounds a value must meet, beyond having the default's type. The grid steps are bounded
# so that one setting cannot make millions of windows per instance (a memory and time bomb);
# durations and counts cannot be negative. Thresholds themselves may be negative: for the
# autoscaler rule a negative threshold leaves its condition out.
_AT_LEAST: dict[str, float] = {
    "window_s": 1.0,
    "queue_sample_s": 0.1,
    "autoscaler_step_s": 0.1,
    "slo_min_requests": 1,
    "swing_lookback_windows": 1,
    "errors_count": 1,
}
_AT_MOST = 10**9  # durations (s) and counts
_CHOICES: dict[str, tuple[str, ...]] = {"autoscaler_combine": ("any", "all")}
_DURATION_SUFFIX = "_s"
_NON_NEGATIVE_EXCEPT = ("autoscaler_waiting", "autoscaler_running", "autoscaler_kv_usage")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def check_thresholds(values: Mapping[str, Any], defaults: Mapping[str, Any], source: str) -> None:
    """Each value has its default's type and lies in its range: a ValueError naming the key,
    what it must be and where it came from, for the first that does not."""
    for key, value in values.items():
        default = defaults.get(key)
        if default is None or value is None:
            continue
        want = _kind(default)
        if _kind(value) != want:
            shown = repr(value) if isinstance(value, str) else str(value)
            raise ValueError(f"threshold {key} in {source} must be {want}, not {_kind(value)} ({shown[:80]})")
        if want == "a number":
            if not math.isfinite(value):
                raise ValueError(f"threshold {key} in {source} must be a finite number, not {value!r}")
            low = _AT_LEAST.get(key)
            if low is None and key not in _NON_NEGATIVE_EXCEPT and (key.endswith(_DURATION_SUFFIX) or isinstance(default, int)):
                low = 0
            if low is not None and value < low:
                raise ValueError(f"threshold {key} in {source} must be at least {low:g}, not {value!r}")
            if (key.endswith(_DURATION_SUFFIX) or isinstance(default, int)) and abs(value) > _AT_MOST:
                # beyond DuckDB's timestamps (a window of 1e18 s) or its BIGINT (1e20 windows)
                raise ValueError(f"threshold {key} in {source} must be at most {_AT_MOST:,} ({'about 31 years' if key.endswith(_DURATION_SUFFIX) else 'a count'}), not {value!r}")
        elif key in _CHOICES and value not in _CHOICES[key]:
            raise ValueError(f"threshold {key} in {source} must be one of {', '.join(_CHOICES[key])}, not {value!r}")


def presets() -> list[str]:
    """The autoscaler presets shipped beside thresholds.toml (sql/preset-NAME.toml)."""
    return sorted(p.name[len("preset-"):-len(".toml")] for p in sql_dir().glob("preset-*.toml"))


def preset_path(name: str) -> Path:
    """The file of preset `name`; a ValueError naming the presets when there is none."""
    if name in presets():
        return sql_dir() / f"preset-{name}.toml"
    raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(presets())} (e.g. --thresholds preset:{presets()[0]})")


def resolve_variables(
    variables: Mapping[str, Any] | None = None, thresholds: Path | str | None = None
) -> dict[str, Any]:
    """Packaged defaults, then a user thresholds file (or `preset:NAME`), then explicit
    variables.

    A user file may only set keys the defaults know (a typo must not silently do nothing)."""
    merged = read_thresholds()
    if thresholds is not None and str(thresholds).startswith(PRESET_PREFIX):
        thresholds = preset_path(str(thresholds)[len(PRESET_PREFIX):])
    if thresholds is not None:
        user = read_thresholds(thresholds)
        unknown = sorted(set(user) - set(merged))
        if unknown:
            raise ValueError(f"unknown threshold(s) in {thresholds}: {', '.join(unknown)}")
        check_thresholds(user, merged, str(thresholds))
        merged.update(user)
    check_thresholds(variables or {}, merged, "the command line")
    merged.update(variables or {})
    return merged


def set_variables(con: duckdb.DuckDBPyConnection, variables: Mapping[str, Any]) -> None:
    for name, value in variables.items():
        if not _NAME_RE.match(name):
            raise ValueError(f"bad variable name {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"variable {name} must be a number or a string, not {value!r}")
        # A parameter binds the value safely; the name was checked above.
        con.execute(f"set variable {name} = ?", [value])


def _tune(con: duckdb.DuckDBPyConnection) -> None:
    # The store's Parquet views give the optimizer tiny cardinality estimates, and below
    # this threshold DuckDB runs an ASOF join as a nested loop: 80k TGI requests took minutes
    # in request_state instead of a second. Always use the real ASOF join.
    try:
        con.execute("set asof_loop_join_threshold = 0")
    except duckdb.Error:  # pragma: no cover - a DuckDB without the setting has no loop path
        pass
    # The views nest deeply (signals over window metrics over per-view staging), and DuckDB's
    # projection pull-up pass grows steeply with that depth: it made planning, not running,
    # the cost of a signals query. Turning it off changes no answer.
    try:
        con.execute("set disabled_optimizers = 'projection_pullup'")
    except duckdb.Error:  # pragma: no cover - a DuckDB without that pass
        pass


def _ensure_samples(con: duckdb.DuckDBPyConnection) -> None:
    """An empty `samples` (pipeline/store/samples.py) where the caller bound none (a fleet, a
    test's bare connection): the views reading scrapes then find nothing to read."""
    if not con.execute("select 1 from duckdb_views() where view_name = 'samples' union all "
                       "select 1 from duckdb_tables() where table_name = 'samples'").fetchall():
        from ..store.sample_parts import no_samples_sql

        con.execute(f"create or replace view samples as {no_samples_sql()}")


def load_views(
    con: duckdb.DuckDBPyConnection,
    sql_dir: Path | str | None = None,
    variables: Mapping[str, Any] | None = None,
    thresholds: Path | str | None = None,
    only: Iterable[str] | None = None,
    overrides: Mapping[str, str] | None = None,
    samples_bound: bool = False,
    after: Callable[[str], None] | None = None,
    compute: Callable[[str, str], None] | None = None,
    computed: Iterable[str] = (),
    variables_read: bool = True,
) -> list[str]:
    """Set the variables and create the views of sql/ on `con`, in load order (sql_files):
    every view, or those of `only` (from `views_for`: it must hold the views they read too).

    `overrides`: view name -> the statement that creates it instead of its file (a view
    bound over a stored rollup, pipeline/query/rollups.py). `samples_bound`: the caller has
    bound `samples` (connect does), so no catalog query looks for it. `after(name)`: called
    once each view is created, before the views that read it (a view it replaces by a table
    makes the views above cheap to bind); without it, the views are created over stand-ins
    (_create_over_stubs). `compute(name, select)`: called for each view of `computed` in
    its place, with the real views beneath it bound and `select` the query of its rows: it
    must create the view (connect computes the rows into a table and binds the view over
    that: pipeline/query/shared.py); the other views are still created over stand-ins.
    `variables_read`: False when nothing the caller runs on `con` reads a variable (see
    reads_variables); then, with no view to create, none is set.

    `con` must already have an `events` table or view with the event schema. Returns the
    view names created."""
    keep = None if only is None else set(only)
    if variables_read or keep is None or keep:
        values = resolve_variables(variables, thresholds)
        if not variables_read and keep is not None:
            # only what the views bound read: nothing else on `con` reads one, and each
            # variable is a statement of its own
            read = _variables_read(sql_dir, frozenset(keep), tuple(sorted((overrides or {}).items())))
            values = {k: v for k, v in values.items() if k.lower() in read}
        set_variables(con, values)
    _tune(con)
    if not samples_bound:
        _ensure_samples(con)
    names = []
    if keep is not None and not keep:  # a query that reads no view (`select 1`): no load order to compute
        return names
    statements = []
    for path in sql_files(Path(sql_dir) if sql_dir is not None else None):
        name = view_name(path)
        if keep is not None and name not in keep:
            continue
        names.append(name)
        statements.append((name, path, (overrides or {}).get(name) or view_sql(path)))
    if after is not None:
        for name, path, sql in statements:
            _create(con, path, sql)
            after(name)
        return names
    reads = view_dependencies(Path(sql_dir) if sql_dir is not None else None)
    _create_over_stubs(con, statements, {n: frozenset() if n in (overrides or {}) else reads.get(n, frozenset())
                                         for n in names}, set(computed) if compute is not None else set(), compute)
    return names


# a view reads a variable by naming it: getvariable('name')
GETVARIABLE = re.compile(r"getvariable\(\s*'(\w+)'\s*\)", re.I)


@functools.lru_cache(maxsize=64)
def _variables_read(directory: Path | str | None, views: frozenset[str], overrides: tuple[tuple[str, str], ...]) -> frozenset[str]:
    """The variables (lowercased) that creating and reading `views` of `directory` reads,
    each view from the statement `overrides` gives it, else from its file."""
    instead = dict(overrides)
    texts = [instead.get(view_name(p)) or view_sql(p) for p in sql_files(Path(directory) if directory is not None else None)
             if view_name(p) in views]
    return frozenset(v.lower() for text in texts for v in GETVARIABLE.findall(text))


def _create(con: duckdb.DuckDBPyConnection, path: Path, sql: str) -> None:
    try:
        con.execute(_parsed(sql) or sql if sql in _CREATED else sql)
    except duckdb.Error as e:
        raise RuntimeError(f"{path.name}: {e}") from e
    # parsed ahead only from its second use in this process: a one-query process (`servelens
    # sql`) would pay for a parsing database of its own and parse the text twice
    if len(_CREATED) >= 512:  # texts of rollup paths and time ranges vary: keep it bounded
        _CREATED.clear()
    _CREATED.add(sql)


_CREATED: set[str] = set()


def _create_over_stubs(con: duckdb.DuckDBPyConnection, statements: list[tuple[str, Path, str]],
                       reads: Mapping[str, frozenset[str]], computed: set[str] = frozenset(),  # type: ignore[assignment]
                       compute: Callable[[str, str], None] | None = None) -> None:
    """Create the views of `statements` (in load order), each bound over empty tables of the
    views it reads rather than over their whole derivation.

    DuckDB binds a view's query when it is created, and binding a reference to a view binds
    that view's query again: a view near the top (`incident_summary`) reaches `requests` by a
    dozen paths and each path is bound anew, so creating the views one over another costs
    seconds on any store. Here each view is created over empty tables standing in for the
    views beneath it, then set aside under another name while an empty table of its columns
    takes its name (the stand-in for the views above); once all are created, the stand-ins
    are dropped and the views take their names back. Renaming does not bind the view again,
    so each is bound once, over stand-ins. A query binds the real views beneath (DuckDB
    checks that their columns have the types the view was created with: the stand-ins have
    the types of the very views they stand for).

    Only a view that reads views and is read by one needs a stand-in: one that reads none
    costs its own statement wherever it is bound. `reads`: view -> the views it reads.

    A view of `computed` is handed to `compute` in its turn, with the views beneath it back
    under their names (computing it reads them); it then reads no view (a table), and those
    of them that views still to come read are set aside again."""
    created = {name for name, _, _ in statements}
    read = {v for name in created for v in reads.get(name, ()) if v in created}
    stood_in = {name for name in read if reads.get(name, frozenset()) & created and name not in computed}
    schema = con.execute("select current_schema()").fetchall()[0][0]
    stand = StandIns(con)
    for i, (name, path, sql) in enumerate(statements):
        select = _select_of(sql, name) if name in computed and compute is not None else None
        if select is None:
            _create(con, path, sql)
        if name in computed and compute is not None:
            beneath, todo = set(), [name]
            while todo:
                for v in reads.get(todo.pop(), ()):
                    if v in created and v not in computed and v not in beneath:
                        beneath.add(v)
                        todo.append(v)
            back = [v for sc, v in stand.held if sc == schema and v in beneath]
            for v in back:
                stand.restore(schema, v)
            # from the statement itself when it has the usual form: the view created first
            # would be bound once more only to be replaced
            compute(name, select if select is not None else f"select * from {_quoted(name)}")
            later = {v for later_name, _, _ in statements[i + 1:] for v in reads.get(later_name, ())}
            stand.aside(schema, *[v for v in back if v in later])
        elif name in stood_in:
            stand.aside(schema, name)
    stand.restore_all()


@functools.lru_cache(maxsize=128)
def _parsed(sql: str) -> Any:
    """`sql` parsed once per process: every connection creates the same views, and DuckDB
    runs a parsed statement (a copy of it) without parsing its text again, which is a good
    part of creating a view over stand-ins. None when it is not one statement."""
    try:
        statements = parse_statements(sql)
    except QueryError:  # let the connection's own execute say what is wrong
        return None
    return statements[0] if len(statements) == 1 else None


def _select_of(sql: str, name: str) -> str | None:
    """The query of a `create or replace view name as ...` statement; None for another form."""
    m = _VIEW_RE.search(sql)
    if m is None or m.group(1) != name or _VIEW_RE.search(sql, m.end()) is not None:
        return None
    return sql[m.end():]


class StandIns:
    """Views set aside behind empty tables of their columns while other views are created
    over them (the reason is _create_over_stubs'): `aside(schema, *names)` renames each view
    and puts a table of its columns (read from the catalog, which binds nothing) in its
    place; `restore` gives one back its name, and leaving a `with` block gives every view
    still aside its name back."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.held: dict[tuple[str, str], None] = {}  # (schema, view) set aside, in order
        self.columns: dict[tuple[str, str], str] = {}  # a view's columns, read once

    def __enter__(self) -> "StandIns":
        return self

    def aside(self, schema: str, *names: str) -> None:
        """Set these views of `schema` aside (a name that is not a view's is left as it is)."""
        unread = [n for n in names if (schema, n) not in self.columns]
        if unread:
            columns: dict[str, list[str]] = {}
            # (the catalog's columns alone: joining duckdb_views() to keep views only costs
            # several times as much, on every connection)
            for name, column, kind in self.con.execute(
                    "select table_name, column_name, data_type from duckdb_columns() where database_name = current_database() "
                    "and schema_name = ? and list_contains(?, table_name) order by table_name, column_index",
                    [schema, unread]).fetchall():
                columns.setdefault(name, []).append(f"{_quoted(column)} {kind}")
            self.columns.update({(schema, n): ", ".join(c) for n, c in columns.items()})
        for name in names:
            if (schema, name) not in self.columns:
                continue  # nothing of that name
            try:
                self.con.execute(f"alter view {_quoted(schema)}.{_quoted(name)} rename to {_quoted('servelens_bound_' + name)}")
            except duckdb.CatalogException:
                continue  # a table already (a shared view's rows)
            self.held[(schema, name)] = None
            self.con.execute(f"create table {_quoted(schema)}.{_quoted(name)} ({self.columns[(schema, name)]})")

    def restore(self, schema: str, name: str) -> None:
        del self.held[(schema, name)]
        self.con.execute(f"drop table {_quoted(schema)}.{_quoted(name)}")
        self.con.execute(f"alter view {_quoted(schema)}.{_quoted('servelens_bound_' + name)} rename to {_quoted(name)}")

    def restore_all(self) -> None:
        for schema, name in list(self.held):
            self.restore(schema, name)

    def __exit__(self, kind: object, *exc: object) -> None:
        if kind is None:  # else the caller closes the connection
            self.restore_all()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
