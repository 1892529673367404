"""The baseline: what a user would write without servelens.

A plain Python loop over the lines with `re`: one match per line, a dict per event, rows
batched into `pyarrow.Table.from_pylist` and written to Parquet with the same schema. It
extracts the same main fields as the servelens parsers for the lines the simulator writes
(request timings, periodic stats, access lines, capacity lines), keeps every other line as
`log`/`unparsed`, and carries the last timestamp onto lines without one. Honest code, not
deliberately slow: compiled patterns, a cheap prefix test before the expensive patterns,
batching, no per-line I/O beyond the buffered read.

    python bench/baseline.py ENGINE OUT_DIR FILE...
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from servelens.parsers.schema import EVENT_SCHEMA

BATCH_ROWS = 100_000
UTC = dt.timezone.utc

# -- vLLM (V0 and V1 text header) --------------------------------------------------------
VLLM_HEAD = re.compile(
    r"^(?:\(\w+ pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[?([\w./]+:\d+)\]? (.*)$"
)
VLLM_RECEIVED = re.compile(r"^Received request ([\w-]+): .*?max_tokens=(\d+|None)")
VLLM_ADDED = re.compile(r"^Added request ([\w-]+)\.")
VLLM_FINISHED = re.compile(r"^Finished request ([\w-]+)\.")
VLLM_STATS_V0 = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Swapped: (\d+) reqs, Pending: (\d+) reqs, GPU KV cache usage: ([\d.]+)%"
)
VLLM_STATS_V1 = re.compile(
    r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([\d.]+)%"
)
VLLM_BLOCKS = re.compile(r"# GPU blocks: (\d+)")
VLLM_MAX_SEQS = re.compile(r"max_num_seqs=(\d+)")
VLLM_MODEL = re.compile(r"model='([^']+)'")
VLLM_PREEMPT = re.compile(r"Sequence group (\S+) is preempted")
UVICORN = re.compile(r'^(?:\(\w+ pid=\d+\) )?INFO:\s+([\d.:]+) - "(\w+) (\S+) (HTTP/[\d.]+)" (\d{3})')

# -- TGI (router text format and JSON) ---------------------------------------------------
TGI_HEAD = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z\s+(TRACE|DEBUG|INFO|WARN|ERROR) (.*)$"
)
TGI_SUCCESS = re.compile(
    r'total_time="([^"]+)" validation_time="([^"]+)" queue_time="([^"]+)" '
    r'inference_time="([^"]+)" time_per_token="([^"]+)"'
)
TGI_MAX_NEW = re.compile(r"max_new_tokens: Some\((\d+)\)")
TGI_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|ms|µs|ns)$")
TGI_UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
TGI_MAX_TOTAL = re.compile(r"Setting max batch total tokens to (\d+)")
TGI_LEVELS = {"WARN": "WARNING", "TRACE": "DEBUG"}

# -- TensorRT-LLM ------------------------------------------------------------------------
TRT_CPP = re.compile(r"^\[TensorRT-LLM\]\[(TRACE|DEBUG|INFO|WARNING|ERROR)\](?:\[\d+\])? (.*)$")
TRT_GLOG = re.compile(r"^([IWE])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +\d+ ([\w./]+:\d+)\] (.*)$")
TRT_STAMP = re.compile(r"(\d\d)-(\d\d)-(\d{4}) (\d\d):(\d\d):(\d\d)(?:\.(\d{6}))?")
TRT_BLOCKS = re.compile(r"Number of blocks in KV cache primary pool: (\d+)|primary blocks=(\d+)")
TRT_MAX_SEQS = re.compile(r"TRTGptModel maxNumSequences: (\d+)")
TRT_PY = re.compile(r"^\[(\d\d)/(\d\d)/(\d{4})-(\d\d):(\d\d):(\d\d)\] \[TRT-LLM\] \[([FEWIV])\] (.*)$")
# -- SGLang ------------------------------------------------------------------------------
SGL_HEAD = re.compile(r"^\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{3}))?((?: [A-Z_]+\d+)*)\] (.*)$")
SGL_FIELD = re.compile(r"([#A-Za-z][\w\- ()/#]*?): ([\w.]+)")
SGL_STATS = {"#running-req": "running", "#queue-req": "waiting", "token usage": "kv_usage",
             "gen throughput (token/s)": "gen_tps", "input throughput (token/s)": "prompt_tps",
             "#new-token": "batch_tokens"}
SGL_INT = {"running", "waiting", "batch_tokens"}
SGL_KV_POOL = re.compile(r"max_total_num_tokens=(\d+)")

# -- llama.cpp (2026: relative times, one line per timing part) -----------------------------
LCP_HEAD = re.compile(r"^(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) ([IWEDT]) (.*)$")
LCP_SLOT = re.compile(r"^slot +\S+: id +(\d+) \| task (-?\d+) \| (.*)$")
LCP_PART = re.compile(r"^\s*(prompt eval|eval|total) time = +([\d.]+) ms / +(\d+) tokens")
LCP_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "D": "DEBUG", "T": "DEBUG"}
GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR"}
PY_LEVELS = {"F": "CRITICAL", "E": "ERROR", "W": "WARNING", "I": "INFO", "V": "DEBUG"}


class Writer:
    """Rows -> Parquet, BATCH_ROWS at a time."""

    def __init__(self, path: Path):
        self.writer = pq.ParquetWriter(path, EVENT_SCHEMA, compression="zstd")
        self.rows: list[dict] = []
        self.n = 0

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=EVENT_SCHEMA))
            self.n += len(self.rows)
            self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()


def tgi_seconds(text: str) -> float | None:
    m = TGI_DURATION.match(text)
    return float(m.group(1)) * TGI_UNITS[m.group(2)] if m else None


def parse_vllm(path: Path, out: Writer, year: int) -> None:
    base = {"engine": "vllm", "instance": path.stem, "source": str(path), "n_lines": 1}
    last_ts = None
    model = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            row = dict(base, line=n)
            m = VLLM_HEAD.match(line)
            if m:
                level, mo, d, h, mi, s, src, msg = m.groups()
                last_ts = dt.datetime(year, int(mo), int(d), int(h), int(mi), int(s), tzinfo=UTC)
                row.update(ts=last_ts, ts_inferred=False, level=level, message=msg, model=model,
                           attrs=json.dumps({"src": src}), event="log")
                if msg.startswith("Received request"):
                    r = VLLM_RECEIVED.match(msg)
                    if r:
                        row.update(event="request_arrived", request_id=r.group(1),
                                   max_tokens=None if r.group(2) == "None" else int(r.group(2)))
                elif msg.startswith("Added request"):
                    r = VLLM_ADDED.match(msg)
                    if r:
                        row.update(event="request_arrived", request_id=r.group(1))
                elif msg.startswith("Finished request"):
                    r = VLLM_FINISHED.match(msg)
                    if r:
                        row.update(event="request_finished", request_id=r.group(1))
                elif msg.startswith("Avg prompt throughput"):
                    r = VLLM_STATS_V0.search(msg)
                    if r:
                        pt, gt, run, sw, wait, kv = r.groups()
                        row.update(event="engine_stats", prompt_tps=float(pt), gen_tps=float(gt),
                                   running=int(run), swapped=int(sw), waiting=int(wait),
                                   kv_usage=float(kv) / 100)
                    else:
                        r = VLLM_STATS_V1.search(msg)
                        if r:
                            pt, gt, run, wait, kv = r.groups()
                            row.update(event="engine_stats", prompt_tps=float(pt), gen_tps=float(gt),
                                       running=int(run), waiting=int(wait), kv_usage=float(kv) / 100)
                elif "preempted" in msg:
                    r = VLLM_PREEMPT.search(msg)
                    row.update(event="preemption", request_id=r.group(1) if r else None)
                elif msg.startswith("# GPU blocks"):
                    r = VLLM_BLOCKS.search(msg)
                    row.update(event="capacity", kv_blocks_total=int(r.group(1)) if r else None)
                elif msg.startswith("args: Namespace"):
                    r = VLLM_MAX_SEQS.search(msg)
                    mm = VLLM_MODEL.search(msg)
                    if mm:
                        model = mm.group(1)
                        row["model"] = model
                    row.update(event="capacity", max_num_seqs=int(r.group(1)) if r else None)
                elif level in ("ERROR", "CRITICAL"):
                    row["event"] = "error"
                out.add(row)
                continue
            m = UVICORN.match(line)
            if m:
                client, method, p, proto, status = m.groups()
                row.update(ts=last_ts, ts_inferred=True, level="INFO", event="http_access",
                           model=model, http_status=int(status), message=line,
                           attrs=json.dumps({"method": method, "path": p, "client": client, "protocol": proto}))
            else:
                row.update(ts=last_ts, ts_inferred=last_ts is not None, event="unparsed", message=line)
            out.add(row)


def parse_tgi(path: Path, out: Writer, year: int) -> None:
    base = {"engine": "tgi", "instance": path.stem, "source": str(path), "n_lines": 1}
    last_ts = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            row = dict(base, line=n)
            if line.startswith("{"):
                row.update(_tgi_json(line, last_ts))
                last_ts = row.get("ts") or last_ts
                out.add(row)
                continue
            m = TGI_HEAD.match(line)
            if not m:
                row.update(ts=last_ts, ts_inferred=last_ts is not None, event="unparsed", message=line)
                out.add(row)
                continue
            y, mo, d, h, mi, s, frac, level, rest = m.groups()
            us = int((frac or "0").ljust(6, "0")[:6])
            last_ts = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), us, tzinfo=UTC)
            # `<spans>: <target>: <file>:<line>: <message>`
            msg = rest.rsplit(": ", 1)[-1]
            row.update(ts=last_ts, ts_inferred=False, level=TGI_LEVELS.get(level, level),
                       message=msg, event="error" if level == "ERROR" else "log")
            if msg == "Success":
                r = TGI_SUCCESS.search(rest)
                if r:
                    total, valid, queue, infer, tpt = (tgi_seconds(x) for x in r.groups())
                    mx = TGI_MAX_NEW.search(rest)
                    row.update(
                        event="request", e2e_s=total, queue_s=queue, inference_s=infer, tpot_s=tpt,
                        output_tokens=round(infer / tpt) if infer and tpt else None,
                        max_tokens=int(mx.group(1)) if mx else None,
                        attrs=json.dumps({"validation_s": valid}),
                    )
            elif msg.startswith("Setting max batch total tokens"):
                r = TGI_MAX_TOTAL.search(msg)
                row.update(event="capacity", kv_capacity_tokens=int(r.group(1)) if r else None)
            out.add(row)


def _tgi_json(line: str, last_ts):
    try:
        obj = json.loads(line)
    except ValueError:
        return {"ts": last_ts, "ts_inferred": last_ts is not None, "event": "unparsed", "message": line}
    ts = obj.get("timestamp")
    t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00")[:26] + "+00:00") if ts else None
    level = obj.get("level")
    msg = obj.get("message") or (obj.get("fields") or {}).get("message")
    row = {"ts": t or last_ts, "ts_inferred": t is None, "level": TGI_LEVELS.get(level, level),
           "message": msg, "event": "error" if level == "ERROR" else "log"}
    span = obj.get("span") or {}
    if msg == "Success" and "total_time" in span:
        infer, tpt = tgi_seconds(span.get("inference_time", "")), tgi_seconds(span.get("time_per_token", ""))
        mx = TGI_MAX_NEW.search(span.get("parameters", ""))
        row.update(event="request", e2e_s=tgi_seconds(span["total_time"]),
                   queue_s=tgi_seconds(span.get("queue_time", "")), inference_s=infer, tpot_s=tpt,
                   output_tokens=round(infer / tpt) if infer and tpt else None,
                   max_tokens=int(mx.group(1)) if mx else None)
    return row


def _trt_stats(payload: str, row: dict) -> None:
    try:
        s = json.loads(payload)
    except ValueError:
        return
    if "Active Request Count" in s:
        used, total = s.get("Used KV cache blocks"), s.get("Max KV cache blocks")
        t = TRT_STAMP.match(s.get("Timestamp", ""))
        if t:
            mo, d, y, h, mi, sec, us = t.groups()
            row["ts"] = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), int(us or 0), tzinfo=UTC)
            row["ts_inferred"] = False
        row.update(event="engine_stats", running=s.get("Active Request Count"),
                   batch_size=s.get("Scheduled Requests"), kv_blocks_used=used, kv_blocks_total=total,
                   kv_usage=used / total if used is not None and total else None,
                   batch_tokens=s.get("Total Context Tokens"))
    elif "iter" in s:
        kv = s.get("kvCacheStats") or {}
        ifb = s.get("inflightBatchingStats") or {}
        used, total = kv.get("usedNumBlocks"), kv.get("maxNumBlocks")
        t = TRT_STAMP.match(s.get("timestamp", ""))
        if t:
            mo, d, y, h, mi, sec, us = t.groups()
            row["ts"] = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), int(us or 0), tzinfo=UTC)
            row["ts_inferred"] = False
        row.update(event="engine_stats", running=s.get("numActiveRequests"), waiting=s.get("numQueuedRequests"),
                   batch_size=ifb.get("numScheduledRequests"), batch_tokens=ifb.get("numCtxTokens"),
                   kv_blocks_used=used, kv_blocks_total=total,
                   kv_usage=used / total if used is not None and total else None)


def parse_trtllm(path: Path, out: Writer, year: int) -> None:
    base = {"engine": "trtllm", "instance": path.stem, "source": str(path), "n_lines": 1}
    last_ts = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            row = dict(base, line=n, ts=last_ts, ts_inferred=last_ts is not None, event="log")
            m = TRT_GLOG.match(line)
            if m:
                lv, mo, d, h, mi, s, us, src, msg = m.groups()
                last_ts = dt.datetime(year, int(mo), int(d), int(h), int(mi), int(s), int(us), tzinfo=UTC)
                msg = msg[1:-1] if msg.startswith('"') and msg.endswith('"') else msg
                row.update(ts=last_ts, ts_inferred=False, level=GLOG_LEVELS[lv], message=msg,
                           attrs=json.dumps({"src": src}))
                if msg.startswith("{"):
                    _trt_stats(msg.replace('\\"', '"'), row)
                elif lv == "E":
                    row["event"] = "error"
                out.add(row)
                continue
            m = TRT_CPP.match(line)
            if m:
                level, msg = m.groups()
                row.update(level=level, message=msg)
                if msg.startswith("{") or msg.startswith("["):
                    _trt_stats(msg.lstrip("[").rstrip("]"), row)
                    if row["event"] == "engine_stats":
                        last_ts = row["ts"] or last_ts
                elif msg.startswith("TRTGptModel maxNumSequences"):
                    r = TRT_MAX_SEQS.match(msg)
                    row.update(event="capacity", max_num_seqs=int(r.group(1)) if r else None)
                elif "KV cache primary pool" in msg or "primary blocks=" in msg:
                    r = TRT_BLOCKS.search(msg)
                    row.update(event="capacity", kv_blocks_total=int(r.group(1) or r.group(2)) if r else None)
                elif level == "ERROR":
                    row["event"] = "error"
                out.add(row)
                continue
            m = TRT_PY.match(line)
            if m:
                mo, d, y, h, mi, s, lv, msg = m.groups()
                last_ts = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), tzinfo=UTC)
                row.update(ts=last_ts, ts_inferred=False, level=PY_LEVELS[lv], message=msg,
                           event="error" if lv in "FE" else "log")
                out.add(row)
                continue
            row.update(event="unparsed", message=line)
            out.add(row)


def parse_sglang(path: Path, out: Writer, year: int) -> None:
    base = {"engine": "sglang", "instance": path.stem, "source": str(path), "n_lines": 1}
    last_ts = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            row = dict(base, line=n)
            m = SGL_HEAD.match(line)
            if not m:
                row.update(ts=last_ts, ts_inferred=last_ts is not None, event="unparsed", message=line)
                out.add(row)
                continue
            y, mo, d, h, mi, s, ms, ranks, msg = m.groups()
            last_ts = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), int(ms or 0) * 1000, tzinfo=UTC)
            row.update(ts=last_ts, ts_inferred=False, message=msg, event="log",
                       attrs=json.dumps({"ranks": ranks.strip()}) if ranks else None)
            if msg.startswith(("Decode batch", "Prefill batch")):
                row["event"] = "engine_stats" if msg.startswith("Decode") else "batch"
                for key, value in SGL_FIELD.findall(msg.split(" ", 2)[-1]):
                    col = SGL_STATS.get(key.strip())
                    if col:
                        row[col] = int(value) if col in SGL_INT else float(value)
            elif msg.startswith("INFO:"):
                r = UVICORN.match(msg)
                if r:
                    client, method, p, proto, status = r.groups()
                    row.update(level="INFO", event="http_access", http_status=int(status),
                               attrs=json.dumps({"method": method, "path": p, "client": client, "protocol": proto}))
            elif "max_total_num_tokens=" in msg:
                r = SGL_KV_POOL.search(msg)
                row.update(event="capacity", kv_capacity_tokens=int(r.group(1)) if r else None)
            elif "KV cache pool is full" in msg or "out of memory happened" in msg:
                row["event"] = "preemption"
            out.add(row)


def parse_llamacpp(path: Path, out: Writer, year: int) -> None:
    """Relative times anchored at the file's mtime: a first pass finds the last one."""
    base = {"engine": "llamacpp", "instance": path.stem, "source": str(path), "n_lines": 1}
    last_rel = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            m = LCP_HEAD.match(raw)
            if m:
                mi, s, ms, us = (int(x) for x in m.groups()[:4])
                last_rel = ((mi * 60 + s) * 1000 + ms) * 1000 + us
    end = dt.datetime.fromtimestamp(path.stat().st_mtime, UTC)
    parts: dict[str, dict] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\r\n")
            row = dict(base, line=n)
            m = LCP_HEAD.match(line)
            if not m:
                row.update(event="unparsed", message=line)
                out.add(row)
                continue
            mi, s, ms, us, lvl, body = m.groups()
            rel = ((int(mi) * 60 + int(s)) * 1000 + int(ms)) * 1000 + int(us)
            ts = end - dt.timedelta(microseconds=last_rel - rel)
            row.update(ts=ts, ts_inferred=False, level=LCP_LEVELS[lvl], message=body,
                       event="error" if lvl == "E" else "log")
            r = LCP_SLOT.match(body)
            if r:
                slot, task, msg = r.groups()
                p = LCP_PART.match(msg) if "time =" in msg else None
                if p:
                    got = parts.setdefault(f"{slot}|{task}", {})
                    got[p.group(1)] = (float(p.group(2)), int(p.group(3)))
                    if p.group(1) == "total":
                        pe, ev = got.get("prompt eval", (None, None)), got.get("eval", (None, None))
                        row.update(event="request", request_id=task, e2e_s=got["total"][0] / 1000,
                                   inference_s=got["total"][0] / 1000, prompt_tokens=pe[1], output_tokens=ev[1],
                                   tpot_s=ev[0] / 1000 / (ev[1] - 1) if ev[1] and ev[1] > 1 else None)
                        del parts[f"{slot}|{task}"]
                elif msg.startswith("processing task"):
                    row.update(event="request_arrived", request_id=task)
                elif msg.startswith("stop processing"):
                    row.update(event="request_finished", request_id=task)
                elif msg.startswith("n_decoded") and "tg =" in msg:
                    row.update(event="engine_stats", gen_tps=float(msg.split("tg =", 1)[1].split()[0]))
            elif "n_slots = " in body:
                row.update(event="capacity", max_num_seqs=int(body.rsplit("n_slots = ", 1)[1].split()[0]))
            out.add(row)


PARSERS = {"vllm": parse_vllm, "tgi": parse_tgi, "trtllm": parse_trtllm, "sglang": parse_sglang,
           "llamacpp": parse_llamacpp}


def run(engine: str, out_dir: Path, files: list[Path], year: int = 2026) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    total = 0
    for i, path in enumerate(files):
        w = Writer(out_dir / f"part-{i:04d}.parquet")
        PARSERS[engine](path, w, year)
        w.close()
        total += w.n
    return total


def main(argv: list[str]) -> None:
    engine, out_dir, *files = argv
    n = run(engine, Path(out_dir), [Path(f) for f in files])
    print(n)


if __name__ == "__main__":
    main(sys.argv[1:])
