"""Model-based: random writes (whole and half lines), rename rotation, copytruncate, .gz
compression, polls, crashes and restarts against an in-memory model of what was written. The
store must never hold a line twice or a line never written, and once the writers are done and
the tailer catches up it holds every line exactly once."""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from servelens.pipeline.tail import tailer as tail_mod
from servelens.pipeline.tail import identity as tail_identity
from servelens.pipeline.store.commit import Store
from servelens.pipeline.store.manifest import committed_parts
from servelens.pipeline.tail.tailer import Tailer
from servelens.pipeline.tail.watch import Targets
from tests.helpers.tailing import events_only

FILES = ("a", "b")
WAITS = {(tail_mod, "ROTATE_WAIT_S"): 0.0, (tail_identity, "COPY_WAIT_S"): 0.0, (tail_mod, "GZ_SETTLE_S"): 0.0}


class TailModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.saved = {k: getattr(*k) for k in WAITS}
        for (mod, name), v in WAITS.items():
            setattr(mod, name, v)
        self.tmp = Path(tempfile.mkdtemp(prefix="tailmodel-"))
        self.logs = self.tmp / "logs"
        self.logs.mkdir()
        self.store_dir = self.tmp / "store"
        self.written = {f: 0 for f in FILES}  # complete lines per file
        self.partial = {f: None for f in FILES}  # (full line, bytes already written)
        self.rotations = {f: 0 for f in FILES}
        self.renamed: dict[str, int] = {}  # file -> rotation number done by rename
        self.open()

    def open(self):
        self.store = Store.open(self.store_dir, purpose="tail")
        # (the model is about the lines stored: no rollups)
        self.tailer = events_only(Tailer(
            self.store, Targets([self.logs], None, skip_under=self.store_dir),
            engine="unknown", quiet_s=0.0, compact_min_parts=0,
        ))

    def path(self, f: str) -> Path:
        return self.logs / f"{f}.log"

    def append(self, f: str, data: str):
        with open(self.path(f), "a") as fh:
            fh.write(data)

    def finish_partial(self, f: str):
        if self.partial[f] is not None:
            line, done = self.partial[f]
            self.append(f, line[done:])
            self.partial[f] = None
            self.written[f] += 1

    @rule(f=st.sampled_from(FILES), n=st.integers(0, 6), half=st.booleans(), cut=st.integers(1, 5))
    def write(self, f, n, half, cut):
        self.finish_partial(f)
        self.append(f, "".join(f"{f} {self.written[f] + i}\n" for i in range(n)))
        self.written[f] += n
        if half:
            line = f"{f} {self.written[f]}\n"
            self.append(f, line[:cut])
            self.partial[f] = (line, cut)

    @rule(f=st.sampled_from(FILES))
    def rotate_rename(self, f):
        self.finish_partial(f)
        if self.path(f).exists():
            self.rotations[f] += 1
            os.rename(self.path(f), self.logs / f"{f}.log.{self.rotations[f]}")
            self.renamed[f] = self.rotations[f]

    @rule(f=st.sampled_from(FILES), n=st.integers(1, 3))
    def write_late_to_renamed(self, f, n):
        """The writer's old descriptor writes a little more after a rename rotation."""
        rotated = self.logs / f"{f}.log.{self.rotations[f]}"
        if self.renamed.get(f) == self.rotations[f] and rotated.exists():
            self.finish_partial(f)  # line numbers stay unique
            with open(rotated, "a") as fh:
                fh.write("".join(f"{f} {self.written[f] + i}\n" for i in range(n)))
            self.written[f] += n

    @rule(f=st.sampled_from(FILES))
    def rotate_copytruncate(self, f):
        self.finish_partial(f)
        if self.path(f).exists():
            self.rotations[f] += 1
            shutil.copyfile(self.path(f), self.logs / f"{f}.log.{self.rotations[f]}")
            os.truncate(self.path(f), 0)

    @rule(f=st.sampled_from(FILES))
    def compress_rotated(self, f):
        plain = self.logs / f"{f}.log.{self.rotations[f]}"
        if self.rotations[f] and plain.exists():
            with open(plain, "rb") as src, gzip.open(str(plain) + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            plain.unlink()

    @rule()
    def poll(self):
        self.tailer.poll_once(rescan=True)

    @rule()
    def read_without_commit_then_crash(self):
        for fol in list(self.tailer.followed.values()):
            self.tailer._poll(fol, 0.0)
        self.crash()
        self.open()

    @rule()
    def crash_restart(self):
        self.crash()
        self.open()

    @rule()
    def clean_restart(self):
        self.tailer.close()
        self.store.close()
        self.open()

    def crash(self):
        for fol in list(self.tailer.followed.values()):
            os.close(fol.fd)
        self.store.close()

    def stored(self) -> Counter:
        parts = committed_parts(self.store_dir)
        return Counter(pl.read_parquet(parts)["message"].to_list()) if parts else Counter()

    def expected(self) -> Counter:
        return Counter(f"{f} {i}" for f in FILES for i in range(self.written[f]))

    @invariant()
    def never_twice_never_invented(self):
        got = self.stored()
        assert max(got.values(), default=1) == 1, [k for k, n in got.items() if n > 1]
        allowed = self.expected() + Counter(p[0][:-1] for p in self.partial.values() if p)
        assert not (set(got) - set(allowed)), set(got) - set(allowed)

    def teardown(self):
        try:
            for f in FILES:
                self.finish_partial(f)
            for _ in range(3):
                self.tailer.poll_once(rescan=True)
            got, want = self.stored(), self.expected()
            assert got == want, (sorted((want - got).elements())[:10], sorted((got - want).elements())[:10])
        finally:
            self.tailer.close()
            self.store.close()
            for (mod, name), v in self.saved.items():
                setattr(mod, name, v)
            shutil.rmtree(self.tmp, ignore_errors=True)


TailModel.TestCase.settings = settings(
    max_examples=25, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_tail_model = TailModel.TestCase
