"""Held-out real lines (sample_logs/{llamacpp,sglang}/real/heldout/, see their SOURCES.md),
collected after the parsers were written: read through `ingest` (wrappers undone, engine
forced), every line with an engine header becomes a structured event and every timing block
and stats line gives the values that separate regexes (not the parsers') pull out of it."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import polars as pl

from servelens.pipeline.ingest import ingest
from servelens.pipeline.store.manifest import committed_parts

REAL = Path(__file__).resolve().parents[2] / "sample_logs"
MTIME = dt.datetime(2026, 9, 1, tzinfo=dt.timezone.utc).timestamp()


def events(path: Path, engine: str, tmp: Path) -> pl.DataFrame:
    copy = tmp / path.name
    copy.write_bytes(path.read_bytes())
    os.utime(copy, (MTIME, MTIME))
    ingest([copy], tmp / ("store-" + path.stem), engine=engine, rollups=False)
    return pl.read_parquet(committed_parts(tmp / ("store-" + path.stem))).sort("line")


def close(a, b) -> bool:
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def test_llamacpp_held_out_lines_and_timing_blocks(tmp_path):
    lines = structured = blocks = right = 0
    for path in sorted((REAL / "llamacpp" / "real" / "heldout").glob("*.log")):
        ev = events(path, "llamacpp", tmp_path)
        text = path.read_text().splitlines()
        unparsed = set(ev.filter(pl.col("event") == "unparsed")["line"].to_list())
        # no llama.cpp header: blank lines, and a fork's own `======== ` debug prints
        headerless = {i for i, t in enumerate(text, 1) if not t.strip() or t.startswith("======== ")
                      # a console capture: the launcher's own prints between llama-server's lines
                      or ("console" in path.name and not re.match(r"^\d+\.\d\d\.\d{3}\.\d{3} ", t))}
        assert unparsed == headerless, path.name  # kept, counted, never dropped
        lines += len(text) - len(headerless)
        structured += len(text) - len(headerless) - len(unparsed - headerless)
        caps = ev.filter(pl.col("event") == "capacity")
        if path.name == "c_startup_27638.log":
            assert caps["max_num_seqs"].to_list() == [4] and '"n_ctx_slot":131072' in caps["attrs"][0]
        if path.name == "b_startup_12968.log":
            # libllama's `n_ctx = 512`, and the one slot's `new slot n_ctx_slot = 512` (1 x 512)
            assert caps["max_num_seqs"].drop_nulls().to_list() == [1, 1] and caps["kv_capacity_tokens"].drop_nulls().to_list() == [512, 512]
        if path.name == "c_console_two_runs.log":  # the server was started twice: task 0 twice
            assert ev.filter(pl.col("event") == "request")["request_id"].to_list() == [
                "0", "0@run2", "4@run2", "13@run2", "20@run2", "34@run2", "45@run2"]
        body = "\n".join(text)
        totals = [float(x) for x in re.findall(r"total time\s*=\s*([\d.]+) ms /\s*\d+ tokens", body)]
        prompts = re.findall(r"prompt eval time\s*=\s*([\d.]+) ms /\s*(\d+) tokens", body)
        evals = re.findall(r"(?<!prompt )(?<!generation )\beval time\s*=\s*([\d.]+) ms /\s*(\d+) tokens", body)
        req = ev.filter(pl.col("event") == "request")
        whole = pl.col("attrs").str.contains('"timing_incomplete":true').fill_null(False)
        done = req.filter(~whole & pl.col("e2e_s").is_not_null()).to_dicts()
        cut = req.filter(whole).to_dicts()
        if path.name == "a_9492.log":  # the paste ends before `total time`: prompt + generation, marked
            assert len(cut) == 1 and close(cut[0]["e2e_s"], (39264.217 + 40157.401) / 1000)
            assert cut[0]["output_tokens"] == 327 and cut[0]["prompt_tokens"] == 685
        assert len(done) == len(totals), path.name
        for r, total, (_, pn), (em, en) in zip(done, totals, prompts, evals):
            blocks += 1
            # one output token: no time between tokens, no TPOT
            tpot = close(r["tpot_s"], float(em) / 1000 / (int(en) - 1)) if int(en) > 1 else r["tpot_s"] is None
            right += (close(r["e2e_s"], total / 1000) and r["prompt_tokens"] == int(pn)
                      and r["output_tokens"] == int(en) and tpot)
    assert (lines, structured) == (278, 278)
    assert (blocks, right) == (14, 14)


def test_sglang_held_out_stats_lines(tmp_path):
    lines = structured = stats = right = 0
    for path in sorted((REAL / "sglang" / "real" / "heldout").glob("*.log")):
        ev = events(path, "sglang", tmp_path)
        text = path.read_text().splitlines()
        unparsed = set(ev.filter(pl.col("event") == "unparsed")["line"].to_list())
        # a line whose prefix lost its `[` in the paste has no SGLang header: kept, unparsed
        headed = {i for i, t in enumerate(text, 1) if not re.match(r"^\d{4}-\d\d-\d\d [\d:]+ TP0\] ", t)}
        assert unparsed == set(range(1, len(text) + 1)) - headed, path.name
        lines += len(headed)
        structured += len(headed - unparsed)
        if "damaged" in path.name:  # fields cut in the paste: only "never crashes, nothing lost"
            continue
        for i, t in enumerate(text, 1):
            if i not in headed or not re.search(r"(?:Decode|Prefill) batch", t):
                continue
            row = ev.filter(pl.col("line") == i).row(0, named=True)
            usage = re.search(r"(?:^|, |\] |\. )(?:full )?token usage: ([\d.]+)", t)
            want = {"running": re.search(r"#running-req: (\d+)", t), "waiting": re.search(r"#queue-req: (\d+)", t),
                    "kv_usage": usage, "gen_tps": re.search(r"gen throughput \(token/s\): ([\d.]+)", t),
                    "batch_tokens": re.search(r"#new-token: (\d+)", t)}
            stats += 1
            right += all(close(row[k] and float(row[k]), float(m.group(1))) for k, m in want.items() if m)
    assert (lines, structured) == (46, 46)
    assert (stats, right) == (38, 38)
