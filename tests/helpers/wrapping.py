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


def _time(times: list[int] | None, i: int) -> int:
    return times[i] if times is not None else wrapper_time_ns(i)


def to_cri(lines: list[str], stream: str = "stdout", limit: int = SPLIT_BYTES, times: list[int] | None = None) -> str:
    out = []
    for i, line in enumerate(lines):
        parts = _pieces(line, limit)
        for j, part in enumerate(parts):
            tag = "F" if j == len(parts) - 1 else "P"
            # each fragment carries the time it was written (a few microseconds apart)
            out.append(f"{rfc3339_ns(_time(times, i) + j * 7_000)} {stream} {tag} {part}\n")
    return "".join(out)


def to_docker_json(lines: list[str], stream: str = "stdout", limit: int = SPLIT_BYTES, times: list[int] | None = None) -> str:
    out = []
    for i, line in enumerate(lines):
        parts = _pieces(line + "\n", limit)
        t = rfc3339_ns(_time(times, i))  # every piece of one line shares its time
        for part in parts:
            out.append(json.dumps({"log": part, "stream": stream, "time": t}, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(out)


def to_journald(lines: list[str], times: list[int] | None = None) -> str:
    out = []
    for i, line in enumerate(lines):
        us = _time(times, i) // 1000
        out.append(json.dumps({
            "__REALTIME_TIMESTAMP": str(us), "_HOSTNAME": "gpu-node-1", "SYSLOG_IDENTIFIER": "vllm",
            "_SYSTEMD_UNIT": "vllm.service", "_PID": "4242", "MESSAGE": line,
        }) + "\n")
    return "".join(out)


def to_syslog_iso(lines: list[str], times: list[int] | None = None) -> str:
    out = []
    for i, line in enumerate(lines):
        ns = _time(times, i)
        sec, frac = divmod(ns, 1_000_000_000)
        t = dt.datetime.fromtimestamp(sec, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac // 1000:06d}+00:00"
        out.append(f"{t} gpu-node-1 vllm[4242]: {line}\n")
    return "".join(out)


def to_docker_ts(lines: list[str], times: list[int] | None = None) -> str:
    return "".join(f"{rfc3339_ns(_time(times, i))} {line}\n" for i, line in enumerate(lines))


def to_compose(lines: list[str], service: str = "server-1") -> str:
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


def nested_cri_compose_ansi(lines: list[str], times: list[int] | None = None) -> str:
    """CRI around a compose prefix around colour codes (`docker compose up` inside a pod)."""
    return to_cri(split_lines(to_compose(split_lines(to_ansi(lines)))), times=times)


def line_times(lines: list[str], engine: str) -> list[int]:
    """A wrapper time (ns) per line, as a runtime would have written it: the second the
    engine printed (the verbatim parse's time of the event covering the line), plus a
    sub-second part that grows along the file (whole-second engine times only; a finer
    engine time is taken as it is)."""
    from servelens.parsers.text import parse_text

    ev = parse_text(engine, "\n".join(lines) + "\n")
    per_line: list[int | None] = [None] * len(lines)
    for line, n, ts in ev.select("line", "n_lines", "ts").unique("line", keep="first").iter_rows():
        for k in range(line, line + n):
            if ts is not None:
                per_line[k - 1] = int(ts.timestamp() * 1_000_000) * 1000
    first = next((t for t in per_line if t is not None), wrapper_time_ns(0))
    out, last = [], first
    for i, t in enumerate(per_line):
        t = last if t is None else t
        if t % 1_000_000_000 == 0:
            t += (i * STEP_NS) % 1_000_000_000
        # (sample logs gather lines of several runs, so times may go back)
        last = t
        out.append(t)
    return out


LONG_PROMPT_LINE = (
    "(APIServer pid=1) INFO 01-23 15:48:40 [logger.py:49] Received request cmpl-long-0: prompt: '"
    + "The quick brown fox jumps over the lazy dog. " * 900
    + "', params: SamplingParams(n=1, max_tokens=16), prompt_token_ids: None, lora_request: None."
)

# fixtures: tests/fixtures/wrapped/<name> from a real sample log and a wrapping
FIXTURES = {
    "vllm_v1_0_11.cri.log": ("vllm", "sample_logs/vllm/real/v1_0_11.log", "to_cri", True),
    "vllm_v1_0_11.docker-json.log": ("vllm", "sample_logs/vllm/real/v1_0_11.log", "to_docker_json", True),
    "tgi_router_text.cri-compose-ansi.log": ("tgi", "sample_logs/tgi/real/router_text.log", "nested_cri_compose_ansi", False),
    "trtllm_iteration_stats.docker-json.log": ("trtllm", "sample_logs/trtllm/real/iteration_stats.log", "to_docker_json", False),
}


def fixture_source(name: str, root) -> tuple[str, list[str]]:
    """(engine, verbatim lines) of a fixture: the real log, with a 40 KB prompt line put in
    where the fixture tests the runtime's splitting."""
    engine, rel, _, long = FIXTURES[name]
    lines = split_lines((root / rel).read_text())
    if long:
        lines = lines[:10] + [LONG_PROMPT_LINE] + lines[10:]
    return engine, lines


def render_fixture(name: str, root) -> str:
    engine, lines = fixture_source(name, root)
    return globals()[FIXTURES[name][2]](lines, times=line_times(lines, engine))


if __name__ == "__main__":  # regenerate tests/fixtures/wrapped/
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = root / "tests" / "fixtures" / "wrapped"
    out.mkdir(parents=True, exist_ok=True)
    for name in FIXTURES:
        (out / name).write_text(render_fixture(name, root))
        print(out / name)
