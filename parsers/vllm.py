"""The vLLM parser: every log format vLLM has printed (v0.1 to today) into the common schema.

This module owns the anatomy of a line, outside in (see /work/shared/formats/vllm.md §0):
outer wrappers (`docker logs --timestamps` / k8s RFC 3339 time, docker-compose `svc-1 | `,
ANSI colour codes with or without the ESC byte, stray `\\r`), the vLLM process prefix
(`(APIServer pid=1) `, `(VllmWorker rank=1 pid=5283) `, Ray's `(RayWorkerWrapper pid=1,
ip=10.0.0.2) `...), the vLLM header (`INFO 06-10 14:23:45 metrics.py:341] ` up to v0.7,
`INFO 06-10 14:23:45 [loggers.py:116] ` from v0.8), and multi-line records (tracebacks,
the start-up banner). What each message means is in `vllm_fields.py`.

Everything is polars expressions over the whole chunk: no Python loop per line.
"""

from __future__ import annotations

import polars as pl

from . import vllm_fields as F
from .base import (
    ANSI_RE,
    RFC3339_RE,
    ParseContext,
    attrs_json,
    group_records,
    record_ids,
    rfc3339_to_ts,
)

NAME = "vllm"
CARRY_FORWARD = ("model",)

_LEVEL = r"DEBUG|INFO|WARNING|ERROR|CRITICAL"

# The anchored patterns below capture only a short prefix (`all`): capturing a whole line
# tail with `(.*)` costs ~4 s per million lines, slicing the tail off costs nothing.
# outer wrappers: RFC 3339 time (docker/k8s), compose service, possibly both in either order
_OUTER = (
    rf"^(?P<all>(?:(?P<rfc>{RFC3339_RE})\s+)?"
    r"(?:(?P<svc>[A-Za-z0-9][\w.-]*)\s+\|\s?)?"
    rf"(?:(?P<rfc2>{RFC3339_RE})\s+)?)"
)
# vLLM's own process prefix (and torch.distributed's `[rank0]: `); exactly one space
# follows it, so the indentation of a raw traceback frame survives in `body`
_PROC_CORE = (
    r"\((?P<pname>[A-Za-z_]\w*)(?: (?P<pname2>[A-Za-z_]\w*))?(?: rank=(?P<prank>\d+))?"
    r" pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\)"
)
_PROC = rf"^(?P<all>(?:\[rank(?P<trank>\d+)\]:\s?)?(?:{_PROC_CORE} ?)?)"
_OUTER_HINT = rf"^(?:{RFC3339_RE}|[A-Za-z0-9][\w.-]*\s+\|)"
_OUTER_STRUCT = pl.Struct({k: pl.String for k in ("all", "rfc", "svc", "rfc2")})
_PROC_STRUCT = pl.Struct(
    {k: pl.String for k in ("all", "trank", "pname", "pname2", "prank", "pid", "ip")}
)
# the vLLM header; ASCII classes keep the automaton small
_HDR = (
    rf"(?P<hh>(?P<level>{_LEVEL}) +(?P<md>[0-9]{{2}}-[0-9]{{2}}) +"
    r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,][0-9]+)? +\[?(?P<src>[A-Za-z0-9_./-]+\.py):"
    r"(?P<lineno>[0-9]+)\] ?)"
)
_HDR_ANYWHERE = rf"(?:^|[ \t)|\]:>])(?:{_LEVEL}) +[0-9]{{2}}-[0-9]{{2}} +[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}"
# behind an arbitrary prefix (journald, Buildkite, TorchServe...): the level must open the
# text or follow a separator
_HDR_AFTER = r"^(?P<hpre>(?:.*?[ \t)|\]:>])?)" + _HDR

_ANATOMY_COLS = (
    "rfc", "svc", "pname", "prank", "pid", "ip", "trank", "level", "md", "hms", "src",
    "lineno", "has_hdr", "body", "m", "key", "cont",
)


def _lines_anatomy(df: pl.DataFrame) -> pl.DataFrame:
    """Take every line apart: adds the columns of _ANATOMY_COLS. `body` is the message
    after the header (or the raw text after the wrappers), `m` the same without leading
    blanks, `key` who wrote the line, `cont` whether it continues the line before."""
    text = pl.col("text").fill_null("")
    # rewriting every string costs a pass; most files have neither `\r` nor colour codes
    if df.select(pl.col("text").str.ends_with("\r").any()).item():
        text = text.str.strip_chars_end("\r")
    if df.select(pl.col("text").str.contains(ANSI_RE).any()).item():
        text = text.str.replace_all(ANSI_RE, "")
    df = df.with_columns(text.alias("_t"))
    # the wrapper / prefix extractions cost a pass each: skipped when no line can have one
    if df.select(pl.col("_t").str.contains(_OUTER_HINT).any()).item():
        df = df.with_columns(pl.col("_t").str.extract_groups(_OUTER).alias("_o"))
    else:
        df = df.with_columns(pl.lit(None, _OUTER_STRUCT).alias("_o"))
    o = pl.col("_o").struct
    df = df.with_columns(
        pl.coalesce(o.field("rfc"), o.field("rfc2")).alias("rfc"),
        o.field("svc").alias("svc"),
        pl.col("_t").str.slice(o.field("all").str.len_chars().fill_null(0)).alias("_r"),
    )
    if df.select(pl.col("_r").str.contains(r"^[(\[]").any()).item():
        df = df.with_columns(pl.col("_r").str.extract_groups(_PROC).alias("_p"))
    else:
        df = df.with_columns(pl.lit(None, _PROC_STRUCT).alias("_p"))
    p = pl.col("_p").struct
    df = df.with_columns(pl.col("_r").str.slice(p.field("all").str.len_chars().fill_null(0)).alias("_r"))
    df = df.with_columns(pl.col("_r").str.extract_groups("^" + _HDR).alias("_h"))
    # slow path, only for the rare lines whose header sits behind some other prefix
    df = df.with_row_index("_i")
    odd = df.filter(
        pl.col("_h").struct.field("level").is_null() & pl.col("_r").str.contains(_HDR_ANYWHERE)
    ).select("_i", "_r")
    if odd.height:
        odd = odd.with_columns(pl.col("_r").str.extract_groups(_HDR_AFTER).alias("_h2")).with_columns(
            pl.col("_h2").struct.field("hpre").str.extract_groups(_PROC_CORE).alias("_late")
        )
        df = df.join(odd.drop("_r"), on="_i", how="left").sort("_i")
    else:
        df = df.with_columns(pl.lit(None).alias("_h2"), pl.lit(None).alias("_late"))
    h, h2, late = pl.col("_h").struct, pl.col("_h2").struct, pl.col("_late").struct

    def hf(name: str) -> pl.Expr:
        return pl.coalesce(h.field(name), h2.field(name)) if odd.height else h.field(name)

    def pf(name: str) -> pl.Expr:
        return pl.coalesce(p.field(name), late.field(name)) if odd.height else p.field(name)

    hpre_len = h2.field("hpre").str.len_chars().fill_null(0) if odd.height else pl.lit(0)
    name1, name2 = pf("pname"), pf("pname2")
    df = df.with_columns(
        pl.when(name2.is_not_null()).then(pl.concat_str([name1, pl.lit(" "), name2]))
        .otherwise(name1).alias("pname"),
        pf("prank").cast(pl.Int64, strict=False).alias("prank"),
        pf("pid").cast(pl.Int64, strict=False).alias("pid"),
        pf("ip").alias("ip"),
        p.field("trank").cast(pl.Int64, strict=False).alias("trank"),
        hf("level").alias("level"),
        hf("md").alias("md"),
        hf("hms").alias("hms"),
        hf("src").alias("src"),
        hf("lineno").cast(pl.Int64, strict=False).alias("lineno"),
        hf("level").is_not_null().alias("has_hdr"),
        pl.when(hf("level").is_not_null())
        .then(pl.col("_r").str.slice(hpre_len + hf("hh").str.len_chars()))
        .otherwise(pl.col("_r"))
        .fill_null("")
        .alias("body"),
    )
    df = df.with_columns(
        pl.col("body").str.strip_chars_start().alias("m"),
        pl.concat_str(
            [
                pl.col(c).cast(pl.String).fill_null("")
                for c in ("svc", "pname", "prank", "pid", "ip", "trank", "level", "md", "hms", "src", "lineno")
            ],
            separator="|",
        ).alias("key"),
    )
    # a continuation line: same writer (same header, or same raw prefix) as the line
    # before, and shaped like the inside of a traceback or an indented block
    indented = pl.col("body").str.contains(r"^\s+\S")
    df = df.with_columns(
        (
            (pl.col("key") == pl.col("key").shift(1))
            & (
                indented
                | (pl.col("m") == "")
                | pl.col("m").str.starts_with("Traceback (most recent call last)")
                | pl.col("m").str.contains(
                    r"^(?:The above exception was the direct cause|During handling of the above exception)"
                )
                | (pl.col("m").str.contains(F.EXCEPTION) & indented.shift(1))
            )
        ).fill_null(False).alias("cont")
    )
    return df.drop("_t", "_o", "_r", "_p", "_h", "_h2", "_late", "_i")


def record_starts(text: pl.Series) -> pl.Series:
    df = _lines_anatomy(pl.DataFrame({"text": text.cast(pl.String)}))
    return (~df["cont"]).alias("starts")


# ---------------------------------------------------------------------------------------
# detect


def detect(lines: list[str]) -> float:
    """High for vLLM headers, process prefixes and stats lines; ~0 for TGI and
    TensorRT-LLM; low for uvicorn lines alone (trtllm-serve prints them too)."""
    if not lines:
        return 0.0
    df = _lines_anatomy(pl.DataFrame({"text": pl.Series(lines, dtype=pl.String).fill_null("")}))
    df = df.filter(pl.col("text").str.strip_chars() != "")
    n = df.height
    if n == 0:
        return 0.0
    vllm_proc = pl.col("pname").str.contains(
        r"^(?:APIServer|VllmWorkerProcess|VllmWorker|EngineCore|RayWorkerWrapper|RayWorkerVllm|Worker)"
    ).fill_null(False)
    strong = pl.col("has_hdr") | vllm_proc | F.IS_STATS | pl.col("m").str.contains(
        r"vLLM API server version|LLM engine \(v|vllm\.entrypoints|vllm serve"
    )
    foreign = pl.col("text").str.contains(
        r"TensorRT-LLM|TRT-LLM|text_generation_(?:router|launcher|server)|\[TRT"
    )
    uvicorn = pl.col("m").str.contains(F.UVICORN_OTHER)
    s = df.select(strong.sum().alias("s"), foreign.sum().alias("f"), uvicorn.sum().alias("u")).row(0)
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
    starts = ~df["cont"]
    records = group_records(lines.select("line", pl.col("text").cast(pl.String).fill_null("")), starts)
    rec = records.select("line", "n_lines", pl.col("text").alias("raw")).join(
        df.filter(starts).drop("text", "cont", "key"), on="line", how="left"
    )

    # what the continuation lines add: the exception (the last one, as Python prints the
    # final exception last) and the whole message
    multi = df.with_columns(record_ids(starts)).with_columns(pl.len().over("_rec").alias("_len"))
    multi = multi.filter(pl.col("_len") > 1)
    exc1 = pl.col("m").str.extract_groups(F.EXCEPTION)
    if multi.height:
        agg = (
            multi.with_columns(exc1.alias("_e"))
            .group_by("_rec", maintain_order=True)
            .agg(
                pl.col("line").first(),
                pl.col("_e").struct.field("exc").drop_nulls().last().alias("_xt"),
                pl.col("_e").struct.field("excmsg")
                .filter(pl.col("_e").struct.field("exc").is_not_null()).last().alias("_xm"),
                pl.col("m").str.starts_with("Traceback (most recent call last)").any().alias("has_tb"),
                pl.col("body").str.join("\n").alias("body_all"),
            )
            .drop("_rec")
        )
        rec = rec.join(agg, on="line", how="left")
    else:
        rec = rec.with_columns(
            pl.lit(None, pl.String).alias("_xt"),
            pl.lit(None, pl.String).alias("_xm"),
            pl.lit(None, pl.Boolean).alias("has_tb"),
            pl.lit(None, pl.String).alias("body_all"),
        )
    rec = rec.sort("line").with_columns(
        pl.coalesce(pl.col("_xt"), exc1.struct.field("exc")).alias("exc_type"),
        pl.coalesce(pl.col("_xm"), exc1.struct.field("excmsg")).alias("exc_message"),
        pl.col("has_tb").fill_null(False),
    )
    return _events(rec, ctx)


# event families: each is computed on its own rows only, so a million stats lines never pay
# for the request regexes and vice versa
_FAMILIES = ("stats", "iter", "cap", "req", "preempt", "note", "access", "other")


def _family() -> pl.Expr:
    hdr = pl.col("has_hdr")
    bare = ~hdr & pl.col("pname").is_null() & F.BARE_VLLM
    return (
        pl.when((hdr | bare) & F.IS_STATS).then(pl.lit("stats"))
        .when(hdr & F.IS_ITERATION).then(pl.lit("iter"))
        .when((hdr | bare) & F.IS_CAPACITY).then(pl.lit("cap"))
        .when(hdr & (F.IS_RECEIVED | F.IS_ADDED | F.IS_FINISHED | F.IS_ABORTED | F.IS_DETAILS | F.IS_GENERATED))
        .then(pl.lit("req"))
        .when(hdr & F.IS_PREEMPT).then(pl.lit("preempt"))
        .when(hdr & (F.IS_BATCH_NOTE | F.IS_GEN_NOTE)).then(pl.lit("note"))
        .when(~hdr & pl.col("m").str.contains(F.UVICORN_ACCESS)).then(pl.lit("access"))
        .otherwise(pl.lit("other"))
    )


def _common_attrs() -> dict[str, pl.Expr]:
    pname = pl.col("pname")
    return {
        "process": pname,
        "pid": pl.col("pid"),
        "rank": pl.coalesce(pl.col("prank"), pl.col("trank")),
        "ip": pl.col("ip"),
        # data-parallel engines inside one instance: EngineCore_DP0 / EngineCore_0 / Worker_DP1_TP0
        "dp_rank": pname.str.extract(r"(?:_DP|^EngineCore_)(\d+)", 1).cast(pl.Int64, strict=False),
        "tp_rank": pname.str.extract(r"[_ ]TP(\d+)", 1).cast(pl.Int64, strict=False),
        "pp_rank": pname.str.extract(r"_PP(\d+)", 1).cast(pl.Int64, strict=False),
        "ep_rank": pname.str.extract(r"_EP(\d+)", 1).cast(pl.Int64, strict=False),
        "service": pl.col("svc"),
        "src": pl.when(pl.col("src").is_not_null()).then(
            pl.concat_str([pl.col("src"), pl.lit(":"), pl.col("lineno").cast(pl.String)])
        ),
    }


def _family_frame(fam: str, sub: pl.DataFrame) -> pl.DataFrame:
    """Event kind, schema columns and attrs for the rows of one family."""
    m = pl.col("m")
    cols: dict[str, pl.Expr] = {}
    extra: dict[str, pl.Expr] = {}
    if fam == "stats":
        cols = {"event": pl.lit("engine_stats"), **F.stats_columns()}
        extra = F.stats_attrs()
        # the optional parts (Preemptions, MM cache, KV fetch...) are rare: only the rows
        # that carry one pay for their regexes
        rich = sub["m"].str.contains(F.RARE_STATS)
        if not rich.any():
            extra = {k: v for k, v in extra.items() if k not in F.RARE_STATS_KEYS}
        elif not rich.all():
            return pl.concat(
                [_family_frame("stats", sub.filter(rich)), _family_frame("stats", sub.filter(~rich))],
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
        # the model is named only by the engine-config and argument-dump lines
        cols = {"event": pl.lit("capacity"), "_model": F.model_name(), **F.capacity_columns()}
        extra = F.capacity_attrs()
    elif fam == "req":
        rq = F.request_columns()
        kind = (
            pl.when(F.IS_RECEIVED | F.IS_ADDED).then(pl.lit("request_arrived"))
            .when(F.IS_FINISHED).then(pl.lit("request_finished"))
            .when(F.IS_ABORTED).then(pl.lit("request_aborted"))
            .otherwise(pl.lit("log"))  # `Request X details:` / `Generated response X:`
        )
        cols = {"event": kind, **rq, "_aborted": pl.when(F.IS_ABORTED).then(F.aborted_ids())}
        extra = F.request_attrs()
    elif fam == "preempt":
        extra = F.preemption_attrs()
        cols = {"event": pl.lit("preemption"), "request_id": extra.pop("request_id")}
    elif fam == "note":
        cols = {"event": pl.lit("batch"), **F.note_columns()}
        extra = {"batch_index": m.str.extract(r"^Running batch #(\d+)", 1).cast(pl.Int64, strict=False)}
    elif fam == "access":
        uv = pl.col("_uv").struct
        sub = sub.with_columns(m.str.extract_groups(F.UVICORN_ACCESS).alias("_uv"))
        cols = {
            "event": pl.lit("http_access"),
            "level": uv.field("ulevel"),
            "http_status": uv.field("status").cast(pl.Int32, strict=False),
        }
        extra = {
            "method": uv.field("method"),
            "path": uv.field("path"),
            "client": uv.field("client"),
            "protocol": uv.field("proto"),
        }
    else:
        hdr = pl.col("has_hdr")
        is_uv = ~hdr & m.str.contains(F.UVICORN_OTHER)
        is_pylog = ~hdr & m.str.contains(F.PYLOGGING)
        error = (hdr & (pl.col("level").is_in(["ERROR", "CRITICAL"]) | pl.col("has_tb"))) | (
            ~hdr & (pl.col("has_tb") | (pl.col("exc_type").is_not_null() & ~is_uv & ~is_pylog))
        )
        kind = (
            pl.when(error).then(pl.lit("error"))
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
    sub = sub.with_columns(**cols)
    # attrs fields that are null on every row of this part are left out before encoding
    fields = {**_common_attrs(), **extra}
    sub = sub.with_columns(**{f"_a_{k}": v for k, v in fields.items()})
    present = {k: pl.col(f"_a_{k}") for k in fields if sub[f"_a_{k}"].null_count() < sub.height}
    return sub.with_columns(attrs_json(**present).alias("attrs")).drop([f"_a_{k}" for k in fields])


def _events(rec: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    rec = rec.with_columns(_family().alias("_fam"))
    parts = [
        _family_frame(fam, part)
        for (fam,), part in rec.partition_by("_fam", as_dict=True, maintain_order=True).items()
    ]
    out = pl.concat(parts, how="diagonal_relaxed").sort("line")
    if "_aborted" not in out.columns:
        out = out.with_columns(pl.lit(None, pl.List(pl.String)).alias("_aborted"))
    if "_model" not in out.columns:
        out = out.with_columns(pl.lit(None, pl.String).alias("_model"))
    if "request_id" not in out.columns:
        out = out.with_columns(pl.lit(None, pl.String).alias("request_id"))

    # one event per aborted id, all on the same line span
    out = out.with_columns(
        pl.when(pl.col("_aborted").list.len() > 0)
        .then(pl.col("_aborted"))
        .otherwise(pl.concat_list([pl.col("request_id")]))
        .alias("request_id")
    ).explode("request_id")

    out = out.with_columns(
        rfc3339_to_ts(pl.col("rfc")).alias("ts"),
        pl.concat_str([pl.lit("2000-"), pl.col("md"), pl.lit(" "), pl.col("hms")])
        .str.to_datetime("%Y-%m-%d %H:%M:%S", time_unit="us", strict=False)
        .alias("ts_noyear"),
        pl.when(pl.col("event") == "unparsed").then(pl.col("raw"))
        .otherwise(pl.coalesce(pl.col("body_all"), pl.col("body")))
        .alias("message"),
    )

    # the model named at start-up applies to the rest of the file: base.finalize carries it
    # forward (CARRY_FORWARD), across chunks too
    out = out.with_columns(pl.col("_model").alias("model"))

    keep = [c for c in _OUT_COLS if c in out.columns]
    return out.select(keep).with_row_index("_seq")


_OUT_COLS = (
    "line", "n_lines", "ts", "ts_noyear", "level", "event", "request_id", "model",
    "prompt_tokens", "output_tokens", "max_tokens", "inference_s", "running", "waiting",
    "swapped", "batch_size", "batch_tokens", "kv_usage", "kv_blocks_total", "prompt_tps",
    "gen_tps", "max_num_seqs", "max_batch_tokens", "kv_capacity_tokens", "http_status",
    "message", "attrs",
)
