"""What the log-platform export decoders share: JSON objects spread over several lines, and
entries handed back newest first.

Platforms print an export as a pretty-printed JSON array (`gcloud logging read
--format=json`, `aws logs filter-log-events`) or one object per line. A pretty-printed
object ends on a line holding only its closing brace at the array's indentation; its lines
join into one logical line (the engine line is inside it), so the usual fragment joining
(_frame.join_fragments) applies. Brackets and commas between objects are dropped.

Platforms return the newest entries first unless asked otherwise; the engine parser joins a
record's lines (a traceback) in the order the server wrote them, so the entries of a block
are put back in time order per stream (the platform's instance labels) before it runs."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl

from ._frame import cut_suffix, join_fragments

# an element of a pretty-printed array opens with a bare `{` line and closes with a `}` /
# `},` line at the same indentation (gcloud indents elements by 2, the AWS CLI by 8 inside
# its `{"events": [` envelope); nested objects open after a key (`"resource": {`)
_OPEN = r"^( *)\{\s*$"
# array / envelope punctuation around the objects
_PUNCT = r"^[\[\]{},\s]*$"


def join_objects(df: pl.DataFrame) -> pl.DataFrame:
    """The physical lines of a JSON export -> one logical line per object (its text the
    object, without the separating comma). Lines outside the elements (brackets, the
    envelope's own members such as a paging token) are left out."""
    text = pl.col("text")
    if _one_per_line(df):
        return df
    indent = indent_of(df.head(_HEAD))
    if indent is None and df.height > _HEAD:
        indent = indent_of(df)
    if indent is None:  # one object per line
        inside = pl.lit(False)
        closes = pl.lit(True)
    else:
        pad = " " * int(indent)
        opens_re, closes_re = text.str.contains(f"^{pad}\\{{\\s*$"), text.str.contains(f"^{pad}\\}},?\\s*$")
        opens_eq, closes_eq = text == pad + "{", (text == pad + "}") | (text == pad + "},")
        # the braces are alone on their lines as printers write them: compared whole, not
        # matched (a block's head says whether that holds)
        plain = df.head(_HEAD).select(((opens_eq == opens_re) & (closes_eq == closes_re)).all()).item()
        opens, closes = (opens_eq, closes_eq) if plain else (opens_re, closes_re)
        # inside an element: its opening line was the last brace line at that indentation
        # (a block that starts inside one, as a reader's window may, has its tail outside)
        last = pl.when(opens).then(pl.lit(True)).when(closes).then(pl.lit(False)).forward_fill()
        inside = last.fill_null(False) | closes
    df = _join_runs(df, ~inside | closes)
    t = pl.col("text").str.strip_chars().str.strip_suffix(",")
    text = pl.col("text")
    envelope = text.str.contains(_PUNCT) | text.str.contains(r'^\s*"[^"]*"\s*:\s*(?:[\[{]|\[\]|"[^"]*"|[0-9.]+|true|false|null),?\s*$')
    # the envelope is the platform's, not the server's: its lines give no line to the parser
    # (an unfinished last line stays, so the reader still holds it back)
    keep = ~envelope | pl.col("_open")
    return df.filter(keep).with_columns(pl.when(t.str.starts_with("{")).then(t).otherwise(pl.col("text")).alias("text"))


_HEAD = 4096


def _one_per_line(df: pl.DataFrame) -> bool:
    """Is every line one whole object, as a one-object-a-line export writes it? Such a
    line opens no element, closes its own, and is no envelope line: joining leaves the
    block as it is (asked first, so no pattern runs over the lines)."""
    text = pl.col("text")
    return df.height > 0 and df.select((text.str.starts_with('{"') & text.str.ends_with("}")).all()).item()
_SEP = "\x1e"  # never raw in JSON text (a control character is escaped inside strings)


def indent_of(df: pl.DataFrame) -> int | None:
    return df.select(pl.col("text").str.extract(_OPEN, 1).str.len_bytes().drop_nulls().mode().max()).item()


def _join_runs(df: pl.DataFrame, ends: pl.Expr) -> pl.DataFrame:
    """`join_fragments` for the lines of a JSON export, without grouping: the block's lines
    are put end to end once, with a separator after each object's last line, and cut there.
    Each line loses its indentation (JSON whitespace: a string never spans lines)."""
    if df.height == 0 or df["_stream"].null_count() != df.height:
        return join_fragments(df, ends)
    df = df.with_columns(ends.fill_null(True).alias("_end"))
    if bool(df["_end"].all()):
        return df.drop("_end")
    end = pl.col("_end")
    last_row = pl.int_range(pl.len()) == pl.len() - 1
    first = end.shift(1).fill_null(True)
    labels = [c for c in df.columns if c.startswith("_lab_")]
    heads = df.filter(first).select("line", "_wts", "_stream", "_pre", *labels)
    sizes = df.select(pl.col("_n").cum_sum().filter(end | last_row).diff().fill_null(pl.col("_n").cum_sum().filter(end | last_row).first()))
    marked = pl.when(end).then(pl.col("text") + _SEP).otherwise(pl.col("text")).str.strip_chars_start(" ")
    pieces = df.select(marked.str.join("").str.split(_SEP).explode())[:, 0]
    if bool(df["_end"][-1]):
        pieces = pieces.head(len(pieces) - 1)
    if len(pieces) != heads.height:  # a separator inside some line after all
        return join_fragments(df.drop("_end"), end)
    open_last = not bool(df["_end"][-1])
    out = heads.with_columns(pieces.alias("text"), sizes.to_series().cast(pl.Int32).alias("_n"),
                             (pl.lit(open_last) & last_row).alias("_open"))
    return out.select("line", "text", "_n", "_wts", "_stream", "_open", "_pre", *labels)


def sniff_export(texts: list[str], entry: str, marks: str) -> float:
    """Share of the sample in an export whose entries carry the member `entry` (the line)
    and some member of `marks` (what only that platform writes). An indented export has
    one member a line: any entry with a mark makes the sample one; otherwise (one object a
    line) the share of lines that are such entries."""
    s = pl.Series(texts, dtype=pl.String)
    s = s.filter(s.str.strip_chars().str.len_bytes() > 0)
    if len(s) == 0:
        return 0.0
    has_entry = s.str.contains(f'"(?:{entry})"\\s*:')
    has_mark = s.str.contains(f'"(?:{marks})"\\s*:')
    if not has_entry.any() or not has_mark.any():
        return 0.0
    one_line = s.str.contains(r"^\s*\{.*\}\s*,?$")
    if one_line.mean() > 0.5:
        return float((one_line & has_entry & has_mark).mean())
    return 1.0 if pretty_printed(s) else 0.0


# a line of a pretty-printed JSON document: a member, a string in an array, a bracket, a brace
_JSON_SHAPED = r'^\s*[\[\]{}"]'


def pretty_printed(s: pl.Series) -> bool:
    """Whether the non-blank sample lines `s` read as a pretty-printed JSON document (most of
    them JSON-shaped), not as a log one of whose lines holds some JSON: a prompt quoting a
    log record must not make the whole file an export."""
    return len(s) > 0 and float(s.str.contains(_JSON_SHAPED).mean()) >= 0.5


def decode_objects(df: pl.DataFrame, dtype: pl.Struct, envelope: tuple[str, ...] = ()) -> pl.DataFrame:
    """`join_objects`, then each object decoded into the struct column `_j` (null where a
    line is not a whole object: an export cut short leaves its text to the engine parser,
    which keeps it as `unparsed`). `envelope`: the members down to the entries where the
    export wraps them in an object (`{"events": [...]}`, `{"hits": {"hits": [...]}}`), which
    a compact download puts on one line."""
    df = join_objects(df)
    df = _split_whole(df, dtype)
    if envelope:
        df = _split_whole(df, dtype, envelope)
    obj = pl.col("text").str.starts_with("{")
    # (every line an object, as one object a line is: decoded as they are, not picked first)
    text = pl.col("text") if df.height and df.select(obj.all()).item() else pl.when(obj).then(pl.col("text"))
    try:
        return df.with_columns(text.str.json_decode(dtype).alias("_j"))
    except pl.exceptions.PolarsError:
        # some object is broken: only then one object at a time, the broken one labelled
        # with why it is left to the engine parser
        df = df.with_columns(pl.col("text").map_elements(decoder(dtype), return_dtype=dtype).alias("_j"))
        broken = obj & pl.col("_j").is_null()
        return df.with_columns(pl.when(broken).then(pl.lit("not a whole JSON object (the export cut short?)")).alias("_lab_decode_error"))


# a whole array of objects on one line (a download saved compact, `jq -c .`)
_ARRAY = r"^\[\s*\{.*\}\s*\]$"


def explode_whole(df: pl.DataFrame, pattern: str, item: pl.DataType, path: tuple[str, ...] = (),
                  needle: str | None = None) -> pl.DataFrame | None:
    """The lines matching `pattern` (a whole JSON value on one line) decoded, followed down
    the members `path` to a list of `item`, and exploded: one row per item, in `_item` (null
    on the other lines, which stay as they are). A value with no item gives no row (the
    platform's envelope, not the server's). None where no line matches or the value cannot
    be decoded: the lines then stay whole, and the engine parser keeps them as they are.
    `needle`: a literal text every line matching `pattern` holds (a search for it is cheaper
    than the pattern over every line, and an export of one entry a line holds it nowhere)."""
    whole = pl.col("text").str.contains(pattern)
    if df.height == 0:
        return None
    if needle is not None and not df.select(pl.col("text").str.contains(needle, literal=True).any()).item():
        return None
    if not df.select(whole.any()).item():
        return None
    shape: pl.DataType = pl.List(item)
    for member in reversed(path):
        shape = pl.Struct({member: shape})
    try:
        items = pl.when(whole).then(pl.col("text")).str.json_decode(shape)
        for member in path:
            items = items.struct.field(member)
        df = df.with_columns(items.alias("_item"), whole.alias("_whole"))
    except pl.exceptions.PolarsError:
        return None
    empty = (pl.col("_item").list.len() == 0).fill_null(False)
    return df.filter(~(pl.col("_whole") & empty)).explode("_item").drop("_whole")


def _split_whole(df: pl.DataFrame, dtype: pl.Struct, envelope: tuple[str, ...] = ()) -> pl.DataFrame:
    """A line holding a whole array of objects, or (`envelope`: the members down to it) an
    envelope object around one -> one line per object (each keeps the line's number), each
    object's text its JSON."""
    pattern = f'^\\{{.*"{envelope[-1]}"\\s*:\\s*\\[.*\\}}\\s*$' if envelope else _ARRAY
    out = explode_whole(df, pattern, dtype, envelope, f'"{envelope[-1]}"' if envelope else None)
    if out is None:
        return df
    one = pl.col("_item").is_not_null()
    return out.with_columns(pl.when(one).then(pl.col("_item").struct.json_encode()).otherwise(pl.col("text")).alias("text")).drop("_item")


def decode_one(text: str | None):
    if not text or not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # (nesting deeper than Python's stack)
        return None


def decoder(dtype: pl.DataType):
    """One object's text -> its value in the shape of `dtype` (None where it is no whole
    object), for the lines a whole column's decode refused: a member of another type than
    the platform's usual one (a shipper's `log` object where another's is a string) is left
    out rather than failing the file."""
    def decode(text: str | None):
        return fit(decode_one(text), dtype)
    return decode


def fit(value, dtype: pl.DataType):
    """`value` (decoded JSON) as `dtype` holds it: a member of another type becomes null."""
    if value is None:
        return None
    if isinstance(dtype, pl.Struct):
        if not isinstance(value, dict):
            return None
        return {f.name: fit(value.get(f.name), f.dtype) for f in dtype.fields}
    if isinstance(dtype, pl.List):
        return [fit(v, dtype.inner) for v in value] if isinstance(value, list) else None
    if dtype == pl.String:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return value if isinstance(value, str) else None
    if dtype.is_integer():
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if dtype.is_float():
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if dtype == pl.Boolean:
        return value if isinstance(value, bool) else None
    return None


def message_lines(df: pl.DataFrame) -> pl.DataFrame:
    """Each line of an entry's message (a traceback a log agent kept as one entry) a line to
    the engine parser, all at the entry's place; only the very last may be unfinished."""
    last = pl.int_range(pl.len()) == pl.len() - 1
    # (an export whose messages keep no newline, the usual one, is not split)
    if not df.select(pl.col("text").str.contains("\n", literal=True).any()).item():
        return df.with_columns((pl.col("_open") & last).alias("_open"))
    return df.with_columns(pl.col("text").str.split("\n")).explode("text").with_columns((pl.col("_open") & last).alias("_open"))


def time_order(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Entries in time order within each stream (`keys`: label columns naming it), streams
    kept apart; a block already in order (the usual case for a file) is returned as it is.
    An unfinished last line stays last: the reader holds it back."""
    if df.height < 2:
        return df
    keys = [k for k in keys if k in df.columns]
    ts = pl.col("_wts")
    if _one_stream(df, keys):
        return one_stream_order(df)
    named = pl.concat_str([pl.col(k).fill_null("") for k in keys], separator="\x1f") if keys else pl.lit("")
    # lines without a time (punctuation, an undecodable part) go with the entry before them;
    # where an inner layer brings the times (`kubectl logs --prefix --timestamps`), a line
    # naming its stream opens an entry
    opens = ts.is_not_null()
    if keys and df["_wts"].null_count() == df.height:
        opens = pl.any_horizontal([pl.col(k).is_not_null() for k in keys])
    df = df.with_columns(pl.when(opens).then(named).forward_fill().backward_fill().fill_null("").alias("_key_grp"))
    grp = pl.col("_key_grp")
    back, runs, streams = df.select(
        (ts.diff().over(grp) < pl.duration(nanoseconds=0)).fill_null(False).any().alias("back"),
        (grp != grp.shift(1)).fill_null(True).sum().alias("runs"),
        grp.n_unique().alias("streams"),
    ).row(0)
    # a stream's entries come back after another's: they are brought together
    if not back and runs <= streams:
        return df.drop("_key_grp")
    last_open = bool(df["_open"][-1])
    body, tail = (df[:-1], df[-1:]) if last_open else (df, df[:0])
    # entries of one time keep the order the server wrote them in: a newest-first export
    # is read backwards before the (stable) sort
    steps = body.select(ts.diff().over(grp).dt.total_nanoseconds().sign().sum()).item()
    if steps is not None and steps < 0:
        body = body.reverse()
    body = body.with_columns(ts.forward_fill().backward_fill().alias("_key_ts"))
    if streams == 1:
        # one stream (the usual export of one server), most often in order once reversed
        if not body["_key_ts"].is_sorted():
            body = body.sort("_key_ts", maintain_order=True)
        body = body.drop("_key_ts")
        return pl.concat([body, tail.select(body.columns)]).drop("_key_grp")
    # streams in the order they first appear; within one, time order (stable for equal times)
    order = body.with_row_index("_pos").group_by("_key_grp", maintain_order=True).agg(pl.col("_pos").min().alias("_first"))
    body = body.join(order, on="_key_grp", how="left").sort(["_first", "_key_ts"], maintain_order=True)
    body = body.drop("_key_ts", "_first")
    return pl.concat([body, tail.select(body.columns)]).drop("_key_grp")


def _one_stream(df: pl.DataFrame, keys: list[str]) -> bool:
    """Does every line name the same stream (an export of one server, the usual one; a
    label no line has, or an empty one, names it as `time_order`'s key does)? Then there
    is nothing to group by."""
    if not keys:
        return True
    named = [pl.col(k).fill_null("") for k in keys]
    return bool(df.select(pl.all_horizontal([(c == c.first()).all() for c in named])).item())


def one_stream_order(df: pl.DataFrame) -> pl.DataFrame:
    """`time_order` of a block of one stream: what its grouping gives with one group."""
    ts = pl.col("_wts")
    if not df.select((ts.diff() < pl.duration(nanoseconds=0)).fill_null(False).any()).item():
        return df
    last_open = bool(df["_open"][-1])
    body, tail = (df[:-1], df[-1:]) if last_open else (df, df[:0])
    steps = body.select(ts.diff().dt.total_nanoseconds().sign().sum()).item()
    if steps is not None and steps < 0:
        body = body.reverse()
    key = body.select(ts.forward_fill().backward_fill())[:, 0]
    if not key.is_sorted():
        body = body.with_columns(key.alias("_key_ts")).sort("_key_ts", maintain_order=True).drop("_key_ts")
    return pl.concat([body, tail.select(body.columns)])


# an envelope line: punctuation, or a member whose value is on its own line (join_objects
# leaves these out)
_ENVELOPE = r'^\s*"[^"]*"\s*:\s*(?:[\[{]|\[\]|"[^"]*"|[0-9.]+|true|false|null),?\s*$'


class Entries:
    """A pretty-printed JSON export's entries, each member read from its own line (a
    printer puts one member a line, and a JSON string never spans lines), without joining
    and decoding whole entries. `of(df)` is None where that reading does not hold: a block
    cut inside an entry, lines another layer joined, envelope lines no envelope has.

    Where every entry is printed alike (`Shape`), the lines a reading picks are found in
    the first two entries and taken from the same rows of every entry."""

    def __init__(self, df: pl.DataFrame, inside: pl.Series, g: pl.Series, heads: pl.DataFrame, pad: str, step: int,
                 shape: Shape | None):
        self.df, self.inside, self.g, self.heads, self.pad, self.step, self.shape = df, inside, g, heads, pad, step, shape
        self._side: pl.DataFrame | None = None
        self._probe: pl.DataFrame | None = None

    @classmethod
    def of(cls, df: pl.DataFrame) -> "Entries | None":
        if df.height == 0 or df["_n"].max() != 1:
            return None
        indent = indent_of(df.head(_HEAD))
        if indent is None:
            return None
        text = pl.col("text")
        pad = " " * indent
        marks = df.select((text == pad + "{").alias("o"), ((text == pad + "}") | (text == pad + "},")).alias("c"))
        line = df["line"]
        open_at, close_at = line.filter(marks["o"]).to_numpy(), line.filter(marks["c"]).to_numpy()
        n = len(open_at)
        if n == 0 or len(close_at) == 0:
            return None
        # each entry closes at the first such brace after it opens, before the next opens
        # (the envelope's own objects may close at that indentation too, outside the entries)
        k = np.searchsorted(close_at, open_at, side="right")
        if k[-1] >= len(close_at):
            return None
        close_at = close_at[k]
        if n > 1 and not (close_at[:-1] < open_at[1:]).all():
            return None
        shape = Shape.of(df, pad, marks["o"], marks["c"], partial=True)
        if shape is not None and shape.count == n:
            # (every row from the first entry's to the last's is inside one)
            g = None
            rows = np.arange(df.height)
            inside = pl.Series((rows >= shape.o0) & (rows < shape.o0 + shape.count * shape.n))
        else:
            g = marks["o"].cum_sum().cast(pl.Int64)
            closes = pl.Series(np.concatenate([[0], close_at])).gather(g)
            inside = (g > 0) & (line <= closes)
        outside = df.filter(~inside)
        if outside.height and not outside.select((text.str.contains(_PUNCT) | text.str.contains(_ENVELOPE)).all()).item():
            return None
        first = int(np.searchsorted(line.to_numpy(), open_at[0]))
        if first + 1 >= df.height:
            return None
        step = len(df["text"][first + 1]) - len(df["text"][first + 1].lstrip(" ")) - indent
        if step <= 0:
            return None
        rows = df.filter(marks["o"])
        heads = rows.select("line", pl.Series("_n", close_at - open_at + 1).cast(pl.Int32), "_wts", "_stream", "_pre",
                            *[c for c in df.columns if c.startswith("_lab_")]).with_columns(
            pl.int_range(1, n + 1, dtype=pl.Int64).alias("_g"))
        return cls(df, inside, g, heads, pad, step, shape)

    @property
    def side(self) -> pl.DataFrame:
        """The lines inside the entries, each with its entry `_g` (1..N)."""
        if self._side is None:
            g = self.g if self.g is not None else self.df.select(pl.col("text") == self.pad + "{")[:, 0].cum_sum().cast(pl.Int64)
            self._side = self.df.select("text", g.alias("_g")).filter(self.inside)
        return self._side

    @property
    def probe(self) -> pl.DataFrame:
        """`side` of the first two entries (a `Shape`'s), with each line's offset `_k`."""
        if self._probe is None:
            sh = self.shape
            self._probe = self.df.slice(sh.o0, 2 * sh.n).select(
                "text", pl.Series("_g", np.repeat([1, 2], sh.n).astype(np.int64)), pl.Series("_k", np.tile(np.arange(sh.n), 2)))
        return self._probe

    def _at(self, depth: int) -> str:
        return self.pad + " " * (self.step * depth)

    def _probes(self, parents: tuple[str, ...]) -> list[str]:
        """The beginnings `_under(parents, ...)` tests lines for."""
        out = []
        for depth, key in enumerate(parents, start=1):
            at = self._at(depth) + '"'
            out += [at, f'{at}{key}": ']
        return out

    def _lines(self, parents: tuple[str, ...], hit: pl.Expr, probes: list[str], pick: pl.Expr, value) -> pl.DataFrame:
        """`_g` and `value(text)` of the lines `hit` & `pick` under `parents`: from the rows
        a `Shape` puts them on when it decides every test, else from all lines."""
        sh = self.shape
        if sh is not None and sh.decides(self._probes(parents) + probes):
            at = same_offsets(self._under(parents, hit, self.probe).filter(pick))
            if at is not None:
                text = self.df["text"].gather(sh.rows(at))
                return self._and_rest(pl.DataFrame([sh.entry_of(at), value(text)]), parents, hit, pick, value)
        lines = self._under(parents, hit, self.side).filter(pick)
        return pl.DataFrame([lines["_g"], value(lines["text"])])

    def _and_rest(self, part: pl.DataFrame, parents: tuple[str, ...], hit: pl.Expr, pick: pl.Expr, value) -> pl.DataFrame:
        """`part` (the `Shape`'s entries) and the same reading of the entries after them,
        where the shape holds only the first ones. Those are read line by line after the
        first entry's lines: a line's enclosing members are then found as after the last
        entry of the shape (every entry of it ends as the first one does)."""
        sh = self.shape
        if self.g is None:
            return part
        g = self.g
        rest = self.df.select("text", g.alias("_g")).filter(self.inside & ((g == 1) | (g > sh.count)))
        lines = self._under(parents, hit, rest).filter(pick).filter(pl.col("_g") > 1)
        if lines.height == 0:
            return part
        return pl.concat([part, pl.DataFrame([lines["_g"], value(lines["text"])])])

    def members(self, parents: tuple[str, ...], keys: dict[str, pl.DataType]) -> list[pl.DataFrame]:
        """Per key of `keys` (scalar members of the object at `parents`, keys from the
        entry down): `_g` and its value, a column named after the key."""
        text = pl.col("text")
        at = self._at(len(parents) + 1)
        sh = self.shape
        pres = {k: f'{at}"{k}": ' for k in keys}
        if sh is not None and sh.decides(self._probes(parents) + [at + '"', *pres.values()]):
            # every key's rows found from one reading of the probe, the values of the keys on
            # one row of each entry decoded together
            under = self._under(parents, text.str.starts_with(at + '"'), self.probe)
            rows = list(zip(under["_g"].to_list(), under["_k"].to_list(), under["text"].to_list()))
            offsets = {}
            for k, pre in pres.items():
                one = [o for g, o, t in rows if g == 1 and t.startswith(pre)]
                two = [o for g, o, t in rows if g == 2 and t.startswith(pre)]
                offsets[k] = one if one == two else None
            if all(v is not None for v in offsets.values()):
                single = {k: (self.df["text"].gather(sh.rows(offsets[k])), len(pres[k]), dt) for k, dt in keys.items() if len(offsets[k]) == 1}
                values = member_values(single) if single else None
                g = sh.entry_of([0])
                hit = text.str.starts_with(at + '"')
                return [self._and_rest(
                    pl.DataFrame([g, values[k]]) if len(offsets[k]) == 1 else
                    pl.DataFrame([sh.entry_of(offsets[k]), member_value(self.df["text"].gather(sh.rows(offsets[k])), len(pres[k]), dt).alias(k)]),
                    parents, hit, text.str.starts_with(pres[k]), lambda t, pre=pres[k], k=k, dt=dt: member_value(t, len(pre), dt).alias(k))
                    for k, dt in keys.items()]
        out = []
        for k, dtype in keys.items():
            pre = f'{at}"{k}": '
            out.append(self._lines(parents, text.str.starts_with(at + '"'), [at + '"', pre], text.str.starts_with(pre),
                                   lambda t, pre=pre, k=k, dtype=dtype: member_value(t, len(pre), dtype).alias(k)))
        return out

    def items(self, path: tuple[str, ...]) -> pl.DataFrame:
        """`_g` and each string item of the array at `path`, in order."""
        text = pl.col("text")
        pre = self._at(len(path) + 1) + '"'
        return self._lines(path, text.str.starts_with(pre), [pre], pl.lit(True),
                           lambda t: member_value(t, len(pre) - 1, pl.String).alias("_item"))

    def _under(self, parents: tuple[str, ...], hit: pl.Expr, side: pl.DataFrame) -> pl.DataFrame:
        """The lines `hit` of `side` whose enclosing members are `parents` (each the last
        member opened at its depth before the line)."""
        text = pl.col("text")
        conds = []
        for depth, key in enumerate(parents, start=1):
            at = self._at(depth) + '"'
            conds.append(pl.when(text.str.starts_with(at)).then(text.str.starts_with(f'{at}{key}": ')).forward_fill().fill_null(False))
        if not conds:
            return side.filter(hit)
        return side.filter(hit & pl.all_horizontal(conds))

    def joined(self, *parts: pl.DataFrame) -> pl.DataFrame | None:
        """The heads with each part's column (None when a part names some entry twice)."""
        out = self.heads
        for p in parts:
            g = p["_g"]
            # (a part is in entry order: a repeated entry is a step that does not rise)
            if p.height > 1 and not bool((g.diff().drop_nulls() > 0).all()):
                return None
            if p.height == out.height:
                # every entry once, in order: the part's rows are the heads' rows
                out = out.hstack(p.drop("_g"))
            else:
                out = out.join(p, on="_g", how="left", maintain_order="left")
        return out


def member_value(text: pl.Series, skip: int, dtype: pl.DataType) -> pl.Series:
    """The JSON value after the first `skip` characters of member lines, without the comma
    that ends all but the last."""
    t = pl.col("text")
    return json_values(text.to_frame("text").select(cut_suffix(t, ",").str.slice(skip))[:, 0], dtype)


def member_values(lines: dict[str, tuple[pl.Series, int, pl.DataType]]) -> pl.DataFrame:
    """Per key, `_value` of its lines (`lines`: key -> the member's lines, the characters
    before its value, its type), all keys in a few passes: one a step, not one a key and
    step (a block's few members cost their calls more than their bytes)."""
    f = pl.DataFrame([t.alias(k) for k, (t, _, _) in lines.items()])
    value = {k: cut_suffix(pl.col(k), ",").str.slice(skip).str.json_decode(dt).alias(k) for k, (_, skip, dt) in lines.items()}
    # (`json_values`: a key whose lines are all the same text has one value, decoded once)
    if f.height > 1:
        same = f.select([((pl.col(k).null_count() == 0) & (pl.col(k) == pl.col(k).first()).all()).alias(k) for k in f.columns]).row(0)
    else:
        same = (False,) * f.width
    once = [k for k, s in zip(f.columns, same) if s]
    each = [k for k, s in zip(f.columns, same) if not s]
    out = f.select([value[k] for k in each]) if each else pl.DataFrame()
    if once:
        first = f.head(1).select([value[k] for k in once])
        out = out.hstack([first[k].new_from_index(0, f.height) for k in once])
    return out.select(f.columns)


def json_values(v: pl.Series, dtype: pl.DataType) -> pl.Series:
    """`v.str.json_decode(dtype)`, decoded once where every value is the same text (a label
    of the one server an export holds)."""
    if len(v) > 1 and v.null_count() == 0 and bool((v == v[0]).all()):
        return v.head(1).str.json_decode(dtype).new_from_index(0, len(v))
    return v.str.json_decode(dtype)


# the lines of an entry by kind: a member (its indentation and key), an array's string item
# (its indentation and quote), punctuation
_KEY_LINE = re.compile(r' *"(?:[^"\\]|\\.)*": ')
_ITEM_LINE = re.compile(r'( *)"(?:[^"\\]|\\.)*",?')
_BRACES = frozenset(("{", "}", "},", "[", "]", "],", "{}", "{},", "[]", "[],"))


class Shape:
    """A block whose entries are all printed alike, as an export of one kind of entry is: N
    entries of n lines each from row `o0` on, each line beginning as the same line of the
    first entry does (a member's indentation and key, an array item's indentation and quote,
    punctuation whole). A test that reads a line's beginning then answers alike for the same
    line of every entry, so where to find a member is found in the first entries and the
    member read from the same row of each (no pass over all lines per member)."""

    def __init__(self, o0: int, n: int, count: int, heads: list[str]):
        self.o0, self.n, self.count, self.heads = o0, n, count, heads

    @classmethod
    def of(cls, df: pl.DataFrame, pad: str, opens: pl.Series, closes: pl.Series, partial: bool = False) -> "Shape | None":
        """`opens` / `closes`: the rows opening (`pad{`) and closing (`pad}` / `pad},`) an entry.
        `partial`: the entries printed alike may be followed by others (the envelope's own
        objects after the events): the shape is then that of the first ones, two at least."""
        o = np.flatnonzero(opens.to_numpy())
        if len(o) < 2:
            return None
        o0, count = int(o[0]), len(o)
        n = int(o[1] - o0)
        if n < 3:
            return None
        c = closes.to_numpy()
        alike = (o == o0 + n * np.arange(count)) & (o + n - 1 < df.height)
        alike[alike] &= c[(o + n - 1)[alike]]
        if not alike.all():
            if not partial:
                return None
            count = int(np.argmin(alike))
            if count < 2:
                return None
        first = df["text"].slice(o0, n).to_list()
        heads, most = [pad + "{"], [len(pad) + 1]
        for t in first[1:-1]:
            if not t.startswith(pad + " "):
                return None
            m = _KEY_LINE.match(t)
            if m is not None:
                heads.append(m.group(0))
                most.append(-1)
                continue
            m = _ITEM_LINE.fullmatch(t)
            if m is not None:
                heads.append(m.group(1) + '"')
                most.append(-1)
            elif t.strip(" ") in _BRACES:
                heads.append(t)
                most.append(len(t))
            else:
                return None
        # (the last entry's close has no comma: the close rows are `closes` as tested above)
        heads.append(pad + "}")
        most.append(len(pad) + 2)
        text = df["text"].slice(o0, count * n)
        # (the lengths of punctuation lines checked by entry and line, the beginnings by row)
        most = np.array(most, dtype=np.int64)
        lens = text.str.len_bytes().to_numpy().reshape(count, n)
        if not ((most < 0) | (lens <= most)).all():
            return None
        head = pl.Series(heads, dtype=pl.String).gather(np.tile(np.arange(n, dtype=np.uint32), count))
        ok = pl.select(text.str.starts_with(head).all()).item()
        return cls(o0, n, count, heads) if ok else None

    def decides(self, probes) -> bool:
        """Whether `probes` (the texts lines are tested to begin with) are answered by each
        line's beginning alone: none of them goes on past a beginning the entries share."""
        return not any(len(h) < len(p) and p.startswith(h) for h in self.heads for p in probes)

    def rows(self, at: list[int]) -> np.ndarray:
        """The rows of the lines `at` (offsets in an entry) of every entry, entry by entry."""
        k = np.asarray(at, dtype=np.int64)
        return (self.o0 + self.n * np.arange(self.count, dtype=np.int64)[:, None] + k[None, :]).ravel()

    def entry_of(self, at: list[int]) -> pl.Series:
        """The entry (1..N) of each of `rows(at)`."""
        return pl.Series("_g", np.repeat(np.arange(1, self.count + 1, dtype=np.int64), len(at)))


def same_offsets(probe: pl.DataFrame) -> list[int] | None:
    """The offsets (`_k`) of a probe's lines in its first entry when its second entry has its
    lines at the same offsets (`_g` 1 and 2), else None."""
    g, k = probe["_g"].to_list(), probe["_k"].to_list()
    one = [b for a, b in zip(g, k) if a == 1]
    two = [b for a, b in zip(g, k) if a == 2]
    return one if one == two else None
