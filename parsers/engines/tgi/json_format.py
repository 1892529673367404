"""The JSON half of the TGI parser (`tgi.py`): `--json-output` records of the router
(tracing-subscriber JSON, event fields flattened, `span`/`spans` objects) and of the
launcher (`fields.message`), decoded with polars' JSON reader against an explicit schema
and turned into the same columns the text path produces."""

from __future__ import annotations

import functools
import json

import polars as pl

from .fields import DURATION_FIELDS, duration_struct

_STR = pl.String
_LEVEL_RE = r"^(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR)$"
_SPAN_KEYS = (
    "name", "total_time", "validation_time", "queue_time", "inference_time",
    "time_per_token", "seed", "parameters", "batch_size", "rank",
)
# every leaf a string: a number where a string is expected (or the reverse) must not fail
_JSON_DTYPE = pl.Struct(
    {
        "timestamp": _STR, "level": _STR, "message": _STR, "target": _STR,
        "filename": _STR, "line_number": _STR,
        "fields": pl.Struct({"message": _STR}),
        "span": pl.Struct({k: _STR for k in _SPAN_KEYS}),
        "spans": pl.List(pl.Struct({"name": _STR, "batch_size": _STR})),
    }
)

def _decode_json(first: pl.Series) -> pl.DataFrame:
    try:
        dec = first.str.json_decode(_JSON_DTYPE)
    except Exception:  # malformed or oddly typed lines: normalise them one by one
        dec = pl.Series([_normalise_json(t) for t in first], dtype=_STR).str.json_decode(_JSON_DTYPE)
    return pl.DataFrame({"_j": dec})


def _normalise_json(text: str) -> str | None:
    """Reduce one JSON line to the keys `_JSON_DTYPE` reads, every leaf as a string;
    None when it is not a JSON object (the record then stays unparsed)."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None

    def leaf(v: object) -> str | None:
        if v is None or isinstance(v, str):
            return v
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        return json.dumps(v)

    def obj_of(v: object, keys: tuple[str, ...]) -> dict | None:
        return {k: leaf(v.get(k)) for k in keys} if isinstance(v, dict) else None

    out = {k: leaf(obj.get(k)) for k in ("timestamp", "level", "message", "target", "filename", "line_number")}
    out["fields"] = obj_of(obj.get("fields"), ("message",))
    out["span"] = obj_of(obj.get("span"), _SPAN_KEYS)
    spans = obj.get("spans")
    out["spans"] = [obj_of(s, ("name", "batch_size")) for s in spans if isinstance(s, dict)] if isinstance(spans, list) else None
    return json.dumps(out)


def json_records(recs: pl.DataFrame) -> pl.DataFrame:
    if recs.height == 0:
        return recs
    recs = pl.concat([recs, _decode_json(recs["_first"])], how="horizontal")
    return recs.with_columns(*_record_exprs()).drop("_j").unnest(*DURATION_FIELDS.values())


@functools.cache
def _record_exprs() -> tuple[pl.Expr, ...]:
    """`json_records`' columns from the decoded `_j` (built once: the same every call)."""
    j = pl.col("_j")
    span = j.struct.field("span")
    spans = j.struct.field("spans")
    sf = lambda k: span.struct.field(k)  # noqa: E731
    names = spans.list.eval(pl.element().struct.field("name")).list.join(":")
    outer_batch = spans.list.eval(pl.element().struct.field("batch_size")).list.drop_nulls().list.first()
    lvl = j.struct.field("level")
    return (
        j.struct.field("timestamp").alias("_ts"),
        pl.when(lvl.str.contains(_LEVEL_RE)).then(lvl).alias("_lvl"),
        j.struct.field("target").alias("target"),
        pl.when(j.struct.field("filename").is_not_null()).then(
            pl.concat_str([j.struct.field("filename"), pl.lit(":"), j.struct.field("line_number").fill_null("")])
        ).alias("file"),
        # old launchers keep the shard message's trailing newline
        pl.coalesce(j.struct.field("message"), j.struct.field("fields").struct.field("message"))
        .str.strip_chars_end().alias("_msg"),
        pl.coalesce(pl.when(names != "").then(names), sf("name")).alias("span"),
        *[duration_struct(sf(f), p) for f, p in DURATION_FIELDS.items()],
        sf("seed").alias("_seed"),
        sf("parameters").alias("_params"),
        pl.coalesce(sf("batch_size"), outer_batch).cast(pl.Int64, strict=False).alias("batch_size"),
        sf("rank").cast(pl.Int64, strict=False).alias("_rank_json"),
    )
