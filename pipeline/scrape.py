"""Scraping engines' `/metrics` live into the store (`servelens scrape`).

Every interval each URL is fetched once; its answer is parsed (pipeline/sources/exposition.py)
with the moment the request was sent as the time of the samples that carry none (as
Prometheus stamps a scrape, to the millisecond), and the round's samples are committed in one
commit through the path `servelens ingest` takes for files of scrapes
(sample_ingest.name_instances -> store.samples.commit_samples): a sample is known by its
instance, series and time, so a sample the store already holds adds nothing.

The store is opened for each round's commit and closed again, so `servelens ingest` of the
same server's log can run meanwhile; a round that finds the store in use keeps its samples and
commits them with the next round that gets in.

Each URL is one target (its host:port); its samples are stored under `--instance`, else the
instance the log of the same server has (sample_ingest.name_instances: by the port its log
announced, the model it labels, the only instance of its engine), else the target itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import polars as pl

from .store.sample_compact import merge_small_parts
from .sample_ingest import Known, known_instances, name_instances, server_engine
from .sources.exposition import ParseStats, finish_raw, parse_text
from .store.commit import Store
from .store.manifest import StoreLocked
from .store.samples import commit_samples

DEFAULT_INTERVAL_S = 5.0
# what Prometheus asks for: the text format first (every engine serves it)
ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
MAX_BYTES = 64 * 1024 * 1024  # one answer: far beyond any engine's /metrics
# samples held while the store is in use by another writer, before the oldest are let go
MAX_HELD_ROUNDS = 720


class ScrapeError(Exception):
    """A problem the user can fix (a bad URL, a bad option); the message says how."""


def normalise_url(url: str) -> str:
    """`host:port`, `http://host:port` or a full URL -> the URL to GET (`/metrics` when no
    path is given)."""
    u = url.strip()
    if "://" not in u:
        u = "http://" + u
    parts = urllib.parse.urlsplit(u)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ScrapeError(f"cannot scrape {url!r}: give an http(s) URL such as http://127.0.0.1:8000/metrics")
    try:
        parts.port
    except ValueError:
        raise ScrapeError(f"cannot scrape {url!r}: its port is not a number") from None
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def target_of(url: str) -> str:
    """host:port of a URL (the port its scheme implies when none is given), as Prometheus
    names a target in its `instance` label."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def fetch(url: str, timeout: float) -> str:
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "servelens-scrape"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read(MAX_BYTES + 1)
    if len(body) > MAX_BYTES:
        raise ValueError(f"the answer is larger than {MAX_BYTES >> 20} MiB")
    return body.decode("utf-8", errors="replace")


def _reason(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        hint = " (llama-server publishes /metrics only with --metrics)" if e.code in (404, 501) else ""
        return f"HTTP {e.code} {e.reason}{hint}"
    inner = getattr(e, "reason", e)
    if isinstance(inner, ConnectionRefusedError):
        return "connection refused (is the server running, on that port?)"
    if isinstance(inner, (TimeoutError, OSError)) and "timed out" in str(inner):
        return "no answer in time"
    if isinstance(inner, OSError) and inner.strerror:
        return inner.strerror
    return str(inner) or type(inner).__name__


@dataclass
class ScrapeStats:
    """What a scrape run did."""

    rounds: int = 0
    fetched: int = 0  # answers with samples
    failures: int = 0
    samples: int = 0  # samples read
    new: int = 0  # samples stored (the rest the store held already)
    commits: int = 0
    held: int = 0  # samples read but not committed (the store stayed in use)
    stopped: bool = False  # ended by SIGINT / SIGTERM
    dropped: int = 0  # samples let go after MAX_HELD_ROUNDS rounds held
    instances: dict[str, str] = field(default_factory=dict)  # url -> instance
    errors: dict[str, str] = field(default_factory=dict)  # url -> its last error
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        where = ", ".join(f"{target_of(u)} -> {i}" for u, i in self.instances.items()) or "nothing stored"
        failed = f", {self.failures:,} failed" if self.failures else ""
        held = f", {self.held:,} not committed (the store was in use)" if self.held else ""
        held += f", {self.dropped:,} let go (the store was in use too long)" if self.dropped else ""
        return (f"{self.new:,} new samples committed in {self.commits:,} commit(s) "
                f"({self.samples:,} read in {self.fetched:,} scrape(s) over {self.rounds:,} round(s){failed}{held}; "
                f"{where})")


class Scraper:
    """Fetches every URL once per `round`, and commits the round's samples to the store."""

    def __init__(self, urls: list[str], store_dir: Path | str, *, interval_s: float = DEFAULT_INTERVAL_S,
                 instances: list[str] | None = None, say: Callable[[str], None] | None = None):
        if not urls:
            raise ScrapeError("give at least one URL to scrape, such as http://127.0.0.1:8000/metrics")
        if not interval_s > 0:
            raise ScrapeError("--interval must be more than 0 seconds")
        self.urls = [normalise_url(u) for u in urls]
        if len(set(self.urls)) != len(self.urls):
            raise ScrapeError("a URL is given twice; give each server's /metrics once")
        instances = instances or []
        if instances and len(instances) != len(self.urls):
            raise ScrapeError(f"--instance given {len(instances)} time(s) for {len(self.urls)} URL(s): give it "
                              "once per URL, in the same order")
        self.instances = dict(zip(self.urls, instances))
        self.store_dir = store_dir
        self.interval_s = interval_s
        self.say = say or (lambda msg: None)
        self.stats = ScrapeStats()
        self._known: Known | None = None
        self._held: list[pl.DataFrame] = []  # rounds not committed yet (the store was in use)
        self._locked_said = False
        self._executor = None
        # fetch_round (a scraping thread) and commit_held (the tailer's thread) may run at once
        self._lock = threading.RLock()

    def _pool(self):
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(max_workers=min(16, len(self.urls)), thread_name_prefix="scrape")
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            # a fetch still waiting on a server ends by its own timeout; nothing waits for it
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def fetch_one(self, url: str) -> pl.DataFrame | None:
        """One URL's samples (instance null unless --instance named it), or None after
        saying why not (once per distinct error)."""
        ts = dt.datetime.fromtimestamp(round(time.time(), 3), dt.timezone.utc)
        try:
            text = fetch(url, timeout=max(1.0, min(self.interval_s, 10.0)))
        except (OSError, ValueError, urllib.error.URLError) as e:
            error = f"cannot scrape {url}: {_reason(e)}"
        else:
            stats = ParseStats()
            raw, _ = parse_text(text, ts, stats)
            if stats.samples:
                if url in self.stats.errors:
                    self.say(f"servelens: {url} answers again")
                    del self.stats.errors[url]
                return finish_raw(raw, stats, instance=self.instances.get(url), source=url, target=target_of(url))
            error = f"{url} answered with no samples: is it a /metrics endpoint?"
        self.stats.failures += 1
        if self.stats.errors.get(url) != error:
            self.say(f"servelens: {error}; trying again every {self.interval_s:g}s")
        self.stats.errors[url] = error
        return None

    def round(self) -> int:
        """Fetch every URL once and commit what came (with any rounds held before) in one
        commit. Returns the samples stored."""
        self.fetch_round()
        return self.commit_held()

    def fetch_round(self) -> None:
        """Fetch every URL once; what came is held until `commit_held`."""
        if len(self.urls) == 1:
            frames = [self.fetch_one(self.urls[0])]
        else:  # at once: a server that does not answer delays no other's scrape
            frames = list(self._pool().map(self.fetch_one, self.urls))
        frames = [f for f in frames if f is not None]
        with self._lock:
            self.stats.rounds += 1
            self.stats.fetched += len(frames)
            if frames:
                batch = pl.concat(frames)
                self.stats.samples += batch.height
                self._held.append(batch)
                if len(self._held) > MAX_HELD_ROUNDS:
                    dropped = self._held.pop(0)
                    self.stats.dropped += dropped.height
                    if self.stats.dropped == dropped.height:
                        self.say(f"servelens: the store has been in use for {MAX_HELD_ROUNDS} rounds: the oldest held "
                                 "rounds are let go from now on (the summary counts them)")

    def commit_held(self, into: Store | None = None) -> int:
        """Commit the rounds held, in one commit: into the store `into` when a writer that
        holds it open (the tailer) commits them, else opening the store for it."""
        with self._lock:
            return self._commit_held(into)

    def _commit_held(self, into: Store | None) -> int:
        if not self._held:
            return 0
        if into is not None:
            store = into
        else:
            try:
                store = Store.open(self.store_dir, purpose="scrape")
            except StoreLocked as e:
                if not self._locked_said:
                    self.say(f"servelens: {e}; holding the samples scraped meanwhile and committing them when it is free")
                    self._locked_said = True
                self.stats.held = sum(f.height for f in self._held)
                return 0
        with contextlib.nullcontext() if into is not None else store:
            samples = pl.concat(self._held)
            unnamed = samples.filter(pl.col("instance").is_null())["target"].unique().to_list()
            # the store's instances are read again while a target has no name yet: its log
            # may have been ingested since the last round
            if self._known is None or any(t not in self._known.targets for t in unnamed):
                self._known = known_instances(store)
            samples, notes = name_instances(samples, self._known)
            samples = server_engine(samples)
            for note in notes:
                if note not in self.stats.notes:
                    self.stats.notes.append(note)
                    self.say(f"servelens: {note}")
            new = commit_samples(store, samples)
            if new:
                merge_small_parts(store)
        self._held.clear()
        self.stats.held = 0
        if self._locked_said:
            self.say("servelens: the store is free again; the held samples are committed")
            self._locked_said = False
        for url, inst in samples.select("source", "instance").unique().iter_rows():
            self.stats.instances[url] = inst
            self._known.targets.setdefault(target_of(url), inst)
        self.stats.new += new
        self.stats.commits += 1 if new else 0
        return new


def check_store(store_dir: Path | str) -> None:
    """Refuse a --store that exists and is not a store (a log file, a directory of other
    things) before anything is scraped."""
    from .store.remote import store_url

    if store_url(store_dir) is not None:
        return
    path = Path(store_dir)
    if not path.exists():
        return
    if not path.is_dir():
        raise ScrapeError(f"--store {path} is a file, not a store directory; give --store a store directory "
                          "(a new one is made)")
    from .outfile import is_store_dir
    from .query.connect import not_a_store

    problem = None if is_store_dir(path) else not_a_store(path)
    if problem:
        raise ScrapeError(problem)


def run(
    urls: list[str],
    store_dir: Path | str,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    instances: list[str] | None = None,
    count: int | None = None,
    duration_s: float | None = None,
    say: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> ScrapeStats:
    """`servelens scrape`: a round every `interval_s` until `count` rounds, `duration_s`,
    SIGINT / SIGTERM or `stop`. Each round is committed before the next starts, so a stopped
    run keeps every round it finished; a signal during a round lets the round finish."""
    if count is not None and count < 1:
        raise ScrapeError("--count must be at least 1")
    scraper = Scraper(urls, store_dir, interval_s=interval_s, instances=instances, say=say)
    check_store(store_dir)
    # the store is opened once first, so a store that cannot be written is said at once
    try:
        Store.open(store_dir, purpose="scrape").close()
    except StoreLocked:
        pass
    stop = stop or threading.Event()

    def on_signal(*_):
        if stop.is_set():  # a second Ctrl-C does not wait for the round (commits are atomic)
            raise KeyboardInterrupt
        stop.set()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    deadline = None if duration_s is None else time.monotonic() + duration_s
    try:
        next_at = time.monotonic()
        while not stop.is_set():
            scraper.round()
            if count is not None and scraper.stats.rounds >= count:
                break
            next_at += interval_s
            now = time.monotonic()
            if next_at < now:  # slower than the interval: the next round now, not a burst
                next_at = now
            if deadline is not None and next_at >= deadline:
                break
            stop.wait(next_at - now)
        scraper.stats.stopped = stop.is_set() and (count is None or scraper.stats.rounds < count)
        if scraper._held:  # rounds held while the store was in use: a last try
            scraper.commit_held()
    finally:
        scraper.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return scraper.stats




def beside_tail(urls: list[str], store_dir: Path | str, *, interval_s: float = DEFAULT_INTERVAL_S,
                instance: str | None = None, say: Callable[[str], None] | None = None,
                ) -> tuple[Scraper, Callable[..., None], Callable[[], None]]:
    """`servelens tail --scrape URL`: scrapes fetched every `interval_s` by a thread of their
    own, committed by the tailer (which holds the store) after each of its commits, through the
    same exactly-once commit as `servelens scrape`, under `instance` (the tail's --instance)
    or the instance of the same server's log. Returns the scraper, the tailer's hook and the
    stop. The tailer's last call (`final=True`, as it stops) ends the fetching first, so
    every scrape fetched is committed."""
    scraper = Scraper(urls, store_dir, interval_s=interval_s,
                      instances=[instance] * len(urls) if instance else None, say=say)
    stop = threading.Event()

    def loop() -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            scraper.fetch_round()
            next_at = max(next_at + interval_s, time.monotonic())
            stop.wait(next_at - time.monotonic())

    thread = threading.Thread(target=loop, name="tail-scrape", daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(timeout=max(2.0, min(interval_s, 10.0) + 1.0))
        scraper.close()

    def commit(store: Store, final: bool = False) -> None:
        if final:
            halt()
        scraper.commit_held(into=store)

    return scraper, commit, halt
