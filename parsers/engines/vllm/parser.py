"""The vLLM parser: every log format vLLM has printed (v0.1 to today) into the common schema.

This module owns the anatomy of a line, outside in (docs/vllm-v1.md and sample_logs/vllm/real/):
a stray `\\r`, the vLLM process prefix
(`(APIServer pid=1) `, `(VllmWorker rank=1 pid=5283) `, Ray's `(RayWorkerWrapper pid=1,
ip=10.0.0.2) `...), the vLLM header (`INFO 06-10 14:23:45 metrics.py:341] ` up to v0.7,
`INFO 06-10 14:23:45 [loggers.py:116] ` from v0.8), and multi-line records (tracebacks,
the start-up banner). What each message means is in `fields.py`. The wrappers around
vLLM's lines (`docker logs --timestamps` / k8s RFC 3339 times, docker-compose `svc-1 | `, ANSI
colour codes) are undone before, by the decoding stage (parsers/wrappers), which gives their
time and service as `wrapper_ts` / `ts` and `labels`.

Everything is polars expressions over the whole chunk: no Python loop per line. What costs
is the number of passes over the chunk, so cheap whole-chunk tests decide which passes run at
all (no wrapper, no colour code, no continuation line: no pass for them), and each event
family is computed on its own rows only, after a classification by anchored tests.
"""

from __future__ import annotations

import functools
import re

import polars as pl

from ... import uvicorn
from . import fields as F
from ...base import ParseContext, attrs_column, find_len, record_ids

NAME = "vllm"
CARRY_FORWARD = ("model",)
# what every line naming a carried value contains (a newest-first export's reader looks
# for them before the chunks: pipeline/sources/carry_scan.py)
CARRY_HINT = ("with config: ", "non-default args: ", "args: Namespace(")
# whether a line starts a record depends on it and the line before only (`_continues`), so
# the ingest hold-back may ask about a block's last lines alone (pipeline/sources/lines.py)
RECORD_LOOKBACK = 1

_LEVEL = r"DEBUG|INFO|WARNING|ERROR|CRITICAL"

# The anchored patterns below capture only a short prefix (`all`): capturing a whole line
# tail with `(.*)` copies every line's text again, slicing the tail off costs nothing.
# The process prefix and the header are taken apart by anchored `extract_groups` passes that
# capture only the short prefix; the message is sliced off behind it (capturing a 3 KB `(.*)`
# tail would cost far more).
# vLLM's own process prefix (and torch.distributed's `[rank0]: `); exactly one space
# follows it, so the indentation of a raw traceback frame survives in `body`
_PROC_CORE = (
    r"\((?P<pname>[A-Za-z_]\w*)(?: (?P<pname2>[A-Za-z_]\w*))?(?: rank=(?P<prank>\d+))?"
    r" pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\)"
)
_PROC = rf"(?:\[rank(?P<trank>\d+)\]:\s?)?(?:{_PROC_CORE} ?)?"
_PROC_FIELDS = ("trank", "pname", "pname2", "prank", "pid", "ip")
# the vLLM header; ASCII classes keep the automaton small. NVIDIA NIM's text formatter
# prints the date with its year and milliseconds: `INFO 2025-09-10 16:32:05.957 metrics.py:386] `
# (`md` is `(?:[0-9]{4}-)?[0-9]{2}-[0-9]{2}` written so that its first two digits do not
# open two ways: a pattern that never has two ways on captures for about a search's cost)
_HDR = (
    rf"(?P<hh>(?P<level>{_LEVEL}) +(?P<md>[0-9]{{2}}(?:[0-9]{{2}}-[0-9]{{2}}-|-)[0-9]{{2}}) +"
    r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?P<frac>[.,][0-9]+)? +\[?(?P<srcline>(?P<src>[A-Za-z0-9_./-]+\.py):"
    r"(?P<lineno>[0-9]+))\] ?)"
)
_HDR_FIELDS = ("hh", "level", "md", "hms", "frac", "srcline", "src", "lineno")
# _HDR with any file name: the source file's run of characters ends at the `:` anyway, and
# without `\.py` inside it the pattern is one-pass, which halves the cost of its captures;
# a file name not ending in `.py` (after one character at least) is then no header
_HDR_ANY_FILE = _HDR.replace(r"(?P<src>[A-Za-z0-9_./-]+\.py)", r"(?P<src>[A-Za-z0-9_./-]+)")
assert _HDR_ANY_FILE != _HDR
_LEVEL_TIME = rf"(?:{_LEVEL}) +(?:[0-9]{{4}}-)?[0-9]{{2}}-[0-9]{{2}} "
_HDR_ANYWHERE = (
    rf"(?:^|[ \t)|\]:>])(?:{_LEVEL}) +(?:[0-9]{{4}}-)?[0-9]{{2}}-[0-9]{{2}} +[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}"
)
# behind an arbitrary prefix (journald, Buildkite, TorchServe...): the level must open the
# text or follow a separator
_HDR_AFTER = r"^(?P<hpre>(?:.*?[ \t)|\]:>])?)" + _HDR

# what continuation lines look like (besides being indented or empty)
_CHAINED = r"^(?:The above exception was the direct cause|During handling of the above exception)"
_TRACEBACK = "Traceback (most recent call last)"

_ANATOMY_COLS = (
    "pname", "prank", "pid", "ip", "trank", "level", "md", "hms", "frac", "src",
    "lineno", "srcline", "has_hdr", "body", "m", "cont",
)


def _any(df: pl.DataFrame, expr: pl.Expr) -> bool:
    return bool(df.select(expr.any()).item())


def _lines_anatomy(df: pl.DataFrame) -> pl.DataFrame:
    """Take every line apart: adds the columns of _ANATOMY_COLS. `body` is the message
    after the header (or the raw text after the process prefix), `m` the same without leading
    blanks, `cont` whether the line continues the one before."""
    # what the chunk holds decides which passes run (one select asks it all)
    def holds(col: str) -> dict[str, bool]:
        t = pl.col(col)
        tests = {
            "cr": t.str.ends_with("\r"),
            # a line can only carry a prefix when it starts like one: when no line of the
            # chunk does, that pattern is left out (files without prefixes pay nothing)
            "proc": t.str.starts_with("(") | t.str.starts_with("["),
        }
        return df.select(v.any().alias(k) for k, v in tests.items()).row(0, named=True)

    has = holds("text")
    text = pl.col("text").fill_null("") if df["text"].null_count() else pl.col("text")
    # rewriting every string costs a pass; most files have no `\r`
    if has["cr"]:
        text = text.str.strip_chars_end("\r")
    df = df.with_columns(text.alias("_t"))

    # the process prefix, then the header: two small anchored patterns cost less than one
    # that holds both; a part no line starts with is skipped. Neither is cut off the line
    # (each cut copies every line's text): `_o` is where the prefix ends (characters, `_ob`
    # in the unit of `str.find`'s offsets), and the body is sliced once, behind both
    if has["proc"]:
        df, prefix = _proc_groups(df)
    else:
        df, prefix = df.with_columns(pl.lit(0, pl.UInt32).alias("_o"), pl.lit(0, pl.UInt32).alias("_ob")), ""
    df = _header_groups(df, prefix)
    src = pl.col("src")
    not_py = src.is_not_null() & ~(src.str.ends_with(".py") & (src.str.len_chars() > 3))
    if _any(df, not_py):
        df = df.with_columns(pl.when(~not_py).then(pl.col(f)).alias(f) for f in _HDR_FIELDS)
    absent = [f for f in _PROC_FIELDS if f not in df.columns]
    df = df.with_columns(
        *(pl.lit(None, pl.String).alias(f) for f in absent),
        pl.col("_t").str.slice(pl.col("_o") + pl.col("hh").str.len_chars().fill_null(0)).alias("body"),
    )
    df = _header_behind_prefix(df)

    name1, name2 = pl.col("pname"), pl.col("pname2")
    lineno, body = pl.col("lineno"), pl.col("body")
    odd = df.select(
        # `srcline` (`file.py:N`, the `src` attr) is used as printed, unless a line number
        # would not read back the same from an integer (leading zeros, too long to be one)
        ((lineno.str.starts_with("0") & (lineno.str.len_bytes() > 1)) | (lineno.str.len_bytes() > 18))
        .any()
        .alias("lineno"),
        # few messages start with blanks: stripping copies every string, so only if one does
        body.str.contains(r"^\s").any().alias("blank"),
    ).row(0, named=True)
    srcline = pl.col("srcline")
    if odd["lineno"]:
        srcline = pl.concat_str([pl.col("src"), pl.lit(":"), lineno.cast(pl.Int64, strict=False).cast(pl.String)])
    df = df.with_columns(
        srcline.alias("srcline"),
        pl.when(name2.is_not_null()).then(pl.concat_str([name1, pl.lit(" "), name2]))
        .otherwise(name1).alias("pname"),
        pl.col("prank").cast(pl.Int64, strict=False),
        pl.col("pid").cast(pl.Int64, strict=False),
        pl.col("trank").cast(pl.Int64, strict=False),
        lineno.cast(pl.Int64, strict=False),
        pl.col("level").is_not_null().alias("has_hdr"),
        (body.str.strip_chars_start() if odd["blank"] else body).alias("m"),
    )
    df = df.with_columns(_continues(df, odd["blank"]))
    return df.drop("_t", "_o", "_ob", "pname2", "hh")


def _by_start(df: pl.DataFrame, key: pl.Expr, pattern: str, then: dict[str, pl.Expr] | None = None) -> pl.DataFrame:
    """The named groups of `pattern` matched at the start of `key` (a start of the line long
    enough to decide the match), as columns. Lines share few such starts (one per second
    and source line), and the pattern runs once per distinct start, not per line; so do
    `then`'s expressions over the groups (columns in place of the groups they read)."""
    df = df.with_columns(key.alias("_start"))
    starts = df.select(pl.col("_start").unique()).drop_nulls()
    if 2 * starts.height > df.height - df["_start"].null_count():
        # most starts are distinct (one line a second): the join would cost more than it saves
        groups = df.select(pl.col("_start").str.extract_groups(pattern).alias("_g")).unnest("_g")
        if then:
            groups = groups.select(*(v.alias(k) for k, v in then.items()))
        return df.drop("_start").hstack(groups)
    starts = starts.with_columns(pl.col("_start").str.extract_groups(pattern).alias("_g")).unnest("_g")
    if then:
        starts = starts.select("_start", *(v.alias(k) for k, v in then.items()))
    return df.join(starts, on="_start", how="left", maintain_order="left").drop("_start")


def _proc_groups(df: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """The process prefix's fields (_PROC_FIELDS) at the start of `_t`, and `_o`/`_ob`, its
    length in characters/bytes; and the one prefix every line that has one has, if so
    (None when the lines have several). A match starts with `(` or `[`; nothing it reads before
    its `)` can be one, so it ends at the line's first `)` or one character after it, and
    without a `)` it is at most `[rankN]:` and one blank, which ends one character after
    the first `]`. (`str.find` counts bytes or characters by polars version, `str.head`
    characters: a start with characters of several bytes may be longer than needed, never
    shorter.)"""
    t = pl.col("_t")
    opens = t.str.starts_with("(") | t.str.starts_with("[")
    close, bracket = t.str.find(")", literal=True), t.str.find("]", literal=True)
    n = (
        pl.when(~opens).then(0)
        .when(close.is_not_null()).then(close + 2)
        .when(bracket.is_not_null()).then(bracket + 3)
        .otherwise(0)
    )
    then, pattern = _proc_then(), _PROC_START
    # most files have one writer: when every line that opens like a prefix starts with the
    # first such line's start, and that start is all of its `n` and holds a `)`, it is every
    # such line's start (the same first `)`, the same `n`), and its groups are every such
    # line's; the other lines' start is empty (`n` is 0): no prefix (uvicorn's own lines
    # among vLLM's)
    head = df["_t"][0] or ""
    at = 0 if head.startswith(("(", "[")) else df.select(opens.arg_max()).item()
    first = df.slice(at, 1).select(t.str.head(n)).item() or ""
    close_at = first.encode().find(b")")
    if close_at >= 0 and len(first) == close_at + 2:
        mine = t.str.starts_with(first)
        # (every line starting so: then every line that opens like a prefix does)
        every = df.select(mine.all()).item()
        if every or df.select((mine | ~opens).all()).item():
            one = _one_prefix(first)
            values = [pl.lit(v, dtype) for v, dtype in one]
            if not every:  # a field the prefix does not set is null on every line
                values = [v if value is None else pl.when(mine).then(v) for v, (value, _) in zip(values, one)]
            df = df.with_columns(v.alias(c) for v, c in zip(values, [*then]))
            # the prefix the pattern read (a start it does not read whole has a shorter one)
            return df.with_columns(pl.col("_o").fill_null(0), pl.col("_ob").fill_null(0)), first[: one[[*then].index("_o")][0]]
    df = _by_start(df, t.str.head(n), pattern, then)
    return df.with_columns(pl.col("_o").fill_null(0), pl.col("_ob").fill_null(0)), None


# a line's process prefix, read from its start
_PROC_START = f"^(?P<pre>{_PROC})"


def _proc_then() -> dict[str, pl.Expr]:
    """The columns a process prefix gives, from `_PROC_START`'s groups."""
    pre = pl.col("pre")
    return {**{f: pl.col(f) for f in _PROC_FIELDS}, "_o": pre.str.len_chars(), "_ob": find_len(pre)}


@functools.lru_cache(maxsize=256)
def _one_prefix(first: str) -> tuple[tuple[object, pl.DataType], ...]:
    """`_proc_then()`'s values (and types) of one process prefix; the few prefixes of a
    file are read once, not at every chunk."""
    one = pl.DataFrame({"_start": [first]}).select(pl.col("_start").str.extract_groups(_PROC_START).alias("_g"))
    one = one.unnest("_g").select(*(v.alias(k) for k, v in _proc_then().items()))
    return tuple((one[c][0], one[c].dtype) for c in one.columns)


# lines whose header starts are sampled to tell whether most starts are distinct
_SAMPLE = 2048


def _header_groups(df: pl.DataFrame, prefix: str | None = None) -> pl.DataFrame:
    """The named groups of `_HDR_ANY_FILE` behind the process prefix (at `_o`), as
    columns. Every match ends at the first `]` behind the prefix or one character after it
    (nothing the pattern reads before its closing bracket can be one), so the line's start
    up to there decides the match. A line without `]` there has no header. `prefix`: the
    one process prefix of every line that has one ("" for none), if known."""
    t = pl.col("_t")
    first = t.str.find("]", literal=True)  # in the unit of `_ob`
    if prefix is not None and "]" not in prefix:
        # each line has `prefix` or no prefix before its header: one pattern that holds the
        # prefix as an option reads the header (`prefix` opens with a bracket, which no header
        # does, so a line with the prefix matches behind it or not at all), and the line's
        # start that decides the match is the same with the prefix in it
        lead = f"(?:{re.escape(prefix)})?" if prefix else ""
        pattern = f"^{lead}{_HDR_ANY_FILE}"
        key = t.str.head(first + 2)  # null without `]` (a when around it copies every start)
        if _mostly_distinct(df.head(_SAMPLE).select(key).to_series()):
            # read in place, without cutting the starts first; lines without `]` are skipped
            groups = df.select(pl.when(first.is_not_null()).then(t).str.extract_groups(pattern).alias("_g"))
            return df.hstack(groups.unnest("_g"))
        return _by_start(df, key, pattern)
    at, at_b = pl.col("_o"), pl.col("_ob")
    # a `]` inside the prefix (`[rank0]: `): the first one behind it is looked for
    if _any(df, first < at_b):
        first = pl.when(first >= at_b).then(first).otherwise(t.str.slice(at).str.find("]", literal=True) + at_b)
    key = pl.when(first.is_not_null()).then(t.str.slice(at, first - at_b + 2))
    return _by_start(df, key, f"^{_HDR_ANY_FILE}")


def _mostly_distinct(starts: pl.Series) -> bool:
    """Whether most of these (non-null) line starts are distinct: then deduplicating them
    costs more than it saves (`_by_start`'s test, on a sample)."""
    n = starts.len() - starts.null_count()
    return n > 0 and 2 * starts.drop_nulls().n_unique() > n


def _header_behind_prefix(df: pl.DataFrame) -> pl.DataFrame:
    """The slow path, only for the rare lines whose header sits behind some other prefix
    (journald, Buildkite...): header fields, process prefix and body found behind it."""
    # the search runs on the lines without a header only (most lines have one), and first
    # for its literal part (the boundary before the level keeps the regex from skipping
    # ahead to the level words); on a line without a header, `body` is all behind the
    # process prefix
    bare = df["level"].is_null().arg_true()
    bare = bare.filter(df["body"].gather(bare).str.contains(_LEVEL_TIME))
    bare = bare.filter(df["body"].gather(bare).str.contains(_HDR_ANYWHERE))
    if bare.len() == 0:
        return df
    df = df.with_row_index("_i")
    odd = df[bare]
    h2 = pl.col("_h2").struct
    late = pl.col("_late").struct
    odd = odd.with_columns(pl.col("body").str.extract_groups(_HDR_AFTER).alias("_h2"))
    odd = odd.with_columns(h2.field("hpre").str.extract_groups(_PROC_CORE).alias("_late"))
    # the header fields were null on these lines; a prefix found at the start still wins
    odd = odd.select(
        "_i",
        *(h2.field(f).alias(f) for f in _HDR_FIELDS),
        *(pl.coalesce(pl.col(f), late.field(f)).alias(f) for f in _PROC_FIELDS if f != "trank"),
        pl.when(h2.field("level").is_not_null())
        .then(pl.col("body").str.slice(h2.field("hpre").str.len_chars() + h2.field("hh").str.len_chars()))
        .otherwise(pl.col("body"))
        .alias("body"),
    )
    return df.update(odd, on="_i", include_nulls=True).drop("_i")


def _continues(df: pl.DataFrame, blank: bool = True) -> pl.Expr:
    """`cont`: the line continues the one before: it is shaped like the inside of a
    traceback or an indented block, and has the same writer (same header, or same raw
    prefix) as the line before. Writers are compared only where the shape fits. `blank`:
    whether some body may start with a blank (without one no line is indented)."""
    m = pl.col("m")
    if blank:
        indented = df.select(pl.col("body").str.contains(r"^\s+\S")).to_series()
    else:
        indented = pl.repeat(False, df.height, dtype=pl.Boolean, eager=True)
    shaped = pl.lit(indented) | (m == "") | m.str.starts_with(_TRACEBACK) | m.str.contains(_CHAINED)
    # an exception line ends an indented traceback
    if indented.any():
        shaped = shaped | (m.str.contains(F.EXCEPTION) & pl.lit(indented.shift(1)))
    shaped = df.select(shaped.fill_null(False)).to_series()
    if not shaped.any():
        return pl.lit(False).alias("cont")
    # the lines to compare: each candidate and the line before it
    pair = shaped | shaped.shift(-1, fill_value=False)
    sub = df.filter(pair).with_columns(shaped.filter(pair).alias("_shaped"))
    key = pl.concat_str(
        [
            pl.col(c).cast(pl.String).fill_null("")
            for c in ("pname", "prank", "pid", "ip", "trank", "level", "md", "hms", "src", "lineno")
        ],
        separator="|",
    )
    same = sub.select((pl.col("_shaped") & (key == key.shift(1))).fill_null(False)).to_series()
    cont = pl.Series("cont", [False] * df.height, dtype=pl.Boolean)
    cont = cont.scatter(pair.arg_true(), same)
    return pl.lit(cont).alias("cont")


# A line can continue the one before only when `_continues` finds it shaped: its body (behind
# any process prefix and header, each of which ends in `)` or `]` and at most one space) is
# blank or indented, or it opens a traceback or a chained exception. A line holding none of
# these anywhere is no continuation, whatever its prefix and header (a line opening with
# torch's `[rankN]:`, whose prefix ends otherwise, is always asked in full).
_MAYBE_SHAPED = (
    r"^\s|^$|^\[rank|[)\]](?:$|[^\S ]| (?:$|\s))|" + re.escape(_TRACEBACK)
    + r"|The above exception was the direct cause|During handling of the above exception"
)


def record_starts(text: pl.Series) -> pl.Series:
    text = text.cast(pl.String)
    # the usual window (a block's last lines) holds no candidate: each line starts a record,
    # without taking the lines apart
    if not pl.select(pl.lit(text.fill_null("")).str.contains(_MAYBE_SHAPED).any()).item():
        return pl.repeat(True, len(text), dtype=pl.Boolean, eager=True).alias("starts")
    df = _lines_anatomy(pl.DataFrame({"text": text}))
    return (~df["cont"]).alias("starts")


# ---------------------------------------------------------------------------------------
# detect


# what some line holds anywhere when `detect` counts it strong (a header, a vLLM process
# prefix, stats or vLLM's own words), or a uvicorn line; and a foreign engine's line. The
# message is a part of the line: a sample without the first two is scored by the third
# alone, and its lines need not be taken apart
_OWN_WORDS = r"vLLM API server version|LLM engine \(v|vllm\.entrypoints|vllm serve"
_MAYBE_STRONG = (
    rf"(?:{_LEVEL}) +(?:[0-9]{{4}}-)?[0-9]{{2}}-[0-9]{{2}} +[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}"
    r"|\((?:APIServer|VllmWorker|EngineCore|RayWorker|Worker)|Avg prompt throughput: "
    "|" + _OWN_WORDS
)
_MAYBE_UVICORN = rf"(?:{_LEVEL}):\s+\S"
_FOREIGN = r"TensorRT-LLM|TRT-LLM|text_generation_(?:router|launcher|server)|\[TRT"


def detect(lines: list[str]) -> float:
    """High for vLLM headers, process prefixes and stats lines; ~0 for TGI and
    TensorRT-LLM; low for uvicorn lines alone (trtllm-serve prints them too)."""
    if not lines:
        return 0.0
    text = pl.Series(lines, dtype=pl.String).fill_null("")
    t = pl.lit(text)
    maybe, foreign = pl.select(t.str.contains(_MAYBE_STRONG + "|" + _MAYBE_UVICORN).any().alias("m"), t.str.contains(_FOREIGN).any().alias("f")).row(0)
    if not maybe:
        return 0.02 if foreign else 0.0
    return _score(text)


def _score(text: pl.Series) -> float:
    """`detect`'s score of the sample lines `text`, the lines taken apart."""
    df = _lines_anatomy(pl.DataFrame({"text": text}))
    df = df.filter(pl.col("text").str.strip_chars() != "")
    n = df.height
    if n == 0:
        return 0.0
    vllm_proc = pl.col("pname").str.contains(
        r"^(?:APIServer|VllmWorkerProcess|VllmWorker|EngineCore|RayWorkerWrapper|RayWorkerVllm|Worker)"
    ).fill_null(False)
    strong = pl.col("has_hdr") | vllm_proc | F.IS_STATS | pl.col("m").str.contains(_OWN_WORDS)
    foreign = pl.col("text").str.contains(_FOREIGN)
    uv_lines = pl.col("m").str.contains(F.UVICORN_OTHER)
    s = df.select(strong.sum().alias("s"), foreign.sum().alias("f"), uv_lines.sum().alias("u")).row(0)
    n_strong, n_foreign, n_uv = (int(x or 0) for x in s)
    if n_foreign > n_strong:
        return 0.02
    if n_strong == 0:
        return 0.1 if n_uv else 0.0
    return min(1.0, 0.6 + 0.4 * n_strong / n)


# ---------------------------------------------------------------------------------------
# parse


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return lines.select("line", pl.lit("unparsed").alias("event"), pl.col("text").alias("message"))
    df = _lines_anatomy(lines.select("line", pl.col("text").cast(pl.String)))
    return _events(_records(df), ctx)


def _records(df: pl.DataFrame) -> pl.DataFrame:
    """One row per record: the anatomy of its first line, `n_lines`, `raw` (the physical
    lines joined) and what its continuation lines add: the exception (the last one, as
    Python prints the final exception last, in `_xt`/`_xm`), `has_tb` and the whole
    message `body_all`."""
    raw = pl.col("text").fill_null("")
    if not df["cont"].any():  # the common chunk: every record is one line
        return df.select(
            "line",
            pl.lit(1, pl.Int32).alias("n_lines"),
            raw.alias("raw"),
            *_ANATOMY_COLS[:-1],
            pl.lit(None, pl.String).alias("_xt"),
            pl.lit(None, pl.String).alias("_xm"),
            pl.lit(False).alias("has_tb"),
            pl.lit(None, pl.String).alias("body_all"),
        )
    starts = ~df["cont"]
    df = df.with_columns(record_ids(starts))
    multi = df.filter(pl.len().over("_rec") > 1)
    exc = pl.col("_e").struct
    agg = (
        multi.with_columns(pl.col("m").str.extract_groups(F.EXCEPTION).alias("_e"))
        .group_by("_rec", maintain_order=True)
        .agg(
            pl.col("line").first(),
            pl.len().cast(pl.Int32).alias("_n"),
            raw.str.join("\n").alias("_raw"),
            exc.field("exc").drop_nulls().last().alias("_xt"),
            exc.field("excmsg").filter(exc.field("exc").is_not_null()).last().alias("_xm"),
            pl.col("m").str.starts_with(_TRACEBACK).any().alias("has_tb"),
            pl.col("body").str.join("\n").alias("body_all"),
        )
        .drop("_rec")
    )
    return (
        df.filter(starts)
        .join(agg, on="line", how="left", maintain_order="left")
        .select(
            "line",
            pl.col("_n").fill_null(1).alias("n_lines"),
            pl.coalesce("_raw", raw).alias("raw"),
            *_ANATOMY_COLS[:-1],
            "_xt",
            "_xm",
            pl.col("has_tb").fill_null(False),
            "body_all",
        )
    )


# event families: each is computed on its own rows only, so a million stats lines never pay
# for the request regexes and vice versa
_FAMILIES = ("stats", "iter", "cap", "delta", "req", "req_plain", "preempt", "note", "access", "other")


def _family() -> pl.Expr:
    hdr = pl.col("has_hdr")
    bare = ~hdr & pl.col("pname").is_null() & F.BARE_VLLM
    return (
        pl.when((hdr | bare) & F.IS_STATS).then(pl.lit("stats"))
        .when(hdr & F.IS_ITERATION).then(pl.lit("iter"))
        .when((hdr | bare) & F.IS_CAPACITY).then(pl.lit("cap"))
        .when(hdr & F.IS_GEN_DELTA).then(pl.lit("delta"))
        .when(hdr & F.IS_REQUEST).then(pl.lit("req"))
        .when(hdr & F.IS_PREEMPT).then(pl.lit("preempt"))
        .when(hdr & (F.IS_BATCH_NOTE | F.IS_GEN_NOTE)).then(pl.lit("note"))
        .when(~hdr & pl.col("m").str.contains(F.UVICORN_ACCESS)).then(pl.lit("access"))
        .otherwise(pl.lit("other"))
    )


# below this many rows a pass costs about the same whatever it does: fewer passes win
_FEW_ROWS = 1000


def _families(rec: pl.DataFrame) -> tuple[pl.Series, pl.Series | None]:
    """`_family()` of every record, and the access lines' captures
    (`uvicorn.access_groups`, in their order) when the access test read them. The stats and
    capacity tests search the whole message (a 3 KB prompt included), so they run only on
    the few messages holding one of their literals; the other records take the same chain
    without them (anchored tests that fail at the first bytes), those behind a header its
    header tests only, the others its access test only: the access line's reading itself
    (a line is one when uvicorn.ACCESS matches: its method is read)."""
    if rec.height < _FEW_ROWS:  # on few rows one pass of the whole chain costs less
        return rec.select(_family().alias("_fam")).to_series(), None
    # the literal tests below on every record in one pass
    msg = pl.col("m")
    tests = rec.select(
        "has_hdr",
        msg.str.contains(F.STATS_OR_CAPACITY_HINT).alias("hot"),
        msg.str.starts_with("Received request ").alias("received"),
        (msg.str.starts_with("Added request ") | msg.str.starts_with("Finished request ")).alias("ended"),
    )
    hot, hdr = tests["hot"], tests["has_hdr"]
    # the chain's tests each need a header or its absence: each runs on its side only
    behind_header = (
        pl.when(F.IS_ITERATION).then(pl.lit("iter"))
        .when(F.IS_PLAIN_REQUEST).then(pl.lit("req_plain"))
        .when(F.IS_GEN_DELTA).then(pl.lit("delta"))
        .when(F.IS_REQUEST).then(pl.lit("req"))
        .when(F.IS_PREEMPT).then(pl.lit("preempt"))
        .when(F.IS_BATCH_NOTE | F.IS_GEN_NOTE).then(pl.lit("note"))
        .otherwise(pl.lit("other"))
    )
    fam = pl.repeat("other", rec.height, dtype=pl.String, eager=True).alias("_fam")
    m = rec.select("m")
    # behind a header, the request lines (most of a log with request logging on) are told
    # apart by their head: no test of the chain before IS_REQUEST matches one, IS_REQUEST
    # does, and of the `Added` / `Finished` lines IS_PLAIN_REQUEST tells the plain ones
    side, head = ~hot & hdr, rec["m"]
    received, ended = side & tests["received"], side & tests["ended"]
    fam = fam.scatter(received.arg_true(), "req")
    idx = ended.arg_true()
    if idx.len():
        plain = pl.when(F.IS_PLAIN_REQUEST).then(pl.lit("req_plain")).otherwise(pl.lit("req"))
        fam = fam.scatter(idx, m[idx].select(plain).to_series())
    idx = (side & ~received & ~ended).arg_true()
    if idx.len():
        fam = fam.scatter(idx, m[idx].select(behind_header).to_series())
    uv = None
    idx = (~hot & ~hdr).arg_true()
    if idx.len():
        uv = uvicorn.access_groups(head.gather(idx))
        access = uv.struct.field("method").is_not_null()
        fam = fam.scatter(idx.filter(access), "access")
        uv = uv.filter(access)
    if hot.any():
        idx = hot.arg_true()
        hot_rows = rec.select("m", "has_hdr", "pname")[idx]
        # most are stats lines behind a header (the chain's first test); only the rest
        # take the whole chain
        stats = hot_rows.select(pl.col("has_hdr") & F.IS_STATS).to_series()
        fam = fam.scatter(idx.filter(stats), "stats")
        if not stats.all():
            rest = hot_rows.filter(~stats).select(_family()).to_series()
            fam = fam.scatter(idx.filter(~stats), rest)
            if (rest == "access").any():  # access lines of both sides: read again together
                uv = None
    return fam, uv


def _common_attrs(sub: pl.DataFrame) -> dict[str, pl.Expr]:
    pname = pl.col("pname")
    attrs = {
        "process": pname,
        "pid": pl.col("pid"),
        "rank": pl.coalesce(pl.col("prank"), pl.col("trank")),
        "ip": pl.col("ip"),
    }
    # data-parallel engines inside one instance: EngineCore_DP0 / EngineCore_0 / Worker_DP1_TP0
    # (four searches per line, skipped when no process name has a suffix)
    if sub["pname"].str.contains(r"_|[_ ]TP").any():
        attrs |= {
            "dp_rank": pname.str.extract(r"(?:_DP|^EngineCore_)(\d+)", 1).cast(pl.Int64, strict=False),
            "tp_rank": pname.str.extract(r"[_ ]TP(\d+)", 1).cast(pl.Int64, strict=False),
            "pp_rank": pname.str.extract(r"_PP(\d+)", 1).cast(pl.Int64, strict=False),
            "ep_rank": pname.str.extract(r"_EP(\d+)", 1).cast(pl.Int64, strict=False),
        }
    return attrs | {
        "src": pl.col("srcline"),
    }


def _with_attrs(sub: pl.DataFrame, fields: list[str]) -> pl.DataFrame:
    """`attrs` (base.attrs_column) in place of the columns `_a_<field>`."""
    vals = sub.select(pl.col(f"_a_{k}").alias(k) for k in fields)
    return sub.drop(f"_a_{k}" for k in fields).with_columns(attrs_column(vals, fields))


def _family_frame(fam: str, sub: pl.DataFrame, uv: pl.Series | None = None) -> pl.DataFrame:
    """Event kind, schema columns and attrs for the rows of one family (`uv`: the access
    lines' captures, if read)."""
    m = pl.col("m")
    cols: dict[str, pl.Expr] = {}
    extra: dict[str, pl.Expr] = {}
    if fam == "stats":
        # the lines of the shapes vLLM prints most are read by one pattern, the rest key by key
        shaped = sub.select(m.str.extract_groups(F.STATS_SHAPE)).to_series()
        fast = shaped.struct.field("prompt").is_not_null()
        if fast.any():
            cols, extra = F.shaped_stats(pl.col("_st"))
            part = sub.filter(fast).with_columns(shaped.filter(fast).alias("_st"))
            done = _finish(fam, part, {"event": pl.lit("engine_stats"), **cols}, extra)
            if fast.all():
                return done
            return pl.concat([done, _family_frame("stats_by_key", sub.filter(~fast))], how="diagonal_relaxed")
        fam = "stats_by_key"
    if fam == "stats_by_key":
        cols = {"event": pl.lit("engine_stats"), **F.stats_columns()}
        extra = F.stats_attrs()
        # the optional parts (Preemptions, MM cache, KV fetch...) are rare: only the rows
        # that carry one pay for their regexes
        rich = sub["m"].str.contains(F.RARE_STATS)
        if not rich.any():
            extra = {k: v for k, v in extra.items() if k not in F.RARE_STATS_KEYS}
        elif not rich.all():
            return pl.concat(
                [_family_frame(fam, sub.filter(rich)), _family_frame(fam, sub.filter(~rich))],
                how="diagonal_relaxed",
            )
    elif fam == "iter":
        it = F.iteration_columns()
        cols = {
            "event": pl.lit("batch"),
            "batch_size": it.pop("batch_size"),
            "batch_tokens": it.pop("batch_tokens"),
            "inference_s": it.pop("inference_s"),
            "kv_usage": F.stats_columns()["kv_usage"],
        }
        extra = {"engine_index": F.stats_attrs()["engine_index"], **it}
    elif fam == "cap":
        # the model is named only by the engine-config and argument-dump lines; it applies
        # to the rest of the file: finalize carries it forward (CARRY_FORWARD)
        cols = {"event": pl.lit("capacity"), "model": F.model_name(), **F.capacity_columns()}
        extra = F.capacity_attrs()
    elif fam == "req":
        # the commonest `Received request` lines (V1's, V0's) are read from their repr, the rest as before
        shaped, rest = F.received_shapes(sub)
        if shaped.height:
            done = _finish(fam, *F.shaped_received(shaped))
            if rest.height == 0:
                return done
            return pl.concat([done, _family_frame("req_by_key", rest)], how="diagonal_relaxed")
        return _family_frame("req_by_key", sub)
    elif fam == "req_by_key":
        sub = F.with_sampling_params(sub.with_columns(**F.request_parts()))
        rq = F.request_columns()
        cols = {"event": F.request_kind(), **rq, "sampling_params": pl.col("sampling_params")}
        if sub.select(F.IS_ABORTED.any()).item():
            cols["_aborted"] = pl.when(F.IS_ABORTED).then(F.aborted_ids())
        extra = {**F.request_attrs(), "param_seed": pl.col("param_seed")}
    elif fam == "req_plain":
        # `Added request X.` / `Finished request X.`: the id is all there is to read
        cols = {
            "event": pl.when(F.IS_ADDED).then(pl.lit("request_arrived")).otherwise(pl.lit("request_finished")),
            "request_id": F.plain_request_id(),
        }
    elif fam == "preempt":
        extra = F.preemption_attrs()
        cols = {"event": pl.lit("preemption"), "request_id": extra.pop("request_id")}
    elif fam == "note":
        cols = {"event": pl.lit("batch"), **F.note_columns()}
        extra = {"batch_index": m.str.extract(r"^Running batch #(\d+)", 1).cast(pl.Int64, strict=False)}
    elif fam == "access":
        sub, cols, extra = uvicorn.access_columns(sub, m, uv)
    else:
        # the exception a record names: its continuation lines' (`_xt`) or its own
        exc = pl.col("_e").struct
        sub = sub.with_columns(m.str.extract_groups(F.EXCEPTION).alias("_e")).with_columns(
            pl.coalesce(pl.col("_xt"), exc.field("exc")).alias("exc_type"),
            pl.coalesce(pl.col("_xm"), exc.field("excmsg")).alias("exc_message"),
        )
        hdr = pl.col("has_hdr")
        is_uv = ~hdr & m.str.contains(F.UVICORN_OTHER)
        is_pylog = ~hdr & m.str.contains(F.PYLOGGING)
        error = (hdr & (pl.col("level").is_in(["ERROR", "CRITICAL"]) | pl.col("has_tb"))) | (
            ~hdr & (pl.col("has_tb") | (pl.col("exc_type").is_not_null() & ~is_uv & ~is_pylog))
        )
        kind = (
            pl.when(error).then(pl.lit("error"))
            .when(m.str.contains(F.SHUTDOWN)).then(pl.lit("shutdown"))
            .when(hdr | is_uv | is_pylog | pl.col("pname").is_not_null()).then(pl.lit("log"))
            .otherwise(pl.lit("unparsed"))
        )
        cols = {
            "event": kind,
            "level": pl.coalesce(
                pl.col("level"),
                pl.when(is_uv | is_pylog).then(m.str.extract(r"^(" + _LEVEL + r"):", 1)),
            ),
        }
        extra = {
            "exc_type": pl.when(error).then(pl.col("exc_type")),
            "exc_message": pl.when(error).then(pl.col("exc_message")),
            "logger": pl.when(is_pylog).then(m.str.extract(F.PYLOGGING, 2)),
            "uvicorn": pl.when(is_uv).then(pl.lit(True)),
        }
    return _finish(fam, sub, cols, extra)


def _finish(fam: str, sub: pl.DataFrame, cols: dict[str, pl.Expr], extra: dict[str, pl.Expr]) -> pl.DataFrame:
    """The events of one family's rows: its columns `cols`, the message and the attrs
    (the common ones and `extra`)."""
    message = pl.coalesce(pl.col("body_all"), pl.col("body"))
    if fam == "other":  # an unparsed record keeps its lines as they were
        message = pl.when(cols["event"] == "unparsed").then(pl.col("raw")).otherwise(message)
    fields = {**_common_attrs(sub), **extra}
    # one select makes all a part's columns; only what the events need goes on (the concat
    # and sort of the parts cost per column)
    sub = sub.select(
        *(c for c in ("line", "n_lines", "ts", "ts_noyear", "level") if c not in cols),
        *(v.alias(k) for k, v in cols.items()),
        message.alias("message"),
        *(v.alias(f"_a_{k}") for k, v in fields.items()),
    )
    return _with_attrs(sub, list(fields))


def _fold_deltas(sub: pl.DataFrame) -> pl.DataFrame:
    """The `streaming delta` lines of a chunk, folded (one stored event per line would be
    most of a log with output logging on: ~75 per request).

    A run of consecutive delta lines is one span, carried by one `request_output` event
    without a request id (`folded_lines` in attrs). Each request's deltas in the chunk
    become one `request_output` event with its id, sharing the span of the run holding its
    first delta: `ts` is that first delta (the first token out), attrs `deltas` (lines),
    `last_delta_s` (s from the first to the last), `finish_reason` (the last chunk's), and
    `output_tokens` the tokens the chunks listed (null when the lines list none)."""
    d = sub.with_columns(**F.delta_columns())
    # one clock for the offsets: the wrapper's when it is there, else the header's
    t = pl.coalesce(pl.col("ts").dt.replace_time_zone(None), pl.col("ts_noyear"))
    runs = d.group_by("_run", maintain_order=True).agg(
        pl.col("line").min(),
        pl.col("n_lines").sum().cast(pl.Int32),
        pl.len().alias("_folded"),
        pl.col("ts").first(),
        pl.col("ts_noyear").first(),
        pl.col("level").first(),
    )
    carriers = runs.select(
        "line", "n_lines", "ts", "ts_noyear", "level",
        pl.lit("request_output").alias("event"),
        pl.lit(None, pl.String).alias("request_id"),
        pl.lit(None, pl.Int64).alias("output_tokens"),
        pl.format("{} streaming delta lines", pl.col("_folded")).alias("message"),
        attrs_column(runs.select(pl.col("_folded").alias("folded_lines")), ["folded_lines"]),
    )
    per_req = (
        d.filter(pl.col("request_id").is_not_null())
        .with_columns(t.alias("_t"))
        .group_by("request_id", maintain_order=True)
        .agg(
            pl.col("_run").first(),
            pl.col("ts").min(),
            pl.col("ts_noyear").min(),
            pl.col("level").first(),
            pl.len().alias("deltas"),
            ((pl.col("_t").max() - pl.col("_t").min()).dt.total_microseconds() / 1e6).alias("last_delta_s"),
            pl.col("_tokens").sum().alias("output_tokens"),
            pl.col("_tokens").is_not_null().any().alias("_listed"),
            pl.col("_finish").filter(pl.col("_finish") != "None").last().alias("finish_reason"),
        )
    )
    per_req = per_req.join(runs.select("_run", "line", "n_lines"), on="_run", how="left", maintain_order="left")
    fields = ["deltas", "last_delta_s", "finish_reason"]
    summaries = per_req.select(
        "line", "n_lines", "ts", "ts_noyear", "level",
        pl.lit("request_output").alias("event"),
        "request_id",
        pl.when(pl.col("_listed")).then(pl.col("output_tokens")).alias("output_tokens"),
        pl.lit(None, pl.String).alias("message"),
        attrs_column(per_req, fields),
    )
    return pl.concat([carriers, summaries], how="vertical_relaxed")


def _events(rec: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    fams, uv = _families(rec)
    # what the families read no more goes before the partition (which copies every column):
    # the time's parts, the source file and line apart (`srcline` is the attr), the raw
    # lines unless an unparsed record may keep them
    spent = ["md", "hms", "frac", "src", "lineno", *(["raw"] if not (fams == "other").any() else [])]
    rec = rec.with_columns(fams, *_times(rec)).drop(spent)
    if (rec["_fam"] == "delta").any():
        # runs of consecutive records of one family: a delta run folds into one span
        fam = pl.col("_fam")
        rec = rec.with_columns((fam != fam.shift(1)).fill_null(True).cum_sum().alias("_run"))
    parts = [
        _fold_deltas(part) if fam == "delta" else _family_frame(fam, part, uv if fam == "access" else None)
        for (fam,), part in rec.partition_by("_fam", as_dict=True, maintain_order=True).items()
    ]
    out = pl.concat(parts, how="diagonal_relaxed").sort("line")
    # one event per aborted id, all on the same line span
    if "_aborted" in out.columns and out["_aborted"].null_count() < out.height:
        out = out.with_columns(
            pl.when(pl.col("_aborted").list.len() > 0)
            .then(pl.col("_aborted"))
            .otherwise(pl.concat_list([pl.col("request_id")]))
            .alias("request_id")
        ).explode("request_id")
    if "model" not in out.columns:  # finalize carries the model of an earlier chunk into it
        out = out.with_columns(pl.lit(None, pl.String).alias("model"))
    keep = [c for c in _OUT_COLS if c in out.columns]
    return out.select(keep).with_row_index("_seq")


def _times(rec: pl.DataFrame) -> list[pl.Expr]:
    """`ts` from a header that prints its year (NIM's), `ts_noyear` from the vLLM header
    (a wrapper's time is given to the event by the decoding stage)."""
    ts = pl.lit(None, pl.Datetime("us", "UTC"))
    md = pl.col("md")
    if rec.select((md.str.len_bytes() == 10).any()).item():
        frac = pl.col("frac").fill_null("").str.replace(",", ".", literal=True)
        dated = pl.when(md.str.len_bytes() == 10).then(
            pl.concat_str([md, pl.lit(" "), pl.col("hms"), frac])
            .str.to_datetime("%Y-%m-%d %H:%M:%S%.f", time_unit="us", strict=False)
            .dt.replace_time_zone("UTC")
        )
        ts = pl.coalesce(ts, dated)
        md = pl.when(md.str.len_bytes() == 5).then(md)
    return [
        ts.alias("ts"),
        pl.concat_str([pl.lit("2000-"), md, pl.lit(" "), pl.col("hms")])
        .str.to_datetime("%Y-%m-%d %H:%M:%S", time_unit="us", strict=False)
        .alias("ts_noyear"),
    ]


_OUT_COLS = (
    "line", "n_lines", "ts", "ts_noyear", "level", "event", "request_id", "model",
    "prompt_tokens", "output_tokens", "max_tokens", "inference_s", "running", "waiting",
    "swapped", "batch_size", "batch_tokens", "kv_usage", "kv_blocks_total", "prompt_tps",
    "gen_tps", "max_num_seqs", "max_batch_tokens", "kv_capacity_tokens", "http_status",
    "message", "attrs", "sampling_params",
)
