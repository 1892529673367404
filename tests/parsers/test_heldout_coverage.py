"""What a line says, read: public SGLang and llama.cpp logs the parsers were not written
against (tests/fixtures/heldout/<engine>/*.log, each headed by the issue it was pasted in),
beside expectations written from the line text and the engines' formats (`*.expect`: one
line per log line, `N field=value ...`; a field is a schema column, `attrs.K`, `sampling.K`;
`a|b` accepts either; a timing-block line's numbers may be read into the request row the
parser links it to). The score is the fields the parser fills with the written value over
all fields written; every line must also come out as an event (none dropped)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path

import polars as pl
import pytest

from servelens.pipeline.ingest import ingest
from servelens.pipeline.store.manifest import committed_parts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HELDOUT = FIXTURES / "heldout"
# a second set, gathered after the parsers were fixed against the first: still unseen
HELDOUT2 = FIXTURES / "heldout2"
# a third, gathered after the second was fixed against
HELDOUT3 = FIXTURES / "heldout3"
MTIME = dt.datetime(2026, 9, 1, tzinfo=dt.timezone.utc).timestamp()
FLOOR = 0.95

_FIELD = re.compile(r"(\S+?)=('(?:[^']*)'(?:\|\S+)?|\S+)")


def expectations(path: Path) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for row in path.read_text().splitlines():
        if not row.strip() or row.startswith("#"):
            continue
        n, _, rest = row.partition(" ")
        out.setdefault(int(n), {}).update(dict(_FIELD.findall(rest)))
    return out


def _value(text: str):
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text  # a bare word: an event kind


def matches(got, want: str) -> bool:
    for alt in want.split("|") if not want.startswith("'") else [want]:
        w = _value(alt)
        if isinstance(w, bool) or w is None or isinstance(w, str):
            if got == w:
                return True
        elif isinstance(got, (int, float)) and not isinstance(got, bool):
            if abs(got - w) <= 1e-6 * max(1.0, abs(w)):
                return True
    return False


def events(paths: list[Path], engine: str, tmp: Path) -> dict[str, pl.DataFrame]:
    """The events of each log, by file name: the logs ingested together (each is its own
    source and instance, its events those of an ingest of it alone)."""
    logs = tmp / "logs"
    logs.mkdir()
    for path in paths:
        copy = logs / path.name
        copy.write_bytes(path.read_bytes())
        os.utime(copy, (MTIME, MTIME))
    ingest([logs], tmp / "store", engine=engine, rollups=False)  # the events are what is scored
    ev = pl.read_parquet(committed_parts(tmp / "store"))
    return {path.name: ev.filter(pl.col("source").str.ends_with("/" + path.name)).sort("line") for path in paths}


def got_field(row: dict, field: str):
    if field.startswith("attrs."):
        return json.loads(row["attrs"] or "{}").get(field[6:])
    if field.startswith("sampling."):
        return json.loads(row["sampling_params"] or "{}").get(field[9:])
    got = row.get(field)
    if isinstance(got, dt.datetime):  # written as the line's wall-clock time, UTC (ms if it has them)
        got = got.astimezone(dt.timezone.utc)
        return got.strftime("%Y-%m-%d %H:%M:%S") + (f".{got.microsecond // 1000:03d}" if got.microsecond else "")
    return got


def score(engine: str, tmp: Path, folder: Path = HELDOUT) -> tuple[int, int, list[str]]:
    right = total = 0
    misses: list[str] = []
    paths = sorted((folder / engine).glob("*.log"))
    by_file = events(paths, engine, tmp)
    for path in paths:
        ev = by_file[path.name]
        n_text = len(path.read_text().splitlines())
        covered = set()
        for start, n in zip(ev["line"].to_list(), ev["n_lines"].to_list()):
            covered.update(range(start, start + (n or 1)))
        assert set(range(1, n_text + 1)) <= covered, (path.name, sorted(set(range(1, n_text + 1)) - covered))
        rows = {r["line"]: r for r in reversed(ev.to_dicts())}  # the first event of a line
        for line, fields in expectations(path.with_suffix(".expect")).items():
            row = rows.get(line, {})
            # a timing block's line is read into its request's row (attrs `request_line`)
            linked = rows.get(json.loads(row.get("attrs") or "{}").get("request_line"), {}) if row else {}
            for field, want in fields.items():
                total += 1
                got = got_field(row, field) if row else None
                if got is None and linked and field != "event":
                    got = got_field(linked, field)
                if matches(got, want):
                    right += 1
                else:
                    misses.append(f"{path.name}:{line} {field}: want {want}, got {got!r}")
    return right, total, misses


@pytest.mark.parametrize("folder", [HELDOUT, HELDOUT2, HELDOUT3], ids=["heldout", "heldout2", "heldout3"])
@pytest.mark.parametrize("engine", ["sglang", "llamacpp"])
def test_held_out_public_lines_are_read(engine, folder, tmp_path):
    right, total, misses = score(engine, tmp_path, folder)
    assert total > 0
    print(f"{folder.name}/{engine}: {right}/{total} fields read = {right / total:.1%}")
    print("\n".join(misses))
    assert right / total >= FLOOR, f"{engine}: {right}/{total} = {right / total:.1%}\n" + "\n".join(misses)
