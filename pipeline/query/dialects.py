"""The views of `sql/` in other SQL dialects (Spark, Trino), for stores too big for one machine.

The views are written for DuckDB and stay the one definition of every metric. This module
translates them with sqlglot and replaces by hand what sqlglot cannot translate faithfully,
so that a view means the same on another engine:

* parameters: `getvariable('name')` becomes the value as a literal (thresholds.toml, a user
  file or `--window`), since neither engine has DuckDB's session variables;
* exact percentiles: `quantile_cont` (linear interpolation between the two nearest ranks)
  becomes Spark's `percentile`, which interpolates the same way (`percentile_approx` would
  not), and on Trino, which has no exact percentile, the same interpolation over the sorted
  values (`array_agg` + `array_sort`);
* ASOF joins (the latest right row at or before the left row's time) become a union of both
  sides sorted by time per key with the right row carried forward
  (`last_value(... ignore nulls)`): one sort, no range join;
* `epoch()` / `epoch_us()` / `make_timestamptz()` / `to_timestamp()` keep their microseconds
  (sqlglot's Spark `unix_timestamp` truncates to whole seconds), `epoch()` rounded the way
  DuckDB rounds it, each replacement parenthesised where it stands;
* a window frame bound computed from parameters becomes its value (Spark takes a literal);
* several `unnest(list)` side by side (zipped) become one `inline(array(struct(...)))`;
* `* exclude (...)` / `* replace (...)` become column lists, read off DuckDB binding the view;
* `arg_min(x, (a, b))` orders by a struct; `group by all` becomes ordinals; DuckDB's
  `format('{:.1f}', x)` becomes `format_string('%.1f', x)`; `try(...)` and `materialized`
  hints are dropped (other engines' JSON functions return null on bad input).

The result for Spark is tested against DuckDB's answers on PySpark (tests/query/test_spark_views.py);
Trino's is translated the same way but not run here (see docs/spark.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping

import duckdb
import sqlglot
from sqlglot import exp

from ..store.layout import no_events_sql
from .views import StandIns, load_views, resolve_variables, sql_files, view_name, view_sql

DIALECTS = ("spark", "trino", "duckdb")


class DialectError(ValueError):
    """A view that cannot be translated (a construct this module does not know)."""


# --- what DuckDB knows about the views: column names of any select, by binding it ----------


class _Probe:
    """A DuckDB connection with every view bound over an empty `events` (or those of `only`,
    which must hold the views they read): asked for the columns of a (DuckDB) select, it binds
    the select and reads them off, so a `*` can be spelled out."""

    def __init__(self, variables: Mapping[str, Any], only: set[str] | None = None):
        self.con = duckdb.connect(":memory:")
        # id -> (the CTE, kept so that its id is not reused; its DuckDB text)
        self.cte_sql: dict[int, tuple[exp.CTE, str]] = {}
        self.con.execute(f"create view events as {no_events_sql()}")
        created = load_views(self.con, variables=dict(variables), only=only)
        # each view then stands aside behind an empty table of its columns, for good: a probe
        # binds the select it is asked about over tables, not over every view beneath it,
        # each time again
        StandIns(self.con).aside("main", *created)

    def columns(self, select: exp.Expression, ctes: list[exp.CTE]) -> list[str]:
        return [name for name, _ in self.typed_columns(select, ctes)]

    def typed_columns(self, select: exp.Expression, ctes: list[exp.CTE]) -> list[tuple[str, str]]:
        """(name, DuckDB type) of each column the select returns."""
        # the CTEs as text, each generated once per probe: a view's stars are probed one
        # by one with the same CTEs, and generating copies the whole tree each time (a star
        # spelled out since names the same columns, so an earlier text answers the same)
        texts = []
        for cte in ctes:
            if id(cte) not in self.cte_sql:
                self.cte_sql[id(cte)] = (cte, cte.sql("duckdb"))
            texts.append(self.cte_sql[id(cte)][1])
        recursive = bool(ctes) and isinstance(ctes[0].parent, exp.With) and ctes[0].parent.args.get("recursive")
        sql = (f"with {'recursive ' if recursive else ''}{', '.join(texts)} " if texts else "") + select.sql("duckdb")
        try:
            return [(r[0], r[1]) for r in self.con.execute(f"describe {sql}").fetchall()]
        except duckdb.Error as e:  # pragma: no cover - the views bind, so their parts do
            raise DialectError(f"cannot read the columns of: {sql[:200]}: {e}") from None


def _ctes_before(node: exp.Expression) -> list[exp.CTE]:
    """The CTEs a select inside a view may read: those of the outermost WITH (all of them;
    DuckDB binds only what the probe uses)."""
    root = node.root()
    top = root.expression if isinstance(root, exp.Create) else root
    with_ = top.args.get("with_") if isinstance(top, exp.Expression) else None
    return list(with_.expressions) if with_ else []


def _source_probe(select: exp.Select, alias: str | None) -> exp.Select:
    """`select <alias>.* from <select's from and joins>`: the columns a star would expand to."""
    star = exp.Column(this=exp.Star(), table=exp.to_identifier(alias)) if alias else exp.Star()
    probe = exp.Select(expressions=[star])
    probe.set("from_", select.args["from_"].copy())
    if select.args.get("joins"):
        probe.set("joins", [j.copy() for j in select.args["joins"]])
    return probe


# --- stars with exclude / replace -----------------------------------------------------------


def _expand_stars(tree: exp.Expression, probe: _Probe) -> None:
    for select in list(tree.find_all(exp.Select)):
        new_exprs = []
        changed = False
        for e in select.expressions:
            star = e.this if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) else e
            # (under `qualify`, sqlglot's rewrite into a subquery needs named columns too)
            modified = star.args.get("except_") or star.args.get("replace") or select.args.get("qualify")
            if not isinstance(star, exp.Star) or not modified:
                new_exprs.append(e)
                continue
            alias = e.table if isinstance(e, exp.Column) else None
            names = probe.columns(_source_probe(select, alias or None), _ctes_before(select))
            excluded = {c.name.lower() for c in star.args.get("except_") or []}
            replaced = {r.alias.lower(): r for r in star.args.get("replace") or []}
            for name in names:
                if name.lower() in excluded:
                    continue
                if name.lower() in replaced:
                    new_exprs.append(replaced[name.lower()].copy())
                else:
                    new_exprs.append(exp.column(name, table=alias or None))
            changed = True
        if changed:
            select.set("expressions", new_exprs)


# --- ASOF joins ------------------------------------------------------------------------------


def _asof_condition(on: exp.Expression, left: str, right: str) -> tuple[list[tuple[str, str]], str, str, bool]:
    """Equality keys [(left col, right col)], the left and right time columns, and whether the
    inequality is strict, from `l.k = r.k and ... and l.t >= r.t`."""
    keys: list[tuple[str, str]] = []
    time = None
    for cond in on.flatten() if isinstance(on, exp.And) else [on]:
        a, b = cond.this, cond.expression
        if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
            raise DialectError(f"ASOF condition not on plain columns: {cond.sql('duckdb')}")
        if a.table == right:
            a, b = b, a
            cond = {exp.GTE: exp.LTE, exp.LTE: exp.GTE, exp.GT: exp.LT, exp.LT: exp.GT}.get(type(cond), type(cond))(this=a, expression=b)
        if a.table != left or b.table != right:
            raise DialectError(f"ASOF condition must compare {left}.x with {right}.x: {cond.sql('duckdb')}")
        if isinstance(cond, exp.EQ):
            keys.append((a.name, b.name))
        elif isinstance(cond, (exp.GTE, exp.GT)) and time is None:
            time = (a.name, b.name, isinstance(cond, exp.GT))
        else:
            raise DialectError(f"unsupported ASOF condition: {cond.sql('duckdb')}")
    if time is None:
        raise DialectError("ASOF join without `left.t >= right.t`")
    return keys, time[0], time[1], time[2]


def _rewrite_asof(tree: exp.Expression, probe: _Probe) -> None:
    """`from L as l asof left join R as r on l.k = r.k and l.t >= r.t` -> a subquery `l` with
    L's columns and a struct column `r` (the latest row of R at or before l.t with the same
    keys), so that `r.x` keeps meaning the same."""
    for select in list(tree.find_all(exp.Select)):
        joins = select.args.get("joins") or []
        if not any(j.args.get("method") == "ASOF" for j in joins):
            continue
        ctes = _ctes_before(select)
        left = select.args["from_"].this
        left_alias = left.alias_or_name
        rest = []
        for join in joins:
            if join.args.get("method") != "ASOF":
                rest.append(join)
                continue
            if join.args.get("side") != "LEFT":
                raise DialectError("only ASOF LEFT JOIN is translated")
            right = join.this
            right_alias = right.alias_or_name
            keys, lt, rt, strict = _asof_condition(join.args["on"], left_alias, right_alias)
            probe_left = exp.Select(expressions=[exp.Star()]).from_(left.copy())
            left_cols = probe.columns(probe_left, ctes)
            right_cols = probe.typed_columns(exp.Select(expressions=[exp.Star()]).from_(right.copy()), ctes)
            left = _asof_subquery(left, right, left_alias, right_alias, left_cols, right_cols, keys, lt, rt, strict)
            # the left side's star now also holds the struct: spell out its columns instead
            new_exprs = []
            for e in select.expressions:
                if isinstance(e, exp.Column) and isinstance(e.this, exp.Star) and e.table == left_alias:
                    new_exprs.extend(exp.column(c, table=left_alias) for c in left_cols)
                else:
                    new_exprs.append(e)
            select.set("expressions", new_exprs)
            left_cols = left_cols + [right_alias]
        select.set("from_", exp.From(this=left))
        select.set("joins", rest or None)


def _asof_subquery(left, right, left_alias, right_alias, left_cols, right_cols, keys, lt, rt, strict):
    q = lambda name: exp.to_identifier(name).sql("duckdb")  # noqa: E731
    lcols = ", ".join(q(c) for c in left_cols)
    nulls_l = ", ".join(f"null as {q(c)}" for c in left_cols)
    # typed, for Trino, whose ROW has no field names of its own
    struct = (
        "cast(struct_pack(" + ", ".join(f"{q(c)} := r.{q(c)}" for c, _ in right_cols) + ") as struct("
        + ", ".join(f"{q(c)} {t}" for c, t in right_cols) + "))"
    )
    key_l = ", ".join(f"l.{q(a)} as __k{i}" for i, (a, _) in enumerate(keys))
    key_r = ", ".join(f"r.{q(b)} as __k{i}" for i, (_, b) in enumerate(keys))
    part = ", ".join(f"__k{i}" for i in range(len(keys)))
    # at equal times a right row comes first for `>=` (it matches), last for a strict `>`
    right_side, left_side = (1, 0) if strict else (0, 1)
    sql = f"""
        select {lcols}, case when __t is not null then last_value(__r ignore nulls) over (
                partition by {part} order by __t, __side rows between unbounded preceding and current row) end as {q(right_alias)}, __side
        from (
            select l.*, null as __r, l.{q(lt)} as __t, {left_side} as __side, {key_l} from __left as l
            union all
            select {nulls_l}, {struct} as __r, r.{q(rt)} as __t, {right_side} as __side, {key_r} from __right as r
            where r.{q(rt)} is not null
        )
    """
    body = sqlglot.parse_one(sql, read="duckdb")
    for table in body.find_all(exp.Table):
        if table.name == "__left":
            src = left.copy()
            src.set("alias", exp.TableAlias(this=exp.to_identifier("l")))
            table.replace(src)
        elif table.name == "__right":
            src = right.copy()
            src.set("alias", exp.TableAlias(this=exp.to_identifier("r")))
            table.replace(src)
    outer = exp.Select(expressions=[exp.column(c) for c in left_cols] + [exp.column(right_alias)])
    outer = outer.from_(body.subquery("__asof")).where(f"__side = {left_side}")
    return outer.subquery(left_alias)


# --- function and clause replacements --------------------------------------------------------

_FMT_RE = re.compile(r"\{(:[^}]*)?\}")


def _printf_pattern(fmt: str) -> tuple[str, list[str]]:
    """DuckDB's fmt pattern as a printf one (Spark format_string, Trino format), and per
    argument the spec ('' for `{}`, 'g' for `{:g}`)."""
    specs: list[str] = []

    def sub(m: re.Match) -> str:
        spec = (m.group(1) or ":")[1:]
        specs.append(spec)
        if spec in ("", "g"):
            return "%s"
        if re.fullmatch(r"\.\d+f", spec):
            return "%" + spec
        raise DialectError(f"format spec {{:{spec}}} has no translation")

    return _FMT_RE.sub(sub, fmt.replace("%", "%%")), specs


def _shortest_number(arg: exp.Expression, dialect: str) -> exp.Expression:
    """`{:g}` of a number: 10.0 prints 10, 0.5 prints 0.5 (fmt's general format)."""
    text = exp.cast(arg, "string" if dialect == "spark" else "varchar")
    return exp.func("regexp_replace", text, exp.Literal.string(r"\.0+$" if dialect == "spark" else r"\.0+$"), exp.Literal.string(""))


def _interpolated_quantile(values: exp.Expression, q: exp.Expression) -> exp.Expression:
    """Trino: quantile_cont over the sorted non-null values `a` (1-based), as DuckDB does it:
    position h = q * (n - 1), a[floor h] + (h - floor h) * (a[floor h + 1] - a[floor h])."""
    sql = """
        case when cardinality(__a) = 0 then null else
            element_at(__a, cast(floor(__q * (cardinality(__a) - 1)) as bigint) + 1)
            + (__q * (cardinality(__a) - 1) - floor(__q * (cardinality(__a) - 1)))
            * (element_at(__a, least(cast(floor(__q * (cardinality(__a) - 1)) as bigint) + 2, cardinality(__a)))
               - element_at(__a, cast(floor(__q * (cardinality(__a) - 1)) as bigint) + 1))
        end
    """
    tpl = sqlglot.parse_one(sql, read="trino")
    for col in list(tpl.find_all(exp.Column)):
        if col.name == "__a":
            col.replace(values.copy())
        elif col.name == "__q":
            col.replace(q.copy())
    return tpl


def _trino_sorted_values(x: exp.Expression) -> exp.Expression:
    agg = exp.Filter(
        this=exp.ArrayAgg(this=x.copy()),
        expression=exp.Where(this=exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null()))),
    )
    return exp.func("array_sort", exp.func("coalesce", agg, exp.Array(expressions=[])))


def _percentile(node: exp.PercentileCont, dialect: str) -> exp.Expression:
    x, q = node.this, node.expression
    if dialect == "spark":
        # exact, interpolating like quantile_cont (percentile_approx is not)
        return exp.Anonymous(this="percentile", expressions=[x.copy(), q.copy()])
    values = _trino_sorted_values(x)
    if isinstance(q, exp.Array):
        return exp.Array(expressions=[_interpolated_quantile(values, level) for level in q.expressions])
    return _interpolated_quantile(values, q)


def _time_function(node: exp.Expression, dialect: str) -> exp.Expression | None:
    """epoch() / epoch_us() / make_timestamptz(us) / to_timestamp(s) with their microseconds."""
    spark = dialect == "spark"
    if isinstance(node, exp.TimeToUnix):  # epoch(ts): seconds, fractional
        # DuckDB's epoch() of a TIMESTAMPTZ (ICU) is whole milliseconds / 1e3 plus the
        # microseconds left / 1e6, which rounds differently from micros / 1e6 in the last
        # bit; written the same way, differences of two epochs are equal to the bit
        tpl = (
            "unix_millis(__x) / 1e3 + (unix_micros(__x) - unix_millis(__x) * 1000) / 1e6"
            if spark else "to_unixtime(__x)"
        )
    elif isinstance(node, exp.Anonymous) and node.name.lower() == "epoch_us":
        tpl = "unix_micros(__x)" if spark else "date_diff('microsecond', from_unixtime(0), __x)"
    elif isinstance(node, exp.Anonymous) and node.name.lower() == "make_timestamptz" and len(node.expressions) == 1:
        tpl = "timestamp_micros(__x)" if spark else "from_unixtime_nanos(__x * 1000)"
    elif isinstance(node, exp.UnixToTime):  # to_timestamp(seconds)
        tpl = "timestamp_micros(cast(round(__x * 1e6) as bigint))" if spark else "from_unixtime(__x)"
    else:
        return None
    arg = node.this if not isinstance(node, exp.Anonymous) else node.expressions[0]
    if isinstance(arg, (exp.Binary, exp.Unary)):
        # `to_timestamp(a + b)` is `(a + b) * 1e6`, not `a + b * 1e6`
        arg = exp.Paren(this=arg)
    out = sqlglot.parse_one(tpl, read=dialect)
    for col in list(out.find_all(exp.Column)):
        if col.name == "__x":
            col.replace(arg.copy())
    # (an expression in its place: `epoch(a) - epoch(b)` must not become `x + y - z + w`)
    return exp.Paren(this=out) if isinstance(out, exp.Binary) else out


def _zip_unnests(select: exp.Select, dialect: str) -> None:
    """DuckDB unnests several lists of one select side by side; Spark allows one generator per
    select: `inline(array(struct(a1 as k, b1 as d), struct(a2, b2), ...)) as (k, d)`."""
    items = [(i, e) for i, e in enumerate(select.expressions) if isinstance(e.unalias(), exp.Explode)]
    if len(items) < 2 or dialect != "spark":
        return
    lists = []
    for _, e in items:
        arr = e.unalias().this
        if not isinstance(arr, exp.Array):
            raise DialectError(f"cannot zip unnest of a non-literal list: {e.sql('duckdb')}")
        lists.append((e.alias, arr.expressions))
    n = len(lists[0][1])
    if any(len(v) != n for _, v in lists):
        raise DialectError("unnest of lists of different lengths")
    structs = [
        exp.Struct(expressions=[exp.alias_(v[row].copy(), name) for name, v in lists]) for row in range(n)
    ]
    inline = exp.Anonymous(this="inline", expressions=[exp.Array(expressions=structs)])
    names = [name for name, _ in lists]
    generator = exp.Aliases(this=inline, expressions=[exp.to_identifier(n) for n in names])
    first = items[0][0]
    drop = {i for i, _ in items}
    exprs = [generator if i == first else e for i, e in enumerate(select.expressions) if i == first or i not in drop]
    select.set("expressions", exprs)


def _inline_named_windows(select: exp.Select) -> None:
    """`over w ... window w as (...)` -> `over (...)`: Spark reads `over upto - x` as an
    identifier `upto-x`, and neither engine lets one named window build on another."""
    named = {w.name: w for w in select.args.get("windows") or []}
    if not named:
        return

    def spec(name: str) -> dict[str, Any]:
        w = named[name]
        base = spec(w.alias) if w.alias else {}
        for key in ("partition_by", "order", "spec"):
            if w.args.get(key):
                base[key] = w.args[key]
        return base

    for window in select.find_all(exp.Window):
        if window.parent is select and window.arg_key == "windows":
            continue
        if window.alias and window.alias in named:
            merged = spec(window.alias)
            for key in ("partition_by", "order", "spec"):
                if window.args.get(key):
                    merged[key] = window.args[key]
            for key, value in merged.items():
                window.set(key, value.copy() if isinstance(value, exp.Expression) else [v.copy() for v in value])
            window.set("alias", None)
    select.set("windows", None)


def _fold_frame_bounds(tree: exp.Expression) -> None:
    """`rows between <expression> preceding`: a bound computed from parameters (bound as
    literals by now) becomes its value, since Spark takes only a literal there (DuckDB and
    Trino take any constant expression). DuckDB evaluates it, so it means what it did."""
    for spec in tree.find_all(exp.WindowSpec):
        for key in ("start", "end"):
            bound = spec.args.get(key)
            if not isinstance(bound, exp.Expression) or isinstance(bound, exp.Literal):
                continue
            if bound.find(exp.Column):
                raise DialectError(f"window frame bound is not a constant: {bound.sql('duckdb')}")
            with duckdb.connect(":memory:") as con:
                value = con.execute(f"select {bound.sql('duckdb')}").fetchone()[0]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise DialectError(f"window frame bound {bound.sql('duckdb')} is {value!r}, not a row count")
            spec.set(key, exp.Literal.number(value))


def _group_by_all(select: exp.Select) -> None:
    group = select.args.get("group")
    if not group or not group.args.get("all"):
        return
    ordinals = [
        exp.Literal.number(i + 1)
        for i, e in enumerate(select.expressions)
        if not e.find(exp.AggFunc) and not e.find(exp.Window)
    ]
    select.set("group", exp.Group(expressions=ordinals))


_REBUILT = (exp.Anonymous, exp.TimeToUnix, exp.UnixToTime, exp.PercentileCont, exp.ArgMin, exp.ArgMax, exp.Format, exp.Try)


def _portable(tree: exp.Expression, dialect: str, variables: Mapping[str, Any]) -> exp.Expression:
    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, _REBUILT):
            # these are rebuilt around their arguments, whose own replacements come first
            # (a transform does not descend into the node it returned)
            for key, value in list(node.args.items()):
                if isinstance(value, exp.Expression):
                    node.set(key, value.transform(replace))
                elif isinstance(value, list):
                    node.set(key, [v.transform(replace) if isinstance(v, exp.Expression) else v for v in value])
        if isinstance(node, exp.Anonymous) and node.name.lower() == "getvariable":
            name = node.expressions[0].name
            value = variables.get(name)
            if value is None:
                return exp.Null()
            return exp.Literal.string(value) if isinstance(value, str) else exp.Literal.number(value)
        if isinstance(node, exp.Try):
            return node.this
        if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
            node.set("materialized", None)
            return node
        if (dialect == "trino" and isinstance(node, exp.Cast) and isinstance(node.this, exp.Struct)
                and node.to.is_type(exp.DataType.Type.STRUCT)):
            # Trino's ROW takes its field names from the type it is cast to
            values = [e.expression if isinstance(e, (exp.PropertyEQ, exp.Alias)) else e for e in node.this.expressions]
            values = [v.transform(replace) if isinstance(v, exp.Expression) else v for v in values]
            return exp.Cast(this=exp.Anonymous(this="ROW", expressions=values), to=node.to)
        if isinstance(node, exp.PercentileCont) and dialect != "duckdb":
            return _percentile(node, dialect)
        if isinstance(node, (exp.ArgMin, exp.ArgMax)) and isinstance(node.expression, exp.Tuple):
            fields = node.expression.expressions
            order = (
                exp.Struct(expressions=[exp.alias_(f.copy(), f"k{i}") for i, f in enumerate(fields)])
                if dialect == "spark"
                else exp.func("row", *[f.copy() for f in fields])
            )
            return type(node)(this=node.this, expression=order)
        if isinstance(node, exp.Format) and dialect != "duckdb":
            pattern, specs = _printf_pattern(node.this.name)
            args = [
                _shortest_number(a, dialect) if spec == "g" else a
                for a, spec in zip(node.expressions, specs)
            ]
            name = "format_string" if dialect == "spark" else "format"
            return exp.Anonymous(this=name, expressions=[exp.Literal.string(pattern), *args])
        if dialect != "duckdb":
            timed = _time_function(node, dialect)
            if timed is not None:
                return timed
        return node

    if dialect != "duckdb":
        # (before the replacements: `percentile(...)` is no aggregate sqlglot knows of)
        for select in list(tree.find_all(exp.Select)):
            _group_by_all(select)
    tree = tree.transform(replace)
    if dialect != "duckdb":
        _fold_frame_bounds(tree)
        for select in list(tree.find_all(exp.Select)):
            _inline_named_windows(select)
            _zip_unnests(select, dialect)
    return tree


# --- the public functions ---------------------------------------------------------------------


def _header(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def translate_view(
    path: Path,
    dialect: str,
    variables: Mapping[str, Any],
    probe: _Probe | None = None,
) -> str:
    """The view of `path` as `dialect` SQL, its header comment kept, parameters bound."""
    if dialect not in DIALECTS:
        raise DialectError(f"unknown dialect {dialect!r}; choose one of: {', '.join(DIALECTS)}")
    text = view_sql(path)
    if dialect == "duckdb":
        return text.rstrip() + ";\n"
    tree = sqlglot.parse_one(text, read="duckdb")
    probe = probe or _Probe(variables)
    _expand_stars(tree, probe)
    _rewrite_asof(tree, probe)
    tree = _portable(tree, dialect, variables)
    if dialect == "spark" and isinstance(tree, exp.Create):
        # over a temporary `events` view of Parquet, Spark allows only temporary views
        tree.set("properties", exp.Properties(expressions=[exp.TemporaryProperty()]))
    body = tree.sql(dialect=dialect, pretty=True, comments=False, unsupported_level=sqlglot.ErrorLevel.RAISE)
    return f"{_header(text)}\n{body};\n"


def portable_duckdb(path: Path, variables: Mapping[str, Any], probe: _Probe | None = None) -> str:
    """The view of `path` after the structural rewrites only (stars spelled out, ASOF joins
    as a union and a window), still DuckDB SQL: DuckDB can then check that they keep the
    view's answers (tests/query/test_views_cli.py)."""
    tree = sqlglot.parse_one(view_sql(path), read="duckdb")
    probe = probe or _Probe(variables)
    _expand_stars(tree, probe)
    _rewrite_asof(tree, probe)
    return tree.sql(dialect="duckdb", comments=False)


def views(
    dialect: str,
    names: list[str] | None = None,
    variables: Mapping[str, Any] | None = None,
    thresholds: Path | str | None = None,
    names_only: bool = False,
) -> list[tuple[str, str]]:
    """(view name, SQL) of every view of sql/ in load order (or those in `names`, in load
    order, with the views they read before them), translated to `dialect` (SQL left empty
    with `names_only`)."""
    if dialect not in DIALECTS:
        raise DialectError(f"unknown dialect {dialect!r}; choose one of: {', '.join(DIALECTS)}")
    resolved = resolve_variables(variables, thresholds)
    files = [(view_name(p), p) for p in sql_files()]
    known = [n for n, _ in files]
    wanted = set(known)
    if names:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise DialectError(f"unknown view {unknown[0]!r}; choose one of: {', '.join(known)}")
        wanted = _with_dependencies(files, names)
    if names_only:
        return [(n, "") for n, _ in files if n in wanted]
    # binding the deep views costs seconds: bind only the views translated (each reads only
    # views among them)
    probe = _Probe(resolved, wanted if names else None) if dialect != "duckdb" else None
    out = []
    for name, path in files:
        if name not in wanted:
            continue
        try:
            out.append((name, translate_view(path, dialect, resolved, probe)))
        except (DialectError, sqlglot.errors.SqlglotError) as e:
            if names and name in names:
                raise DialectError(f"view {name} cannot be translated to {dialect}: {str(e).splitlines()[0]}") from None
            # one view an engine cannot express does not hide the others
            out.append((name, f"-- {name}: not translated to {dialect} ({str(e).splitlines()[0]})\n"))
    return out


def _with_dependencies(files: list[tuple[str, Path]], names: list[str]) -> set[str]:
    known = {n for n, _ in files}
    reads: dict[str, set[str]] = {}
    for name, path in files:
        tree = sqlglot.parse_one(view_sql(path), read="duckdb")
        reads[name] = {t.name for t in tree.find_all(exp.Table) if t.name in known and t.name != name}
    out: set[str] = set()
    todo = list(names)
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo.extend(reads[n])
    return out


def script(dialect: str, names: list[str] | None = None, **kwargs: Any) -> str:
    """All the translated views as one script, in an order in which each reads only views above it."""
    return "\n".join(sql for _, sql in views(dialect, names, **kwargs))


Translate = Callable[[str], str]
