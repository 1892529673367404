"""`servelens tail` (follow live logs into the store) and `servelens compact` (merge small
Parquet parts)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from servelens.parsers import ENGINES

from .options import StoreOpt, duration_option, fail, store_path

NON_TTY_STATUS_S = 30.0


class StatusLine:
    """Files followed, lines/s and lag on stderr: one refreshed line on a terminal, a line
    every NON_TTY_STATUS_S otherwise (so a log of the tailer stays readable)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._shown = False
        self._next = 0.0

    def say(self, message: str) -> None:
        self._clear()
        typer.echo(f"servelens: {message}", err=True)

    def status(self, stats) -> None:
        if not self.enabled:
            return
        text = (
            f"following {stats.files} file{'s' if stats.files != 1 else ''} | "
            f"{stats.rate:,.0f} lines/s | lag {stats.lag_s:.1f}s | {stats.lines:,} lines committed"
        )
        if self.tty:
            sys.stderr.write("\r\x1b[K" + text)
            sys.stderr.flush()
            self._shown = True
        elif time.monotonic() >= self._next:
            self._next = time.monotonic() + NON_TTY_STATUS_S
            typer.echo(f"servelens: {text}", err=True)

    def _clear(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            self._shown = False

    def end(self) -> None:
        if self._shown:
            sys.stderr.write("\n")
            self._shown = False


def _start_exporter(store: Path, host: str, port: int, line: StatusLine):
    """`--serve-port`: the exporter of `servelens serve` in background threads of the tailer."""
    from ..query.views import resolve_variables
    from ..serve.snapshot import ServeError
    from ..serve.http import start_beside

    try:
        stop = start_beside(store, host=host, port=port, variables=resolve_variables())
    except ServeError as e:
        raise fail(str(e)) from None
    line.say(f"serving metrics at http://{host}:{port}/metrics")
    return stop


def register(app: typer.Typer) -> None:
    @app.command()
    def tail(
        paths: Annotated[list[Path], typer.Argument(help="Log directories (watched recursively) or files to follow.", show_default=False)],
        store: StoreOpt = None,  # type: ignore[assignment]
        glob: Annotated[Optional[str], typer.Option(help="Follow only files whose name matches, e.g. '*.log*' (default: every file that is not hidden or obviously not a log).")] = None,
        from_beginning: Annotated[bool, typer.Option("--from-beginning", help="Read files already there from their start (the default), or from where the store left off.")] = False,
        from_end: Annotated[bool, typer.Option("--from-end", help="Skip what files already there hold now; follow only new lines (and new files from their start).")] = False,
        engine: Annotated[str, typer.Option(help=f"auto (detect per file), or one of: {', '.join(ENGINES)}.")] = "auto",
        instance: Annotated[Optional[str], typer.Option(help="Instance name for every file (default: from each file's name, with the directory in front where two directories hold the same name).")] = None,
        instance_from: Annotated[Optional[str], typer.Option(help="Name each file's instance from its path: a template over {stem} {name} {parent} {grandparent} {dir} {pod} {namespace} {container}, e.g. '{parent}/{stem}'.")] = None,
        year: Annotated[Optional[int], typer.Option(help="Year of timestamps printed without one (default: from the file's modification time).")] = None,
        flush_interval: Annotated[float, typer.Option(help="Seconds between commits to the store; new lines are queryable about this long after they are written.")] = 0.5,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No status line; only messages about files.")] = False,
        serve_port: Annotated[Optional[int], typer.Option(help="Also serve /metrics, /api/signals and /healthz on this port (as servelens serve).")] = None,
        serve_host: Annotated[str, typer.Option(help="Address the --serve-port exporter binds.")] = "127.0.0.1",
        scrape: Annotated[Optional[list[str]], typer.Option("--scrape", help="Also scrape this server's /metrics into the store (host:port is enough), under the instance of its log (or --instance); repeat for several.", show_default=False)] = None,
        scrape_interval: Annotated[str, typer.Option(help="Time between scrapes of --scrape (5s, 1m, 500ms).")] = "5s",
    ) -> None:
        """Follow log files as they grow and write them to the store, exactly once through
        rotation (rename or copytruncate, .gz), truncation, deletion and restarts. Stop with
        Ctrl-C: what has been read is committed first. Query meanwhile with servelens sql.

        \b
        Examples:
          servelens tail /var/log/vllm/
          servelens tail /var/log/tgi/ --glob '*.log*' --store live.store
          servelens tail server.log --engine trtllm --from-end --flush-interval 1
          servelens tail /var/log/vllm/ --store live.store --serve-port 9464
          servelens tail hosts/ --instance-from '{parent}/{stem}'
          servelens tail /var/log/vllm/server.log --scrape localhost:8000 --store live.store
        """
        from ..store.manifest import StoreError
        from ..tail.tailer import TailError, tail as run_tail

        if from_beginning and from_end:
            raise fail("--from-beginning and --from-end contradict each other; give one")
        line = StatusLine(enabled=not quiet)
        scraper = commit_scrapes = stop_scraping = None
        if scrape:
            from ..scrape import ScrapeError, beside_tail, check_store

            interval_s = duration_option(scrape_interval, "--scrape-interval")
            try:
                check_store(store_path(store))
                scraper, commit_scrapes, stop_scraping = beside_tail(
                    scrape, store_path(store), interval_s=interval_s, instance=instance,
                    say=lambda msg: line.say(msg.removeprefix("servelens: ")))
            except ScrapeError as e:
                raise fail(str(e)) from None
        stop_serving = _start_exporter(store_path(store), serve_host, serve_port, line) if serve_port is not None else None
        try:
            stats = run_tail(
                paths, store_path(store), glob=glob, engine=engine, instance=instance,
                instance_from=instance_from, year=year,
                from_end=from_end, flush_interval=flush_interval, say=line.say, on_status=line.status,
                beside=commit_scrapes,
            )
        except (TailError, StoreError) as e:
            line.end()
            raise fail(str(e)) from None
        finally:
            if stop_serving is not None:
                stop_serving()
            if stop_scraping is not None:
                stop_scraping()
        line.end()
        typer.echo(f"servelens: stopped; {stats.lines:,} lines committed in {stats.commits:,} commits", err=True)
        if scraper is not None:
            typer.echo(f"servelens: scrapes: {scraper.stats.describe()}", err=True)

    @app.command()
    def compact(
        store: StoreOpt = None,  # type: ignore[assignment]
        min_parts: Annotated[int, typer.Option(help="Merge a partition's small parts only when it has at least this many.")] = 2,
    ) -> None:
        """Merge the small Parquet parts of the store (events, and the samples of scrapes) into
        large ones so queries stay fast. Readers keep working meanwhile; a running `servelens
        tail` compacts by itself.

        \b
        Examples:
          servelens compact
          servelens compact --store live.store --min-parts 16
        """
        from ..query import rollups
        from ..store.compact import compact as run_compact
        from ..store.commit import Store
        from ..store.manifest import StoreError, StoreLocked

        target = store_path(store)
        from ..outfile import is_store_dir
        from ..store.remote import store_exists, store_url

        if not store_exists(target) or (store_url(target) is None and not is_store_dir(Path(target))):
            raise fail(f"{target} is not a servelens store (no store manifest); nothing was changed: give --store")
        if min_parts < 2:
            raise fail("--min-parts must be at least 2")
        from ..store.sample_compact import merge_small_parts
        from ..store.samples import sample_entries

        try:
            with Store.open(target, purpose="compact") as st:
                result = run_compact(st, min_parts=min_parts, migrate=True, refresh=rollups.refresh)
                # the scrapes' sample parts too: a day's small ones into one
                sample_parts_before = len(sample_entries(st.manifest)["parts"])
                samples_merged = merge_small_parts(st, min_parts=min_parts)
                sample_parts_after = len(sample_entries(st.manifest)["parts"])
        except StoreLocked as e:
            raise fail(f"{e} (a running servelens tail compacts the store itself)") from None
        except StoreError as e:
            raise fail(str(e)) from None
        typer.echo(
            f"{result.merged} parts merged into {result.written}; "
            f"{result.parts_before} -> {result.parts_after} parts in {store_url(target) or target}"
        )
        if sample_parts_before:
            typer.echo(f"{samples_merged} sample parts merged; {sample_parts_before} -> {sample_parts_after} sample parts")
        if result.rollup_error:
            typer.echo(f"warning: the rollups could not be refreshed ({result.rollup_error}); queries compute "
                       "them from the events until the next ingest, tail or compact", err=True)
