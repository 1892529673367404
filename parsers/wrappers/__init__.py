"""The decoding stage: wrappers around engine lines, undone before any engine parser runs.

On disk in production an engine's lines arrive inside other formats: a container runtime's
records (CRI, docker json-file), a log system's (journald, syslog), a JSON formatter, a
`docker logs --timestamps` time, a compose service prefix, colour codes, an unknown prefix.
Each format is one small module here with the same seam:

    NAME: str; DOC: str                      # the name stored in the manifest; one line for docs
    JOINS: bool                              # whether it joins fragments into one line
    def sniff(texts: list[str]) -> float     # share of the sample lines in this format
    def decode(frame) -> frame               # logical lines in, logical lines out (_frame.py)
    NEEDS: tuple[str, ...]                   # optional: strings one of which the sample holds
                                             # wherever sniff can reach the threshold

`NEEDS` lets detection skip a format's sniff (a few polars passes over the sample) on a
sample that holds none of them: a plain engine log is asked about every format.

A format whose lines cannot be read without something from the file's head (a CSV export's
header row names its columns) also has `layer(texts) -> str`: the layer name it is stored
under, `NAME:ARG`, and its decode takes ARG: `decode(frame, arg)`, so a block read far from
the head (and the tailer, and a later ingest) decodes it the same way.

`detect(sample)` finds a file's layers outside in by sampling its first lines (they nest:
CRI around a compose prefix around colour codes). `wrap(parser, layers)` gives an object
with the engine parser's contract (parsers/base.py) that decodes each chunk first, so the
reading loop (pipeline/sources/lines.py) and the engine parsers stay as they are: the engine parser
sees plain engine lines; its events come back with the wrapper's columns (`wrapper_ts`,
`stream`, `labels`), the wrapper's time where it is finer than the engine's (the engine's own
kept in attrs `engine_ts`), and line spans mapped back onto physical lines.
"""

from __future__ import annotations

import json
from types import ModuleType

import numpy as np
import polars as pl

from . import ansi, csvexport, cloudwatch, cloudwatch_tail, cloudwatch_text, datadog, elastic, grafana, compose, cri, docker_json, docker_ts, gcp, gcp_yaml, journald, jsonfmt, kubectl, loki, loki_api, otlp, prefix, splunk, syslog
from ._frame import cut_suffix, start

# tried in this order at each depth; the first whose share of the sample reaches
# SNIFF_THRESHOLD is the next layer (each format at most once per file)
DECODERS: dict[str, ModuleType] = {
    m.NAME: m for m in (gcp, gcp_yaml, datadog, elastic, splunk, cloudwatch, cloudwatch_text, loki, loki_api, grafana, otlp, csvexport, docker_json, journald, cri, ansi, syslog, kubectl, cloudwatch_tail, docker_ts, compose, jsonfmt, prefix)
}
SNIFF_THRESHOLD = 0.6
# the head of a file that ingest and the tailer read to find its layers and its engine
SAMPLE_BYTES = 64 * 1024
SAMPLE_LINES = 300
MAX_DEPTH = 6
# the docker json-file and CRI runtimes split lines longer than 16 KiB; a record-start
# question about a window of lines needs this many more lines of look-back (pipeline/sources/lines.py)
FRAGMENT_LOOKBACK = 64
# a newest-first export read in blocks: the oldest entries of a block whose start of record
# cannot be told from the block, for a parser that says no look-back (pipeline/sources/lines.py)
OLDEST_UNKNOWN = 256


def head_sample(head: bytes) -> list[str]:
    """The sample lines of a file's first SAMPLE_BYTES that `detect` (and engine
    detection) read: at most SAMPLE_LINES, without a last line cut short."""
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    lines = text.split("\n")
    if len(head) >= SAMPLE_BYTES and len(lines) > 1:
        lines = lines[:-1]  # the last one is probably cut short
    return [ln.rstrip("\r") for ln in lines[:SAMPLE_LINES]]


def detect(sample: list[str]) -> tuple[str, ...]:
    """The wrapper layers of a file, outside in, from the first lines of it."""
    return detect_lines(sample)[0]


def detect_lines(sample: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """`detect`, and the engine lines inside the sample that engine detection reads: the
    sample decoded through the layers found, as each depth decoded it for the next, so the
    sample is decoded once (an unfinished last entry of the innermost layer kept, as a
    block's decode keeps it)."""
    layers: list[str] = []
    texts = inner = sample
    order = (0, 0)
    global _last_detected
    for _ in range(MAX_DEPTH):
        joined = "\n".join(t or "" for t in texts)
        for name, mod in DECODERS.items():
            if any(_base(n) == name for n in layers):
                continue
            needs = getattr(mod, "NEEDS", None)
            if needs and not any(n in joined for n in needs):
                continue
            if mod.sniff(texts) >= SNIFF_THRESHOLD:
                name = mod.layer(texts) if hasattr(mod, "layer") else name
                layers.append(name)
                inner, texts, steps = _decoded_sample(texts, name)
                if len(layers) == 1:
                    order = steps
                break
        else:
            break
    _last_detected = (tuple(layers), sample, inner, order)
    return tuple(layers), inner


# the last sample detected, its layers, the lines inside and the order of its one layer's
# entries on disk: a file's read block is scaled from the same head right after
# (block_scale), and the reader asks whether the file runs newest first (sample_newest_first),
# neither decoding it again
_last_detected: tuple[tuple[str, ...], list[str], list[str], tuple[int, int]] | None = None


def _inner_lines(sample: list[str], layers: tuple[str, ...]) -> list[str]:
    """`decode_texts(sample, layers)`, taken from the last detection when it read this
    sample through this one layer (its decode of one layer is this one)."""
    last = _last_detected
    if last is not None and len(layers) == 1 and last[0] == layers and last[1] == sample:
        return last[2]
    return decode_texts(sample, layers)


def decode(lines: pl.DataFrame, layers: tuple[str, ...]) -> pl.DataFrame:
    """Physical lines (`line`, `text`) -> logical lines with the wrapper columns (_frame.py)."""
    df = start(lines)
    for name in layers:
        base, _, arg = name.partition(":")
        df = DECODERS[base].decode(df, arg) if arg else DECODERS[base].decode(df)
    return df


def _base(layer: str) -> str:
    """The decoder's name of a stored layer (`csv-export:<header>` -> `csv-export`)."""
    return layer.partition(":")[0]


def _decoded_sample(texts: list[str], layer: str) -> tuple[list[str], list[str], tuple[int, int]]:
    """The lines inside one layer of a sample: all of them, and those the next depth sniffs,
    without an unfinished last one (the sample's end cuts an export's last object short: its
    raw text would be taken for another format); and `entry_steps` of the decoded lines."""
    if not texts:
        return [], [], (0, 0)
    lines = pl.DataFrame({"line": pl.int_range(1, len(texts) + 1, eager=True), "text": pl.Series(texts, dtype=pl.String)})
    dec = decode(lines, (layer,))
    # (an entry without text would reach the next depth's sniffers as None)
    inner = dec["text"].fill_null("").to_list()
    steps = entry_steps(dec)
    if dec.height and bool(dec["_open"][-1]):
        return inner, inner[:-1], steps
    return inner, inner, steps


def entry_steps(dec: pl.DataFrame) -> tuple[int, int]:
    """Between consecutive decoded lines that have a platform time: how many steps go back
    on disk and how many forward (an export put in time order whose lines run backwards on
    disk was written newest first)."""
    steps = dec.filter(pl.col("_wts").is_not_null())["line"].diff().drop_nulls()
    return int((steps < 0).sum()), int((steps > 0).sum())


# the timed steps a sample's entries must all take one way for its order to stand for the
# file's head (fewer, or some each way: the head is decoded to tell)
SAMPLE_ORDER_STEPS = 8


def sample_newest_first(sample: list[str], layers: tuple[str, ...]) -> bool | None:
    """Whether a file in one layer `layers` runs newest first, from the detection of its
    head's `sample` just made (None when that detection was of another sample, or its
    entries do not all step one way, SAMPLE_ORDER_STEPS of them at least)."""
    last = _last_detected
    if last is None or len(layers) != 1 or last[0] != tuple(layers) or last[1] != sample:
        return None
    back, forward = last[3]
    if back + forward < SAMPLE_ORDER_STEPS or (back and forward):
        return None
    return back > 0


def decode_texts(texts: list[str], layers: tuple[str, ...]) -> list[str]:
    """The engine lines inside `texts` (engine detection reads these)."""
    if not layers or not texts:
        return list(texts)
    lines = pl.DataFrame({"line": pl.int_range(1, len(texts) + 1, eager=True), "text": pl.Series(texts, dtype=pl.String)})
    return decode(lines, layers)["text"].to_list()


def wrap(parser, layers: tuple[str, ...] | list[str], labels: dict[str, str] | None = None):
    """`parser` behind the decoders `layers` (the parser itself when there is nothing to
    undo). `labels`: constant labels of the file (Kubernetes namespace, container...)."""
    layers = tuple(layers or ())
    unknown = [n for n in layers if _base(n) not in DECODERS]
    if unknown:
        raise ValueError(f"unknown wrapper format {unknown[0]!r}")
    if not layers and not labels:
        return parser
    return DecodedParser(parser, layers, labels or {})


class DecodedParser:
    """An engine parser behind a file's wrapper layers, with the parser contract."""

    def __init__(self, parser, layers: tuple[str, ...], labels: dict[str, str]):
        self.parser = parser
        self.layers = layers
        self.labels = labels
        self.NAME = parser.NAME
        self.CARRY_FORWARD = getattr(parser, "CARRY_FORWARD", ())
        lookback = getattr(parser, "RECORD_LOOKBACK", None)
        joins = any(DECODERS[_base(n)].JOINS for n in layers)
        if lookback is not None:
            self.RECORD_LOOKBACK = lookback + (FRAGMENT_LOOKBACK if joins else 0)

    def __getattr__(self, name: str):
        return getattr(self.parser, name)

    def detect(self, lines: list[str]) -> float:
        return self.parser.detect(decode_texts(lines, self.layers))

    def record_starts(self, text: pl.Series) -> pl.Series:
        """Per physical line: a logical line's first fragment where the engine starts a
        record there; an unfinished last line always counts as a start, so the reader holds
        it back until its last fragment has been written."""
        n = len(text)
        lines = pl.DataFrame({"line": pl.int_range(1, n + 1, eager=True), "text": text.cast(pl.String)})
        dec = decode(lines, self.layers)
        starts = self.parser.record_starts(dec["text"]).fill_null(True).to_numpy().astype(bool)
        open_last = bool(dec.height and dec["_open"][-1])
        phys = dec["line"].to_numpy()
        steps = np.diff(phys)
        backwards = (steps < 0).sum() > (steps > 0).sum()
        if open_last and not backwards:
            starts[-1] = True
        if dec.height == n and dec["line"].is_sorted():
            return pl.Series("starts", starts)
        # an entry's first piece (an export entry may give several lines) speaks for it
        first = np.ones(len(phys), dtype=bool)
        if len(phys) > 1:
            seen = dec.select(pl.col("line").is_first_distinct()).to_series().to_numpy()
            first = seen
        phys, starts = phys[first], starts[first]
        out = np.zeros(n, dtype=bool)
        if not backwards:
            out[phys - 1] = starts
            return pl.Series("starts", out)
        # newest first on disk: cutting before an entry is safe when the (newer) entry just
        # before it on disk starts a record; every line of the records before the cut is then
        # before it too, and those after it end before that record began
        # (the oldest entries of the window may continue a record begun further on disk,
        # beyond the window: their starts are not known)
        lookback = getattr(self.parser, "RECORD_LOOKBACK", None)
        starts = starts.copy()
        starts[: OLDEST_UNKNOWN if lookback is None else lookback + 1] = False
        order = np.argsort(phys, kind="stable")
        p, st = phys[order], starts[order]
        out[p[1:] - 1] = st[:-1]
        # (an unfinished last entry is older than every other: the cut before it is safe only
        # when the entry before it starts a record, as for any other)
        return pl.Series("starts", out)

    def parse(self, lines: pl.DataFrame, ctx) -> pl.DataFrame:
        dec = decode(lines, self.layers)
        if dec.height == 0:
            return self.parser.parse(lines, ctx)
        first = int(lines["line"][0])
        # (an export's entries put back in time order are no longer in line order)
        joined = dec.height != lines.height or not dec["line"].is_sorted()
        # the engine parser numbers logical lines consecutively; spans are mapped back below
        # a parser that anchors the engine's own relative clock on the wrapper's times reads them
        wts = [pl.col("_wts").alias("wrapper_ts")] if getattr(self.parser, "WANTS_WRAPPER_TS", False) else []
        view = dec.select(pl.int_range(first, first + dec.height, dtype=pl.Int64).alias("line"), "text", *wts)
        export = any(_base(n) in INSTANCE_LAYERS for n in self.layers)
        events = _parse_streams(self.parser, view, dec, ctx, STREAM_LABELS + (("_lab_host",) if export else ()))
        if events.height == 0:
            return events
        # a platform's export names the server of each entry: one instance per server, unless
        # the user named the file's instance (`--instance`)
        by_server = export and not ctx.file.get("instance_explicit")
        return apply_wrapper(events, dec, first, joined, self.labels, export, by_server)


# the platform exports whose labels name the server (the instance) of each entry
INSTANCE_LAYERS = frozenset({"gcp-logging", "gcp-logging-yaml", "cloudwatch", "cloudwatch-tail", "cloudwatch-text", "loki", "loki-api", "splunk", "otlp", "csv-export", "datadog", "elastic", "grafana-explore", "kubectl-prefix"})

# the labels naming an entry's server, the first present wins: a Kubernetes pod; else a
# CloudWatch log stream (an ECS task's `<prefix>/<container>/<task id>`, an EC2 instance's
# `i-...`); else the host (the Datadog Agent's, Filebeat's `host.name`, an OpenTelemetry
# resource's, a Loki stream's, a Compute Engine VM's name)
SERVER_LABELS = ("_lab_pod", "_lab_log_stream", "_lab_host")


def server_of(dec: pl.DataFrame) -> pl.Expr:
    """The name of each decoded line's server (SERVER_LABELS; null where none is named)."""
    named = [pl.col(c) for c in SERVER_LABELS if c in dec.columns]
    return pl.coalesce(named) if named else pl.lit(None, pl.String)

# downloads a platform writes whole (a JSON download often ends without a newline): never a
# live file whose last line is still being written
WRITTEN_WHOLE = frozenset({"gcp-logging", "gcp-logging-yaml", "cloudwatch", "cloudwatch-text", "loki-api", "splunk", "csv-export", "datadog", "elastic", "grafana-explore"})


def written_whole(layers: tuple[str, ...] | list[str]) -> bool:
    return bool(layers) and _base(layers[0]) in WRITTEN_WHOLE


# the most a platform download's read block is scaled by (its memory is that of a block)
MAX_BLOCK_SCALE = 4.0
# a chunk of a platform download costs more per chunk than a plain log's does (the decode's
# own passes, the reader's record-start question decoding the block's last lines, the
# wrapper's columns, on top of the engine parser's passes): its block holds this many times
# the engine lines of a plain log's block, so that those costs count for half as much
EXPORT_CHUNK_LINES = 2.0


def block_scale(layers: tuple[str, ...] | list[str], head: bytes) -> float:
    """How many read blocks' worth of bytes one block of a file in `layers` is to take: a
    platform download spends bytes on each entry's envelope, and a chunk costs per engine
    line and per chunk (the engine parser's passes, the decode's), so its block is as many
    times larger as its head's bytes are to the engine lines inside them, times
    EXPORT_CHUNK_LINES (at most MAX_BLOCK_SCALE); 1 for anything else."""
    if not written_whole(layers) or not head:
        return 1.0
    sample = head_sample(head)
    lines = _inner_lines(sample, tuple(layers))
    raw = pl.Series(sample, dtype=pl.String).str.len_bytes().sum() + len(sample)
    inner = pl.Series(lines, dtype=pl.String).str.len_bytes().sum() + len(lines)
    if not inner:
        return 1.0
    return float(min(MAX_BLOCK_SCALE, max(1.0, EXPORT_CHUNK_LINES * raw / inner)))


# labels that name one server's stream in a file holding several (a platform export of a
# namespace): each stream's lines go to the engine parser on their own
STREAM_LABELS = ("_lab_namespace", "_lab_pod", "_lab_container", "_lab_log_group", "_lab_log_stream")


def _parse_streams(parser, view: pl.DataFrame, dec: pl.DataFrame, ctx, labels: tuple[str, ...] = STREAM_LABELS) -> pl.DataFrame:
    """The engine parser over `view`, once per run of one stream's lines when the decoded
    lines name several (`labels`: the columns naming a stream; a record never joins lines of
    two servers). A stream whose lines are another engine's (one export of a namespace
    serving with several) goes to that engine's parser, found from its first lines and kept
    for the file."""
    keys = [c for c in labels if c in dec.columns]
    if not keys:
        return parser.parse(view, ctx)
    name = pl.concat_str([pl.col(k).fill_null("") for k in keys], separator="\x1f")
    if _one_run(dec, keys):
        # (one stream's block, the usual one: its name is its first line's, one run)
        firsts = dec.head(1).select(name)[:, 0].to_list()
        runs = run_id = None
    else:
        # lines naming no stream (an undecodable part) stay with the run before them
        runs = dec.select(pl.when(name != "").then(name).forward_fill().fill_null("").alias("_s"))["_s"]
        change = (runs != runs.shift(1)).fill_null(True)
        run_id = change.cum_sum()
        firsts = runs.filter(change).to_list()
    # the engine of each stream, once per file (ctx state): None for the file's own
    known = ctx.state.setdefault("stream_engines", {})
    mixed = ctx.engine != "unknown" and not ctx.file.get("engine_explicit")

    def engine_of(stream: str) -> str | None:
        if stream in known or not (mixed and stream):
            return known.get(stream)
        # (a block of one stream, the usual one, is that stream's lines as they are)
        lines = view["text"] if len(firsts) == 1 else view.filter(runs == stream)["text"]
        return _stream_engine(stream, lines, ctx.engine, known)

    of_stream = {s: engine_of(s) for s in dict.fromkeys(firsts)}
    engines = [of_stream[s] for s in firsts]
    if len(firsts) <= 1 and engines[0] is None:
        return parser.parse(view, ctx)
    from .. import get_parser

    parts = []
    for i, engine in enumerate(engines):
        sub = view if run_id is None else view.filter(run_id == i + 1)
        if engine is None:
            parts.append(parser.parse(sub, ctx))
        else:
            parts.append(get_parser(engine).parse(sub, ctx).with_columns(pl.lit(engine, pl.String).alias("engine")))
    parts = [p for p in parts if p.height]
    if len(set(engines)) > 1:
        parts = _same_times(parts)
    return pl.concat(parts, how="diagonal_relaxed") if parts else parser.parse(view.head(0), ctx)


def _one_run(dec: pl.DataFrame, keys: list[str]) -> bool:
    """Does every line of `dec` name the stream its first line names (`keys`, nulls alike)?"""
    return dec.height > 0 and bool(dec.select(pl.all_horizontal([pl.col(k).eq_missing(pl.col(k).first()).all() for k in keys])).item())


def _same_times(parts: list[pl.DataFrame]) -> list[pl.DataFrame]:
    """Two engines' events side by side: a time column one parser gives naive (UTC, as
    finalize reads it) and another with its zone, in UTC microseconds in both."""
    zones: dict[str, set] = {}
    for p in parts:
        for c, t in p.schema.items():
            if isinstance(t, pl.Datetime):
                zones.setdefault(c, set()).add((t.time_unit, t.time_zone))
    mixed = [c for c, z in zones.items() if len(z) > 1]
    if not mixed:
        return parts
    out = []
    for p in parts:
        fix = []
        for c in mixed:
            t = p.schema.get(c)
            if isinstance(t, pl.Datetime):
                e = pl.col(c).dt.replace_time_zone("UTC") if t.time_zone is None else pl.col(c).dt.convert_time_zone("UTC")
                fix.append(e.dt.cast_time_unit("us").alias(c))
        out.append(p.with_columns(fix) if fix else p)
    return out


def _stream_engine(stream: str, text: pl.Series, file_engine: str, known: dict[str, str | None]) -> str | None:
    """The engine of one stream of a file holding several, when it is not the file's own
    (None: the file's parser reads it), from its lines `text` in this block (at most a
    detection sample of them). Kept in `known` once decided; a stream whose lines name no
    engine yet is decided on a later block."""
    from .. import DETECT_THRESHOLD, detect_engine, get_parser

    texts = text.head(SAMPLE_LINES).to_list()
    # the file's own engine keeps every stream it recognises (lines several engines share,
    # such as uvicorn's, move nothing)
    if float(get_parser(file_engine).detect(texts)) >= DETECT_THRESHOLD:
        known[stream] = None
        return None
    engine, _score = detect_engine(texts)
    if engine == "unknown":
        return None
    known[stream] = engine
    return engine


def apply_wrapper(events: pl.DataFrame, dec: pl.DataFrame, first: int, joined: bool, labels: dict[str, str],
                  export: bool = False, by_server: bool = False) -> pl.DataFrame:
    """Give each event its line's wrapper columns, the wrapper's time where it is finer than
    the engine's, and (when fragments were joined) spans over physical lines."""
    idx = (events["line"] - first).cast(pl.Int64)
    if "n_lines" in events.columns:
        span = events["n_lines"].fill_null(1).cast(pl.Int64)
    else:
        span = pl.Series(np.ones(events.height, dtype=np.int64))
    label_cols = sorted(c for c in dec.columns if c.startswith("_lab_"))
    side = dec.select(pl.col("_wts"), pl.col("_stream"), pl.col("_pre")).with_columns(
        _labels_of(dec, label_cols, labels).alias("_labels"))
    cols = {c: side[c].gather(idx) for c in side.columns}
    events = events.with_columns(
        cols["_wts"].alias("wrapper_ts"), cols["_stream"].alias("stream"), cols["_labels"].alias("labels"),
        cols["_pre"].alias("_pre"),
    )
    if export and any(c in dec.columns for c in SERVER_LABELS):
        # (a line naming no server, such as an entry whose labels could not be read, is the
        # server's of the line before it, as its stream is)
        server = dec.select(server_of(dec).forward_fill().alias("_server"))["_server"].gather(idx)
        # (a value carried from line to line, the model, is carried within each server)
        events = events.with_columns(server.alias("_carry_by"))
        if by_server:
            own = events["instance"] if "instance" in events.columns else pl.Series([None] * events.height, dtype=pl.String)
            events = events.with_columns(pl.coalesce(server, own).alias("instance"))
    if joined:
        phys = dec["line"].cast(pl.Int64)
        ends = (phys + dec["_n"].cast(pl.Int64))
        last = idx + span - 1
        # an event's lines may run backwards on disk (a newest-first export put in order)
        start_at = pl.Series(np.minimum(phys.gather(idx).to_numpy(), phys.gather(last).to_numpy()))
        end_at = pl.Series(np.maximum(ends.gather(idx).to_numpy(), ends.gather(last).to_numpy()))
        events = events.with_columns(start_at.alias("line"), (end_at - start_at).cast(pl.Int32).alias("n_lines"))
        if not dec["line"].is_sorted():
            # finalize walks the events in this order, not the lines' (carried model, times)
            events = events.with_columns(idx.alias("_order"))
    return _wrapper_time(events)


def _labels_of(dec: pl.DataFrame, cols: list[str], constant: dict[str, str]) -> pl.Series:
    """`_labels_expr` per line of `dec`, encoded once per distinct set of labels (a file
    holds few: one per stream) rather than once a line."""
    if not cols:
        return dec.select("line").with_columns(_labels_expr(cols, constant).alias("_labels"))["_labels"]
    lab = dec.select(cols)
    # (one stream's block, the usual one: the same labels on every line, encoded once)
    if lab.height and all(lab.select(pl.col(c).eq_missing(pl.col(c).first()).all() for c in cols).row(0)):
        one = lab.head(1).select(_labels_expr(cols, constant)).to_series()
        return one.new_from_index(0, lab.height)
    combos = lab.unique(maintain_order=True)
    if combos.height * 4 > lab.height:
        return lab.select(_labels_expr(cols, constant)).to_series()
    combos = combos.with_columns(_labels_expr(cols, constant).alias("_labels"))
    return lab.join(combos, on=cols, how="left", nulls_equal=True, maintain_order="left")["_labels"]


def _labels_expr(cols: list[str], constant: dict[str, str]) -> pl.Expr:
    from ..base import attrs_json

    if not cols and not constant:
        return pl.lit(None, pl.String)
    fields = {k: pl.lit(v, pl.String) for k, v in sorted(constant.items())}
    fields |= {c.removeprefix("_lab_"): pl.col(c) for c in cols}
    return attrs_json(**fields)


def _wrapper_time(events: pl.DataFrame) -> pl.DataFrame:
    """The event takes the wrapper's time when the engine's is missing, has no year, or has
    whole seconds only; the engine's own time is then kept in attrs `engine_ts`."""
    from ..finalize import as_utc

    cols = events.columns
    wts = pl.col("wrapper_ts")
    own = as_utc(pl.col("ts"), events.schema["ts"]) if "ts" in cols else pl.lit(None, pl.Datetime("us", "UTC"))
    noyear = pl.col("ts_noyear") if "ts_noyear" in cols else pl.lit(None, pl.Datetime("us"))
    coarse = own.is_null() | (own.dt.microsecond() == 0)
    take = wts.is_not_null() & coarse
    # (each kind of time formatted only when some event has it; most lines carry one kind)
    has_own, has_noyear, has_pre = events.select(
        own.is_not_null().any().alias("o"), noyear.is_not_null().any().alias("n"),
        pl.col("_pre").is_not_null().any().alias("p")).row(0) if events.height else (False, False, False)
    engine_ts = pl.lit(None, pl.String)
    if has_noyear:
        engine_ts = pl.when(noyear.is_not_null()).then(noyear.dt.strftime("%m-%d %H:%M:%S"))
    if has_own:
        engine_ts = pl.when(own.is_not_null()).then(own.dt.strftime("%Y-%m-%dT%H:%M:%S%.fZ")).otherwise(engine_ts)
    # `{"engine_ts":…,"prefix":…}` without nulls, built directly (a time needs no escaping;
    # one member's null needs no cutting out)
    events = events.with_columns(pl.when(take).then(engine_ts).alias("_own_ts"))
    own_ts = pl.col("_own_ts")
    # the members added (null: none), `"engine_ts":…,"prefix":…`
    ets = pl.lit('"engine_ts":"') + own_ts + pl.lit('"')
    if has_pre:
        pre = pl.struct(pl.col("_pre").alias("prefix")).struct.json_encode().str.slice(1).str.strip_suffix("}")
        pre = pl.when(pl.col("_pre").is_not_null()).then(pre)
        add = pl.when(own_ts.is_not_null() | pl.col("_pre").is_not_null()).then(
            pl.concat_str([ets, pre], separator=",", ignore_nulls=True))
    else:
        add = ets
    events = events.with_columns(
        pl.when(take).then(wts.dt.cast_time_unit("us")).otherwise(own).alias("ts"),
        pl.when(take).then(None).otherwise(noyear).alias("ts_noyear"),
        _merge_attrs(events, add).alias("attrs"),
    )
    return events.drop("_pre", "_own_ts")


def _merge_attrs(events: pl.DataFrame, add: pl.Expr) -> pl.Expr:
    """attrs (a JSON object string or null) with the members `add` (`"k":v,…`; null: none)."""
    whole = pl.lit("{") + add + pl.lit("}")
    if "attrs" not in events.columns:
        return whole
    old = pl.col("attrs").cast(pl.String)
    # (the members written once into the merged string: not an object first, then cut open)
    return (
        pl.when(add.is_null()).then(old)
        .when(old.is_null() | (old == "{}")).then(whole)
        .otherwise(pl.concat_str(cut_suffix(old, "}"), pl.lit(","), add, pl.lit("}")))
    )


def describe(layers: tuple[str, ...] | list[str]) -> str:
    """`cri > compose > ansi`, or `plain`."""
    return " > ".join(layers) if layers else "plain"


def labels_json(labels: dict[str, str]) -> str | None:
    return json.dumps(labels, sort_keys=True) if labels else None
