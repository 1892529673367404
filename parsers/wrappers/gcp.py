"""Google Cloud Logging exports: `gcloud logging read --format=json` (a pretty-printed array
of LogEntry, newest first by default), the Logs Explorer's JSON download, and one LogEntry
per line (`--format=json` piped through `jq -c '.[]'`, a log sink's files).

    {"insertId": "...", "logName": "projects/p/logs/stdout",
     "resource": {"type": "k8s_container", "labels": {"pod_name": "vllm-0", "container_name": "vllm",
                  "namespace_name": "serving", "cluster_name": "c1", ...}},
     "severity": "INFO", "textPayload": "INFO 06-10 14:23:45 ...", "timestamp": "2026-06-10T14:23:45.123456789Z",
     "receiveTimestamp": "..."}

The engine line is `textPayload`, or `jsonPayload.message` when the agent parsed the line as
JSON. `timestamp` (nanoseconds) is the wrapper time; the resource labels that name the
instance become labels (`pod`, `container`, `namespace`, `node`, `cluster`), with `severity`."""

from __future__ import annotations

import numpy as np
import polars as pl

from ._export import Shape, indent_of, decode_objects, member_value, member_values, same_offsets, sniff_export, time_order
from ._frame import line_of, rfc3339_ns_of, set_time

NAME = "gcp-logging"
DOC = "Google Cloud Logging JSON (`gcloud logging read --format=json`, Logs Explorer download, one LogEntry per line): `textPayload` / `jsonPayload.message`, `timestamp` (ns); labels `pod`, `container`, `namespace`, `node`, `cluster`, `severity`, and `host` for a Compute Engine VM; newest-first put back in time order per pod"
JOINS = True
NEEDS = ('"textPayload"', '"jsonPayload"')

# the members only a LogEntry has, on a line of its own (pretty-printed) or in one object
_RES = {"pod_name": "pod", "container_name": "container", "namespace_name": "namespace", "node_name": "node", "cluster_name": "cluster"}
# a Compute Engine VM (resource `gce_instance`) names the host: by the name the Ops Agent puts
# in the entry's labels, else by the resource's numeric id
_VM_NAME, _VM_ID = "compute.googleapis.com/resource_name", "instance_id"
_DTYPE = pl.Struct({
    "textPayload": pl.String,
    "jsonPayload": pl.Struct({"message": pl.String}),
    "timestamp": pl.String,
    "severity": pl.String,
    "resource": pl.Struct({"labels": pl.Struct({k: pl.String for k in (*_RES, _VM_ID)})}),
    "labels": pl.Struct({_VM_NAME: pl.String}),
})
_KEYS = ["_lab_namespace", "_lab_pod", "_lab_container", "_lab_host"]


def sniff(texts: list[str]) -> float:
    return sniff_export(texts, "textPayload|jsonPayload", "logName|insertId|receiveTimestamp")


def decode(df: pl.DataFrame) -> pl.DataFrame:
    fast = _members(df)
    df = fast if fast is not None else decode_objects(df, _DTYPE)
    f = pl.col("_j").struct.field
    msg = pl.coalesce(f("textPayload"), f("jsonPayload").struct.field("message"))
    res = f("resource").struct.field("labels").struct.field
    df = df.with_columns(
        pl.when(msg.is_not_null()).then(line_of(msg)).otherwise(pl.col("text")).alias("text"),
        set_time(df, rfc3339_ns_of(df, f("timestamp"))),
        *[res(k).alias(f"_lab_{v}") for k, v in _RES.items()],
        pl.coalesce(f("labels").struct.field(_VM_NAME), res(_VM_ID)).alias("_lab_host"),
        f("severity").alias("_lab_severity"),
    ).drop("_j")
    return time_order(df, _KEYS)



# the members read straight from a pretty-printed entry's lines, by the path gcloud prints
_TOP = ("textPayload", "timestamp", "severity")


def _members(df: pl.DataFrame) -> pl.DataFrame | None:
    """`gcloud logging read --format=json` as printed (an array, one member a line): each
    entry's members read from their own lines, without joining and decoding whole entries.
    None (the general path then reads the block) for anything else: a block cut inside an
    entry, a `jsonPayload`, an entry without `textPayload`, another layer outside."""
    text = pl.col("text")
    indent = indent_of(df.head(4096)) if df.height else None
    if indent is None or df["_n"].max() != 1:
        return None
    pad = " " * indent
    mpad = pad + "  "
    opens = text == pad + "{"
    closes = (text == pad + "}") | (text == pad + "},")
    ends = df.select(opens.alias("o"), closes.alias("c"))
    o, c = ends["o"], ends["c"]
    n_open = int(o.sum())
    if n_open == 0 or n_open != int(c.sum()):
        return None
    line = df["line"]
    open_at, close_at = line.filter(o), line.filter(c)
    # every entry opens before it closes and before the next one opens
    if not ((close_at > open_at).all() and (open_at.slice(1) > close_at.slice(0, n_open - 1)).all()):
        return None
    lpad = mpad + "    "
    vm_pre = f'{mpad}  "{_VM_NAME}": '
    g = o.cum_sum().alias("_g")
    # outside the entries: only the array's brackets
    outside = df.filter((g == 0) | (line > close_at[-1]))
    if not outside["text"].str.strip_chars().is_in(["[", "]", ""]).all():
        return None
    keys = [*[(k, f'{mpad}"{k}": ') for k in _TOP], *[(k, f'{lpad}"{k}": ') for k in (*_RES, _VM_ID)], (_VM_NAME, vm_pre)]
    fields = {}
    shape = Shape.of(df, pad, o, c)
    probes = [mpad + '"', mpad + '" ', lpad + '"', vm_pre, f'{mpad}"jsonPayload": ', f'{mpad}"resource": ', f'{mpad}"labels": ',
              *[pre for _, pre in keys]]
    if shape is not None and shape.decides(probes):
        # every entry printed alike: the rows of each member found in the first two entries
        probe = df.slice(shape.o0, 2 * shape.n).select(
            "text", pl.Series("_g", np.repeat([1, 2], shape.n)), pl.Series("_k", np.tile(np.arange(shape.n), 2)))
        lines = _lines(probe, mpad, lpad, vm_pre, keys)
        if lines is None:
            return None
        at = {k: same_offsets(part) for k, part in lines.items()}
        if all(v is not None for v in at.values()):
            # (a member on one row of each entry, the usual case, is a column beside the
            # entries; one on none a column of nulls; one on several rows joined)
            one = {k: (df["text"].gather(shape.rows(at[k])), len(pre), pl.String) for k, pre in keys if len(at[k]) == 1}
            values = member_values(one) if one else pl.DataFrame()
            for k, pre in keys:
                if len(at[k]) == 1:
                    fields[k] = values[k]
                elif not at[k]:
                    fields[k] = pl.Series(k, [], dtype=pl.String)
                else:
                    fields[k] = pl.DataFrame([shape.entry_of(at[k]), member_value(df["text"].gather(shape.rows(at[k])), len(pre), pl.String).alias(k)])
            if len(at["textPayload"]) != 1:
                return None
            heads = pl.DataFrame({"_g": pl.int_range(1, n_open + 1, eager=True, dtype=pl.Int64), "line": open_at,
                                  "_n": (close_at - open_at + 1).cast(pl.Int32)})
            heads = heads.hstack([f if f.len() else pl.repeat(None, n_open, dtype=pl.String, eager=True).alias(k)
                                  for k, f in fields.items() if isinstance(f, pl.Series)])
            for f in fields.values():
                if isinstance(f, pl.DataFrame):
                    heads = _beside(heads, f)
    if not fields:
        # the entries' own members and the lines that may be labels, the rest left behind
        lines = _lines(df.select("text", g), mpad, lpad, vm_pre, keys)
        if lines is None:
            return None
        fields = {k: pl.DataFrame([lines[k]["_g"].cast(pl.Int64), member_value(lines[k]["text"], len(pre), pl.String).alias(k)]) for k, pre in keys}
        if fields["textPayload"].height != n_open:
            return None
        heads = pl.DataFrame({"_g": pl.int_range(1, n_open + 1, eager=True, dtype=pl.Int64), "line": open_at,
                              "_n": (close_at - open_at + 1).cast(pl.Int32)})
        for k, f in fields.items():
            heads = _beside(heads, f)
    if heads["textPayload"].null_count():
        # (an entry whose `textPayload` is null keeps its whole object as its text: the
        # general reading's)
        return None
    first = df.filter(o)
    res = pl.struct([pl.col(k) for k in (*_RES, _VM_ID)]).alias("labels")
    j = pl.struct(pl.col("textPayload"), pl.lit(None, pl.Struct({"message": pl.String})).alias("jsonPayload"),
                  pl.col("timestamp"), pl.col("severity"), pl.struct(res).alias("resource"),
                  pl.struct(pl.col(_VM_NAME)).alias("labels"))
    out = heads.select("line", j.alias("_j"), "_n").with_columns(
        pl.col("_j").struct.field("textPayload").alias("text"),
        first["_wts"], first["_stream"], pl.lit(False).alias("_open"), first["_pre"],
        *[first[c] for c in first.columns if c.startswith("_lab_")],
    )
    return out.select("line", "text", "_n", "_wts", "_stream", "_open", "_pre", *[c for c in first.columns if c.startswith("_lab_")], "_j")


def _lines(df: pl.DataFrame, mpad: str, lpad: str, vm_pre: str, keys: list[tuple[str, str]]) -> dict[str, pl.DataFrame] | None:
    """Per key, the lines of `df` (`text`, its entry `_g`) that hold that member: an entry's
    own members, the resource's labels, the VM name among the entry's labels (None where an
    entry has a `jsonPayload`: the general path reads it)."""
    text = pl.col("text")
    member = text.str.starts_with(mpad + '"') & ~text.str.starts_with(mpad + '" ')

    def within(name: str) -> pl.Expr:
        return pl.when(pl.col("_m")).then(text.str.starts_with(f'{mpad}"{name}": ')).forward_fill().fill_null(False)

    # (the member enclosing a label line is the last member line before it: both are kept)
    side = df.with_columns(member.alias("_m")).filter(
        pl.col("_m") | text.str.starts_with(lpad + '"') | text.str.starts_with(vm_pre))
    if side.select((pl.col("_m") & text.str.starts_with(mpad + '"jsonPayload": ')).any()).item():
        return None
    side = side.with_columns(within("resource").alias("_res"), within("labels").alias("_lab"))
    # (each key looked for among the lines of its kind only)
    members = side.filter(pl.col("_m"))
    in_res = side.filter(pl.col("_res") & text.str.starts_with(lpad + '"'))
    in_lab = side.filter(pl.col("_lab") & text.str.starts_with(vm_pre))
    of = {**{k: members for k in _TOP}, **{k: in_res for k in (*_RES, _VM_ID)}, _VM_NAME: in_lab}
    return {k: of[k].filter(text.str.starts_with(pre)) for k, pre in keys}


def _beside(heads: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
    """`heads` (entries `_g` 1..n in order) left-joined with `part` on `_g`: its column put
    beside them when it names each entry once, in order (the usual case), without a join."""
    g = part["_g"].to_numpy()
    if part.height == heads.height and (part.height == 0 or (g[0] == 1 and bool((np.diff(g) == 1).all()))):
        return heads.hstack(part.drop("_g"))
    return heads.join(part, on="_g", how="left", maintain_order="left")
