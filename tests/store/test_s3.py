"""Stores on object storage: ingest, tail, compact and query against a real S3 API on
loopback (moto in server mode on 127.0.0.1), exactly once, and fleets of stores queried as one.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app

import moto.server as moto_server  # noqa: E402 - the test extra installs moto[server]

if not any((c.callback and c.callback.__name__ == "compact") for c in app.registered_commands):
    build_app()

ROOT = Path(__file__).resolve().parents[2]
INCIDENT = ROOT / "sample_logs" / "incident"
TGI = ROOT / "sample_logs" / "tgi"
INCIDENT_LOGS = sorted(INCIDENT.rglob("*.log"))  # the files an ingest of INCIDENT reads


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 with a bucket `fleet`; the AWS variables point at it."""
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "SERVELENS_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fs = pafs.S3FileSystem(endpoint_override=env["AWS_ENDPOINT_URL"], region="us-east-1",
                           access_key="test", secret_key="test", allow_bucket_creation=True)
    fs.create_dir("fleet")
    try:
        yield fs
    finally:
        server.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def incident_truth(incident_store) -> tuple[Path, int]:
    """The incident ingested into a local store, and its events counted there: the truth the
    remote stores are held to (read only: the run's shared incident store, tests/conftest.py)."""
    return incident_store, count(str(incident_store))


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def count(store: str, sql: str = "select count(*) as n from events") -> int:
    r = cli("sql", sql, "--store", store, "--format", "csv")
    assert r.exit_code == 0, r.output
    return int(r.output.split()[1])


def objects(fs: pafs.FileSystem, prefix: str) -> list[str]:
    sel = pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
    return sorted(i.path[len(prefix) + 1:] for i in fs.get_file_info(sel) if i.type == pafs.FileType.File)


def glob_count(fs: pafs.FileSystem, prefix: str) -> int:
    """What another engine globbing the store's events/ counts (pyarrow.dataset, hive)."""
    if fs.get_file_info(f"{prefix}/events").type == pafs.FileType.NotFound:
        return 0
    return ds.dataset(f"{prefix}/events", filesystem=fs, format="parquet", partitioning="hive").count_rows()


def test_ingest_query_exactly_once_even_with_a_lost_mirror(s3, incident_truth):
    local, truth = incident_truth
    url = "s3://fleet/once/node-1"
    r = cli("ingest", str(INCIDENT), "--store", url, "-q")
    assert r.exit_code == 0, r.output
    assert f"store: {url}" in r.output
    assert count(url) == truth == glob_count(s3, "fleet/once/node-1")
    # the same views answer the same
    q = "select engine, instance, n, p99_e2e_s from latency_percentiles order by all"
    assert cli("sql", q, "--store", url, "-f", "csv").stdout == cli("sql", q, "--store", str(local), "-f", "csv").stdout
    # re-ingesting adds nothing; neither does a node that lost its local mirror
    assert f"0 ingested, {len(INCIDENT_LOGS)} unchanged" in cli("ingest", str(INCIDENT), "--store", url, "-q").output
    shutil.rmtree(os.environ["SERVELENS_CACHE_DIR"])
    assert f"0 ingested, {len(INCIDENT_LOGS)} unchanged" in cli("ingest", str(INCIDENT), "--store", url, "-q").output
    assert count(url) == truth == glob_count(s3, "fleet/once/node-1")
    # nothing but committed parts under events/, nothing left in staging
    keys = objects(s3, "fleet/once/node-1")
    assert not [k for k in keys if k.startswith("_staging/")]
    import json

    with s3.open_input_stream("fleet/once/node-1/manifest.json") as f:
        manifest = json.loads(f.read())
    assert manifest["pending"] == []
    assert sorted(k for k in keys if k.startswith("events/")) == sorted(manifest["parts"])


def test_compaction_on_s3_leaves_no_replaced_part_visible(s3, tmp_path):
    url = "s3://fleet/compact/node-1"
    for log in INCIDENT_LOGS:  # one commit per file: several parts per partition
        assert cli("ingest", str(log), "--store", url, "-q").exit_code == 0
    before = count(url)
    parts_before = len([k for k in objects(s3, "fleet/compact/node-1") if k.startswith("events/")])
    r = cli("compact", "--store", url)
    assert r.exit_code == 0 and f"parts in {url}" in r.output, r.output
    parts_after = len([k for k in objects(s3, "fleet/compact/node-1") if k.startswith("events/")])
    assert parts_after < parts_before
    assert count(url) == before == glob_count(s3, "fleet/compact/node-1")


def test_tail_writes_to_s3_exactly_once(s3, tmp_path):
    from servelens.pipeline.store.commit import Store
    from servelens.pipeline.tail.tailer import Tailer
    from servelens.pipeline.tail.watch import Targets

    logs = tmp_path / "logs"
    logs.mkdir()
    src = INCIDENT_LOGS[0]
    text = src.read_text().splitlines(keepends=True)
    half = len(text) // 2
    live = logs / src.name
    live.write_text("".join(text[:half]))
    url = "s3://fleet/tail/node-1"

    def poll(n: int) -> None:
        with Store.open(url, purpose="tail") as st:
            t = Tailer(st, Targets([logs], None), engine="auto", quiet_s=0.0, compact_min_parts=0)
            for _ in range(n):
                t.poll_once(rescan=True)
            t.close()

    poll(10)
    first = count(url)
    assert first > 0
    with open(live, "a") as f:
        f.write("".join(text[half:]))
    poll(10)  # a restarted tailer resumes at the committed offset
    local = tmp_path / "whole.store"
    assert cli("ingest", str(live), "--store", str(local), "-q").exit_code == 0
    assert count(url) == count(str(local)) > first
    assert count(url) == glob_count(s3, "fleet/tail/node-1")
    assert "0 ingested, 1 unchanged" in cli("ingest", str(live), "--store", url, "-q").output


def test_a_fleet_of_stores_queries_as_one(s3, tmp_path):
    a, b = "s3://fleet/many/node-a", "s3://fleet/many/node-b"
    assert cli("ingest", str(INCIDENT), "--store", a, "-q").exit_code == 0
    assert cli("ingest", str(TGI), "--store", b, "-q").exit_code == 0
    na, nb = count(a), count(b)
    assert count("s3://fleet/many/*") == na + nb
    per = "select engine, count(*) as n from events group by all order by engine"
    whole = cli("sql", per, "--store", "s3://fleet/many/*", "-f", "csv").output
    tgi_total = sum(count(s, "select count(*) from events where engine = 'tgi'") for s in (a, b))
    assert f"tgi,{tgi_total}" in whole
    # a fleet list file names the stores, local and remote mixed
    local = tmp_path / "node-c.store"
    assert cli("ingest", str(TGI), "--store", str(local), "-q").exit_code == 0
    fleet = tmp_path / "fleet.txt"
    fleet.write_text(f"# the fleet\n{a}\n{b}\n{local}\n")
    assert count(str(fleet)) == na + 2 * nb
    # user SQL on a fleet is sandboxed like on one store
    r = cli("sql", "select * from read_text('/etc/hostname')", "--store", "s3://fleet/many/*")
    assert r.exit_code == 1 and "reads only the store's committed data" in r.output
    r = cli("sql", "select 1", "--store", "s3://fleet/none/*")
    assert r.exit_code == 1 and "no store matches" in r.output


def test_missing_remote_store_is_a_clear_error(s3):
    r = cli("sql", "select count(*) from events", "--store", "s3://fleet/absent")
    assert r.exit_code == 1 and "does not exist" in r.output and "Traceback" not in r.output
    r = cli("compact", "--store", "s3://fleet/absent")
    assert r.exit_code == 1 and "not a servelens store" in r.output


def test_an_unreachable_store_keeps_commits_locally_and_publishes_them_later(s3, monkeypatch, incident_truth):
    from servelens.pipeline.store import remote

    url = "s3://fleet/outage/node-1"
    assert cli("ingest", str(TGI), "--store", url, "-q").exit_code == 0  # the store exists
    truth = count(url)

    calls = []
    push = remote.Mirror.push

    def down(self, manifest):  # reachable when the store opens, down from the first commit on
        calls.append(1)
        if len(calls) == 1:
            return push(self, manifest)
        raise OSError("When uploading part: AWS Error NETWORK_CONNECTION")

    with monkeypatch.context() as m:
        m.setattr(remote.Mirror, "push", down)
        r = cli("ingest", str(INCIDENT), "--store", url, "-q")
    assert r.exit_code == 1 and "not published to s3://fleet/outage/node-1" in r.output, r.output
    assert "Traceback" not in r.output
    assert count(url) == truth  # readers still see the last published commit, whole
    # the next run publishes what was committed locally; nothing is read twice
    assert f"0 ingested, {len(INCIDENT_LOGS)} unchanged" in cli("ingest", str(INCIDENT), "--store", url, "-q").output
    assert count(url) == truth + incident_truth[1] == glob_count(s3, "fleet/outage/node-1")


def test_a_crash_after_the_remote_commit_point_rolls_forward(s3, monkeypatch, incident_truth):
    from servelens.pipeline.store import remote

    url = "s3://fleet/crash/node-1"

    finish = remote.Mirror.finish

    def crash(self, doc):  # the open's publish goes through; the commit's is cut short
        if not doc["parts"]:
            return finish(self, doc)
        raise KeyboardInterrupt("killed after the manifest was written")

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(remote.Mirror, "finish", crash)
        from servelens.pipeline.ingest import ingest

        ingest([INCIDENT], url)
    keys = objects(s3, "fleet/crash/node-1")
    assert [k for k in keys if k.startswith("_staging/")] and not [k for k in keys if k.startswith("events/")]
    truth = incident_truth[1]
    assert count(url) == truth  # a reader finds the committed parts where they are (staging)
    assert glob_count(s3, "fleet/crash/node-1") == 0  # a glob sees nothing uncommitted, nor half
    # the next writer finishes the moves; nothing is read twice
    assert f"0 ingested, {len(INCIDENT_LOGS)} unchanged" in cli("ingest", str(INCIDENT), "--store", url, "-q").output
    assert count(url) == truth == glob_count(s3, "fleet/crash/node-1")
    assert not [k for k in objects(s3, "fleet/crash/node-1") if k.startswith("_staging/")]


def test_a_fleet_query_binds_only_the_views_it_reads(tmp_path):
    """One query's connection to a fleet binds the views the query reads, as one store's
    does (query.connect); its answers are the store's own."""
    from servelens.pipeline.ingest import ingest
    from servelens.pipeline.query.connect import connect, run
    from servelens.pipeline.query.views import closure

    store = tmp_path / "node.store"
    ingest([TGI], store, rollups=False)
    fleet = tmp_path / "fleet.txt"
    fleet.write_text(f"{store}\n")

    def bound(**kw) -> set[str]:
        con = connect(str(fleet), **kw)
        try:
            return {r[0] for r in con.execute("select view_name from duckdb_views() where not internal").fetchall()}
        finally:
            con.close()

    assert bound(views=set()) == {"events", "samples"}
    assert bound(views={"latency_percentiles"}) == {"events", "samples"} | closure({"latency_percentiles"})
    q = "select * from latency_percentiles order by all"
    got = run(str(fleet), q)
    assert got.height > 0
    assert got.equals(run(store, q, rollups=False))
    assert run(str(fleet), "select count(*) from events").item() == run(store, "select count(*) from events").item() > 0
