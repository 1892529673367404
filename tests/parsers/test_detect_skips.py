"""What lets detection skip work (parsers/wrappers `NEEDS`; the vLLM, SGLang and llama.cpp
detectors' first look over the raw lines) never changes what it finds: over real logs, the
test fixtures and every wrapping and export the test writers make of real logs (and the
lines inside each layer of them), a format whose sniff reaches anything holds one of its
NEEDS strings, and an engine's score is the one of the lines taken apart."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import get_parser
from servelens.parsers import wrappers as W

from tests.helpers import wrapping as wr
from tests.helpers import wrapping_exports as X

ROOT = Path(__file__).resolve().parents[2]
# real logs every wrapping and export is written of (each sample's detection costs tens of
# milliseconds; the other engines' logs are among the sample logs below)
REAL = {
    "vllm": "sample_logs/vllm/real/v1_0_11.log",
    "llamacpp": "sample_logs/llamacpp/real/era_b_2024_startup_9928.log",
}
WRAPPINGS = ("to_cri", "to_docker_json", "to_journald", "to_syslog_iso", "to_docker_ts", "to_compose", "to_ansi", "nested_cri_compose_ansi")
EXPORTS = ("gcp_array", "gcp_ndjson", "cw_filter_log_events", "cw_get_log_events", "cw_insights", "loki_jsonl", "loki_default", "otlp_file",
           "gcp_csv", "cw_console_csv", "cw_insights_csv", "datadog_csv", "kibana_csv", "grafana_txt", "grafana_json", "elastic_ndjson",
           "elastic_hits", "datadog_json", "datadog_ndjson")


def _json_formatter(lines, times):
    """A JSON log formatter's lines (structlog, python-json-logger): `message` and a level."""
    return "".join(json.dumps({"timestamp": wr.rfc3339_ns(t), "level": "info", "message": ln}) + "\n" for ln, t in zip(lines, times))


@cache
def samples() -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """name -> (sample lines, as detection reads a file's head, and their layers); the lines
    inside each layer of a sample too (the next depth sniffs those; their layers are the
    sample's)."""
    from tests.parsers import test_wrappers_exports_unseen as U

    # (a few real logs of each folder: detection of each costs tens of milliseconds)
    folders = sorted({p.parent for p in (ROOT / "sample_logs").rglob("*.log")})
    files = [p for d in folders for p in sorted(d.glob("*.log"))[:4]] + sorted((ROOT / "tests" / "fixtures" / "wrapped").iterdir()) + sorted(
        (ROOT / "tests" / "fixtures" / "gcloud_yaml").iterdir())
    heads = {str(p.relative_to(ROOT)): p.open("rb").read(W.SAMPLE_BYTES) for p in files if p.is_file() and p.suffix != ".md"}
    for engine, rel in REAL.items():
        lines = wr.split_lines((ROOT / rel).read_text())
        times = wr.line_times(lines, engine)
        for i in range(1, len(times)):
            times[i] = max(times[i], times[i - 1] + 1_000)
        writers = {w: (lambda ls, ts, f=getattr(wr, w): f(ls, times=ts)) for w in WRAPPINGS if w not in ("to_compose", "to_ansi")}
        writers |= {w: (lambda ls, ts, f=getattr(wr, w): f(ls)) for w in ("to_compose", "to_ansi")}
        writers |= {w: getattr(X, w) for w in EXPORTS} | {"json_formatter": _json_formatter}
        for name, write in writers.items():
            heads[f"{name}/{rel}"] = write(lines, times).encode()[: W.SAMPLE_BYTES]
    for variant, (write, *_, multiline) in U.VARIANTS.items():
        text = write(U.entries("vllm", multiline=multiline))
        heads[f"unseen/{variant}"] = (text if isinstance(text, bytes) else text.encode())[: W.SAMPLE_BYTES]
    out = {}
    for name, head in heads.items():
        texts = W.head_sample(head)
        layers = W.detect(texts)
        out[name] = (texts, layers)
        for k in range(1, len(layers) + 1):
            inner = W.decode_texts(texts, layers[:k])
            out[f"{name} inside {'/'.join(layers[:k])}"] = (inner, ())
    return out


NEEDY = [name for name, mod in W.DECODERS.items() if getattr(mod, "NEEDS", None)]


def test_a_format_sniffed_in_a_sample_holds_one_of_its_needs():
    """Where a sample holds none of a format's NEEDS, its sniff finds nothing: skipping it
    leaves detection as it was. (Every such format is found in some sample.)"""
    for name, (texts, _) in samples().items():
        joined = "\n".join(t or "" for t in texts)
        for fmt in NEEDY:
            mod = W.DECODERS[fmt]
            if not any(n in joined for n in mod.NEEDS):
                assert mod.sniff(texts) == 0, (fmt, name)
    found = {x.partition(":")[0] for _, layers in samples().values() for x in layers}
    assert set(NEEDY) <= found, set(NEEDY) - found


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
def test_engine_detection_skips_only_samples_it_scores_zero(engine):
    """An engine's detect, which first looks over the raw lines for what it scores, gives
    the score of the lines taken apart: over what engine detection reads of each sample
    (the lines inside its layers)."""
    parser = get_parser(engine)
    scored = 0
    for name, (texts, layers) in samples().items():
        inner = samples()[f"{name} inside {'/'.join(layers)}"][0] if layers else texts
        if " inside " in name or not inner:
            continue
        assert None not in inner
        full = parser._score(pl.Series(inner, dtype=pl.String))
        assert parser.detect(inner) == full, name
        scored += full > 0.2
    assert scored >= 5


def test_the_prefix_sniff_skips_only_samples_without_a_prefix():
    """The prefix format's sniff, which first looks for a line holding a header after its
    start, finds what taking every line apart finds: over every sample and the lines inside
    its layers."""
    from servelens.parsers.wrappers import prefix

    found = 0
    for name, (texts, _) in samples().items():
        cut = prefix._cut(pl.DataFrame({"text": pl.Series("text", texts, dtype=pl.String)}))
        full = 1.0 if cut.select((pl.col("_pos").is_not_null() & ~pl.col("_own")).sum()).item() else 0.0
        assert prefix.sniff(texts) == full, name
        found += full > 0
    assert found >= 3
