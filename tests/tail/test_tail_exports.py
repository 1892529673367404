"""`servelens tail` of a platform export: `--instance` names the whole file, as it does for
`servelens ingest` (without it, each pod the export names is an instance of its own)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tests.helpers.common import events, write
from tests.parsers.test_wrappers_exports import SAME
from tests.parsers.test_wrappers_exports_more import two_pod_entries


def _tail(logs: Path, store: Path, want: int, *extra: str) -> pl.DataFrame:
    """Run the CLI's tail until the store holds `want` events (or a minute passes), stop
    it with Ctrl-C, and return what it committed."""
    exe = Path(sys.executable).parent / "servelens"
    proc = subprocess.Popen([str(exe), "tail", str(logs), "--store", str(store), "-q", "--flush-interval", "0.2", *extra],
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                if events(store).height >= want:
                    break
            except Exception:  # nothing committed yet
                pass
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return events(store)


@pytest.mark.parametrize("explicit", [True, False])
def test_tail_names_an_exports_instance_as_ingest_does(tmp_path, explicit):
    from tests.helpers.wrapping_exports import elastic_doc

    docs, bases = two_pod_entries(lambda ln, t, pod: elastic_doc(ln, t, pod=pod))
    logs = tmp_path / "logs"
    write(logs / "serving.ndjson", "".join(json.dumps(d) + "\n" for d in docs))
    # the truth: the two servers' own files, unwrapped, parsed on their own
    want = sum(b.height for b in bases.values())
    extra = ["--instance", "mine"] if explicit else []
    got = _tail(logs, tmp_path / "store", want, *extra)
    assert got.height == want
    assert got["engine"].unique().to_list() == ["vllm"]
    key = [c for c in SAME if c not in ("message", "model")]
    if explicit:
        assert got["instance"].unique().to_list() == ["mine"]
        # (each pod's lines still parsed apart: the events are the two servers' own)
        both = pl.concat([b.select(key) for b in bases.values()], how="diagonal_relaxed")
        assert got.select(key).sort(key, nulls_last=True).equals(both.select(key).sort(key, nulls_last=True))
        return
    assert sorted(got["instance"].unique().to_list()) == ["vllm-a", "vllm-b"]
    for pod, base in bases.items():
        mine = got.filter(pl.col("instance") == pod)
        assert mine.select(key).sort(key, nulls_last=True).equals(base.select(key).sort(key, nulls_last=True)), pod
