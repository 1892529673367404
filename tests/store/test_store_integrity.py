"""Damage to the store is detected on every read and repairable: a lost or cut-short part,
a deleted or malformed manifest, files no manifest references. The end-to-end truth: after
`repair`, re-ingesting the same logs gives back exactly the events the store had."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from servelens.pipeline.store.layout import FILE_SCHEMA
from servelens.pipeline.cli import app as cli_mod
from servelens.pipeline import ingest as ingest_mod
from servelens.pipeline.query import rollups as rollups_mod
from servelens.pipeline.store.compact import compact
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts, read_manifest
from servelens.pipeline.store.integrity import verify_parts
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets

SAMPLES = Path(__file__).parents[2] / "sample_logs"

runner = CliRunner()
cli_mod.build_app()


def cli(*args: str):
    return runner.invoke(cli_mod.app, list(args))


def all_events(store: Path) -> pl.DataFrame:
    """Every stored event, in a canonical order (what must come back after a repair)."""
    parts = committed_parts(store)
    cols = ["source", "line", "n_lines", "event", "ts", "message", "attrs", "running", "kv_usage"]
    return pl.read_parquet(parts).select(cols).sort("source", "line", "event", "message", nulls_last=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The logs and the store ingested from them, once per module: each test changes a copy
    of the store (`store`); the logs are only read."""
    base = tmp_path_factory.mktemp("integrity")
    logs = _write_logs(base / "logs")
    ingest_once(logs, base)
    return base


def ingest_once(logs: Path, base: Path) -> None:
    """`logs` ingested into `base`/store in many small commits (parts holding different byte
    ranges of the same file), from a working directory outside the logs, as each test's is:
    the sources keep their whole paths (a source under the working directory is named
    relative to it), so a test's re-ingest names them as this ingest did."""
    (base / "cwd").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base / "cwd")
        mp.setattr(ingest_mod, "FLUSH_ROWS", 700)
        r = cli("ingest", str(logs), "--store", str(base / "store"), "-q")
    assert r.exit_code == 0, r.output


@pytest.fixture
def logs(built):
    return built / "logs"


def _write_logs(d: Path) -> Path:
    """Real logs of three engines plus a simulated incident: several files and days."""
    for sub in ("vllm/real", "tgi/real", "trtllm/real", "incident/vllm"):
        for p in (SAMPLES / sub).glob("*.log"):
            dest = d / sub.replace("/", "_") / p.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            data = p.read_bytes()
            if sub.startswith("incident"):  # the first 2,500 lines are enough
                data = b"".join(data.splitlines(keepends=True)[:2500])
            dest.write_bytes(data)
    return d


@pytest.fixture
def store(tmp_path, built, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ingest_mod, "FLUSH_ROWS", 700)  # a re-ingest commits as the first did
    # the rollup refresh a repair (or compact) runs after its commit is recorded, not computed:
    # it changes no event, and the rollups rebuilt after a repair are tests/store/test_rollups.py's
    # subject (test_repair_that_drops_parts_rebuilds_the_rollup)
    monkeypatch.setattr(rollups_mod, "refresh", lambda st, *a, **k: REFRESHES.append(Path(st.root)))
    REFRESHES.clear()
    s = tmp_path / "store"
    shutil.copytree(built / "store", s)
    return s


REFRESHES: list[Path] = []  # the stores whose rollup refresh a command asked for (`store`)


def count(store: Path) -> str:
    r = cli("sql", "select count(*) as n from events", "--store", str(store), "-f", "csv")
    return r


def test_every_part_records_its_rows_and_ranges(store):
    m = read_manifest(store)
    assert len(m["parts"]) > 5
    for p in m["parts"]:
        info = m["part_info"][p]
        assert info["rows"] == pl.read_parquet(store / p).height
        assert info["sources"]  # which file ranges it holds
        for key, rng in info["sources"].items():
            assert key in m["files"]
            assert rng["to"] <= m["files"][key]["offset"]
            assert rng["from"] is None or rng["from"]["offset"] < rng["to"]


@pytest.mark.parametrize("which", [0, -1, "middle"])
def test_lost_part_is_an_error_then_repair_and_reingest_restore_exactly(store, logs, which):
    original = all_events(store)
    parts = read_manifest(store)["parts"]
    # a part from the middle of one big file's run of commits, or the first, or the last
    victim = parts[len(parts) // 2] if which == "middle" else parts[which]
    (store / victim).unlink()

    r = count(store)
    assert r.exit_code == 1
    assert f"part {victim} is missing" in r.output
    assert "servelens repair" in r.output and "Traceback" not in r.output

    r = cli("sql", "select count(*) as n from events", "--store", str(store), "-f", "csv", "--allow-partial")
    assert r.exit_code == 0
    assert "answering from the intact parts only" in r.output

    r = cli("check", "--store", str(store))
    assert r.exit_code == 1 and f"damaged  {victim}: is missing" in r.output

    r = cli("repair", "--store", str(store))
    assert r.exit_code == 0, r.output
    assert f"drop {victim} (missing or damaged)" in r.output
    assert "roll back" in r.output
    assert REFRESHES == [store]  # the rollups rebuilt over what is left
    assert cli("check", "--store", str(store)).exit_code == 0
    assert count(store).exit_code == 0

    r = cli("ingest", str(logs), "--store", str(store), "-q")
    assert r.exit_code == 0, r.output
    restored = all_events(store)
    assert restored.height == original.height
    assert restored.equals(original)


def test_truncated_part_is_named_not_a_traceback(store, logs):
    original = all_events(store)
    victim = read_manifest(store)["parts"][1]
    data = (store / victim).read_bytes()
    (store / victim).write_bytes(data[: len(data) // 2])
    for args in (["sql", "select count(*) from events"], ["report"]):
        r = cli(*args, "--store", str(store))
        assert r.exit_code == 1
        assert f"part {victim} is damaged" in r.output
        assert "Traceback" not in r.output
    assert verify_parts(store) == [f"part {victim} is damaged (not a complete Parquet file: {len(data) // 2} bytes)"]
    assert cli("repair", "--store", str(store)).exit_code == 0
    assert cli("ingest", str(logs), "--store", str(store), "-q").exit_code == 0
    assert all_events(store).equals(original)


def test_row_count_mismatch_and_wrong_schema_found_by_check(store):
    m = read_manifest(store)
    a, b = m["parts"][0], m["parts"][1]
    # a part replaced by another complete Parquet file: the cheap check passes, check does not
    df = pl.read_parquet(store / a)
    pq.write_table(df.head(1).to_arrow().cast(FILE_SCHEMA), store / a)
    other = pl.read_parquet(store / b).with_columns(pl.col("line").cast(pl.String)).to_arrow()
    pq.write_table(other.cast(FILE_SCHEMA.set(FILE_SCHEMA.get_field_index("line"), pa.field("line", pa.string()))), store / b)
    # both are whole Parquet files, but not the bytes their commits recorded
    assert [p.split(" ", 3)[1:3] for p in verify_parts(store)] == [[a, "is"], [b, "is"]]
    assert all("when it was committed" in p or "content changed" in p for p in verify_parts(store))
    # a store from before content records: the footer's rows and schema still tell
    for rel in (a, b):
        for k in ("size", "mtime_ns", "crc32"):
            m["part_info"][rel].pop(k)
    (store / "manifest.json").write_text(json.dumps(m))
    assert verify_parts(store) == []
    r = cli("check", "--store", str(store))
    assert r.exit_code == 1
    assert f"damaged  {a}: holds 1 rows, the manifest recorded {df.height}" in r.output
    assert f"damaged  {b}: column line is string, the schema says int64" in r.output


def test_deleted_manifest_is_an_error_and_repair_starts_again(store, logs):
    original = all_events(store)
    (store / "manifest.json").unlink()
    for args in (["sql", "select count(*) from events"], ["ingest", str(logs)], ["check"]):
        r = cli(*args, "--store", str(store))
        assert r.exit_code == 1
        assert "no manifest.json" in r.output and "servelens repair" in r.output
        assert "Traceback" not in r.output
    r = cli("repair", "--store", str(store))
    assert r.exit_code == 0 and "lost+found" in r.output
    assert list((store / "lost+found").rglob("*.parquet"))  # kept aside, not deleted
    assert count(store).output.split() == ["n", "0"]
    assert cli("ingest", str(logs), "--store", str(store), "-q").exit_code == 0
    assert all_events(store).equals(original)


@pytest.mark.parametrize(
    "text, what",
    [
        ('{"version": 1, "files": [], "parts": []}', "`files` is not an object"),
        ('{"version": 1, "files": {"k": {"offset": "x"}}, "parts": []}', "files['k'].head_sha is missing"),
        ('{"version": 1, "files": {}, "parts": {"a": 1}}', "`parts` is not a list of paths"),
        ('{"version": 1, "files": {}, "parts": [], "pending": [1]}', "`pending` is not a list of pairs"),
        ("[1, 2]", "not a JSON object"),
        ('{"version": 1, "files": {', "cannot read"),
    ],
)
def test_malformed_manifest_is_one_clear_line(store, text, what):
    (store / "manifest.json").write_text(text)
    for args in (["sql", "select 1"], ["check"], ["compact"]):
        r = cli(*args, "--store", str(store))
        assert r.exit_code == 1
        assert what in r.output, r.output
        assert "Traceback" not in r.output and "KeyError" not in r.output


@pytest.mark.parametrize("where", ["parts", "rollups", "garbage"])
@pytest.mark.parametrize("outside", ["../secret.parquet", "ABSOLUTE", "events/../../secret.parquet"])
def test_manifest_path_outside_the_store_is_refused(store, tmp_path, where, outside):
    """A hand-edited manifest cannot make the store's reads (or its garbage collection) reach
    a file outside the store: the sandbox allows exactly the files the manifest names."""
    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"x": [42]}), secret)
    rel = str(secret) if outside == "ABSOLUTE" else outside
    m = json.loads((store / "manifest.json").read_text())
    if where == "parts":
        m["parts"].append(rel)
    elif where == "rollups":
        m["rollups"] = {"window_metrics": {**next(iter(m.get("rollups", {}).values()), {}), "path": rel}}
    else:
        m["garbage"] = [[rel, 0]]
    (store / "manifest.json").write_text(json.dumps(m))
    for args in (["sql", "select count(*) from events"], ["check"], ["compact"]):
        r = cli(*args, "--store", str(store))
        assert r.exit_code == 1, (args, r.output)
        assert f"path {rel!r} is not inside the store" in r.output, r.output
        assert "Traceback" not in r.output
    assert secret.exists()  # a collection did not delete it


def test_unreferenced_files_are_listed_and_cleaned(store):
    stray = store / "events" / "engine=vllm" / "day=2020-01-01" / "part-stray-0000.parquet"
    stray.parent.mkdir(parents=True)
    pl.DataFrame({"x": [1]}).write_parquet(stray)
    r = cli("check", "--store", str(store))
    assert r.exit_code == 0  # harmless: no reader reads it
    assert "unreferenced  events/engine=vllm/day=2020-01-01/part-stray-0000.parquet" in r.output
    r = cli("repair", "--store", str(store))
    assert "delete events/engine=vllm/day=2020-01-01/part-stray-0000.parquet" in r.output
    assert not stray.exists() and not stray.parent.exists()


def test_repair_after_compaction_and_tail(store, logs, tmp_path):
    """Merged parts keep the record of the ranges they hold; a tailer resumes a rolled-back
    entry as ingest does."""
    original = all_events(store)
    with Store.open(store) as st:
        res = compact(st, min_parts=2)
    assert res.merged > 0
    m = read_manifest(store)
    assert all(m["part_info"][p]["sources"] for p in m["parts"])
    victim = max(m["parts"], key=lambda p: m["part_info"][p]["rows"])
    (store / victim).unlink()
    assert cli("repair", "--store", str(store)).exit_code == 0
    with Store.open(store, purpose="tail") as st:
        t = Tailer(st, Targets([logs], None, skip_under=store), engine="auto", quiet_s=0.0, compact_min_parts=0)
        for _ in range(4):
            t.poll_once(rescan=True)
        t.close()
    assert all_events(store).equals(original)


def test_store_opened_new_has_a_manifest(tmp_path):
    with Store.open(tmp_path / "s"):
        pass
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["parts"] == []


def test_older_store_without_part_records(store):
    """Parts from before `part_info`: check notes them; a lost one is dropped with a warning
    that re-ingesting cannot restore it, and the store is consistent again."""
    m = json.loads((store / "manifest.json").read_text())
    del m["part_info"]
    (store / "manifest.json").write_text(json.dumps(m))
    r = cli("check", "--store", str(store))
    assert r.exit_code == 0 and f"note: {len(m['parts'])} part(s) predate the record" in r.output
    victim = m["parts"][0]
    (store / victim).unlink()
    r = cli("repair", "--store", str(store))
    assert r.exit_code == 0
    assert f"drop {victim} (missing or damaged)" in r.output
    assert f"warning: {victim} predates the record of what it holds" in r.output
    assert "roll back" not in r.output
    assert cli("check", "--store", str(store)).exit_code == 0
    assert read_manifest(store)["parts"] == m["parts"][1:]
