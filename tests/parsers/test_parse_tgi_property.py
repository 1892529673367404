"""Property tests for the TGI parser: Rust-formatted durations parse back to the exact
nanosecond, and noise between valid lines never crashes the parser or loses a line."""

from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servelens.parsers.engines.tgi import parser as tgi
from servelens.parsers.base import (
    ParseContext,
    check_events,
    parse_lines,
    lines_frame,
    uncovered_lines,
)
from servelens.parsers.engines.tgi.fields import duration_ns


def rust_debug(ns: int) -> str:
    """`format!("{:?}", Duration::from_nanos(ns))` as std formats it: the largest unit
    whose integer part is >= 1, the remaining nanoseconds as a fraction with trailing
    zeros trimmed, no decimal point when exact, `µ` as U+00B5."""
    secs, nanos = divmod(ns, 1_000_000_000)
    if secs:
        whole, frac, digits, unit = secs, nanos, 9, "s"
    elif nanos >= 1_000_000:
        whole, frac, digits, unit = divmod(nanos, 1_000_000) + (6, "ms")
    elif nanos >= 1_000:
        whole, frac, digits, unit = divmod(nanos, 1_000) + (3, "\u00b5s")
    else:
        whole, frac, digits, unit = nanos, 0, 0, "ns"
    text = str(whole)
    if frac:
        text += "." + str(frac).zfill(digits).rstrip("0")
    return text + unit


def test_rust_debug_matches_known_strings():
    # strings from real TGI logs (shared/formats/tgi.md §2)
    assert rust_debug(2_458_150_804) == "2.458150804s"
    assert rust_debug(13_678_487) == "13.678487ms"
    assert rust_debug(184_260) == "184.26\u00b5s"
    assert rust_debug(70_000) == "70\u00b5s"
    assert rust_debug(12) == "12ns"


durations = st.one_of(
    st.integers(0, 999),
    st.integers(1_000, 999_999),
    st.integers(1_000_000, 999_999_999),
    st.integers(1_000_000_000, 10**14),
)


@given(st.lists(durations, min_size=1, max_size=50))
def test_rust_durations_parse_back_to_the_nanosecond(values):
    texts = pl.Series([rust_debug(v) for v in values], dtype=pl.String)
    got = texts.to_frame("d").select(duration_ns(pl.col("d"))).to_series().to_list()
    assert got == values


def success_line(total: int, valid: int, queue: int, inf: int, tpot: int, micros: int) -> str:
    return (
        f"2024-02-14T06:49:{micros // 1_000_000:02d}.{micros % 1_000_000:06d}Z  INFO "
        "generate{parameters=GenerateParameters { best_of: None, temperature: Some(0.5), "
        "max_new_tokens: Some(64), stop: [], seed: None } "
        f'total_time="{rust_debug(total)}" validation_time="{rust_debug(valid)}" '
        f'queue_time="{rust_debug(queue)}" inference_time="{rust_debug(inf)}" '
        f'time_per_token="{rust_debug(tpot)}" seed="None"}}: '
        "text_generation_router::server: router/src/server.rs:299: Success"
    )


timings = st.tuples(durations, durations, durations, durations, st.integers(1, 10**10), st.integers(0, 59_999_999))


def parse(texts: list[str]) -> pl.DataFrame:
    ctx = ParseContext(engine="tgi", source="p.log", instance="p", year=2026)
    ev = parse_lines(tgi, lines_frame(texts), ctx)
    check_events(ev)
    return ev


@settings(max_examples=60, deadline=None)
@given(st.lists(timings, min_size=1, max_size=20))
def test_success_lines_carry_exact_timings(rows):
    ev = parse([success_line(*r) for r in rows])
    assert ev["event"].to_list() == ["request"] * len(rows)
    for got, (total, valid, queue, inf, tpot, _) in zip(ev.iter_rows(named=True), rows):
        assert (got["e2e_s"], got["queue_s"], got["inference_s"], got["tpot_s"]) == (
            total / 1e9, queue / 1e9, inf / 1e9, tpot / 1e9
        )
        assert got["output_tokens"] == round(inf / tpot)


noise_line = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
    max_size=80,
)
noise_or_valid = st.one_of(
    noise_line.map(lambda t: ("noise", t)),
    st.sampled_from(
        [
            "2024-05-07T12:39:20.593317Z  INFO shard-manager: text_generation_launcher: Shard ready in 10.3s rank=0",
            '{"timestamp":"2024-03-09T05:08:19.961136Z","level":"INFO","message":"Setting max batch total tokens to 5","target":"text_generation_router","filename":"router/src/main.rs","line_number":328}',
            '{"timestamp":"2024-03-09T05:08:19.961136Z","level":"INFO","mess',
            "\x1b[2m2024-03-09T05:08:19.961136Z\x1b[0m \x1b[31mERROR\x1b[0m text_generation_launcher: Method Decode encountered an error.",
            "Traceback (most recent call last):",
            "svc-1  | 2024-02-14T06:49:51.437631Z  WARN text_generation_router: router/src/main.rs:1: x",
            "",
        ]
    ).map(lambda t: ("other", t)),
    timings.map(lambda r: ("success", r)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(noise_or_valid, min_size=1, max_size=40))
def test_noise_never_crashes_and_loses_no_line(items):
    texts = [success_line(*v) if kind == "success" else v for kind, v in items]
    ev = parse(texts)
    assert uncovered_lines(ev, 1, len(texts)) == []
    # each Success line is still one request with its exact total time
    wanted = [(i + 1, v[0] / 1e9) for i, (kind, v) in enumerate(items) if kind == "success"]
    got = ev.filter(pl.col("event") == "request").select("line", "e2e_s").rows()
    assert got == wanted
    # nothing a line said is lost: every line's text is inside its event's message
    for line, n, message, event in ev.select("line", "n_lines", "message", "event").iter_rows():
        if event == "unparsed":
            assert message == "\n".join(texts[line - 1 : line - 1 + n])
