"""Helpers many tests share: the repository's paths, writing aged log files, a store's events,
small files of one shape per engine."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[2]
SAMPLE_LOGS = REPO / "sample_logs"


def write(path: Path, text: str | bytes, *, age_s: float = 3600.0, mtime: float | None = None) -> Path:
    """Write a log file whose mtime is `age_s` in the past (an old, finished file), or
    exactly `mtime` (epoch seconds)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    t = mtime if mtime is not None else path.stat().st_mtime - age_s
    os.utime(path, (t, t))
    return path


def events(store: Path) -> pl.DataFrame:
    from servelens.pipeline.query.connect import run

    return run(store, "select * from events order by source, line")


def engine_logs(engine: str) -> list[Path]:
    """Every `.log` of tests/fixtures and sample_logs with a folder named `engine` on its
    path (real, recorded and held-out logs of that engine), sorted."""
    return sorted(p for d in (REPO / "tests" / "fixtures", SAMPLE_LOGS) for p in d.rglob("*.log") if engine in p.parts)


def parsed_lines(engine: str, texts: list[str], source: str = "t.log", **ctx) -> pl.DataFrame:
    """`texts` as the lines 1.. of one file of instance `t`, parsed by the engine's parser and
    finalized with the fields it carries forward: what an ingest of them stores. `ctx`: more
    ParseContext fields (e.g. year)."""
    from servelens.parsers import get_parser
    from servelens.parsers.base import ParseContext, finalize, lines_frame

    parser = get_parser(engine)
    c = ParseContext(engine=engine, source=source, instance="t", **ctx)
    return finalize(parser.parse(lines_frame(texts), c), c, getattr(parser, "CARRY_FORWARD", ()))


def ingested(directory: Path, name: str, text: str) -> Path:
    """A store (directory/store) holding one log `name` with `text`, ingested by the CLI."""
    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app, build_app

    build_app()
    (directory / name).write_text(text)
    r = CliRunner().invoke(app, ["ingest", str(directory / name), "--store", str(directory / "store"), "-q"])
    assert r.exit_code == 0, r.output
    return directory / "store"


def forget_content_record(part: Path) -> None:
    """Make the manifest describe `part` as a servelens before part checksums did (no size,
    time or checksum): what a test that rewrites a part in an older format must also do,
    else reads rightly refuse the rewritten part as damaged."""
    import json

    store = next(p for p in part.parents if (p / "manifest.json").is_file())
    m = json.loads((store / "manifest.json").read_text())
    rel = str(part.relative_to(store))
    for k in ("size", "mtime_ns", "crc32"):
        m["part_info"][rel].pop(k, None)
    (store / "manifest.json").write_text(json.dumps(m))


def returns(fn, *, guard_s: float = 600.0, what: str = "the call"):
    """fn()'s value, for a call that could only return by being stopped (a query that runs
    for hours unbounded). The guard only keeps a stop that never comes from hanging the suite:
    it is no claim about speed, which bench/ measures."""
    import threading

    import pytest

    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the test below
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(guard_s)
    if t.is_alive():
        pytest.fail(f"{what} was still running after {guard_s:g} s: nothing stopped it")
    if "error" in box:
        raise box["error"]
    return box["value"]


# a real log of each engine (the simulator's for TensorRT-LLM) whose first lines make files of
# one shape (pipeline/sources/detect_memo.py)
SHAPE_SOURCES = {
    "vllm": SAMPLE_LOGS / "vllm" / "real" / "v1_0_11.log",
    "tgi": SAMPLE_LOGS / "tgi" / "real" / "router_text.log",
    "trtllm": SAMPLE_LOGS / "incident" / "trtllm" / "trtllm-a.log",
    "sglang": SAMPLE_LOGS / "sglang" / "real" / "v0_5_2026.log",
    "llamacpp": SAMPLE_LOGS / "llamacpp" / "real" / "era_c_2026_router_hip_26222.log",
}


def same_shape_files(logs: Path, copies: int) -> dict[str, str]:
    """`copies` small files per engine in `logs`, each the first lines of its engine's
    SHAPE_SOURCES log with other numbers (one shape per engine), dated long ago: file name ->
    the engine it came from."""
    logs.mkdir(parents=True, exist_ok=True)
    expected = {}
    for engine, src in SHAPE_SOURCES.items():
        head = b"".join(src.read_bytes().splitlines(keepends=True)[:6])
        for i in range(copies):
            text = re.sub(rb"\d", lambda m: str((int(m.group()) + i) % 10).encode(), head)
            write(logs / f"{engine}-{i}.log", text, mtime=1_781_100_000)
            expected[f"{engine}-{i}.log"] = engine
    return expected


def fill_up(path: Path) -> Path:
    """Write zeros to `path` until its file system is full (a small tmpfs); the file, to
    delete when the test frees the space."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    return path


def logged_messages(literal: str, head: str, suffixes: tuple[str, ...] = (".log", ".gz", ".yaml")) -> list[str]:
    """The messages of the lines of tests/fixtures and sample_logs (files of `suffixes`, .gz
    read decompressed) holding `literal`: the first group of `head`, a regex of the whole line."""
    head_re = re.compile(head)
    out = []
    for d in (REPO / "tests" / "fixtures", SAMPLE_LOGS):
        for p in sorted(d.rglob("*")):
            if not p.is_file() or p.suffix not in suffixes:
                continue
            raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
            for line in raw.decode("utf-8", errors="replace").splitlines():
                if literal in line and (m := head_re.match(line.rstrip("\r"))):
                    out.append(m.group(1))
    return out
