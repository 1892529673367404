"""The TGI parser decides some of its work per chunk (a chunk without a `batch{..}` span
skips that search, one whose every duration the one pattern read skips the field-by-field
reading, requests and other events get their attrs apart, a chunk in line order is not
sorted again, one of one-line records is not grouped). Each record must parse the same
whatever chunk it is in: alone, where most of those choices go the other way, as in its
whole file. Checked on every TGI log of the fixtures and sample logs, on generated router
lines and on near misses of each choice."""

from __future__ import annotations

import random
import re

import polars as pl
import pytest
from servelens.parsers.base import ParseContext, lines_frame
from servelens.parsers.engines.tgi import parser as tgi

from tests.helpers.common import REPO as ROOT, engine_logs

CTX = ParseContext(engine="tgi", source="t.log", instance="t", year=2026)


def records(texts: list[str]) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each record, cut where `record_starts` says."""
    starts = tgi.record_starts(pl.Series(texts, dtype=pl.String)).to_list()
    out: list[tuple[int, list[str]]] = []
    for i, (text, start) in enumerate(zip(texts, starts, strict=True)):
        if start or not out:
            out.append((i + 1, [text]))
        else:
            out[-1][1].append(text)
    return out


def rows(df: pl.DataFrame) -> list[dict]:
    return df.select(sorted(df.columns)).to_dicts()


def assert_same_alone_and_whole(texts: list[str], shapes_only: bool = False) -> int:
    """The records of `texts` parsed alone give the whole chunk's rows; `shapes_only`: one
    record of each shape is parsed alone, and compared with its own rows of the whole."""
    whole = tgi.parse(lines_frame(texts), CTX)
    recs = one_of_each_shape(records(texts)) if shapes_only else records(texts)
    alone = [tgi.parse(lines_frame(lines, first), CTX) for first, lines in recs]
    assert whole["line"].to_list() == sorted(whole["line"].to_list())
    assert set(whole.columns) == {*(c for a in alone for c in a.columns)}
    # (a column no record of a one-record chunk has is a null String there: the values
    # are compared, not the types)
    got = [r for a in alone for r in rows(a.select(whole.columns))]
    mine = {first + k for first, lines in recs for k in range(len(lines))}
    assert rows(whole.filter(pl.col("line").is_in(mine))) == got
    return len(got)


def one_of_each_shape(recs: list[tuple[int, list[str]]]) -> list[tuple[int, list[str]]]:
    """The first record of each shape: its text with every digit a 0 (so the number of
    digits of each time, duration and count stays), a requested seed's digits one 0 (a
    random u64, whose length says nothing of the record)."""
    seen: set[str] = set()
    out = []
    for first, lines in recs:
        shape = re.sub(r"\d", "0", _SEED.sub(r"\g<1>0", "\n".join(lines)))
        if shape not in seen:
            seen.add(shape)
            out.append((first, lines))
    return out


_SEED = re.compile(r"(seed(?:=\"|: )Some\()\d+")


@pytest.mark.parametrize("path", engine_logs("tgi"), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_logged_record_parses_alone_as_in_its_file(path):
    """A record of each shape parsed alone: the others differ from it only in their digits'
    values (times, durations, counts, ids of the same lengths), each read by the same
    expressions in its row whatever the chunk; the generated lines below vary those values
    (and their lengths) on purpose, every record parsed alone."""
    texts = path.read_text(errors="replace").splitlines()
    assert assert_same_alone_and_whole(texts, shapes_only=True) > 0


HEAD = "2024-02-14T06:49:50.826344Z  INFO "
DUMP = (
    "GenerateParameters { best_of: None, temperature: Some(0.5), top_k: None, do_sample: true, "
    "max_new_tokens: Some(20), seed: None, top_n_tokens: None }"
)
TAIL = ": text_generation_router::server: router/src/server.rs:305: Success"
TIMES = 'total_time="1.5s" validation_time="70µs" queue_time="2.1ms" inference_time="1.4s" time_per_token="70ms"'


def success(spans: str, tail: str = TAIL, head: str = HEAD) -> str:
    return head + spans + tail


NEAR_MISSES = [
    # the root batch span, and what almost is one
    success(f'batch{{batch_size=4}}:generate{{parameters={DUMP} {TIMES} seed="None"}}'),
    success(f'batch{{batch_size=x}}:generate{{parameters={DUMP} {TIMES} seed="None"}}'),
    success(f'batchy{{batch_size=4}}:generate{{parameters={DUMP} {TIMES} seed="None"}}'),
    success(f'generate{{parameters={DUMP} {TIMES} seed="None"}}:batch{{batch_size=4}}'),
    HEAD + "batch{batch_size=3}:prefill: text_generation_router::infer: router/src/infer.rs:530: "
    "Server error: CUDA out of memory",
    # durations in the usual order, reordered, missing, malformed, with other units
    success(f'generate{{parameters={DUMP} {TIMES} seed="Some(42)"}}'),
    success(f'generate{{parameters={DUMP} validation_time="70µs" total_time="1.5s" seed="None"}}'),
    success(f'generate{{parameters={DUMP} total_time="1.5s" seed="None"}}'),
    success(f'generate{{parameters={DUMP} total_time="1.5 s" validation_time="1us"}}'),
    success(f'generate{{parameters={DUMP} total_time="12ns" validation_time="1μs" queue_time="0ns" '
            'inference_time="7.000000001s" time_per_token="3us" seed="None"}'),
    success(f'generate{{parameters={DUMP}}}'),
    success("generate"),
    # launcher lines, and targets that only look like one
    HEAD + "text_generation_launcher: Starting shard rank=0",
    HEAD + "shard-manager: text_generation_launcher: Shard ready in 10.3s rank=1",
    HEAD + "text_generation_launcherx: Starting shard",
    HEAD + "xtext_generation_launcher: Starting shard",
    HEAD + "text_generation_router: router/src/main.rs:1: text_generation_launcher: Connected",
    HEAD + "text_generation_launcher: KV-cache blocks: 6144, size: 16",
    # error kinds by text, and near misses of them
    HEAD.replace("INFO", "WARN") + "text_generation_router::infer: router/src/infer.rs:1: no permits available",
    HEAD + "text_generation_router::infer: router/src/infer.rs:1: no permits  available",
    HEAD.replace(" INFO", "ERROR") + "text_generation_router::infer: router/src/infer.rs:1: Request failed during generation: x",
    HEAD + "text_generation_router::infer: router/src/infer.rs:1: Server error: boom",
    HEAD + "text_generation_router::infer: router/src/infer.rs:1: a Server error: boom",
    HEAD + "text_generation_router::infer: router/src/infer.rs:1: Receiver dropped",
    HEAD + "text_generation_router::infer: router/src/infer.rs:1: receiver dropped",
    # headless records
    "thread 'main' panicked at 'x', src/main.rs:1:1",
    "Error: WebserverFailed",
    "  a continuation line",
    '{"timestamp":"2024-02-14T06:49:50.826344Z","level":"INFO","message":"Success",'
    '"target":"text_generation_router::server","filename":"router/src/server.rs","line_number":305,'
    '"span":{"name":"generate","total_time":"1.5s","validation_time":"70µs","queue_time":"2.1ms",'
    '"inference_time":"1.4s","time_per_token":"70ms","seed":"None"},"spans":[{"name":"generate"}]}',
]


def test_near_misses_parse_alone_as_together():
    assert assert_same_alone_and_whole(NEAR_MISSES) == len(NEAR_MISSES) - 1
    # and in the other order, where the records are not in line order within a kind
    assert assert_same_alone_and_whole(NEAR_MISSES[::-1]) > 0


def generated_lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    units = ["s", "ms", "\u00b5s", "\u03bcs", "us", "ns"]
    out = []
    for i in range(n):
        def dur() -> str:
            whole = str(rng.randint(0, 999))
            frac = rng.choice(["", "." + str(rng.randint(0, 10**rng.randint(1, 9)))])
            return whole + frac + rng.choice(units)
        fields = [f'{f}="{dur()}"' for f in ("total_time", "validation_time", "queue_time", "inference_time", "time_per_token")]
        if rng.random() < 0.2:
            rng.shuffle(fields)
        if rng.random() < 0.1:
            fields.pop(rng.randrange(len(fields)))
        seed_f = rng.choice(['seed="None"', f'seed="Some({rng.randint(0, 2**64 - 1)})"', ""])
        span = f"generate{{parameters={DUMP} {' '.join(fields)} {seed_f}}}".replace(" }", "}")
        if rng.random() < 0.1:
            span = f"batch{{batch_size={rng.randint(1, 64)}}}:{span}"
        head = f"2024-02-14T06:{i // 60 % 60:02d}:{i % 60:02d}.{rng.randint(0, 999999):06d}Z  INFO "
        line = head + span + TAIL
        if rng.random() < 0.05:
            line = head + "text_generation_launcher: Starting shard rank=0"
        out.append(line)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_lines_parse_alone_as_together(seed):
    texts = generated_lines(120, seed)
    assert assert_same_alone_and_whole(texts) == len(texts)


# what each near miss of a plain-text error kind is (the kinds are found by literal searches)
ERROR_KINDS = {
    "no permits available": "overloaded",
    "no permits  available": None,
    "Request failed during generation: x": "generation",
    "Server error: boom": "server",
    "a Server error: boom": None,
    "Receiver dropped": "client_gone",
    "receiver dropped": None,
}


def test_error_kinds_by_text_and_their_near_misses():
    texts = [t for t in NEAR_MISSES if "router/src/infer.rs:1: " in t]
    got = tgi.parse(lines_frame(texts), CTX)
    assert got.height == len(ERROR_KINDS)
    for text, message, attrs in zip(texts, got["message"], got["attrs"], strict=True):
        kind = ERROR_KINDS[text.split("router/src/infer.rs:1: ", 1)[1]]
        assert message == text.split("router/src/infer.rs:1: ", 1)[1]
        assert (f'"error_kind":"{kind}"' in attrs) if kind else ('"error_kind"' not in attrs), text
