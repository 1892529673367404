"""Wrap a verbatim log the way production log sources do, following each runtime's own
rules (tests and the fixture generator use these):

- CRI (containerd / CRI-O): `<RFC 3339 ns time> <stream> <P|F> <content>`; a line longer
  than the runtime's maximum (16 KiB by default) is cut into `P` records, each with the time
  it was written, ended by an `F` record (cri-api LogTagPartial / LogTagFull).
- docker json-file: moby's copier reads 16 KiB at a time; a longer line is logged as pieces
  that all carry the first piece's time, and only the last piece ends in `\\n`.
- journald JSON, syslog ISO / BSD, `docker logs --timestamps`, compose prefixes, ANSI.

Times: line i is written at BASE + i * STEP (nanosecond digits, so a test can tell the
wrapper's time from the engine's whole seconds).
"""

from __future__ import annotations

import datetime as dt
import json

BASE = dt.datetime(2026, 1, 23, 15, 48, 28, tzinfo=dt.timezone.utc)
STEP_NS = 1_234_567
SPLIT_BYTES = 16 * 1024


def wrapper_time_ns(i: int, base: dt.datetime = BASE) -> int:
    return int(base.timestamp()) * 1_000_000_000 + i * STEP_NS


def rfc3339_ns(ns: int) -> str:
    sec, frac = divmod(ns, 1_000_000_000)
    t = dt.datetime.fromtimestamp(sec, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def _pieces(line: str, limit: int = SPLIT_BYTES) -> list[str]:
    """`line` cut into pieces of at most `limit` UTF-8 bytes (never inside a character)."""
    data = line.encode()
    out, pos = [], 0
    while len(data) - pos > limit:
        cut = pos + limit
        while cut > pos and (data[cut] & 0xC0) == 0x80:
            cut -= 1
        out.append(data[pos:cut].decode())
        pos = cut
    out.append(data[pos:].decode())
    return out


def to_cri(lines: list[str], stream: str = "stdout", limit: int = SPLIT_BYTES) -> str:
    out, k = [], 0
    for line in lines:
        parts = _pieces(line, limit)
        for j, part in enumerate(parts):
            tag = "F" if j == len(parts) - 1 else "P"
            out.append(f"{rfc3339_ns(wrapper_time_ns(k))} {stream} {tag} {part}\n")
            k += 1
    return "".join(out)


def to_docker_json(lines: list[str], stream: str = "stdout", limit: int = SPLIT_BYTES) -> str:
    out = []
    for i, line in enumerate(lines):
        parts = _pieces(line + "\n", limit)
        t = rfc3339_ns(wrapper_time_ns(i))  # every piece of one line shares its time
        for part in parts:
            out.append(json.dumps({"log": part, "stream": stream, "time": t}, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(out)


def to_journald(lines: list[str]) -> str:
    out = []
    for i, line in enumerate(lines):
        us = wrapper_time_ns(i) // 1000
        out.append(json.dumps({
            "__REALTIME_TIMESTAMP": str(us), "_HOSTNAME": "gpu-node-1", "SYSLOG_IDENTIFIER": "vllm",
            "_SYSTEMD_UNIT": "vllm.service", "_PID": "4242", "MESSAGE": line,
        }) + "\n")
    return "".join(out)


def to_syslog_iso(lines: list[str]) -> str:
    out = []
    for i, line in enumerate(lines):
        ns = wrapper_time_ns(i)
        sec, frac = divmod(ns, 1_000_000_000)
        t = dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac // 1000:06d}+00:00"
        out.append(f"{t} gpu-node-1 vllm[4242]: {line}\n")
    return "".join(out)


def to_docker_ts(lines: list[str]) -> str:
    return "".join(f"{rfc3339_ns(wrapper_time_ns(i))} {line}\n" for i, line in enumerate(lines))


def to_compose(lines: list[str], service: str = "vllm-1") -> str:
    return "".join(f"{service}  | {line}\n" for line in lines)


def to_ansi(lines: list[str]) -> str:
    out = []
    for line in lines:
        for level, colour in (("ERROR", 31), ("WARNING", 33), ("INFO", 32)):
            if line.startswith(level) or f") {level} " in line:
                line = line.replace(level, f"\x1b[{colour}m{level}\x1b[0m", 1)
                break
        out.append(line + "\n")
    return "".join(out)


def split_lines(text: str) -> list[str]:
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
