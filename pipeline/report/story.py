"""One request's story (`servelens show`): every event that names it, in time order, across
files and engines, with the raw lines read back from the source files, the client's row
beside the server's, and the queue and batch state around its arrival and its finish.

The store keeps no text of the bulk events (pipeline/sources/lines.py `trim_messages`), but every
event keeps where its line starts (`byte_offset`, bytes into the file's content) and how many
lines it spans (`n_lines`). The lines are read back from the file the manifest says the
event came from, once its content is the content ingested (the manifest's fingerprint: the
hash of its first bytes and of the bytes before the offset read, pipeline/sources/fingerprint.py).
A file moved or rotated since (renamed, gzipped) is found by the same fingerprint among its
siblings and the directories given with `--logs`. Without the file, a store ingested with
`--keep-lines` shows the text it kept; else the parsed columns are all there is, and the
story says so.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..sources import fingerprint as fp

# Longest raw line shown (a vLLM `Received request` line carries the whole prompt); --full
# shows every byte.
MAX_LINE_CHARS = 600
# Files looked at when searching for a moved source by its fingerprint (per directory).
SEARCH_FILES = 2000
# Events of one `--around` listing.
AROUND_LIMIT = 400
# The typed columns shown for an event whose text cannot be read back.
PARSED_COLUMNS = ("level", "model", "prompt_tokens", "output_tokens", "max_tokens", "e2e_s", "queue_s", "ttft_s",
                  "tpot_s", "inference_s", "running", "waiting", "swapped", "batch_size", "batch_tokens", "kv_usage",
                  "kv_blocks_used", "kv_blocks_total", "prompt_tps", "gen_tps", "http_status")
EVENT_COLUMNS = ("ts", "engine", "instance", "source", "line", "n_lines", "byte_offset", "event", "request_id",
                 "message", "attrs", *PARSED_COLUMNS)
STATE_EVENTS = ("engine_stats", "batch")


class ShowError(Exception):
    """Nothing to show; the message says why and what to try."""


@dataclass
class SourceFile:
    """Where an ingested file's content is now."""

    source: str  # as the events name it
    status: str  # ok | moved | changed | gone | unknown
    path: Path | None = None  # where it is read from (ok, moved)
    note: str = ""


@dataclass
class Story:
    request_id: str | None
    around: dt.datetime | None
    requests: list[dict[str, Any]] = field(default_factory=list)
    clients: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    state: list[dict[str, Any]] = field(default_factory=list)
    sources: list[SourceFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- finding the source file by its fingerprint ---------------------------------------------


def _entries_for(manifest: dict, source: str) -> list[dict]:
    return [e for e in manifest.get("files", {}).values() if e.get("source") == source]


def _entry_for_event(entries: list[dict], line: int | None, ts: dt.datetime | None) -> dict | None:
    """The manifest entry (file content) an event came from, when several contents were read
    under one path (a file rotated and its successor read at the same name): one read to at
    least its line, the first whose last time is not before it."""
    fit = [e for e in entries if line is None or e.get("lines", 0) >= line]
    if not fit:
        return None
    if len(fit) > 1 and ts is not None:
        def last_ts(e: dict) -> dt.datetime | None:
            t = (e.get("ctx") or {}).get("last_ts")
            return dt.datetime.fromisoformat(t) if t else None
        later = sorted((e for e in fit if last_ts(e) is not None and last_ts(e) >= ts), key=last_ts)
        if later:
            return later[0]
    return fit[0]


def _matches(path: Path, entry: dict) -> bool:
    try:
        if not path.is_file():
            return False
        head = fp.read_head(path)
        return fp.matches(path, head, entry)
    except (OSError, EOFError):
        return False


def _candidates(source: Path, search: Iterable[Path]) -> Iterable[Path]:
    """Files that may hold a moved or rotated source: its siblings whose name starts with its
    stem (vllm.log.1, vllm.log.2.gz, vllm-2026-05-12.log), then every file of `search`."""
    stem = source.name.split(".")[0]
    parent = source.parent if str(source.parent) else Path(".")
    seen: set[Path] = set()
    if parent.is_dir():
        for n, f in enumerate(sorted(parent.iterdir())):
            if n >= SEARCH_FILES:
                break
            if f.is_file() and f.name.startswith(stem) and f != source:
                seen.add(f)
                yield f
    for d in search:
        files = [d] if d.is_file() else sorted(d.rglob("*")) if d.is_dir() else []
        for f in files[:SEARCH_FILES]:
            if f.is_file() and f not in seen:
                seen.add(f)
                yield f


def locate(manifest: dict, source: str, entry: dict | None, search: Iterable[Path] = ()) -> SourceFile:
    """Where the content `entry` describes is now: at `source` when the file there still
    begins with the same bytes and holds the same bytes up to the offset read; else the
    first candidate file that does (moved, rotated, gzipped)."""
    if entry is None:
        return SourceFile(source, "unknown", None, "the manifest does not list this file")
    path = Path(source)
    if not path.is_absolute() and entry.get("path") and not path.exists():
        # `source` is relative to where ingest ran; the entry also keeps the absolute path
        path = Path(entry["path"])
    if _matches(path, entry):
        return SourceFile(source, "ok", path)
    head_sha, head_len = entry["head_sha"], entry["head_len"]
    for cand in _candidates(path, list(search)):
        try:
            head = fp.read_head(cand)
        except (OSError, EOFError):
            continue
        if len(head) >= head_len and fp.sha(head[:head_len]) == head_sha and fp.matches(cand, head, entry):
            return SourceFile(source, "moved", cand, f"moved: read from {cand} (the same content, by its fingerprint)")
    if path.exists():
        return SourceFile(source, "changed", None,
                          f"{source} now holds other content (rotated or rewritten) and the content ingested was not "
                          "found beside it; give the directory of the rotated files with --logs")
    return SourceFile(source, "gone", None,
                      f"{source} is gone and was not found by its fingerprint; give the directory holding it with --logs")


def read_lines(path: Path, wanted: list[tuple[int, int]], full: bool = False) -> dict[int, list[str]]:
    """The `n` lines starting at each byte offset of `wanted` [(offset, n)], in one pass over
    the file (a .gz is decompressed once, forward)."""
    out: dict[int, list[str]] = {}
    limit = None if full else MAX_LINE_CHARS * 4 + 1  # bytes: a UTF-8 character is at most 4
    with fp.open_stream(path) as f:
        for offset, n in sorted(set(wanted)):
            f.seek(offset)
            lines = []
            for _ in range(max(1, n)):
                raw = f.readline() if limit is None else f.readline(limit)
                if not raw:
                    break
                if limit is not None and not raw.endswith(b"\n") and len(raw) == limit:
                    # the rest of an over-long line: skipped, its length counted
                    rest = 0
                    while True:
                        chunk = f.readline(1 << 20)
                        rest += len(chunk)
                        if not chunk or chunk.endswith(b"\n"):
                            break
                    text = raw.decode("utf-8", errors="replace")
                    lines.append(_cut(text, len(text) + rest))
                    continue
                lines.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
            out[offset] = lines
    return out


def _cut(text: str, total: int | None = None) -> str:
    total = len(text) if total is None else total
    if len(text) <= MAX_LINE_CHARS and total == len(text):
        return text
    return text[:MAX_LINE_CHARS] + f" ... ({total - MAX_LINE_CHARS:,} more characters; --full shows them)"


# --- the story -----------------------------------------------------------------------------------


def _rows(con, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    from ..query.connect import run_on

    return run_on(con, sql, params).to_dicts()


def _event_cols() -> str:
    return ", ".join(EVENT_COLUMNS)


def request_events(con, request_id: str, around: dt.datetime | None, span_s: float) -> tuple[list[dict], str | None]:
    """Events naming `request_id` (exactly; else the one id that contains it), near `around`
    when given. Returns the events and the id matched."""
    # vLLM V1 names a request by the API's id in the request log and by that id with a suffix
    # of its own in the engine (`Added request chatcmpl-3-8b0c88d0`): both are the request
    like_id = request_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "-%"
    where, params = "(request_id = ? or request_id like ? escape '\\')", [request_id, like_id]
    if around is not None:
        where += " and ts between ? and ?"
        params += [around - dt.timedelta(seconds=span_s), around + dt.timedelta(seconds=span_s)]
    rows = _rows(con, f"select {_event_cols()} from events where {where} order by ts, source, line", params)
    if rows:
        return rows, request_id
    key = re.match(r"^(.+):(\d+)$", request_id)
    if key:  # a request the log gives no id (a TGI `Success` line): `source:line`, its request_key
        rows = _rows(con, f"select {_event_cols()} from events where source = ? and line = ?",
                     [key.group(1), int(key.group(2))])
        if rows:
            return rows, request_id
    like = request_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    ids = _rows(con, "select distinct request_id from events where request_id like ? escape '\\' order by 1 limit 6",
                [f"%{like}%"])
    # an id and the engine's suffixed form of it (`x` and `x-8b0c88d0`) are one request
    names = [r["request_id"] for r in ids]
    base = [i for i in names if not any(i != j and i.startswith(j + "-") for j in names)]
    if len(base) == 1 and len(ids) < 6:
        return request_events(con, base[0], around, span_s)
    if ids:
        names = ", ".join(r["request_id"] for r in ids[:5]) + (", ..." if len(ids) > 5 else "")
        raise ShowError(f"{request_id!r} is part of several request ids ({names}); give the whole id")
    return [], None


def story(
    store: Path | str,
    request_id: str | None = None,
    around: dt.datetime | None = None,
    span_s: float | None = None,
    instance: str | None = None,
    search: Iterable[Path] = (),
    full: bool = False,
) -> Story:
    """The story of `request_id` (its events, requests row, client row, state around it), or
    with `around` and no id, every event within `span_s` of that time."""
    from ..query.connect import connect
    from ..store.manifest import StoreError, read_manifest

    if request_id is None and around is None:
        raise ShowError("give a request id, or --around TIME for the lines around a time")
    con = connect(store, views={"requests"})
    try:
        out = Story(request_id, around)
        if request_id is not None:
            events, matched = request_events(con, request_id, around, span_s if span_s is not None else 600.0)
            if not events:
                raise ShowError(_not_found(con, request_id, around))
            out.request_id = matched
            if instance is not None:
                events = [e for e in events if e["instance"] == instance]
            out.requests = [r for r in _rows(con, "select * from requests where request_id = ? or "
                                                  "(request_id is null and request_key = ?) order by arrival_ts",
                                             [matched, matched])
                            if instance is None or r["instance"] == instance]
            out.clients = _client_rows(con, out.requests)
            out.events = _merge_clients(events, out.clients)
            out.state = _state_around(store, out.requests)
        else:
            span = 5.0 if span_s is None else span_s
            where = "ts between ? and ?"
            params: list[Any] = [around - dt.timedelta(seconds=span), around + dt.timedelta(seconds=span)]
            if instance is not None:
                where += " and instance = ?"
                params.append(instance)
            out.events = _rows(con, f"select {_event_cols()} from events where {where} order by ts, source, line "
                                    f"limit {AROUND_LIMIT + 1}", params)
            if len(out.events) > AROUND_LIMIT:
                out.events = out.events[:AROUND_LIMIT]
                out.notes.append(f"more than {AROUND_LIMIT} events in this span: the first {AROUND_LIMIT} shown; "
                                 "narrow it with --span or --instance")
            if not out.events:
                from ..query.connect import range_note
                from ..query.timerange import TimeRange

                raise ShowError(range_note(store, TimeRange(params[0], params[1])))
        try:
            manifest = read_manifest(Path(store))
        except (StoreError, OSError):  # a remote store or a fleet: no local files to read back
            manifest = {"files": {}}
        _attach_text(out, manifest, list(search), full)
        return out
    finally:
        con.close()


def _not_found(con, request_id: str, around: dt.datetime | None) -> str:
    n = _rows(con, "select count(distinct request_id) as n from events where request_id is not null")[0]["n"]
    near = f" near {around.isoformat()}" if around is not None else ""
    if not n:
        return (f"no request {request_id!r}{near}: this store's logs name no request ids (request logging off?); "
                "servelens show --around TIME shows the lines around a time")
    sample = _rows(con, "select any_value(request_id) as r from events where request_id is not null")[0]["r"]
    return (f"no request {request_id!r}{near} among the {n:,} request ids of the store (e.g. {sample}); "
            "servelens sql \"select request_id, instance, arrival_ts from requests\" lists them")


def _client_rows(con, requests: list[dict]) -> list[dict]:
    """The benchmark client's row of each request (the client file and index the requests
    view matched it by)."""
    out = []
    for r in requests:
        if r.get("client_source") is None or r.get("client_index") is None:
            continue
        rows = _rows(con, f"select {_event_cols()} from events where event = 'client_request' and source = ? "
                          "and try_cast(attrs->>'index' as bigint) = ?", [r["client_source"], r["client_index"]])
        for c in rows:
            c["client_match"] = r.get("client_match")
        out += rows
    return out


def _merge_clients(events: list[dict], clients: list[dict]) -> list[dict]:
    seen = {(e["source"], e["line"], e["event"], e["ts"]) for e in events}
    merged = events + [c for c in clients if (c["source"], c["line"], c["event"], c["ts"]) not in seen]
    return sorted(merged, key=lambda e: (e["ts"] is None, e["ts"] or dt.datetime.min.replace(tzinfo=dt.timezone.utc),
                                         e["source"] or "", e["line"] or 0))


# How far before a request's arrival and after its finish the state views are computed: the
# stats lines around it are seconds apart (a reconstructed queue needs the requests in flight).
STATE_MARGIN = dt.timedelta(minutes=5)


def _state_around(store: Path | str, requests: list[dict]) -> list[dict]:
    """Per request, at its arrival and at its finish: the queue, batch and KV state (the
    views' nearest values at or before the moment, logged or reconstructed), and the stats
    lines just before and after it. The views are computed over the request's time only (a
    big store's whole history is not needed to know its queue at one moment)."""
    from ..query.connect import connect
    from ..query.timerange import TimeRange

    times = [t for r in requests for t in (r.get("arrival_ts"), r.get("finish_ts")) if t is not None]
    if not times:
        return []
    con = connect(store, views={"queue_depth", "batch_fill", "kv_cache"},
                  time_range=TimeRange(min(times) - STATE_MARGIN, max(times) + STATE_MARGIN))
    try:
        return _state_rows(con, requests)
    finally:
        con.close()


def _state_rows(con, requests: list[dict]) -> list[dict]:
    out = []
    for r in requests:
        for moment in ("arrival_ts", "finish_ts"):
            t = r.get(moment)
            if t is None or r.get("engine") == "client":
                continue
            key = [r["engine"], r["instance"], t]
            q = _rows(con, "select ts, waiting, estimated from queue_depth where engine = ? and instance = ? and ts <= ? "
                           "order by ts desc limit 1", key)
            b = _rows(con, "select ts, running, fill, max_num_seqs from batch_fill where engine = ? and instance = ? "
                           "and ts <= ? order by ts desc limit 1", key)
            k = _rows(con, "select ts, kv_usage from kv_cache where engine = ? and instance = ? and ts <= ? "
                           "order by ts desc limit 1", key)
            kinds = ", ".join(f"'{k}'" for k in STATE_EVENTS)
            before = _rows(con, f"select {_event_cols()} from events where engine = ? and instance = ? and ts <= ? "
                                f"and event in ({kinds}) order by ts desc, line desc limit 1", key)
            after = _rows(con, f"select {_event_cols()} from events where engine = ? and instance = ? and ts > ? "
                               f"and event in ({kinds}) order by ts, line limit 1", key)
            out.append({
                "request_id": r["request_id"], "engine": r["engine"], "instance": r["instance"],
                "at": moment[: -len("_ts")], "ts": t,
                "waiting": q[0]["waiting"] if q else None, "waiting_ts": q[0]["ts"] if q else None,
                "waiting_estimated": bool(q[0]["estimated"]) if q and q[0]["estimated"] is not None else False,
                "running": b[0]["running"] if b else None, "fill": b[0]["fill"] if b else None,
                "max_num_seqs": b[0]["max_num_seqs"] if b else None,
                "kv_usage": k[0]["kv_usage"] if k else None,
                "lines": before + after,
            })
    return out


def _all_events(s: Story) -> list[dict]:
    return [*s.events, *(e for st in s.state for e in st["lines"])]


def _attach_text(s: Story, manifest: dict, search: list[Path], full: bool) -> None:
    """Each event's raw lines (`text`: a list of lines) and where they came from (`origin`:
    source | moved | stored | none)."""
    keep_lines = bool(manifest.get("keep_lines"))
    located: dict[tuple[str, int], SourceFile] = {}
    by_file: dict[Path, list[dict]] = {}
    for e in _all_events(s):
        e["text"], e["origin"] = None, "none"
        src = e.get("source")
        if not src or e.get("byte_offset") is None:
            if src and e.get("engine") != "client":
                e["note"] = "ingested before servelens kept line offsets: re-ingest into a new store to read its lines"
            continue
        if e.get("engine") == "client" and not src.endswith((".jsonl", ".jsonl.gz")):
            continue  # one JSON document holds every row: its "line" is the whole file
        entries = _entries_for(manifest, src)
        entry = _entry_for_event(entries, e.get("line"), e.get("ts"))
        k = (src, id(entry))
        if k not in located:
            located[k] = locate(manifest, src, entry, search)
        loc = located[k]
        if loc.path is not None:
            by_file.setdefault(loc.path, []).append(e)
            e["origin"] = "source" if loc.status == "ok" else "moved"
            e["read_from"] = str(loc.path)
    for path, evs in by_file.items():
        try:
            texts = read_lines(path, [(e["byte_offset"], _lines_to_read(e, evs)) for e in evs], full)
        except (OSError, EOFError) as err:
            for e in evs:
                e["origin"] = "none"
            s.notes.append(f"cannot read {path}: {getattr(err, 'strerror', None) or err}")
            continue
        for e in evs:
            lines = texts.get(e["byte_offset"]) or []
            rid = e.get("request_id")
            if e["event"] == "request_output" and rid:
                # the request's streamed deltas among other requests': this one's only
                names = re.compile(rf"(?<![\w-]){re.escape(rid)}(?![\w-])")
                lines = [x for x in lines if names.search(x)][: _deltas(e) or None] or lines[: e.get("n_lines") or 1]
            e["text"] = lines if full else [_cut(x) if len(x) > MAX_LINE_CHARS and " more characters;" not in x else x for x in lines]
            if rid and lines and not any(rid.split("@")[0] in x for x in lines) and e.get("engine") != "client":
                e["note"] = "the line read back does not name the request: the file may have changed since"
    for e in _all_events(s):
        if e["text"] is None and e.get("message") is not None and (keep_lines or e["event"] not in _TRIMMED):
            e["text"], e["origin"] = [_cut(x) if not full else x for x in e["message"].split("\n")], "stored"
    s.sources = sorted({(v.source, v.status, str(v.path), v.note): v for v in located.values()}.values(),
                       key=lambda v: v.source)
    if any(e["text"] is None for e in _all_events(s)) and not keep_lines:
        gone = [v.source for v in s.sources if v.status in ("gone", "changed", "unknown")]
        if gone:
            s.notes.append("the text of some lines is not in the store (ingested without --keep-lines) and their "
                           f"file is not at hand ({', '.join(gone)}): their parsed columns are shown")


def _deltas(e: dict) -> int | None:
    try:
        return int(json.loads(e.get("attrs") or "{}").get("deltas"))
    except (TypeError, ValueError):
        return None


def _lines_to_read(e: dict, evs: list[dict]) -> int:
    """Lines to read from an event's offset: its own (`n_lines`); for a request's folded
    streamed deltas, interleaved with other requests' lines, every line up to the request's
    last event in the same file (its deltas are picked out of them)."""
    n = e.get("n_lines") or 1
    if e["event"] != "request_output" or not e.get("request_id"):
        return n
    last = max((x["line"] + (x.get("n_lines") or 1) - 1 for x in evs
                if x.get("source") == e.get("source") and x.get("request_id") == e["request_id"] and x.get("line")),
               default=e["line"])
    return max(n, min(last - e["line"] + 1, 100_000))


# the event kinds whose text the store drops unless --keep-lines (lines.TRIMMED_KINDS)
_TRIMMED = ("request", "request_arrived", "request_finished", "engine_stats", "batch", "http_access")


# --- rendering -------------------------------------------------------------------------------------


def parsed_fields(e: dict) -> str:
    parts = [f"{c}={_num(e[c])}" for c in PARSED_COLUMNS if e.get(c) is not None]
    attrs = e.get("attrs")
    if attrs:
        parts.append(f"attrs={attrs if len(attrs) <= 300 else attrs[:300] + '...'}")
    return " ".join(parts) or "(no parsed fields)"


def _num(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _t(t: dt.datetime | None) -> str:
    return "-" if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"


def to_text(s: Story) -> str:
    out: list[str] = []
    if s.request_id is not None:
        for r in s.requests:
            who = f"{r['instance']} ({r['engine']}{', model ' + r['model'] if r.get('model') else ''})"
            out.append(f"request {r['request_id'] or r['request_key']} on {who}: {r['status']}")
            out.append(f"  arrived {_t(r['arrival_ts'])}, finished {_t(r['finish_ts'])} UTC; e2e {_s(r['e2e_s'])}"
                       f"{' (estimated)' if r.get('e2e_estimated') else ''}, queue {_s(r['queue_s'])}, "
                       f"ttft {_s(r['ttft_s'])}, tpot {_s(r['tpot_s'])}; tokens: prompt {r['prompt_tokens'] or '-'}, "
                       f"output {r['output_tokens'] if r['output_tokens'] is not None else '-'}")
            if r.get("failure_reason"):
                out.append(f"  failed: {r['failure_reason']}")
            if r.get("client_source"):
                out.append(f"  client ({r['client_source']} #{r['client_index']}, matched by {r['client_match']}): "
                           f"ttft {_s(r['client_ttft_s'])}, e2e {_s(r['client_e2e_s'])}, itl {_s(r['client_itl_s'])}, "
                           f"tpot {_s(r['client_tpot_s'])}" + (f", error {r['client_error']}" if r.get("client_error") else ""))
        out.append("")
        out.append(f"{len(s.events)} event(s) naming it, in time order:")
    else:
        out.append(f"{len(s.events)} event(s) around {_t(s.around)} UTC, in time order:")
    out += _event_lines(s.events)
    if s.state:
        out.append("")
        out.append("queue and batch state around it:")
        for st in s.state:
            est = " (reconstructed)" if st["waiting_estimated"] else ""
            fill = f" ({100 * st['fill']:.0f}% of max_num_seqs {st['max_num_seqs']})" if st.get("fill") is not None else ""
            kv = f", KV {100 * st['kv_usage']:.1f}%" if st.get("kv_usage") is not None else ""
            out.append(f"  at {st['at']} {_t(st['ts'])} on {st['instance']}: waiting {_v(st['waiting'])}{est}, "
                       f"running {_v(st['running'])}{fill}{kv}")
            out += ["  " + x for x in _event_lines(st["lines"])]
    if s.sources:
        out.append("")
        out.append("sources:")
        for v in s.sources:
            what = {"ok": "lines read back by offset (fingerprint matches)", "moved": v.note}.get(v.status, v.note)
            out.append(f"  {v.source}: {what}")
    for n in s.notes:
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"


def _v(x: Any) -> str:
    return "-" if x is None else str(x)


def _event_lines(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        where = f"{e['source']}:{e['line']}" if e.get("source") else "-"
        out.append(f"{_t(e['ts'])}  {e['instance'] or '-'}  {e['event']}  {where}")
        if e.get("text"):
            mark = "" if e["origin"] in ("source", "moved") else "(kept text) "
            out += [f"    {mark}{x}" for x in e["text"]]
        if e["event"] == "client_request" or not e.get("text"):
            out.append(f"    [{'client row' if e['event'] == 'client_request' else 'parsed'}] {parsed_fields(e)}")
        if e.get("note"):
            out.append(f"    note: {e['note']}")
    return out


def to_json(s: Story) -> str:
    def enc(o: Any) -> Any:
        if isinstance(o, (dt.datetime, dt.date)):
            return o.isoformat()
        if isinstance(o, Path):
            return str(o)
        return str(o)

    doc = {
        "request_id": s.request_id,
        "around": s.around,
        "requests": s.requests,
        "events": [{k: v for k, v in e.items() if k != "message" or e.get("origin") == "stored"} for e in s.events],
        "state": s.state,
        "sources": [{"source": v.source, "status": v.status, "read_from": v.path, "note": v.note or None} for v in s.sources],
        "notes": s.notes,
    }
    return json.dumps(doc, default=enc, indent=2) + "\n"
