"""End to end: `servelens tail` as a real process, a writer process appending to several files
and rotating them (rename-and-create, copytruncate, .gz), the tailer killed with SIGKILL at
random moments and restarted. At the end every line is in the store exactly once. Also: two
tailers on one store, and how fresh the data is (printed, bounded only loosely)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from typer.testing import CliRunner

from servelens.pipeline.cli.app import app, build_app
from servelens.pipeline.query.connect import run
from servelens.pipeline.store.manifest import committed_parts

pytestmark = pytest.mark.slow

N_FRESH = 4
SERVELENS = [sys.executable, "-c", "from servelens.pipeline.cli.app import main; main()"]

WRITER = textwrap.dedent(
    """
    import gzip, os, random, shutil, sys, time
    logs, n_files, n_lines, rotate_every, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    rng = random.Random(seed)
    names = [os.path.join(logs, f"f{i}.log") for i in range(n_files)]
    files = [open(n, "ab", buffering=0) for n in names]
    rotations = [0] * n_files
    for seq in range(n_lines):
        for i, f in enumerate(files):
            line = f"f{i} {seq:06d} {'x' * rng.randint(0, 80)}\\n".encode()
            if rng.random() < 0.2:  # a line written in two pieces: the tailer sees half
                cut = rng.randint(1, len(line) - 1)
                f.write(line[:cut]); time.sleep(0.002); f.write(line[cut:])
            else:
                f.write(line)
            if seq and seq % rotate_every == 0 and rng.random() < 0.9:
                rotations[i] += 1
                k = rotations[i]
                rotated = f"{names[i]}.{k}"
                if k % 2:  # rename and create
                    f.close()
                    os.rename(names[i], rotated)
                    files[i] = f = open(names[i], "ab", buffering=0)
                else:  # copytruncate: the writer keeps its descriptor
                    shutil.copyfile(names[i], rotated)
                    os.truncate(names[i], 0)
                if k % 3 == 0:  # compress the previous rotated file
                    prev = f"{names[i]}.{k - 1}"
                    with open(prev, "rb") as src, gzip.open(prev + ".gz", "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    os.unlink(prev)
        time.sleep(0.004)
    print("done", flush=True)
    """
)


if not any((c.callback and c.callback.__name__ == "tail") for c in app.registered_commands):
    build_app()


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def start_tailer(logs: Path, store: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*SERVELENS, "tail", str(logs), "--store", str(store), "--engine", "unknown", "-q", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def committed_messages(store: Path) -> set[str]:
    for _ in range(5):  # a part may move (staging -> events/) while we read: try again
        parts = committed_parts(store)
        try:
            return set(pl.read_parquet(parts, columns=["message"])["message"]) if parts else set()
        except (FileNotFoundError, OSError):
            continue
    return set()


def holds_lock(store: Path, pid: int) -> bool:
    try:
        return f"(pid {pid})" in (store / ".lock").read_text()
    except OSError:
        return False


def count(store: Path) -> int:
    if not (store / "manifest.json").exists():
        return 0
    return run(store, "select count(*) as n from events").item()


def wait_for(pred, timeout: float, step: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def test_exactly_once_through_rotation_and_sigkill(tmp_path):
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    n_files, n_lines, rotate_every = 3, 900, 120
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    seed = random.randrange(1 << 30)
    print(f"writer seed {seed}")
    writer = subprocess.Popen([sys.executable, str(script), str(logs), str(n_files), str(n_lines), str(rotate_every), str(seed)])
    rng = random.Random(seed)
    kills = 0
    try:
        while writer.poll() is None or kills < 4:
            tailer = start_tailer(logs, store)
            # kill it while it works, not while Python is still importing (slow machines)
            wait_for(lambda: holds_lock(store, tailer.pid), 30, 0.02)
            time.sleep(rng.uniform(0.1, 1.5))
            tailer.send_signal(signal.SIGKILL)
            _, err = tailer.communicate()
            assert tailer.returncode == -signal.SIGKILL, err  # it was running, not crashed
            assert "Traceback" not in err
            kills += 1
        assert writer.wait() == 0

        tailer = start_tailer(logs, store)
        expected = n_files * n_lines
        assert wait_for(lambda: count(store) >= expected, 30, 0.3), f"{count(store)} of {expected} lines"

        # a line appended to the live file is committed, and `servelens sql` returns it once
        # (how soon is bench/'s: the tailer's freshness is measured there)
        for k in range(N_FRESH):
            time.sleep(0.2)
            marker = f"fresh-{k}-{time.time_ns()}"
            with open(logs / "f0.log", "a") as f:
                f.write(marker + "\n")
            assert wait_for(lambda: marker in committed_messages(store), 20, 0.02)
            assert run(store, "select count(*) from events where message = ?", [marker]).item() == 1

        tailer.send_signal(signal.SIGTERM)
        _, err = tailer.communicate(timeout=20)
        assert tailer.returncode == 0, err
        assert "stopped;" in err
    finally:
        if writer.poll() is None:
            writer.kill()
        if tailer.poll() is None:
            tailer.kill()

    got = run(store, "select message from events").to_series().to_list()
    counts = Counter(m.split(" ")[0] + " " + m.split(" ")[1] if not m.startswith("fresh-") else m for m in got)
    dup = {k: n for k, n in counts.items() if n != 1}
    assert dup == {}, f"lines stored more than once: {list(dup.items())[:10]}"
    for i in range(n_files):
        have = sorted(int(m.split(" ")[1]) for m in counts if m.startswith(f"f{i} "))
        assert have == list(range(n_lines)), f"f{i}: {len(have)} of {n_lines} lines, missing {sorted(set(range(n_lines)) - set(have))[:10]}"
    assert sum(1 for m in counts if m.startswith("fresh-")) == N_FRESH
    # contents are whole lines, exactly as written (the writer's payload is only x's)
    bad = [m for m in got if not m.startswith("fresh-") and set(m.split(" ")[2] if len(m.split(" ")) > 2 else "x") - {"x"}]
    assert bad == []
    per_file = run(store, "select split_part(message, ' ', 1) as f, count(*) as n from events where message not like 'fresh-%' group by 1 order by 1").rows()
    assert per_file == [(f"f{i}", n_lines) for i in range(n_files)]


def test_two_tailers_refuse_one_store(tmp_path):
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    (logs / "a.log").write_text("one\ntwo\n")
    first = start_tailer(logs, store)
    try:
        assert wait_for(lambda: (store / "manifest.json").exists() and count(store) == 2, 20, 0.2)
        # flock is per open file, so a second opener in this process is refused like
        # another process would be
        second = cli("tail", logs, "--store", store, "--engine", "unknown")
        assert second.exit_code == 1
        err = second.stderr.strip()
        assert err.count("\n") == 0 and f"in use by servelens tail (pid {first.pid})" in err
        ingest = cli("ingest", logs, "--store", store)
        assert ingest.exit_code == 1 and "in use by servelens tail" in ingest.stderr
        with open(logs / "a.log", "a") as f:
            f.write("three\n")
        assert wait_for(lambda: count(store) == 3, 10, 0.2)  # the first one is unharmed
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=20)
    assert first.returncode == 0
    assert sorted(run(store, "select message from events").to_series().to_list()) == ["one", "three", "two"]


def test_bad_arguments_are_one_line_errors(tmp_path):
    for args, needle in [
        (("tail", tmp_path / "nope"), "path not found"),
        (("tail", tmp_path, "--engine", "llama"), "unknown engine 'llama'"),
        (("tail", tmp_path, "--from-end", "--from-beginning"), "contradict"),
        (("tail", tmp_path, "--flush-interval", "0"), "more than 0 seconds"),
    ]:
        r = cli(*args, "--store", tmp_path / "s")
        assert r.exit_code == 1, args
        assert r.stderr.startswith("servelens: error: ") and needle in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "s").exists()  # refused before anything was created
