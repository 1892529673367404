"""The llama.cpp parser: `llama-server` logs of every era into the common schema.
The eras it reads are in docs/llamacpp.md; real excerpts in sample_logs/llamacpp/real/.

The anatomy of a line, outside in:
- the router's child prefix `[42027] ` (multi-model llama-server re-logs each child line);
- the relative time `M.SS.mmm.uuu ` (since process start; default since 2026-05, else
  `--log-timestamps`) and the level letter `I `/`W `/`E `/`D ` (`--log-prefix`);
- then one of the three eras' bodies:
  - 2024 `server_log`: a JSON object `{"tid":..,"timestamp":<unix s>,"level":..,
    "function":..,"line":..,"msg":.., extras}` (`message` and no tid before 2024-02), or its
    text form `INFO [   print_timings] msg | tid="..." timestamp=.. key=value ...`;
  - 2024-09 on (common/log): `slot <func>: id  S | task T | msg`, `srv  <func>: msg`,
    `que  <func>: msg` (func cut to 12 characters), and libllama's `<func>: msg` lines;
  - the timing block's unprefixed continuation lines (`prompt eval time = ...`), and
    journald's `[100B blob data]` where a line was hidden.

Events:
- `request`: one per timing block (see `timing.py`), on its last line:
  e2e_s = inference_s = total time, tpot_s, prompt_tokens (prompt tokens evaluated, i.e.
  not served from the prompt cache), output_tokens; request_id = the task id (`<task>@<port>` for a router child's,
  `<task>@run<k>` from the second process run that serves requests on, see
  finalize._scope_request_ids).
- `request_arrived` (`processing task`: a slot took the task), `request_finished` (slot
  `release` / `stop processing`, n_tokens in attrs), `request_aborted` (`cancel task,
  id_task = N`).
- `capacity`: `n_slots` (max_num_seqs), `n_seq_max` / `n_parallel` (max_num_seqs), libllama's
  `n_ctx` (kv_capacity_tokens), per-slot `n_ctx_slot` (attrs).
- `engine_stats`: the periodic progress lines: `n_decoded|n_gen = N, tg = X t/s` (gen_tps:
  the slot's decode speed since its generation started; tg_3s in attrs) and `prompt
  processing, n_tokens = N, progress = P, t = T s / X tokens per second` (prompt_tps).
- `http_access`: `request: POST /v1/... 127.0.0.1 200` / `done request: ...`, and 2024's
  `log_server_request` records.
- `error`: level E/ERR/ERROR, GGML_ASSERT, CUDA errors, out of memory.
- `log`: any other line with a llama.cpp header; `unparsed`: lines without one.

attrs carry slot, task, port, func, tid, rel_s and ts_anchor (see `clock.py`),
and each message's numbers. Everything is polars expressions over the chunk.
"""

from __future__ import annotations

import re

import polars as pl

from . import timing as T
from ...base import ANSI_RE, ParseContext, attrs_column
from .clock import REL_HEAD_RE, REL_LVL_HEAD_RE, anchor, file_runs, rel_digits, rel_us

NAME = "llamacpp"
# the decoding stage passes each line's wrapper time (`wrapper_ts`): a 2026 line's relative
# clock is anchored on it (clock.anchor), not replaced by it
WANTS_WRAPPER_TS = True
CARRY_FORWARD = ("model",)
# what every line naming a carried value contains (a newest-first export's reader looks
# for them before the chunks: pipeline/sources/carry_scan.py)
CARRY_HINT = ("loading model '", "general.name")
# whether a line may start a chunk depends on the lines before it up to a timing block's
# look-back (`timing.open_block`)
RECORD_LOOKBACK = T.BLOCK_LOOKBACK

_STR = pl.String

_PORT_RE = r"^\[\s*([0-9]+)\] "
_LEVEL_RE = r"^([IWEDT]) "
# (the function name is cut to 12 characters; forks such as llama-box print it whole and
# name a task alone: `srv  send_error: task 40 | error = ...`)
_TAG_RE = r"^(slot|srv|que|res|cmn) +([^\s:]{1,40}): (?:id +(-?[0-9]+) \| task (-?[0-9]+) \| ?|task (-?[0-9]+) \| )?"
_ERA_A_TEXT_RE = r"^\s*(INFO|WARN|ERR|VERB|DEBUG) \[\s*([A-Za-z0-9_:~]+)\] "
_FUNC_RE = r"^([A-Za-z_][A-Za-z0-9_.-]*(?: [A-Za-z0-9_.-]+)?): "
# the same with the whole match as group 1 (its length is where the message starts)
_TAG_WHOLE_RE = "^(" + _TAG_RE[1:] + ")"
_FUNC_WHOLE_RE = "^(" + _FUNC_RE[1:] + ")"
# `{"tid":..,"timestamp":..,"level":..` in the order server_log wrote them, or with the keys
# sorted (builds whose json sorted its keys: `{"function":..,"level":..,"line":..`)
_JSON_HINT = r'^\{"(?:tid|timestamp|level|function)"'
# a lead the decoding stage did not take off (a syslog tag `llama-Qwen:[1351]: `, a
# launcher's `name | `) before a 2026 relative time or a server tag: group 1 is the lead
_LEAD_RE = r"^(.{1,200}?(?::|\s\|)\s+)(?:[0-9]+\.[0-9]{2}\.[0-9]{3}\.[0-9]{3} [IWEDT] |(?:slot|srv|que) +[^\s:]{1,12}: )"
_INDENTED_REL_RE = r"^\s+([0-9]+\.[0-9]{2}\.[0-9]{3}\.[0-9]{3} [IWEDT] )"
# the indented `key = value, ...` lines of a multi-line `sampler params:` (or similar) dump
_KV_DUMP_RE = r"^\s{2,}[a-z_]+ = [^,\s]+(?:, [a-z_]+ = [^,\s]+)+\s*$"
_EARLY_RE = r"^(?:slot [0-9]+ (?:is processing|released|: )|all slots are idle|Available slots:| -> Slot [0-9]+ - max context|llama server listening at |system prompt updated$|[a-z_]{3,40} : |encoding image slice|image slice encoded in |decoding image batch |image decoded \(batch )"

# the forms of a line's body (`_classified`) and the event kinds, as Enums: each row's kind is
# compared with a name many times, a string comparison each time
_FORMS = pl.Enum(["json", "text24", "tag", "part", "blob", "early", "kv_dump", "func", "prefixed"])
_EVENTS = pl.Enum([
    "request", "log", "error", "request_arrived", "request_finished", "request_aborted", "http_access",
    "engine_stats", "capacity", "unparsed",
])

_LEVELS = {
    "I": "INFO", "W": "WARNING", "E": "ERROR", "D": "DEBUG", "T": "DEBUG",
    "INFO": "INFO", "WARN": "WARNING", "WARNING": "WARNING", "ERR": "ERROR", "ERROR": "ERROR",
    "VERB": "DEBUG", "DEBUG": "DEBUG",
}

# the 2024 records' extras we read (by name, in either JSON or key=value form)
_EXTRAS_NUM = (
    "t_prompt_processing", "n_prompt_tokens_processed", "t_token_generation", "n_decoded", "t_total",
    "n_ctx", "n_ctx_slot", "n_slots", "n_past", "n_cache_tokens", "n_system_tokens", "status",
    "n_idle_slots", "n_processing_slots", "n_tokens_second", "t_token", "p0",
)
_EXTRAS_STR = ("tid", "timestamp", "id_slot", "slot_id", "id_task", "task_id", "method", "path", "remote_addr", "truncated")


# ---------------------------------------------------------------------------------------
# contract


# what some line holds anywhere when a line is strong in `detect` (its body is the end of the
# line once colour codes are gone): a sample without any is no llama.cpp log, and the
# prefixes need not be taken apart
_MAYBE_STRONG_RE = "|".join((
    ANSI_RE, r"(?:slot|srv|que) +[^\s:]{1,12}: ", r'\{"(?:tid|timestamp|level|function)"', r"\| tid=", r"slot [0-9]+ ",
    r"(?:llama_model_loader|llama_context|llama_new_context_with_model|llama_kv_cache\w*|print_info|load_tensors|llm_load_\w+|ggml_\w+|main): ",
))


def detect(lines: list[str]) -> float:
    if not lines:
        return 0.0
    raw = pl.Series(lines, dtype=_STR)
    if not raw.str.contains(_MAYBE_STRONG_RE).any():
        return 0.0
    return _score(raw)


def _score(raw: pl.Series) -> float:
    """`detect`'s score of the sample lines `raw`, the lines taken apart."""
    s = _header(raw)
    s = s.filter(pl.col("_raw").str.strip_chars() != "")
    n = s.height
    if n == 0:
        return 0.0
    body = pl.col("_body")
    strong = s.select(
        (
            body.str.contains(r"^(?:slot|srv|que) +[^\s:]{1,12}: ")
            | (body.str.contains(_JSON_HINT) & body.str.contains(r'"function":"[a-z_]+"'))
            | body.str.contains(r"^\s*(?:INFO|WARN|ERR|VERB) \[\s*[a-z_]+\] .* \| tid=")
            # the 2023 server's plain prints
            | body.str.contains(r"^slot [0-9]+ (?:is processing \[task id: [0-9]+\]|: kv cache rm )")
            | body.str.contains(r"^(?:llama_model_loader|llama_context|llama_new_context_with_model|llama_kv_cache\w*|print_info|load_tensors|llm_load_\w+|ggml_\w+|main): ")
        ).sum()
    ).item()
    if strong == 0:
        return 0.0
    return min(1.0, 0.5 + 0.5 * strong / n)


def record_starts(text: pl.Series) -> pl.Series:
    """False where a line continues a timing block (or lies inside an open one), so that a
    chunk is never cut inside a request's timing block; nor between a task's `new prompt` or
    `cancel task` line and its end (`stop processing` or `total time`), which the chunk reads
    together (the whole prompt, an abort), as far as the timing block's look-back reaches."""
    text = text.cast(_STR)
    tagged = _tagged_starts(text)
    return tagged if tagged is not None else _anatomy_starts(text)


def _anatomy_starts(text: pl.Series) -> pl.Series:
    """`record_starts` of any window, each line taken apart."""
    df = _classified(_header(text))
    return df.select(
        ~_continues() & ~_block_or_task_open(pl.col("_msg"), pl.col("_part"), pl.col("_opener"))
    ).to_series().alias("starts")


def _block_or_task_open(msg: pl.Expr, part: pl.Expr, opener: pl.Expr) -> pl.Expr:
    """True where a line may not start a chunk for a timing block or a task left open."""
    task_open = msg.str.starts_with("new prompt,") | msg.str.contains("cancel task, id_task = ", literal=True)
    task_end = msg.str.starts_with("stop processing") | (part == "total")
    return (T.open_block(opener, part == "total", part.is_not_null() & ~opener)
            | T.open_block(task_open.fill_null(False), task_end.fill_null(False), pl.lit(False)))


# a 2026 log's usual line: the relative time (its minutes few enough to be read: `_rel` is
# set), the level letter if any and a server tag, the prefix up to the message as group 1 and
# the function as group 3 (the head has one way to match, so the tag's groups are the anatomy's)
_TAGGED_LINE_RE = r"^([0-9]{1,7}\.[0-9]{2}\.[0-9]{3}\.[0-9]{3} (?:[IWEDT] )?" + _TAG_RE[1:] + ")"


def _tagged_starts(text: pl.Series) -> pl.Series | None:
    """`record_starts` of a window whose every line is `_TAGGED_LINE_RE`'s, without the line
    anatomy (None for any other window). Such a line is its own (no continuation), its form a
    tag (no JSON, no 2024 text), its message the rest of the line; with no colour code to take
    out and no timing header (whose parts continue it) each line's part and task roles are
    its own, read here as `_classified` reads them."""
    df = pl.DataFrame({"t": text}).with_columns(pl.col("t").str.extract_groups(_TAGGED_LINE_RE).alias("g"))
    head = df["g"].struct.field("1")
    if head.null_count() or df.select(pl.col("t").str.contains(ANSI_RE).any()).item():
        return None
    g = pl.col("g")
    fn = g.struct.field("3")
    df = df.select(fn.alias("fn"), pl.col("t").str.slice(g.struct.field("1").str.len_chars()).alias("msg"))
    fn, msg = pl.col("fn"), pl.col("msg")
    if df.select(((fn == "print_timing") & (msg.str.strip_chars() == "")).any()).item():
        return None
    df = df.with_columns(T.part_kind(pl.when(fn.is_in(["print_timing", "print_timings"])).then(msg)).alias("part"))
    part = pl.col("part")
    return df.select(~_block_or_task_open(msg, part, (part == "prompt").fill_null(False))).to_series().alias("starts")


def scan_file(frames, ctx: ParseContext) -> None:
    """Before the chunks: where the file's process runs start and end (`clock.file_runs`)."""
    ctx.file["rel_runs"] = file_runs(((f["line"], _relative(f["text"])) for f in frames), ctx)


def _cut_lead(df: pl.DataFrame, col: str) -> pl.DataFrame:
    """`col` without a lead the decoding stage left (`_LEAD_RE`), the lead in `_lead`. Looked
    for only where the line does not open with a prefix of llama.cpp's own."""
    c = pl.col(col)
    # a viewer that puts its own time and level on a line of their own indents the server's
    # line under it (LM Studio's developer log): the relative time and level follow the blanks
    if df.select(c.str.contains(_INDENTED_REL_RE).any()).item():
        df = df.with_columns(c.str.replace(_INDENTED_REL_RE, "$1"))
    own = c.str.contains(r"^(?:\[\s*[0-9]+\] |[0-9]+\.[0-9]{2}\.|[IWEDT] |(?:slot|srv|que) |\{)")
    df = df.with_columns(pl.when(~own).then(c).str.extract(_LEAD_RE, 1).alias("_lead"))
    if df["_lead"].null_count() == df.height:
        return df
    return df.with_columns(
        pl.when(pl.col("_lead").is_not_null()).then(c.str.slice(pl.col("_lead").str.len_chars())).otherwise(c),
        pl.col("_lead").str.strip_chars_end().str.strip_chars_end(":|").str.strip_chars_end(),
    )


def _relative(text: pl.Series) -> pl.Series:
    """`_header`'s `_rel` alone (µs since start, null for lines without), for the first pass.
    A line that opens with the relative time needs none of the steps before it (no colour
    code, lead or router prefix comes first): read off the line as it is, and only the
    other lines taken apart."""
    rel = _rel_of(pl.DataFrame({"b": text}, schema={"b": _STR}), "b")
    missing = rel.is_null()
    if not missing.any():
        return rel
    if missing.all():
        return _relative_apart(text)
    return rel.scatter(missing.arg_true(), _relative_apart(text.filter(missing)))


def _relative_apart(text: pl.Series) -> pl.Series:
    """`_relative` of lines taken apart: colour codes, a lead, a router prefix first."""
    df = pl.DataFrame({"b": text}, schema={"b": _STR})
    b = pl.col("b")
    if df.select(b.str.contains(ANSI_RE).any()).item():
        df = df.with_columns(b.str.replace_all(ANSI_RE, ""))
    df = _cut_lead(df, "b")
    if df.select(b.str.contains(_PORT_RE).any()).item():  # a router's children: their prefix first
        df = df.with_columns(b.str.replace(_PORT_RE, ""))
    return _rel_of(df, "b")


def _rel_of(df: pl.DataFrame, col: str) -> pl.Series:
    """`rel_us` of the lines of `col` (null where a line does not open with a relative time)."""
    return df.select(rel_digits(pl.col(col).str.extract(REL_HEAD_RE, 0)).alias("_n")).select(rel_us(pl.col("_n"))).to_series()


def parse(lines: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    if lines.height == 0:
        return pl.DataFrame({"line": pl.Series([], dtype=pl.Int64)})
    df = _header(lines["text"], wrap=lines["wrapper_ts"] if "wrapper_ts" in lines.columns else None)
    df = df.with_columns(lines["line"])
    df = _classified(df)
    cont = _continued(df)
    df = anchor(df)
    df = T.blocks(df)
    out = _events(df)
    return _joined(out, lines["line"], cont) if cont.any() else out


# one log call printing several lines: the chat template's example (`example_format: '...'`,
# its quote closed lines later) and `sampler params: \n%s` (indented `key = value` lines)
_TEMPLATE_OPEN_RE = r"example_format: ('.*)$"
_SAMPLER_OPEN_RE = r"sampler params:\s*$"
# how far a quote left open may run on before its lines are taken for lines of their own
_RECORD_MAX = 200


def _own() -> pl.Expr:
    """True where a line carries a prefix of its own (it starts a message)."""
    return (pl.col("_rel").is_not_null() | pl.col("_lvl").is_not_null() | pl.col("_port").is_not_null()
            | pl.col("_form").is_in(["json", "text24", "tag", "part", "blob"]).fill_null(False))


# the literal every message that opens a multi-line one holds (_TEMPLATE_OPEN_RE, _SAMPLER_OPEN_RE)
_OPENS_HINT = "example_format: '|sampler params:"


def _continued(df: pl.DataFrame) -> pl.Series:
    """`_continues()` of a chunk's lines. Most chunks have no line without a prefix, or no
    message that opens a multi-line one: then no line continues another, and the searches
    and fills over every line are not needed."""
    if not df.select((~_own()).any()).item() or not df.select(pl.col("_msg").str.contains(_OPENS_HINT).any()).item():
        return pl.repeat(False, df.height, dtype=pl.Boolean, eager=True).alias("_cont")
    return df.select(_continues()).to_series()


def _continues() -> pl.Expr:
    """True where a line continues the message of a line before it (it carries no prefix of
    its own). Lines of a router's child come one log call each, under its port, so never."""
    f = pl.col("_form")
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    own = _own()
    quoted = pl.col("_msg").str.extract(_TEMPLATE_OPEN_RE, 1)
    opens = own & (quoted.str.count_matches("'", literal=True) % 2 == 1).fill_null(False)
    last_open = pl.when(opens).then(idx).forward_fill().shift(1)
    last_own = pl.when(own).then(idx).forward_fill().shift(1)
    last_quote = pl.when(~own & pl.col("_raw").str.contains("'", literal=True)).then(idx).forward_fill().shift(1)
    in_template = (~own & (last_own == last_open) & (last_quote.is_null() | (last_quote < last_open))
                   & (idx - last_open <= _RECORD_MAX)).fill_null(False)
    kv = (f == "kv_dump").fill_null(False)
    after_sampler = pl.when(~kv).then(pl.col("_msg").str.contains(_SAMPLER_OPEN_RE)).forward_fill().shift(1)
    in_sampler = kv & ~own & after_sampler.fill_null(False)
    return (in_template | in_sampler).alias("_cont")


def _joined(events: pl.DataFrame, line: pl.Series, cont: pl.Series) -> pl.DataFrame:
    """The events with each continued message as one record: its first line's event spans
    the lines that continue it, and theirs go."""
    spans = pl.DataFrame({"line": line, "_c": cont}).with_columns((~pl.col("_c")).cum_sum().alias("_rec"))
    spans = spans.with_columns(pl.len().over("_rec").cast(pl.Int32).alias("_span"))
    out = events.join(spans.select("line", "_c", "_span"), on="line", how="left")
    return out.filter(~pl.col("_c").fill_null(False)).with_columns(
        pl.coalesce(pl.col("_span"), pl.col("n_lines")).alias("n_lines")
    ).drop("_c", "_span")


# ---------------------------------------------------------------------------------------
# the line's anatomy


def _opens_timed(text: pl.Series) -> bool:
    return len(text) > 0 and re.match(r"[0-9]+\.", text[0] or "") is not None


def _cut_prefixes(df: pl.DataFrame) -> pl.DataFrame:
    """`_body` without a lead (`_lead`) and a router's prefix (`_port`), then `_timed_head`."""
    c = pl.col("_body")
    df = _cut_lead(df, "_body")
    df = df.with_columns(c.str.extract(_PORT_RE, 1).cast(pl.Int64, strict=False).alias("_port"))
    if df["_port"].null_count() < df.height:
        df = df.with_columns(c.str.replace(_PORT_RE, ""))
    return _timed_head(df)


def _timed_head(df: pl.DataFrame) -> pl.DataFrame:
    """The relative time and level letter `_body` opens with: `_g` the match whole (the body is
    cut after it by its length: the rest of the line as a group would cost the pattern several
    times), `_rel` µs since start, `_g1` the character before the match's last space."""
    g = pl.col("_g")
    df = df.with_columns(pl.col("_body").str.extract(REL_LVL_HEAD_RE, 0).alias("_g"))
    df = df.with_columns(rel_digits(g).alias("_rel"), g.str.slice(-2, 1).alias("_g1"))
    return df.with_columns(rel_us(pl.col("_rel")))


def _header(text: pl.Series, wrap: pl.Series | None = None) -> pl.DataFrame:
    """Per physical line: `_raw`, `_port`, `_rel` (µs since start), `_lvl`, `_body` (what
    follows the prefixes), `_abs` (a wall-clock time the line carries), `_wrap`."""
    df = pl.DataFrame({"_raw": text}, schema={"_raw": _STR})
    c = pl.col("_body")
    df = df.with_columns(pl.col("_raw").alias("_body"))
    if df.select(c.str.contains(ANSI_RE).any()).item():
        df = df.with_columns(c.str.replace_all(ANSI_RE, ""))
    # a line that opens with the relative time has no lead or router prefix to cut (their steps
    # leave it as it is): when every line of the chunk does, as most of a 2026 log's chunks,
    # they are left out (tried when the first line does)
    if _opens_timed(text):
        df = _timed_head(df)
        if df["_rel"].null_count() == 0:
            df = df.with_columns(pl.lit(None, _STR).alias("_lead"), pl.lit(None, pl.Int64).alias("_port"))
            df = df.select("_raw", "_body", "_lead", "_port", "_g", "_rel", "_g1")
        else:
            df = _cut_prefixes(df.drop("_g", "_rel", "_g1"))
    else:
        df = _cut_prefixes(df)
    g = pl.col("_g")
    timed = pl.col("_rel").is_not_null()
    # the time ends in a digit and a space: a letter before the head's last space is the level
    lvl = pl.col("_g1")
    # a bare level letter only before a timestamp's body or a server tag
    bare = _has(pl.when(~timed).then(c), r"^[IWEDT] (?:slot|srv|que|res|cmn) ")
    df = df.with_columns(
        pl.when(timed & lvl.is_in(list("IWEDT"))).then(lvl).when(bare).then(c.str.head(1)).alias("_lvl"),
        pl.when(timed).then(c.str.slice(g.str.len_chars())).when(bare).then(c.str.slice(2)).otherwise(c).alias("_body"),
    ).drop("_g", "_g1")
    wrap_col = wrap.cast(pl.Datetime("us", "UTC")) if wrap is not None else pl.repeat(
        None, df.height, dtype=pl.Datetime("us", "UTC"), eager=True)
    return df.with_columns(wrap_col.alias("_wrap"))


def _extra(src: pl.Expr, key: str) -> pl.Expr:
    """A 2024 record's field by name: `"key":value` (JSON) or ` key=value` (text form)."""
    v = src.str.extract(rf'(?:"{key}":|(?:^| ){key}=)("(?:[^"\\]|\\.)*"|[^,}}\s]+)', 1)
    return v.str.strip_chars('"')


def _has(text: pl.Expr, pattern: str) -> pl.Expr:
    """Whether `pattern` matches, false on a null `text`. For tests on the rows a `when` left:
    `str.contains` runs its pattern over the text under a null too, `str.find` does not."""
    return text.str.find(pattern).is_not_null()


def _classified(df: pl.DataFrame) -> pl.DataFrame:
    """The body taken apart: `_form` (json/text24/tag/func/part/blob/early), `_fn`, `_slot`,
    `_task`, `_msg`, level, 2024 extras `_x_*`, and the timing roles `_part` / `_opener` /
    `_key` that pair a block's lines."""
    b = pl.col("_body")
    # each family's pattern once, as a column: its groups, the first the whole match (a
    # struct field used twice would run the pattern twice); the families after these three
    # are tried only on the lines none of them took (the forms cannot overlap: a JSON record
    # opens with `{"`, the 2024 text form with its level word, a tag with its name)
    tag, a_txt, fnc = pl.col("_tg"), pl.col("_at"), pl.col("_fg")
    # (the JSON tests only on the lines opening with `{`, the 2024 text form's pattern not on
    # those opening with a server tag's name)
    jcand = pl.when(b.str.starts_with("{")).then(b)
    df = df.with_columns(
        (_has(jcand, _JSON_HINT) | (_has(jcand, r'(?s)^\{(?:"function":"|".*"function":")') & _has(jcand, r'(?s)^\{(?:"level":"|".*"level":")'))).alias("_is_json"),
        pl.when(~(b.str.starts_with("slot") | b.str.starts_with("srv"))).then(b).str.extract_groups(_ERA_A_TEXT_RE).alias("_at"),
        b.str.extract_groups(_TAG_WHOLE_RE).alias("_tg"),
    )
    is_json = pl.col("_is_json")
    is_txt = a_txt.struct.field("1").is_not_null()
    is_tag = tag.struct.field("1").is_not_null()
    df = df.with_columns(pl.when(~(is_json | is_txt | is_tag)).then(b).alias("_other"))
    other = pl.col("_other")
    form = (
        pl.when(is_json).then(pl.lit("json"))
        .when(is_txt).then(pl.lit("text24"))
        .when(is_tag).then(pl.lit("tag"))
        .when(_has(other, T.PART_RE)).then(pl.lit("part"))
        .when(_has(other, T.BLOB_RE)).then(pl.lit("blob"))
        .when(_has(other, _EARLY_RE)).then(pl.lit("early"))
        .when(_has(other, _KV_DUMP_RE)).then(pl.lit("kv_dump"))
        .when(_has(other, _FUNC_RE)).then(pl.lit("func"))
        # any other line behind the relative time and level prefix is still llama.cpp's
        .when(pl.col("_rel").is_not_null() | pl.col("_lvl").is_not_null()).then(pl.lit("prefixed"))
    )
    # (an Enum: the form is compared with a name many times per line)
    df = df.with_columns(form.cast(_FORMS).alias("_form")).drop("_other")
    f = pl.col("_form")
    # a branch for a form no line of the chunk has would still cost a pass over every row
    present = set(df["_form"].unique().to_list())
    on = lambda *branches, otherwise=None: _by_form(present, branches, otherwise)  # noqa: E731
    if "func" in present:
        df = df.with_columns(pl.when(f == "func").then(b).str.extract_groups(_FUNC_WHOLE_RE).alias("_fg"))
    jb = pl.when(f == "json").then(b)
    jmsg = pl.coalesce(jb.str.json_path_match("$.msg"), jb.str.json_path_match("$.message"))
    # the text form's extras follow ` | tid=` (2024-02 on)
    tb = pl.when(f == "text24").then(b)
    # (a replace runs over the text under a null too: only in a chunk holding such lines)
    if "text24" in present:
        txt_msg = tb.str.replace(_ERA_A_TEXT_RE, "").str.replace(r" \| tid=.*$", "")
    else:
        txt_msg = pl.lit(None, _STR)
    txt_extra = tb.str.extract(r" \| (tid=.*)$", 1)
    df = df.with_columns(
        on(("json", b), ("text24", txt_extra)).alias("_xsrc"),
        on(("json", pl.coalesce(jb.str.json_path_match("$.function"), pl.lit("?"))),
           ("text24", a_txt.struct.field("2")),
           ("tag", tag.struct.field("3")),
           ("func", fnc.struct.field("2"))).alias("_fn"),
        on(("tag", tag.struct.field("2"))).alias("_tag"),
        on(("json", jmsg),
           ("text24", txt_msg),
           # (the body opens with the whole match: cut off as a prefix, not counted in characters)
           ("tag", b.str.strip_prefix(tag.struct.field("1"))),
           ("func", b.str.strip_prefix(fnc.struct.field("1"))),
           otherwise=b).alias("_msg"),
        pl.coalesce(
            pl.col("_lvl"),
            *([jb.str.json_path_match("$.level")] if "json" in present else []),
            *([pl.when(f == "text24").then(a_txt.struct.field("1"))] if "text24" in present else []),
        ).replace_strict(_LEVELS, default=None).alias("level"),
    )
    # a line without a level letter (builds before 2026): the server prints a cancel with
    # SRV_WRN, so it is a warning in every format
    df = df.with_columns(pl.when(_has(pl.when(pl.col("level").is_null()).then(pl.col("_msg")),
                                      "cancel task, id_task = ")).then(pl.lit("WARNING"))
        # the router's `load` (spawning a child, its arguments) and the prompt cache's `load`
        # print with SRV_INF only
        .when(pl.col("level").is_null() & (pl.col("_tag") == "srv") & (pl.col("_fn") == "load")).then(pl.lit("INFO"))
        .otherwise(pl.col("level")).alias("level"))
    xs = pl.col("_xsrc")
    if df["_xsrc"].null_count() < df.height:
        extras = [
            *[_extra(xs, k).cast(pl.Float64, strict=False).alias(f"_x_{k}") for k in _EXTRAS_NUM],
            *[_extra(xs, k).alias(f"_x_{k}") for k in _EXTRAS_STR],
        ]
    else:  # no 2024 record in the chunk (any later log): no pass for their fields
        extras = [
            *[pl.lit(None, pl.Float64).alias(f"_x_{k}") for k in _EXTRAS_NUM],
            *[pl.lit(None, _STR).alias(f"_x_{k}") for k in _EXTRAS_STR],
        ]
    df = df.with_columns(*extras)
    # the message's own mention searched only where the prefix and the extras name none
    slot = pl.coalesce(
        pl.when(f == "tag").then(tag.struct.field("4").cast(pl.Int64, strict=False)),
        pl.col("_x_id_slot").cast(pl.Int64, strict=False),
        pl.col("_x_slot_id").cast(pl.Int64, strict=False),
    )
    task = pl.coalesce(
        pl.when(f == "tag").then(pl.coalesce(tag.struct.field("5"), tag.struct.field("6")).cast(pl.Int64, strict=False)),
        pl.col("_x_id_task").cast(pl.Int64, strict=False),
        pl.col("_x_task_id").cast(pl.Int64, strict=False),
    )
    # (as columns first: each is read twice below)
    df = df.with_columns(slot.alias("_slot"), task.alias("_task"))
    slot, task = pl.col("_slot"), pl.col("_task")
    df = df.with_columns(
        pl.coalesce(
            slot,
            pl.when(slot.is_null()).then(pl.col("_msg")).str.extract(r"^slot ([0-9]+) ", 1).cast(pl.Int64, strict=False),
        ).alias("_slot"),
        pl.coalesce(
            task,
            pl.when(task.is_null()).then(pl.col("_msg")).str.extract(r"\[task id: ([0-9]+)\]", 1).cast(pl.Int64, strict=False),
            # `srv  send_error: task id = 289, error: ...`: the request the error is sent to
            pl.when(pl.col("_fn") == "send_error").then(pl.col("_msg")).str.extract(r"^task id = ([0-9]+)", 1).cast(pl.Int64, strict=False),
        ).alias("_task"),
        pl.from_epoch(_abs_seconds(pl.col("_x_timestamp")), time_unit="s")
        .dt.replace_time_zone("UTC").cast(pl.Datetime("us", "UTC")).alias("_abs"),
    )
    return _timing_roles(df.drop("_is_json", "_at", "_tg", "_fg", strict=False))


def _by_form(present: set, branches, otherwise: pl.Expr | None = None) -> pl.Expr:
    """`when(_form == form).then(value)...` over the (form, value) branches whose form is in
    `present` (the forms of the chunk's lines), then `otherwise` (else null)."""
    out = None
    for form, value in branches:
        if form in present:
            cond = pl.col("_form") == form
            out = pl.when(cond).then(value) if out is None else out.when(cond).then(value)
    if out is None:
        return pl.lit(None, _STR) if otherwise is None else otherwise
    return out if otherwise is None else out.otherwise(otherwise)


def _abs_seconds(v: pl.Expr) -> pl.Expr:
    # unix seconds in a plausible range (a pasted or damaged value must not overflow)
    n = v.cast(pl.Int64, strict=False)
    return pl.when((n > 946_684_800) & (n < 4_102_444_800)).then(n)


def _by_port(df: pl.DataFrame):
    """A window over the router port (null: the server's own lines), or none when every
    line of the chunk is the server's own: one group, and a window costs a grouping."""
    if df["_port"].null_count() == df.height:
        return lambda e: e
    return lambda e: e.over(pl.col("_port").fill_null(-1))


def _timing_roles(df: pl.DataFrame) -> pl.DataFrame:
    """`_part`: the row's role in a timing block; `_opener`: it opens one; `_key`: which
    request's block (port|slot|task). A continuation line (2024-09..2026-05) or a hidden
    journald blob takes the key of the `slot print_timing:` header just before it (same
    router port, with only such lines between)."""
    f, msg = pl.col("_form"), pl.col("_msg")
    # a part's kind only on the rows that may be parts (its patterns over null are free)
    timed = f.is_in(["tag", "json", "text24", "part", "func"]) & (pl.col("_fn").is_null() | pl.col("_fn").is_in(["print_timing", "print_timings"]))
    # (the header test as a column: it is read up to five times)
    df = df.with_columns(
        pl.when(timed).then(msg).alias("_kind"),
        ((f == "tag") & (pl.col("_fn") == "print_timing") & (msg.str.strip_chars() == "")).alias("_hdr"),
    )
    df = df.with_columns(T.part_kind(pl.col("_kind")).alias("_kind"))
    kind = pl.col("_kind")
    header = pl.col("_hdr")
    # (built only on the rows that read it: a header, a part that names its own slot and task)
    keyed = header | kind.is_not_null()
    port = pl.lit("") if df["_port"].null_count() == df.height else pl.col("_port").cast(_STR).fill_null("")
    own_key = pl.concat_str(
        [port, pl.when(keyed).then(pl.col("_slot")).cast(_STR), pl.when(keyed).then(pl.col("_task")).cast(_STR)],
        separator="|",
    )
    if not df["_hdr"].any():
        # no header in the chunk (a 2026 block's lines each name their task, or no block): no
        # line continues one, and every part keys itself
        return df.with_columns(
            kind.alias("_part"), pl.lit(False).alias("_cont"),
            (header | (kind == "prompt")).alias("_opener"),
            pl.when(kind.is_not_null()).then(own_key).alias("_key"),
        ).drop("_hdr", "_kind")
    # (a row number column: `int_range` inside `.over()` would count within each port; the
    # key a column too: it is read twice)
    df = df.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_idx"), own_key.alias("_own_key"))
    own_key = pl.col("_own_key")
    idx = pl.col("_idx")
    by_port = _by_port(df)
    candidate = f.is_in(["part", "blob"]).fill_null(False)
    df = df.with_columns(
        by_port(pl.when(header).then(idx).forward_fill()).alias("_hdr_at"),
        by_port(pl.when(header).then(own_key).forward_fill()).alias("_hdr_key"),
        by_port(pl.when(~candidate).then(idx).forward_fill()).alias("_last_other"),
    )
    # the continuation lines directly follow their header (one log call writes them all)
    follows = (
        (pl.col("_last_other") == pl.col("_hdr_at")) & (pl.col("_idx") - pl.col("_hdr_at") <= 8)
    ).fill_null(False)
    cont = candidate & follows
    part = (
        pl.when(header).then(pl.lit("header"))
        .when((f == "blob") & follows).then(pl.lit("hidden"))
        .when(kind.is_not_null()).then(kind)
    )
    df = df.with_columns(part.alias("_part"), cont.alias("_cont"))
    return df.with_columns(
        (pl.col("_hdr") | ((pl.col("_part") == "prompt") & ~pl.col("_cont"))).alias("_opener"),
        pl.when(pl.col("_part").is_not_null()).then(
            pl.when(pl.col("_cont")).then(pl.col("_hdr_key")).otherwise(own_key)
        ).alias("_key"),
    ).drop("_hdr", "_hdr_at", "_hdr_key", "_idx", "_last_other", "_own_key", "_kind")


# ---------------------------------------------------------------------------------------
# events


def _num(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.Float64, strict=False)


# (libllama's LLAMA_LOG_ERROR and the server's SRV_ERR lines carry no level letter without
# --log-prefix: the messages themselves say so)
_ERROR_RE = (
    r"GGML_ASSERT|CUDA error|(?i:out of memory)|terminate called|Segmentation fault|core dumped|^error: "
    r"|failed to decode the batch|failed to (?:initialize batch|decode, ret = )|Invalid input batch"
    r"|inconsistent sequence positions|Assertion `.*' failed|^srv +send_error: "
)
# a literal of each rare pattern of `_events` (aborts, capacity, model name, unified KV)
_RARE_HINT = r"cancel task|n_slots|n_seq_max|n_parallel|n_ctx|-> Slot|loading model|kv_unified|general\.name"
# the usual `new prompt` line whole: n_ctx_slot, n_keep, the prompt's tokens
_NEW_PROMPT_RE = r"^new prompt, n_ctx_slot = ([0-9]+), n_keep = (-?[0-9]+), (?:n_prompt_tokens|task\.n_tokens) = ([0-9]+)$"
# the usual release line whole: its two numbers by one anchored pattern; any other release
# line by the field patterns (each the first of its kind in the message, as here)
_RELEASE_RE = r"^stop processing: n_tokens = ([0-9]+), truncated = ([0-9]+)$"
_ACCESS_RE = r"(?:^|: )(?:done )?request: ([A-Z]+) (\S+) (\S+) ([0-9]{3})\s*$"
# llama-box: `srv  log_server_request: rid 959706094865 | POST /v1/chat/completions 1.2.3.4:52058`
# as the request arrives (a `log`), `srv  log_server_response: rid ... | GET /v1/models
# 1.2.3.4:51535 | status 200 | cost 0.00s` as it is answered (the access record)
_BOX_ACCESS_RE = r"^rid \S+ \| ([A-Z]+) (\S+) (\S+)(?: \| status ([0-9]{3}))?"
_TG_RE = r"^n_(?:decoded|gen) =\s*([0-9]+), tg =\s*([0-9.]+) t/s(?:, tg_3s =\s*([0-9.]+) t/s)?"
_PP_RE = r"^prompt processing, n_tokens =\s*([0-9]+), progress = ([0-9.]+), t =\s*([0-9.]+) s /\s*([0-9.]+) tokens per second"


def _events(df: pl.DataFrame) -> pl.DataFrame:
    msg, fn, f, lvl = pl.col("_msg"), pl.col("_fn"), pl.col("_form"), pl.col("level")
    body = pl.col("_body")
    headed = f.is_not_null()
    # each pattern only where a literal test says it may match (a search over null is free);
    # those read for several fields as columns first: a pattern under `when` is run again for
    # every field read from it
    np_head = msg.str.starts_with("new prompt,")
    slot_head = msg.str.starts_with("slot ")
    df = df.with_columns(
        pl.when(body.str.contains("request: ", literal=True)).then(body).str.extract_groups(_ACCESS_RE).alias("_accg"),
        pl.when(fn.is_in(["log_server_request", "log_server_response"])).then(msg).str.extract_groups(_BOX_ACCESS_RE).alias("_boxg"),
        pl.when(msg.str.starts_with("n_")).then(msg).str.extract_groups(_TG_RE).alias("_tgg"),
        pl.when(msg.str.starts_with("prompt processing,")).then(msg).str.extract_groups(_PP_RE).alias("_ppg"),
        # `prompt processing progress, n_past = P, n_tokens = B, progress = F` (2024-25: P tokens
        # done, B in this batch), `... n_tokens = P, batch.n_tokens = B, progress = F` (2025-26)
        pl.when(msg.str.starts_with("prompt processing progress,")).then(msg).str.extract_groups(
            r"^prompt processing progress, (?:n_past = ([0-9]+), n_tokens = ([0-9]+)|n_tokens = ([0-9]+), batch\.n_tokens = ([0-9]+)), progress = ([0-9.]+)"
        ).alias("_pppg"),
        # `new prompt, n_ctx_slot = N, n_keep = N, n_prompt_tokens = N` (2025: `task.n_tokens =
        # N`): the task's whole prompt, cached part included. A line of exactly that shape is
        # read by one pattern (no rare pattern below can match it: each needs a literal it does
        # not hold, or starts otherwise); any other `new prompt,` line by the field patterns
        pl.when(np_head).then(msg).str.extract_groups(_NEW_PROMPT_RE).alias("_npg"),
        pl.when(msg.str.starts_with("stop processing: n_tokens = ")).then(msg).str.extract_groups(_RELEASE_RE).alias("_relg"),
        # (each pattern only on the messages opening with one of its literal heads)
        # (a message opening with the literal is one; the pattern only for the older forms)
        (msg.str.starts_with("processing task").fill_null(False)
         | _has(pl.when(slot_head).then(msg), r"^slot (?:is processing task|[0-9]+ is processing \[task id: [0-9]+\])")).alias("_arrived"),
        (msg.str.starts_with("stop processing").fill_null(False)
         | _has(pl.when(slot_head).then(msg), r"^slot (?:released|[0-9]+ released)")).alias("_finished"),
    )
    access, box, tg, pp, ppp, np_exact = (pl.col(c) for c in ("_accg", "_boxg", "_tgg", "_ppg", "_pppg", "_npg"))
    np_other = np_exact.struct.field("1").is_null()
    # the start-up and abort lines: a few per run among every request's lines, so their
    # patterns run only on the messages holding one of their literals (as a column: read by
    # several patterns)
    df = df.with_columns(
        pl.when(np_head & np_other).then(msg).alias("_npm"),
        pl.when(msg.str.contains(_RARE_HINT) & np_other).then(msg).alias("_rare"),
    )
    # most chunks hold no start-up line, no other `new prompt` form and no 2024 record: then
    # their readings are left out (each would cost a pass over every row, for nulls)
    some = lambda col: df[col].null_count() < df.height  # noqa: E731
    has_rare = some("_rare")
    np_msg = pl.col("_npm") if some("_npm") else pl.lit(None, _STR)
    rare = pl.col("_rare") if has_rare else pl.lit(None, _STR)
    # a 2024 record's field on the messages that name it (none where no record holds it)
    x_on = lambda message, k: pl.when(msg == message).then(pl.col(f"_x_{k}").cast(pl.Int64, strict=False)) if some(f"_x_{k}") else None  # noqa: E731
    or_null = lambda *es: pl.coalesce(*[e for e in es if e is not None] or [pl.lit(None, pl.Int64)])  # noqa: E731
    json_access = (fn == "log_server_request") & pl.col("_x_status").is_not_null()
    arrived, finished = pl.col("_arrived"), pl.col("_finished")
    aborted_id = rare.str.extract(r"cancel task, id_task = ([0-9]+)", 1)
    new_prompt = pl.coalesce(np_exact.struct.field("3"), np_msg.str.extract(r"(?:n_prompt_tokens|task\.n_tokens) = ([0-9]+)", 1)).cast(pl.Int64, strict=False)
    # `kv cache rm [N, end)` (2024; early 2024: `slot 0 : kv cache rm - [N, end)`), `n_tokens =
    # N, memory_seq_rm [N, end)` (2025), `cached n_tokens = N, memory_seq_rm [N, end)` (2026):
    # the prompt's first N tokens are reused
    cached = pl.when(msg.str.contains("rm ", literal=True)).then(msg).str.extract(
        r"^(?:kv cache rm|slot [0-9]+ : kv cache rm -|(?:cached )?n_tokens = [0-9]+, memory_seq_rm) \[([0-9]+), end\)", 1)
    n_slots = or_null(rare.str.extract(r"initializing(?: slots)?, n_slots = ([0-9]+)", 1).cast(pl.Int64, strict=False),
                      x_on("initializing slots", "n_slots"))
    n_seq = rare.str.extract(r"^(?:n_seq_max|n_parallel)\s*=\s*([0-9]+)", 1).cast(pl.Int64, strict=False)
    n_ctx = or_null(
        pl.when(fn.is_in(["llama_context", "llama_new_context_with_model", "llama_init_from_model"])).then(
            rare.str.extract(r"^n_ctx\s*=\s*([0-9]+)", 1).cast(pl.Int64, strict=False)) if has_rare else None,
        # `llama_kv_cache: size = 2048.00 MiB ( 16384 cells,  32 layers,  1/1 seqs), ...`
        pl.when(fn.is_in(["llama_kv_cache", "llama_kv_cache_unified"])).then(
            msg.str.extract(r"^size =\s*[0-9.]+ MiB \(\s*([0-9]+) cells", 1).cast(pl.Int64, strict=False)),
    )
    n_ctx_slot_new = or_null(
        rare.str.extract(r"(?:new slot,?|^initializing, n_slots = [0-9]+,) n_ctx_slot = ([0-9]+)", 1).cast(pl.Int64, strict=False),
        x_on("new slot", "n_ctx_slot"),
        rare.str.extract(r"^ -> Slot [0-9]+ - max context: ([0-9]+)", 1).cast(pl.Int64, strict=False),
    )
    model = pl.coalesce(
        rare.str.extract(r"loading model '([^']+)'", 1),
        rare.str.extract(r"general\.name\s+(?:str\s+)?=\s+(.+?)\s*$", 1),
    )
    df = df.with_columns(
        pl.coalesce(access.struct.field("1"), box.struct.field("1")).alias("method"),
        pl.coalesce(access.struct.field("2"), box.struct.field("2")).alias("path"),
        pl.coalesce(access.struct.field("3"), box.struct.field("3")).alias("client"),
        pl.coalesce(access.struct.field("4"), box.struct.field("4")).cast(pl.Int32, strict=False).alias("_status"),
        _num(tg.struct.field("1")).cast(pl.Int64, strict=False).alias("n_decoded"),
        _num(tg.struct.field("2")).alias("_tg"),
        _num(tg.struct.field("3")).alias("tg_3s"),
        pl.coalesce(pp.struct.field("1"), ppp.struct.field("1"), ppp.struct.field("3")).cast(pl.Int64, strict=False).alias("n_tokens"),
        pl.coalesce(_num(pp.struct.field("2")), _num(ppp.struct.field("5"))).alias("progress"),
        pl.coalesce(ppp.struct.field("2"), ppp.struct.field("4")).cast(pl.Int64, strict=False).alias("batch_n_tokens"),
        pl.coalesce(cached.cast(pl.Int64, strict=False),
                    # 2024's records: `kv cache rm [p0, end)` with the position in `p0`
                    *([pl.when(msg.str.starts_with("kv cache rm [p0")).then(pl.col("_x_p0").cast(pl.Int64, strict=False))]
                      if some("_x_p0") else [])).alias("cached_tokens"),
        pl.coalesce(np_exact.struct.field("1"), np_msg.str.extract(r"n_ctx_slot = ([0-9]+)", 1)).cast(pl.Int64, strict=False).alias("_np_ctx"),
        pl.coalesce(np_exact.struct.field("2"), np_msg.str.extract(r"n_keep = (-?[0-9]+)", 1)).cast(pl.Int64, strict=False).alias("n_keep"),
        _num(pp.struct.field("3")).alias("elapsed_s"),
        _num(pp.struct.field("4")).alias("_pp"),
        n_slots.alias("_n_slots"), n_seq.alias("_n_seq"), n_ctx.alias("_n_ctx"),
        n_ctx_slot_new.alias("n_ctx_slot"),
        model.alias("model"),
        aborted_id.cast(pl.Int64, strict=False).alias("_abort_task"),
        new_prompt.alias("_np_tokens"),
        # kv_unified = 'true': every slot draws on one pool of n_ctx_slot cells
        rare.str.extract(r"kv_unified = '(\w+)'", 1).alias("_kv_unified"),
    )
    # 2023's `slot 0 released (N tokens in cache)` names its slot only: the task that slot
    # took last (looked for only when a chunk has such a line)
    if df.select((finished & pl.col("_task").is_null() & pl.col("_slot").is_not_null()).any()).item():
        slot_task = pl.when(arrived).then(pl.col("_task")).forward_fill().over(pl.col("_port").fill_null(-1), "_slot")
        df = df.with_columns(
            pl.coalesce("_task", pl.when(finished & pl.col("_slot").is_not_null()).then(slot_task)).alias("_task")
        )
    # 2024's metrics task: `slot data` with n_idle_slots / n_processing_slots (slots busy now)
    slot_data = (msg == "slot data") & pl.col("_x_n_processing_slots").is_not_null()
    is_cap = pl.coalesce(pl.col("_n_slots"), pl.col("_n_seq"), pl.col("_n_ctx"), pl.col("n_ctx_slot")).is_not_null()
    is_access = pl.col("_status").is_not_null() | json_access
    part = pl.col("_part")
    # (a timing part's row is a request or a log before the error test is read)
    error = (lvl == "ERROR") | _has(pl.when(part.is_null()).then(body), _ERROR_RE)
    # (a branch whose columns are null on every row of the chunk never takes a row: left out,
    # as each costs a pass over every row)
    unset = lambda *cols: all(df[c].null_count() == df.height for c in cols)  # noqa: E731
    branches = [
        (pl.col("_blk_last"), "request"),
        (part.is_not_null(), "log"),
        (error & headed, "error"),
        (arrived & pl.col("_task").is_not_null(), "request_arrived"),
        (finished & pl.col("_task").is_not_null(), "request_finished"),
        (None if unset("_abort_task") else pl.col("_abort_task").is_not_null(), "request_aborted"),
        (None if unset("_status", "_x_status") else is_access, "http_access"),
        (None if unset("_tg", "_pp", "_x_n_processing_slots") else
         pl.col("_tg").is_not_null() | pl.col("_pp").is_not_null() | slot_data, "engine_stats"),
        (None if unset("_n_slots", "_n_seq", "_n_ctx", "n_ctx_slot") else is_cap, "capacity"),
        (headed, "log"),
        (None if df["_form"].null_count() == 0 else
         _has(pl.when(~headed).then(body), r"GGML_ASSERT|terminate called|Segmentation fault|core dumped"), "error"),
    ]
    event = pl.when(pl.lit(False)).then(pl.lit(None, _STR))
    for cond, kind in branches:
        if cond is not None:
            event = event.when(cond).then(pl.lit(kind))
    event = event.otherwise(pl.lit("unparsed"))
    df = df.with_columns(event.cast(_EVENTS).alias("event"))
    # an error told by its message alone (no level letter printed): libllama's
    # LLAMA_LOG_ERROR, the server's SRV_ERR and the aborts are errors
    df = df.with_columns(pl.when((pl.col("event") == "error") & pl.col("level").is_null())
                         .then(pl.lit("ERROR")).otherwise(pl.col("level")).alias("level"))
    # a server (re)start: task ids begin again at 0 (finalize scopes request ids by run).
    # Router mode's children are processes of their own, each numbering its tasks, started
    # while others serve: their ids are scoped by port instead, and their start lines and
    # relative times do not restart the file's run.
    own = pl.col("_port").is_null()
    own_rel = pl.when(own).then(pl.col("_rel"))
    run_start = own & (
        ((f == "func") & (fn == "build") & msg.str.contains(r"^[0-9]+ \("))
        | ((f == "func") & (fn == "system info"))
        | (f.is_in(["json", "text24"]) & msg.is_in(["build info", "system info"]))
        | (own_rel < own_rel.forward_fill().shift(1))
    ).fill_null(False)
    df = df.with_columns(run_start.alias("run_start"))
    df = df.with_columns(
        (finished & pl.col("_task").is_not_null()).alias("_release"),
        pl.col("run_start").cast(pl.Int32).cum_sum().alias("_crun"),
    )
    df = _cancel_wins(df)
    ev = pl.col("event")
    req = ev == "request"
    fin = ev.is_in(["request_finished", "request_aborted"])
    released = pl.col("_relg")
    # (the field patterns only where the release line's own pattern did not match)
    fin_msg = pl.when(fin & released.struct.field("1").is_null()).then(msg)
    err_body = pl.when(ev == "error").then(body)
    # a part's task is its key's (`port|slot|task`): its header's for a continuation line, else
    # its own (the key is null where the slot or the task is)
    key_task = pl.when(pl.col("_cont")).then(pl.col("_key").str.extract(r"\|(-?[0-9]+)$", 1)).when(
        pl.col("_slot").is_not_null()).then(pl.col("_task").cast(_STR))
    # (as a column: read three times below)
    df = df.with_columns(pl.when(part.is_not_null()).then(key_task).otherwise(pl.col("_task").cast(_STR)).alias("_row_task"))
    task = pl.col("_row_task")
    df = df.with_columns(
        *[pl.when(req).then(e).alias(e.meta.output_name()) for e in T.request_columns()],
    ).with_columns(
        # every line that names its task is about that request (the 2026 timing lines,
        # prompt progress, decode speed, `new prompt`), not only the lifecycle lines
        pl.when(ev == "request_aborted").then(pl.coalesce(pl.col("_abort_task").cast(_STR), task))
        .when(ev.is_in(["request", "request_arrived", "request_finished", "log", "engine_stats", "error"])
              & (task != "-1")).then(task)
        .alias("_task_id"),
        pl.when(ev == "http_access").then(pl.coalesce(pl.col("_status"), pl.col("_x_status").cast(pl.Int32, strict=False))).alias("http_status"),
        pl.when(ev == "http_access").then(pl.coalesce(pl.col("method"), pl.col("_x_method")))
        .when(ev == "log").then(pl.col("method")).alias("method"),
        pl.when(ev == "http_access").then(pl.coalesce(pl.col("path"), pl.col("_x_path")))
        .when(ev == "log").then(pl.col("path")).alias("path"),
        pl.when(ev == "engine_stats").then(pl.col("_tg")).alias("gen_tps"),
        pl.when(ev == "engine_stats").then(pl.col("_x_n_processing_slots").cast(pl.Int64, strict=False)).alias("running"),
        pl.when(ev == "engine_stats").then(pl.col("_x_n_idle_slots").cast(pl.Int64, strict=False)).alias("n_idle_slots"),
        pl.when(ev == "engine_stats").then(pl.col("_pp")).alias("prompt_tps"),
        pl.when(ev == "capacity").then(pl.coalesce(pl.col("_n_slots"), pl.col("_n_seq"))).alias("max_num_seqs"),
        pl.when(ev == "capacity").then(pl.coalesce(
            pl.col("_n_ctx"),
            pl.when(pl.col("_kv_unified") == "true").then(pl.col("n_ctx_slot")),
            # each slot its own n_ctx_slot cells (n_ctx split over n_slots)
            _by_port(df)(pl.col("_n_slots").forward_fill()) * pl.col("n_ctx_slot"),
        )).alias("kv_capacity_tokens"),
        pl.when(fin).then(pl.coalesce(
            released.struct.field("1").cast(pl.Int64, strict=False),
            fin_msg.str.extract(r"n_(?:tokens|past) = ([0-9]+)", 1).cast(pl.Int64, strict=False),
            pl.col("_x_n_past").cast(pl.Int64, strict=False), pl.col("_x_n_cache_tokens").cast(pl.Int64, strict=False),
        )).alias("n_tokens_used"),
        pl.when(fin).then(pl.coalesce(
            released.struct.field("2").cast(pl.Int64, strict=False).cast(pl.Boolean),
            fin_msg.str.extract(r"truncated = ([0-9]+)", 1).cast(pl.Int64, strict=False).cast(pl.Boolean),
            pl.col("_x_truncated").replace_strict({"true": True, "false": False}, default=None, return_dtype=pl.Boolean),
        )).alias("truncated"),
        pl.when(part.is_not_null() & ~pl.col("_blk_last")).then(pl.col("_last_line")).alias("request_line"),
        pl.when(part.is_not_null() & ~pl.col("_blk_last")).then(part).alias("timing_part"),
        pl.when(f == "blob").then(pl.lit(True)).alias("hidden"),
        pl.when(ev == "error").then(pl.when(_has(err_body, "GGML_ASSERT")).then(pl.lit("assert"))
                                    .when(_has(err_body, r"(?i)out of memory")).then(pl.lit("oom"))
                                    .otherwise(pl.lit("error"))).alias("error_kind"),
        (pl.col("_rel") / 1e6).round(6).alias("rel_s"),
        pl.col("_anchor").alias("ts_anchor"),
        pl.col("_lead").alias("wrapper"),
        pl.col("_slot").alias("slot"),
        pl.col("_task").alias("task"),
        pl.coalesce("n_ctx_slot", "_np_ctx").alias("n_ctx_slot"),
        pl.col("_port").alias("port"),
        pl.col("_fn").alias("func"),
        pl.col("_x_tid").alias("tid"),
        pl.col("_ts").alias("ts"),
        pl.when(ev == "unparsed").then(pl.col("_raw")).otherwise(
            pl.when(f == "json").then(pl.coalesce(msg, body)).otherwise(pl.col("_msg"))
        ).alias("message"),
    )
    tid = pl.col("_task_id")
    df = df.with_columns(
        pl.when(pl.col("_port").is_not_null() & tid.is_not_null())
        .then(pl.concat_str(tid, pl.lit("@"), pl.col("_port").cast(_STR))).otherwise(tid).alias("request_id")
    )
    df = _whole_prompt(df)
    return _finish(df)


def _task_key() -> pl.Expr:
    return pl.concat_str([pl.col("_port").fill_null(-1).cast(_STR),
                          pl.coalesce(pl.col("_abort_task"), pl.col("_task")).cast(_STR)], separator="|")


def _cancel_wins(df: pl.DataFrame) -> pl.DataFrame:
    """A client that goes away makes the server cancel its task (`cancel task, id_task = N`)
    and release the slot (`stop processing`, no timing block): that release ends an aborted
    request, not a finished one. Paired by (process run, router port, task) within the chunk
    (record_starts keeps the two in one chunk)."""
    ev = pl.col("event")
    if not df.select((ev == "request_aborted").any()).item():
        return df
    key = pl.concat_str([pl.col("_port").fill_null(-1).cast(_STR),
                         pl.coalesce(pl.col("_abort_task"), pl.col("_task")).cast(_STR)], separator="|")
    cancel = (ev == "request_aborted").cast(pl.Int32)
    before = (cancel.cum_sum() - cancel).over("_crun", key) > 0
    return df.with_columns(
        pl.when((ev == "request_finished") & before).then(pl.lit("request_aborted", _EVENTS)).otherwise(ev).alias("event")
    )


def _whole_prompt(df: pl.DataFrame) -> pl.DataFrame:
    """The task's whole prompt (`new prompt, ... task.n_tokens = N`, cached part included) as
    prompt_tokens on that line and on the task's later lifecycle and request rows within the
    chunk (record_starts keeps them together); the timing block's own count is what was
    evaluated (cache hits excluded: `prompt_evaluated`)."""
    np_ = pl.col("_np_tokens")
    if df["_np_tokens"].null_count() == df.height:
        return df.with_columns(pl.lit(None, pl.Int64).alias("prompt_evaluated"))
    # (by run, port and task as three keys: the same groups as their joined text wherever a
    # task is named, without building it)
    # (a key that is one value on every row of the chunk is left out: the same groups)
    keys = [k for k, one in (("_crun", df["_crun"].n_unique() == 1), ("_port", df["_port"].null_count() == df.height)) if not one]
    keys = [pl.col("_port").fill_null(-1) if k == "_port" else k for k in keys]
    whole = pl.when(pl.col("_task_id").is_not_null()).then(np_.forward_fill().over(*keys, "_task_id"))
    ev = pl.col("event")
    on_req = ev.is_in(["request", "request_arrived", "request_finished", "request_aborted"]) | np_.is_not_null()
    return df.with_columns(whole.alias("_whole")).with_columns(
        pl.when((ev == "request") & pl.col("_whole").is_not_null()).then(pl.col("prompt_tokens")).alias("prompt_evaluated"),
        pl.when(on_req & pl.col("_whole").is_not_null()).then(pl.col("_whole")).otherwise(pl.col("prompt_tokens")).alias("prompt_tokens"),
    ).drop("_whole")


_ATTR_KEYS = (
    *T.REQUEST_ATTRS,
    "n_decoded", "tg_3s", "n_tokens", "progress", "elapsed_s", "n_ctx_slot", "n_tokens_used", "truncated",
    "batch_n_tokens", "cached_tokens", "n_keep", "n_idle_slots",
    "method", "path", "client", "error_kind", "request_line", "timing_part", "hidden",
    "slot", "task", "port", "func", "tid", "rel_s", "ts_anchor", "prompt_evaluated", "wrapper",
)

_OUT_COLS = (
    "line", "ts", "ts_rel_us", "level", "event", "request_id", "model", "prompt_tokens", "output_tokens",
    "e2e_s", "tpot_s", "inference_s", "prompt_tps", "gen_tps", "running", "max_num_seqs",
    "kv_capacity_tokens", "http_status", "message", "run_start",
)

# fields that only mean something on some event kinds
_ONLY_ON = {
    # (and on a fork's request-arrival `log` line, whose status comes on its response line)
    "method": ("http_access", "log"), "path": ("http_access", "log"), "client": ("http_access", "log"),
    "n_decoded": ("engine_stats",), "tg_3s": ("engine_stats",), "elapsed_s": ("engine_stats",),
    # (a slot's prompt progress line is a `log`: its own progress, not an engine snapshot)
    "n_tokens": ("engine_stats", "log"), "progress": ("engine_stats", "log"),
    "n_ctx_slot": ("capacity", "log"),
}


def _finish(df: pl.DataFrame) -> pl.DataFrame:
    ev = pl.col("event")
    df = df.with_columns(
        [pl.when(ev.is_in(kinds)).then(pl.col(k)).alias(k) for k, kinds in _ONLY_ON.items()]
    )
    attrs = attrs_column(df, list(_ATTR_KEYS), keep=ev != "unparsed")
    out = df.select(*_OUT_COLS).with_columns(
        pl.lit(1, pl.Int32).alias("n_lines"),
        pl.when(ev != "unparsed").then(pl.col("level")).alias("level"),
        attrs.alias("attrs"),
        ev.cast(_STR),
    )
    return out
