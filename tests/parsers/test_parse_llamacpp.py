"""Golden tests for the llama.cpp parser on real `llama-server` logs users posted (see
sample_logs/llamacpp/real/SOURCES.md), one era at a time, and the timing block's pairing
across interleaved lines and chunk boundaries."""

from __future__ import annotations

import datetime as dt
import functools
import io
import json
from pathlib import Path

import polars as pl
import pytest

from servelens.parsers import detect_engine
from servelens.parsers.engines.llamacpp import parser as llamacpp
from servelens.parsers.base import ParseContext, check_events, finalize, lines_frame, uncovered_lines
from servelens.pipeline.sources import lines as L

REAL = Path(__file__).parents[2] / "sample_logs" / "llamacpp" / "real"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "llamacpp"


def parse(text: str, mtime: dt.datetime | None = None, **cols) -> pl.DataFrame:
    texts = text.split("\n")
    if texts[-1] == "":
        texts.pop()
    ctx = ParseContext(engine="llamacpp", source="t.log", instance="t", mtime=mtime)
    frame = lines_frame(texts)
    for k, v in cols.items():
        frame = frame.with_columns(pl.Series(k, v))
    ev = finalize(llamacpp.parse(frame, ctx), ctx, carry=llamacpp.CARRY_FORWARD)
    check_events(ev)
    assert uncovered_lines(ev, 1, len(texts)) == []
    return ev


def real(name: str) -> str:
    return (REAL / name).read_text()


def attrs(row) -> dict:
    return json.loads(row["attrs"]) if row["attrs"] else {}


def requests(ev: pl.DataFrame) -> list[dict]:
    return ev.filter(pl.col("event") == "request").to_dicts()


# --- 2026: one prefixed line per timing part ----------------------------------------------


def test_2026_timing_lines_are_one_request_with_exact_values():
    ev = parse(real("era_c_2026_glm_flash_club3090_1124.log"))
    (r,) = requests(ev)
    assert r["line"] == 5  # the block's last line (draft acceptance)
    assert r["request_id"] == "160"
    assert r["e2e_s"] == pytest.approx(5.98121, abs=1e-12)
    assert r["inference_s"] == pytest.approx(5.98121, abs=1e-12)
    assert r["prompt_tokens"] == 4 and r["output_tokens"] == 96
    # 96 tokens after the first: 95 steps in 5729.20 ms
    assert r["tpot_s"] == pytest.approx(5.7292 / 95, abs=1e-12)
    a = attrs(r)
    assert a["prefill_s"] == pytest.approx(0.25201) and a["decode_s"] == pytest.approx(5.7292)
    assert a["ms_per_token"] == 60.31 and a["gen_tokens_per_s"] == 16.58
    assert a["total_tokens"] == 100 and a["graphs_reused"] == 0
    assert (a["draft_acceptance"], a["draft_accepted"], a["draft_generated"], a["draft_mean_len"]) == (0.46218, 55, 119, 2.38)
    # the other lines of the block point at the request
    parts = ev.filter(pl.col("line") < 5)
    assert parts["event"].to_list() == ["log"] * 4
    assert {attrs(x)["request_line"] for x in parts.to_dicts()} == {5}
    kinds = ev["event"].to_list()
    assert kinds[5:] == ["request_finished", "log", "request_arrived"] + ["engine_stats"] * 4
    assert ev["gen_tps"].to_list()[8:] == [19.04, 18.88, 18.39, 17.74]
    assert attrs(ev.row(8, named=True))["tg_3s"] == 19.23


def test_2026_prompt_processing_progress_is_prompt_throughput():
    ev = parse(real("era_c_2026_router_hip_26222.log"))
    stats = ev.filter(pl.col("event") == "engine_stats")
    assert stats["prompt_tps"].to_list() == [1613.98, 1554.27, 1497.71, 1445.72, 1384.50]
    a = attrs(stats.row(0, named=True))
    assert (a["n_tokens"], a["progress"], a["elapsed_s"], a["port"]) == (15360, 0.56, 9.52, 39625)
    (r,) = requests(ev)
    assert (r["request_id"], r["prompt_tokens"], r["output_tokens"]) == ("28@39625", 27277, 128)
    assert r["e2e_s"] == pytest.approx(21.97226, abs=1e-12)
    assert r["tpot_s"] == pytest.approx(1.9699 / 127, abs=1e-12)


def test_a_pasted_fragment_without_core_timing_lines_is_no_request():
    ev = parse(real("era_c_2026_deepseek_club3090_1106.log"))
    (r,) = requests(ev)  # task 9126 shows only its graphs/draft lines
    assert r["request_id"] == "9161" and r["e2e_s"] == pytest.approx(10.3109, abs=1e-12)
    assert ev.row(0, named=True)["event"] == "log"
    assert ev.filter(pl.col("event") == "request_finished")["request_id"].to_list() == ["9126"]


def test_other_2026_lines_are_structured():
    ev = parse(real("era_c_2026_proxmox_club3090_362.log"))
    assert "unparsed" not in ev["event"].to_list()
    (r,) = requests(ev)
    assert (r["request_id"], r["prompt_tokens"], r["output_tokens"]) == ("8", 283, 27)
    assert r["e2e_s"] == pytest.approx(0.92053, abs=1e-12)
    # `adaptive dm` between the timing lines and the release is a log line of the slot
    assert ev.row(5, named=True)["event"] == "log"


# --- 2024-09 .. 2026-05: header and continuation lines ---------------------------------------


def test_multi_line_timing_block_is_one_request():
    ev = parse(real("era_b_2025_infill_19408.log"))
    (r,) = requests(ev)
    assert r["line"] == 6 and r["request_id"] == "124"
    assert (r["prompt_tokens"], r["output_tokens"]) == (1360, 10)
    assert r["e2e_s"] == pytest.approx(5.41305, abs=1e-12)
    assert r["tpot_s"] == pytest.approx(0.31958 / 9, abs=1e-12)
    assert attrs(r)["prefill_s"] == pytest.approx(5.09347)
    assert ev.filter(pl.col("event") == "http_access").select("http_status", "attrs").row(0)[0] == 200
    assert attrs(ev.filter(pl.col("event") == "http_access").row(0, named=True))["path"] == "/infill"
    fin = ev.filter(pl.col("event") == "request_finished").row(0, named=True)
    assert fin["request_id"] == "124" and attrs(fin)["n_tokens_used"] == 1369 and attrs(fin)["truncated"] is False
    assert ev.filter(pl.col("event") == "request_arrived")["request_id"].to_list() == ["135"]  # not task -1


def test_router_prefix_and_timestamped_multi_line_block():
    ev = parse(real("era_bc_transitional_router_23269.log"))
    got = [(r["line"], r["request_id"], r["prompt_tokens"], r["output_tokens"], round(r["e2e_s"], 6)) for r in requests(ev)]
    assert got == [(5, "388@42027", 27, 192, 16.90153), (20, "970@42027", 25, 192, 16.88378)]
    assert ev.filter(pl.col("event") == "engine_stats")["gen_tps"].to_list() == [12.00, 11.90, 11.90]
    assert "unparsed" not in ev["event"].to_list()


def test_slots_and_context_are_capacity():
    ev = parse(real("era_b_2024_startup_9928.log"))
    cap = ev.filter(pl.col("event") == "capacity")
    assert cap.height == 9 and {attrs(x)["n_ctx_slot"] for x in cap.to_dicts()} == {10240}
    assert ev.filter(pl.col("event") == "request_arrived")["request_id"].to_list() == ["0", "1", "2", "3"]
    assert ev.filter(pl.col("event") == "http_access")["http_status"].to_list() == [200, 200]
    text = (
        "srv          init: initializing slots, n_slots = 4\n"
        "llama_context: n_seq_max     = 4\n"
        "llama_context: n_ctx         = 16384\n"
        "llama_context: n_ctx_per_seq = 4096\n"
    )
    ev = parse(text)
    assert ev["event"].to_list() == ["capacity", "capacity", "capacity", "log"]
    assert ev["max_num_seqs"].to_list()[:2] == [4, 4]
    assert ev["kv_capacity_tokens"].to_list()[2] == 16384


def test_cancel_is_an_abort_and_errors_are_errors():
    text = (
        "6.08.145.791 W srv          stop: cancel task, id_task = 661\n"
        "srv  cancel_tasks: cancel task, id_task = 12\n"
        "0.01.000.000 E srv    send_error: task id = 3, error: the request exceeds the available context size\n"
        "/src/ggml/src/ggml.c:1234: GGML_ASSERT(seq_id < n_tokens) failed\n"
    )
    ev = parse(text)
    assert ev["event"].to_list() == ["request_aborted", "request_aborted", "error", "error"]
    assert ev["request_id"].to_list()[:2] == ["661", "12"]
    # the builds without a level letter printed the cancel with SRV_WRN too
    assert ev["level"].to_list()[:3] == ["WARNING", "WARNING", "ERROR"]
    assert attrs(ev.row(3, named=True))["error_kind"] == "assert"


# --- 2024: server_log JSON and text ------------------------------------------------------------


def test_2024_text_records_use_the_exact_extras():
    ev = parse(real("era_a_2024_text_format_9013.log"))
    (r,) = requests(ev)
    assert r["request_id"] == "0"
    assert r["e2e_s"] == pytest.approx(3.209839, abs=1e-12)  # t_total, not the rounded 3209.84
    assert r["tpot_s"] == pytest.approx(3.194224 / 782, abs=1e-12)
    assert (r["prompt_tokens"], r["output_tokens"]) == (12, 783)
    assert r["ts"] == dt.datetime(2024, 8, 13, 17, 20, 22, tzinfo=dt.timezone.utc)
    assert attrs(r)["tid"] == "139964472983552"


def test_2024_incomplete_block_is_a_request_marked_incomplete():
    ev = parse(real("era_a_2024_text_format_8359.log"))
    (r,) = requests(ev)
    assert r["request_id"] == "1" and r["prompt_tokens"] == 221 and r["e2e_s"] is None
    a = attrs(r)
    assert a["timing_incomplete"] is True and a["prefill_s"] == pytest.approx(1.04886)
    acc = ev.filter(pl.col("event") == "http_access").row(0, named=True)
    assert acc["http_status"] == 200 and attrs(acc)["path"] == "/health"
    assert ev.filter(pl.col("event") == "request_arrived")["request_id"].to_list() == ["1"]


def test_2024_json_records():
    text = (
        '{"tid":"140","timestamp":1714497121,"level":"INFO","function":"initialize","line":700,"msg":"initializing slots","n_slots":2}\n'
        '{"tid":"140","timestamp":1714497121,"level":"INFO","function":"initialize","line":712,"msg":"new slot","id_slot":0,"n_ctx_slot":4096}\n'
        '{"tid":"140","timestamp":1714497130,"level":"INFO","function":"launch_slot_with_task","line":1010,"msg":"slot is processing task","id_slot":0,"id_task":5}\n'
        '{"tid":"141","timestamp":1714497131,"level":"INFO","function":"log_server_request","line":2900,"msg":"request","remote_addr":"127.0.0.1","remote_port":50382,"status":200,"method":"POST","path":"/completion","params":{}}\n'
        '{"tid":"140","timestamp":1714497134,"level":"INFO","function":"print_timings","line":313,"msg":"prompt eval time     =     100.00 ms /    10 tokens (   10.00 ms per token,   100.00 tokens per second)","id_slot":0,"id_task":5,"t_prompt_processing":100.004,"n_prompt_tokens_processed":10,"t_token":10.0004,"n_tokens_second":99.99}\n'
        '{"tid":"140","timestamp":1714497134,"level":"INFO","function":"print_timings","line":327,"msg":"generation eval time =    2000.00 ms /    21 runs   (   95.24 ms per token,    10.50 tokens per second)","id_slot":0,"id_task":5,"t_token_generation":2000.002,"n_decoded":21,"t_token":95.238,"n_tokens_second":10.5}\n'
        '{"tid":"140","timestamp":1714497134,"level":"INFO","function":"print_timings","line":337,"msg":"          total time =    2100.01 ms","id_slot":0,"id_task":5,"t_prompt_processing":100.004,"t_token_generation":2000.002,"t_total":2100.006}\n'
        '{"tid":"140","timestamp":1714497134,"level":"INFO","function":"update_slots","line":1600,"msg":"slot released","id_slot":0,"id_task":5,"n_ctx":4096,"n_past":31,"n_system_tokens":0,"n_cache_tokens":31,"truncated":false}\n'
    )
    ev = parse(text)
    assert ev["event"].to_list() == ["capacity", "capacity", "request_arrived", "http_access", "log", "log", "request", "request_finished"]
    assert ev["max_num_seqs"][0] == 2
    r = ev.row(6, named=True)
    assert r["request_id"] == "5" and r["e2e_s"] == pytest.approx(2.100006, abs=1e-12)
    assert r["tpot_s"] == pytest.approx(2.000002 / 20, abs=1e-12)
    assert r["ts"] == dt.datetime.fromtimestamp(1714497134, dt.timezone.utc)
    assert attrs(ev.row(7, named=True))["truncated"] is False


def test_pre_2024_02_json_and_plain_lines():
    ev = parse(real("era_a_2024_json_5104.log"))
    assert ev["event"].to_list() == ["log", "http_access", "request_arrived", "log", "log"]
    assert ev["request_id"][2] == "0"
    assert ev["ts"][1] == dt.datetime.fromtimestamp(1706462782, dt.timezone.utc)


# --- interleaving, hidden values, chunk boundaries ---------------------------------------------

BLOCK_C = (
    "1.00.000.000 I slot launch_slot_: id  1 | task 7 | processing task, is_child = 0\n"
    "1.05.000.000 I slot print_timing: id  1 | task 7 | prompt eval time =    1000.00 ms /   100 tokens (   10.00 ms per token,   100.00 tokens per second)\n"
    "1.05.000.010 I srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200\n"
    "1.05.000.020 I slot print_timing: id  0 | task 6 | n_decoded =    120, tg =  30.00 t/s, tg_3s =  31.00 t/s\n"
    "1.05.000.030 I slot print_timing: id  1 | task 7 |        eval time =    3000.00 ms /    31 tokens (   96.77 ms per token,    10.33 tokens per second)\n"
    "1.05.000.040 I slot print_timing: id  1 | task 7 |       total time =    4000.00 ms /   131 tokens\n"
    "1.05.000.050 I slot      release: id  1 | task 7 | stop processing: n_tokens = 131, truncated = 0\n"
)


def test_parts_separated_by_other_lines_pair_by_slot_and_task():
    ev = parse(BLOCK_C)
    (r,) = requests(ev)
    assert (r["line"], r["request_id"], r["prompt_tokens"], r["output_tokens"]) == (6, "7", 100, 31)
    assert r["e2e_s"] == 4.0 and r["tpot_s"] == pytest.approx(0.1, abs=1e-12)
    assert ev["event"].to_list() == ["request_arrived", "log", "http_access", "engine_stats", "log", "request", "request_finished"]


def test_journald_blob_hides_values_it_does_not_zero_them():
    text = (
        "slot print_timing: id  0 | task 3 | \n"
        "[100B blob data]\n"
        "       eval time =     319.58 ms /    10 tokens (   31.96 ms per token,    31.29 tokens per second)\n"
        "[58B blob data]\n"
        "slot      release: id  0 | task 3 | stop processing: n_tokens = 50, truncated = 0\n"
        "[120B blob data]\n"
    )
    ev = parse(text)
    (r,) = requests(ev)
    assert r["line"] == 4 and r["request_id"] == "3"
    assert r["prompt_tokens"] is None and r["e2e_s"] is None  # hidden, not 0
    assert r["output_tokens"] == 10
    a = attrs(r)
    assert a["hidden_lines"] == 2 and a["timing_incomplete"] is True
    assert ev.row(5, named=True)["event"] == "log" and attrs(ev.row(5, named=True))["hidden"] is True


def _chunked(texts: list[str], cut: int) -> pl.DataFrame:
    """The events of `texts` parsed as two chunks, cut before line index `cut`."""
    ctx = ParseContext(engine="llamacpp", source="t.log", instance="t")
    a = finalize(llamacpp.parse(lines_frame(texts[:cut]), ctx), ctx, carry=llamacpp.CARRY_FORWARD)
    b = finalize(llamacpp.parse(lines_frame(texts[cut:], first_line=cut + 1), ctx), ctx, carry=llamacpp.CARRY_FORWARD)
    return pl.concat([a, b])


@pytest.mark.parametrize("name", ["era_b_2025_infill_19408.log", "era_bc_transitional_router_23269.log",
                                  "era_c_2026_deepseek_club3090_1106.log", "era_c_2026_glm_flash_club3090_1124.log"])
def test_chunks_cut_where_record_starts_allows_give_the_same_events(name):
    texts = real(name).splitlines()
    starts = llamacpp.record_starts(pl.Series(texts)).to_list()
    cuts = [i for i in range(1, len(texts)) if starts[i]]
    assert len(cuts) < len(texts) - 1  # some lines are not cut points
    whole = parse("\n".join(texts) + "\n")  # (the same for every cut)
    for cut in cuts:
        chunked = _chunked(texts, cut)
        assert chunked.drop("ts_inferred").equals(whole.drop("ts_inferred")), (name, cut)


def test_no_cut_point_inside_a_timing_block():
    texts = BLOCK_C.splitlines()
    starts = llamacpp.record_starts(pl.Series(texts)).to_list()
    # inside task 7's block (lines 3..6, 1-based) no chunk may start
    assert starts == [True, True, False, False, False, False, True]
    texts = real("era_b_2025_infill_19408.log").splitlines()
    starts = llamacpp.record_starts(pl.Series(texts)).to_list()
    assert starts[3:7] == [False, False, False, True]


def test_ingest_with_tiny_blocks_keeps_each_timing_block_whole():
    """The real chunking loop (pipeline/sources/lines.py) with blocks of a few hundred bytes: every
    block is cut somewhere, yet each request comes out once with its values."""
    texts = []
    for name in ("era_bc_transitional_router_23269.log", "era_c_2026_router_hip_26222.log", "era_b_2025_infill_19408.log"):
        texts += real(name).splitlines()
    data = ("\n".join(texts) + "\n").encode()
    whole = parse(data.decode())
    for block in (200, 333, 512, 1000):
        ctx = ParseContext(engine="llamacpp", source="t.log", instance="t", keep_lines=True)  # every line's text, as parse() gives
        chunks = list(L.parse_stream(io.BytesIO(data), llamacpp, ctx, offset=0, next_line=1, block_bytes=block))
        assert len(chunks) > 3
        got = pl.concat([c.events for c in chunks])
        # the reading loop adds where each event's line starts in the file (whole-text parse: none)
        assert got.drop("ts_inferred", "byte_offset").equals(whole.drop("ts_inferred", "byte_offset")), block
        starts = [0]
        for line in data.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        assert got["byte_offset"].to_list() == [starts[n - 1] for n in got["line"].to_list()], block


@functools.cache
def _whole_block_answers() -> tuple[list[str], dict[int, int]]:
    """Every real line and BLOCK_C's, and the last record start of each tested head of them
    asked of the whole head (the same for every window: computed once per process)."""
    texts = []
    for p in sorted(REAL.glob("*.log")):
        texts += p.read_text().splitlines()
    texts += BLOCK_C.splitlines()
    whole = {n: L._last_start(llamacpp, pl.Series("text", texts[:n], dtype=pl.String)) for n in range(2, len(texts) + 1, 3)}
    return texts, whole


@pytest.mark.parametrize("window", [1, 2, 16])
def test_tail_window_gives_the_whole_block_answer(window, monkeypatch):
    monkeypatch.setattr(L, "TAIL_WINDOW_LINES", window)
    texts, whole = _whole_block_answers()
    for n in range(2, len(texts) + 1, 3):
        block = pl.Series("text", texts[:n], dtype=pl.String)
        assert L.last_record_start(llamacpp, block) == whole[n], n


# --- time -------------------------------------------------------------------------------------


def test_relative_times_anchor_on_the_file_mtime():
    mtime = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    ev = parse(BLOCK_C, mtime=mtime)
    # the last line (1 min 5.00005 s after start) was written at mtime
    assert ev["ts"][-1] == mtime
    assert ev["ts"][0] == mtime - dt.timedelta(seconds=5.00005)
    assert {attrs(x)["ts_anchor"] for x in ev.to_dicts()} == {"mtime"}
    assert attrs(ev.row(0, named=True))["rel_s"] == 60.0


def test_wrapper_time_wins_and_anchors_the_whole_run():
    texts = BLOCK_C.splitlines()
    wrap = [None] * len(texts)
    wrap[3] = dt.datetime(2026, 6, 1, 8, 0, 5, 20, tzinfo=dt.timezone.utc)  # the tg line, 1.05.000.020
    ev = parse(BLOCK_C, mtime=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc), wrapper_ts=pl.Series(wrap, dtype=pl.Datetime("us", "UTC")))
    assert ev["ts"][0] == dt.datetime(2026, 6, 1, 8, 0, 0, tzinfo=dt.timezone.utc)
    assert {attrs(x)["ts_anchor"] for x in ev.to_dicts()} == {"wrapper"}


def test_a_restart_is_anchored_from_the_run_after_it():
    text = (
        "5.00.000.000 I srv  update_slots: all slots are idle\n"
        "5.10.000.000 I srv  update_slots: all slots are idle\n"
        "0.00.500.000 I main: server is listening on http://127.0.0.1:8080\n"
        "0.02.500.000 I srv  update_slots: all slots are idle\n"
    )
    mtime = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    ev = parse(text, mtime=mtime)
    ts = ev["ts"].to_list()
    assert ts[3] == mtime and ts[2] == mtime - dt.timedelta(seconds=2)
    # the first run ended where the second started (its last line at the restart)
    assert ts[1] == mtime - dt.timedelta(seconds=2.5) and ts[0] == ts[1] - dt.timedelta(seconds=10)
    assert [attrs(x)["ts_anchor"] for x in ev.to_dicts()] == ["mtime"] * 4


def test_without_an_anchor_time_stays_null_and_rel_is_kept():
    ev = parse(BLOCK_C)
    assert ev["ts"].null_count() == ev.height
    assert attrs(ev.row(5, named=True))["rel_s"] == 65.00004


# --- detection, damage, all real files ----------------------------------------------------


def test_every_real_file_is_detected_and_fully_structured():
    headed = structured = 0
    for p in sorted(REAL.glob("*.log")):
        texts = p.read_text().splitlines()
        assert detect_engine(texts)[0] == "llamacpp", p.name
        ev = parse(p.read_text())
        structured += ev.filter(pl.col("event") != "unparsed").height
        headed += len(texts)
    assert structured == headed  # every line of these real excerpts carries a llama.cpp header


def test_other_engines_are_not_taken_for_llamacpp():
    samples = Path(__file__).parents[2] / "sample_logs"
    for engine in ("vllm", "tgi", "trtllm"):
        for p in sorted((samples / engine).rglob("*.log"))[:6]:
            texts = p.read_text(errors="replace").splitlines()[:300]
            # never llama.cpp: its own engine, or none for a line detection cannot place
            # (tgi/real/ansi_cloudwatch.log: a CloudWatch export of colour-coded lines)
            assert llamacpp.detect(texts) < 0.2, p
            assert detect_engine(texts)[0] in (engine, "unknown"), p


def test_damaged_paste_never_crashes():
    text = (FIXTURES / "damaged_paste_7131.log").read_text(errors="replace")
    ev = parse(text)
    assert ev.height == len(text.splitlines())
    assert "unparsed" in ev["event"].to_list()


def test_parse_text_and_cli_ingest(tmp_path):
    from typer.testing import CliRunner

    from servelens.pipeline.cli.app import app

    log = tmp_path / "llama-server.log"
    log.write_text(real("era_bc_transitional_router_23269.log") + BLOCK_C)
    store = tmp_path / "store"
    # (--no-rollups: the requests view is then computed from the events, the answer the same)
    res = CliRunner().invoke(app, ["ingest", str(log), "--store", str(store), "--no-rollups"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["sql", "select request_id, status, round(e2e_s, 5) as e2e, output_tokens "
                                   "from requests order by request_id", "--store", str(store), "--format", "csv"])
    assert res.exit_code == 0, res.output
    rows = res.stdout.strip().splitlines()
    assert rows[0] == "request_id,status,e2e,output_tokens"
    assert "388@42027,finished,16.90153,192" in rows and "970@42027,finished,16.88378,192" in rows and "7,finished,4.0,31" in rows


# --- the simulator's llama.cpp logs ---------------------------------------------------------


@pytest.mark.parametrize("variant", ["v2026", "v2024"])
def test_simulated_logs_parse_fully_and_match_the_truth(tmp_path, variant):
    from servelens.pipeline.simulate import simulate

    summary = simulate("llamacpp", "incident", "150s", 9, tmp_path, variant=variant, instances=2)
    truth = pl.read_parquet(tmp_path / "truth_requests.parquet")
    for name in summary["files"]:
        path = tmp_path / name
        mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
        ev = parse(path.read_text(), mtime=mtime)
        assert ev.filter(pl.col("event") == "unparsed").height == 0
        assert ev["ts"].null_count() == 0
        ok = truth.filter((pl.col("instance") == path.stem) & (pl.col("status") == "ok"))
        got = ok.join(ev.filter(pl.col("event") == "request"), on="request_id", suffix="_log")
        assert got.height == ok.height == ev.filter(pl.col("event") == "request").height > 50
        d = got.select(
            (pl.col("e2e_s_log") - pl.col("inference_s")).abs().max().alias("e2e"),
            (pl.col("tpot_s_log") - pl.col("tpot_s")).abs().max().alias("tpot"),
            (pl.col("output_tokens_log") != pl.col("output_tokens")).sum().alias("out"),
            (pl.col("prompt_tokens_log") != pl.col("prompt_tokens")).sum().alias("prompt"),
            (pl.col("ts") - pl.col("finish_ts")).abs().max().alias("dts"),
        ).row(0, named=True)
        # v2026 prints ms with 2 decimals (10 us) and times to the us; v2024 has exact extras
        # and whole-second timestamps
        assert d["e2e"] <= 5e-6 + 1e-9 and d["tpot"] <= 5e-6 and d["out"] == 0 and d["prompt"] == 0
        assert d["dts"] <= (dt.timedelta(microseconds=10) if variant == "v2026" else dt.timedelta(seconds=1))
        if path.stem.endswith("-a"):  # the crashed instance
            assert "error" in ev["event"].to_list()
        anchors = {attrs(x).get("ts_anchor") for x in ev.to_dicts()} - {None}
        assert anchors == ({"mtime"} if variant == "v2026" else set())


def test_a_growing_file_keeps_the_anchor_it_was_first_read_with():
    """A tailer reads the file as it grows: the first read anchors the run at the mtime it
    saw; later chunks of the same run keep that anchor, whatever the file's mtime is then."""
    texts = BLOCK_C.splitlines()
    m1 = dt.datetime(2026, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    ctx = ParseContext(engine="llamacpp", source="t.log", instance="t", mtime=m1)
    a = finalize(llamacpp.parse(lines_frame(texts[:1]), ctx), ctx, carry=llamacpp.CARRY_FORWARD)
    ctx.mtime = m1 + dt.timedelta(hours=1)  # the file was written to since
    b = finalize(llamacpp.parse(lines_frame(texts[1:], first_line=2), ctx), ctx, carry=llamacpp.CARRY_FORWARD)
    assert a["ts"][0] == m1
    assert b["ts"][-1] == m1 + dt.timedelta(seconds=5.00005)
    # a restart in a later chunk starts a new run, anchored afresh
    c = finalize(llamacpp.parse(lines_frame(["0.00.001.000 I main: loading model"], first_line=9), ctx), ctx)
    assert c["ts"][0] == ctx.mtime
