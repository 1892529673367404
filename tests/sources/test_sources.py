"""Production log sources end to end through `servelens ingest`: container runtime files
named by Kubernetes and Docker, instance names that never merge two servers, lineage
across rotation, and engine lines behind prefixes."""

from __future__ import annotations

import gzip
import json

import polars as pl
from tests.helpers.common import SAMPLE_LOGS, events, forget_content_record, write
from typer.testing import CliRunner

from tests.helpers import wrapping as wr
from servelens.parsers.text import parse_text
from servelens.pipeline.cli.app import app, build_app

build_app()
runner = CliRunner()
UID = "3f0c7a52-6d1e-4b8a-9a55-0e6c1f2d9b17"
CID = "4b1d5e9c0a7f" + "0" * 52
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def _vllm_lines() -> list[str]:
    return wr.split_lines((SAMPLE_LOGS / "vllm/real/v1_0_11.log").read_text())


def test_kubernetes_pod_logs_are_one_instance_with_labels(tmp_path):
    lines = _vllm_lines()
    pod = tmp_path / "var/log/pods" / f"llm_vllm-0_{UID}" / "vllm"
    write(pod / "0.log.20260610-142345.gz", gzip.compress(wr.to_cri(lines[:20]).encode()))
    write(pod / "0.log", wr.to_cri(lines[20:35]))
    write(pod / "1.log", wr.to_cri(lines[35:]))
    other = tmp_path / "var/log/containers" / f"router-7d9f_llm_router-{CID}.log"
    write(other, wr.to_docker_json(lines[:5]))
    r = invoke("ingest", tmp_path / "var", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    assert "[cri > vllm, detected] instance=vllm-0" in r.stderr
    ev = events(tmp_path / "s")
    assert sorted(ev["instance"].unique()) == ["router-7d9f", "vllm-0"]
    pods = ev.filter(pl.col("instance") == "vllm-0")
    assert pods.height == len(lines)  # v1_0_11: one event per line
    labels = pods.select(pl.col("labels").str.json_decode(pl.Struct({"namespace": pl.String, "container": pl.String, "restart": pl.String}))).unnest("labels")
    assert labels.unique().sort("restart").rows() == [("llm", "vllm", "0"), ("llm", "vllm", "1")]
    assert pods["stream"].unique().to_list() == ["stdout"]
    # the wrapper's nanosecond time is kept; `ts` is the wrapper's (vLLM prints whole seconds)
    assert pods["wrapper_ts"].null_count() == 0
    router = ev.filter(pl.col("instance") == "router-7d9f")
    assert json.loads(router["labels"][0]) == {"namespace": "llm", "pod": "router-7d9f", "container": "router", "container_id": CID[:12]}


def test_docker_json_file_is_named_by_its_container(tmp_path):
    d = tmp_path / "containers" / CID
    write(d / f"{CID}-json.log.1", wr.to_docker_json(_vllm_lines()[:30]))
    write(d / f"{CID}-json.log", wr.to_docker_json(_vllm_lines()[30:]))
    r = invoke("ingest", tmp_path / "containers", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    ev = events(tmp_path / "s")
    assert ev["instance"].unique().to_list() == [CID[:12]]
    assert ev.height == len(_vllm_lines())


def test_same_file_name_in_two_directories_is_two_instances_and_said(tmp_path):
    lines = _vllm_lines()
    write(tmp_path / "hosts/gpu-node-1/vllm.log", "\n".join(lines[:20]) + "\n")
    write(tmp_path / "hosts/gpu-node-2/vllm.log", "\n".join(lines[20:]) + "\n")
    write(tmp_path / "hosts/gpu-node-2/vllm.log.1", "\n".join(lines[:3]) + "\n")
    r = invoke("ingest", tmp_path / "hosts", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    assert "note: files named 'vllm' in 2 directories are different instances: gpu-node-1/vllm, gpu-node-2/vllm" in r.stderr
    ev = events(tmp_path / "s")
    counts = dict(ev.group_by("instance").len().iter_rows())
    assert counts == {"gpu-node-1/vllm": 20, "gpu-node-2/vllm": len(lines) - 20 + 3}


def test_instance_from_template(tmp_path):
    write(tmp_path / "eu/a/server.log", "\n".join(_vllm_lines()[:4]) + "\n")
    r = invoke("ingest", tmp_path / "eu", "--store", tmp_path / "s", "--instance-from", "{grandparent}-{parent}")
    assert r.exit_code == 0, r.output
    assert events(tmp_path / "s")["instance"].unique().to_list() == ["eu-a"]
    bad = invoke("ingest", tmp_path / "eu", "--store", tmp_path / "s2", "--instance-from", "{host}")
    assert bad.exit_code == 1
    assert bad.stderr.strip().splitlines()[-1].startswith("servelens: error: --instance-from '{host}' has unknown field {host}")


def test_model_learned_in_the_oldest_rotated_file_carries_to_the_live_one(tmp_path):
    lines = wr.split_lines((SAMPLE_LOGS / "incident/vllm/vllm-a.log").read_text())
    write(tmp_path / "logs/vllm-a.log.2.gz", gzip.compress(("\n".join(lines[:600]) + "\n").encode()))
    write(tmp_path / "logs/vllm-a.log.1", "\n".join(lines[600:1300]) + "\n")
    write(tmp_path / "logs/vllm-a.log", "\n".join(lines[1300:]) + "\n")
    # named newest first: still read oldest first
    r = invoke("ingest", tmp_path / "logs/vllm-a.log", tmp_path / "logs/vllm-a.log.1", tmp_path / "logs/vllm-a.log.2.gz", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    ev = events(tmp_path / "s")
    req = ev.filter(pl.col("event").is_in(["request_arrived", "request_finished", "request"]))
    per_file = dict(req.group_by("source").agg(pl.col("model").drop_nulls().unique()).iter_rows())
    assert len(per_file) == 3
    assert all(v == [MODEL] for v in per_file.values()), per_file
    assert req["model"].null_count() == 0


def test_prefixed_file_is_not_one_unparsed_block(tmp_path):
    tgi = wr.split_lines((SAMPLE_LOGS / "incident/tgi/tgi-a.log").read_text())[:200]
    write(tmp_path / "sky.log", "".join(f"(task, pid=12148) {t}\n" for t in tgi))
    r = invoke("ingest", tmp_path / "sky.log", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    assert "[prefix > tgi, detected]" in r.stderr
    ev = events(tmp_path / "s")
    from servelens.parsers.text import parse_text

    base = parse_text("tgi", "\n".join(tgi) + "\n")
    assert ev["event"].value_counts(sort=True).equals(base["event"].value_counts(sort=True))
    assert ev.filter(pl.col("event") == "request").height > 50
    assert ev["attrs"].str.contains('"prefix":"\\(task, pid=12148\\) "').all()


def test_reingesting_a_wrapped_log_adds_nothing(tmp_path):
    write(tmp_path / "w/x.log", (SAMPLE_LOGS.parent / "tests/fixtures/wrapped/vllm_v1_0_11.docker-json.log").read_text())
    assert invoke("ingest", tmp_path / "w", "--store", tmp_path / "s").exit_code == 0
    n = events(tmp_path / "s").height
    r = invoke("ingest", tmp_path / "w", "--store", tmp_path / "s")
    assert "unchanged" in r.stderr and events(tmp_path / "s").height == n


def test_parts_written_before_the_wrapper_columns_compact_with_new_ones(tmp_path):
    import pyarrow.parquet as pq

    from servelens.pipeline.store.compact import compact
    from servelens.pipeline.store.commit import Store
    from servelens.pipeline.store.manifest import committed_parts

    write(tmp_path / "a/one.log", "\n".join(_vllm_lines()[:10]) + "\n")
    assert invoke("ingest", tmp_path / "a", "--store", tmp_path / "s").exit_code == 0
    # rewrite that part as an older servelens wrote it: without the appended columns
    (old,) = committed_parts(tmp_path / "s")
    t = pq.read_table(old)
    pq.write_table(t.drop_columns(["wrapper_ts", "stream", "labels"]), old)
    forget_content_record(old)
    write(tmp_path / "b/two.log", wr.to_cri(_vllm_lines()[10:]))
    assert invoke("ingest", tmp_path / "b", "--store", tmp_path / "s").exit_code == 0
    with Store.open(tmp_path / "s", purpose="ingest") as store:
        compact(store, min_parts=2, small_bytes=10**9)
    ev = events(tmp_path / "s")
    assert len(committed_parts(tmp_path / "s")) == 1 and ev.height == len(_vllm_lines())
    assert ev.filter(pl.col("source").str.ends_with("one.log"))["wrapper_ts"].null_count() == 10
    assert ev.filter(pl.col("source").str.ends_with("two.log"))["wrapper_ts"].null_count() == 0


def test_same_name_from_another_directory_in_a_later_run_is_told_apart(tmp_path):
    lines = _vllm_lines()
    write(tmp_path / "hosts/gpu-node-1/vllm.log", "\n".join(lines[:20]) + "\n")
    write(tmp_path / "hosts/gpu-node-2/vllm.log", "\n".join(lines[20:40]) + "\n")
    write(tmp_path / "hosts/gpu-node-3/vllm.log", "\n".join(lines[40:]) + "\n")
    assert invoke("ingest", tmp_path / "hosts/gpu-node-1", "--store", tmp_path / "s").exit_code == 0
    r = invoke("ingest", tmp_path / "hosts/gpu-node-2", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    assert "note: the store already has instance 'vllm' from another directory" in r.stderr
    assert "the new files are named gpu-node-2/vllm" in r.stderr
    # the stored server's rotated copy stays its instance; a third server is told apart
    write(tmp_path / "hosts/gpu-node-1/vllm.log.1", "\n".join(lines[:2]) + "\n")
    r = invoke("ingest", tmp_path / "hosts/gpu-node-3", tmp_path / "hosts/gpu-node-1/vllm.log.1", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    assert "gpu-node-3/vllm" in r.stderr
    counts = dict(events(tmp_path / "s").group_by("instance").len().iter_rows())
    assert counts == {"vllm": 22, "gpu-node-2/vllm": 20, "gpu-node-3/vllm": len(lines) - 40}


def test_a_wrapped_file_from_a_store_older_than_the_decoding_stage_resumes_decoded(tmp_path):
    # entries written before the decoding stage hold no `decode`: its layers are found again
    lines = _vllm_lines()
    log = tmp_path / "logs/vllm.log"
    write(log, wr.to_docker_ts(lines[:20]))
    assert invoke("ingest", log, "--store", tmp_path / "s").exit_code == 0
    manifest = tmp_path / "s/manifest.json"
    m = json.loads(manifest.read_text())
    for entry in m["files"].values():
        assert entry.pop("decode") == ["docker-ts"]
    manifest.write_text(json.dumps(m))
    with open(log, "a") as f:
        f.write(wr.to_docker_ts(lines[20:]))
    r = invoke("ingest", log, "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    ev = events(tmp_path / "s")
    verbatim = parse_text("vllm", "\n".join(lines) + "\n", decode=())
    assert ev["event"].to_list() == verbatim["event"].to_list()  # every line as in the verbatim log
    assert ev["wrapper_ts"].null_count() == 0


def test_a_generic_file_takes_its_directory_name_as_it_is(tmp_path):
    """A directory is not rotated: `real-0.32/server.log` is instance `real-0.32`, not `real-0`."""
    # (different content: one content under two names is read once, see test_same_content_once)
    write(tmp_path / "runs/real-0.32/server.log", "\n".join(_vllm_lines()[:4]) + "\n")
    write(tmp_path / "runs/vllm-b/logs/stdout.log.1", "\n".join(_vllm_lines()[:3]) + "\n")
    r = invoke("ingest", tmp_path / "runs", "--store", tmp_path / "s")
    assert r.exit_code == 0, r.output
    assert sorted(events(tmp_path / "s")["instance"].unique().to_list()) == ["real-0.32", "vllm-b"]
