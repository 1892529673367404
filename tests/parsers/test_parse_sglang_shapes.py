"""The cheap readings of SGLang's commonest lines say what the general ones say: a stats line
of `fields.PREFILL_SHAPE` / `DECODE_SHAPE` read by its label's pattern (`fields.stats_shaped`)
gives what the key-by-key reading (`fields.stats_by_key`) gives, on every line (those of the
fixtures and sample logs, generated ones, and near misses)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.engines.sglang import fields as F

from tests.helpers.common import logged_messages

ROOT = Path(__file__).parents[2]
READ = [*F.KINDS, "graph_device", "_extra", "_fragments", "_h"]


def both(messages: list[str]) -> tuple[pl.Series, pl.DataFrame, pl.DataFrame]:
    """Which messages are of a shape, and what each reading gives on those."""
    df = pl.DataFrame({"m": messages}, schema={"m": pl.String}).with_row_index("_i")
    fits = pl.Series([False] * len(messages))
    fast, slow = [], []
    for label in F.STATS_SHAPES:
        shaped, _ = F.stats_shaped(df.filter(pl.col("m").str.starts_with(label)), label)
        fits = fits.scatter(shaped["_i"], True)
        fast.append(shaped.select(READ))
        slow.append(F.stats_by_key(shaped.select("_i", "m")).select(READ))
    return fits, pl.concat(fast), pl.concat(slow)


def assert_same_where_shaped(messages: list[str]) -> pl.Series:
    fits, fast, slow = both(messages)
    assert fast.schema == slow.schema
    diff = [(a, b) for a, b in zip(fast.rows(), slow.rows()) if a != b]
    assert diff == []
    return fits


def logged_stats_messages() -> list[str]:
    """The stats messages of the fixtures and sample logs (the text from the label on, found
    by its own regex)."""
    return logged_messages("batch", r"^.*?((?:Prefill|Decode) batch\b.*)$",
                           suffixes=(".log", ".gz", ".yaml", ".txt", ".jsonl"))


def test_logged_stats_lines_read_the_same_and_the_common_ones_by_the_shape():
    messages = logged_stats_messages()
    assert len(messages) > 100
    fits = assert_same_where_shaped(messages)
    # v0.4's and v0.5's plain prefill and decode lines are of the shapes
    plain = re.compile(
        r"^(?:Prefill batch[.,] #new-seq: \d+, #new-token: \d+, #cached-token: \d+, token usage: [\d.]+, "
        r"#running-req: \d+, #queue-req: \d+(?:, cuda graph: (?:True|False), input throughput \(token/s\): [\d.]+)?"
        r"|Decode batch[.,] #running-req: \d+, #token: \d+, token usage: [\d.]+, (?:cuda graph: (?:True|False), )?"
        r"gen throughput \(token/s\): [\d.]+, #queue-req: \d+)(?:, )?$"
    )
    assert [m for m, f in zip(messages, fits) if plain.match(m) and not f] == []
    assert fits.sum() > 100


NEAR_MISSES = [
    # the common ones, then what the key-by-key reading takes and the shapes do not
    "Prefill batch, #new-seq: 1, #new-token: 139, #cached-token: 0, token usage: 0.00, #running-req: 0, "
    "#queue-req: 0, cuda graph: False, input throughput (token/s): 0.00",
    "Decode batch, #running-req: 4, #token: 1008, token usage: 0.02, cuda graph: True, "
    "gen throughput (token/s): 150.44, #queue-req: 0, ",
    "Prefill batch(mixed #running-req: 3) [12]. #new-seq: 1, #new-token: 1, #cached-token: 0, "
    "cache hit rate: 12.50%, full token usage: 0.5, #running-req: 0, #queue-req: 0",
    "Decode batch [40], #running-req: 3, #token: 1216, token usage: 0.02, pre-allocated usage: 0.00, "
    "#prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, npu graph: True, gen throughput (token/s): 69.88, "
    "largest-len: 7, #queue-req: 0",
    "Decode batch. #running-req: 99999999999999999999, #token: 0002, token usage: 100.000, "
    "gen throughput (token/s): 0, #queue-req: 0",
    # a trailing comma without its blank, a period, blanks; a value of another form
    "Decode batch. #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0, #queue-req: 0,",
    "Decode batch. #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0, #queue-req: 0.",
    "Decode batch. #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0, #queue-req: 0 ",
    "Decode batch. #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5., #queue-req: 0",
    "Decode batch. #running-req: 1,024, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0",
    "Decode batch. #running-req: ٣, #token: 2, token usage: 1e-3, gen throughput (token/s): -5.0",
    "Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, cache hit rate: 12.50, token usage: 0.5, "
    "#running-req: 0, #queue-req: 0",
    "Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.5, #running-req: 0, "
    "#queue-req: 0, gpu graph: True",
    "Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.5, #running-req: 0, "
    "#queue-req: 0, cuda graph: true",
    # keys twice, out of order, unknown, a piece without `: `
    "Decode batch. #running-req: 1, #running-req: 2, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0",
    "Decode batch. #token: 2, #running-req: 1, token usage: 0.1, gen throughput (token/s): 5.0",
    "Decode batch. #running-req: 1, #token: 2, token usage: 0.1, cap len: 3, gen throughput (token/s): 5.0",
    "Decode batch. #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0, oops",
    "Decode batch #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0",
    "Decode batch(mixed #running-req: 3). #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0",
    "Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, full token usage: 0.5, mamba usage: 0.1, "
    "#running-req: 0, #queue-req: 0",
]


def test_near_misses_read_the_same():
    fits = assert_same_where_shaped(NEAR_MISSES)
    assert fits[:5].all() and not fits[5:].any()


def shape_lines(shape: str) -> st.SearchStrategy[str]:
    """The lines of a shape. Each field ends in `, ` or the line's end (`(?:, |$)`); drawn
    from the pattern as it is, most draws put that `$` before more text and are thrown away,
    so they are drawn with `, ` there, and the last one is cut off or not."""
    return st.tuples(st.from_regex(shape.replace("(?:, |$)", ", "), fullmatch=True), st.booleans()).map(
        lambda d: d[0].removesuffix(", ") if d[1] else d[0])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(shape_lines(F.PREFILL_SHAPE) | shape_lines(F.DECODE_SHAPE), min_size=1, max_size=20))
def test_every_line_of_the_shapes_reads_the_same(messages):
    messages = [m for m in messages if "\n" not in m]
    fits = assert_same_where_shaped(messages)
    assert fits.all()


# ---------------------------------------------------------------------------------------
# the line anatomy's cheap readings against the general ones (the parser with them off)

PREFIXES = [
    "[2025-02-27 04:46:39 DP1 TP1 EP1] ", "[2025-02-27 04:46:39] ", "[2025-02-27 04:46:39 TP0]",
    "[2026-05-12 08:00:01.245 DP0 TP0 EP0] ", "[2026-05-12 08:00:01,1234567 TP0] ", "[2025-02-27 04:46:39 TP0TP1] ",
    "[2025-02-27 04:46:39 ATTN_CP2 MOE_DP1 PP0 X9] ", "[2025-02-27 04:46:39 gpu_id=0] ", "[2025-02-27 04:46:39 tp0] ",
    "[2025-02-27 04:46:39  TP0] ", "[2025-02-27 04:46:39 TP٣] ", "[2025-02-27 4:46:39 TP0] ", "[16:43:29 TP0] ",
    "[TP0] ", "[gpu_id=3] ", "[] ", "[2025-03-11 16:44:27] [2025-03-11 01:44:27 TP0] ", "(pid=1) [2025-02-27 04:46:39 TP0] ",
    "2026-06-07 10:59:31,659 [INFO] sglang.srt.managers.scheduler: ", "2025-10-20 03:02:22 INFO 31223 [DP3 TP3 EP3 x.py:222] ",
    "[2025-02-27 04:46:39 " + " ".join(f"TP{i}" for i in range(30)) + "] ", "",
]
MESSAGES = [
    "Decode batch, #running-req: 4, #token: 1008, token usage: 0.02, cuda graph: True, gen throughput (token/s): 150.44, #queue-req: 0, ",
    'INFO:     10.0.0.7:39139 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "The server is fired up and ready to roll!", "", "  indented", "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.5 -> 0.7",
]


def parse_each_and_all(monkeypatch, cheap: bool) -> list[pl.DataFrame]:
    from servelens.parsers.base import ParseContext
    from servelens.parsers.engines.sglang import parser as P

    if not cheap:  # a pattern that matches no line: every line takes the general readings
        monkeypatch.setattr(P, "_FULL_PREFIX", r"^(?P<pre>(?P<date>\x00)(?P<hms>\x00)(?P<frac>\x00)(?P<ranks>\x00))")
    lines = [p + m for p in PREFIXES for m in MESSAGES]
    out = []
    for chunk in [[x] for x in lines] + [lines, lines[::-1]]:
        df = pl.DataFrame({"line": range(1, len(chunk) + 1), "text": chunk}, schema={"line": pl.Int64, "text": pl.String})
        ctx = ParseContext(engine="sglang", source="x.log", instance="x", year=2026)
        out.append(P.parse(df, ctx))
    monkeypatch.undo()
    return out


def test_prefixes_read_the_same_by_the_cheap_and_the_general_readings(monkeypatch):
    cheap = parse_each_and_all(monkeypatch, True)
    general = parse_each_and_all(monkeypatch, False)
    for a, b in zip(cheap, general):
        assert a.schema == b.schema
        assert a.rows() == b.rows()


FAMILY_NEAR_MISSES = [
    "[2025-02-27 04:46:39] INFO:     127.0.0.1:1 - \"GET / HTTP/1.1\" 200 OK",
    "[2025-02-27 04:46:39] INFO:     Started server process [1]",
    "[2025-02-27 04:46:39] INFO: 10.6.131.6 [14/Apr/2025:03:55:53 +0000] \"PUT /m HTTP/1.1\" 200 176 \"-\" \"-\"",
    "INFO:     127.0.0.1:1 - \"GET / HTTP/1.1\" 200 OK",
    "INFO:Finish: obj=x 'e2e_latency': 1",
    "[2025-02-27 04:46:39 TP0] Prefill batch transfer failed for request rank=1 req.rid='a'",
    "[2025-02-27 04:46:39 TP0] Prefill batch; #new-seq: 1",
    "[2025-02-27 04:46:39 TP0] Decode batch",
    "[2025-02-27 04:46:39 TP0] Decode batch [x], #running-req: 1",
    "Decode batch. #running-req: 1, #token: 2, token usage: 0.1, gen throughput (token/s): 5.0",
    "[2025-02-27 04:46:39 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.5 -> 0.7",
]


def sglang_logs() -> list[Path]:
    return [p for d in ("tests/fixtures", "sample_logs") for p in sorted((ROOT / d).rglob("*.log"))
            if "sglang" in str(p.relative_to(ROOT))]


def test_families_told_by_their_head_are_the_chains(monkeypatch):
    from servelens.parsers.base import ParseContext
    from servelens.parsers.engines.sglang import parser as P

    texts = [p.read_text(errors="replace").splitlines() for p in sglang_logs()] + [FAMILY_NEAR_MISSES]
    assert len(texts) > 40

    def parse_all() -> list[pl.DataFrame]:
        out = []
        for lines in texts:
            df = pl.DataFrame({"line": range(1, len(lines) + 1), "text": lines}, schema={"line": pl.Int64, "text": pl.String})
            out.append(P.parse(df, ParseContext(engine="sglang", source="x.log", instance="x", year=2026)))
        return out

    cheap = parse_all()
    monkeypatch.setattr(P, "_families", lambda rec: rec.select(P._family().alias("_fam")).to_series())
    chain = parse_all()
    for a, b in zip(cheap, chain):
        assert a.schema == b.schema
        assert a.rows() == b.rows()
