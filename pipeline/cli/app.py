"""The `servelens` command: a thin typer app over the pipeline library.

Each command parses its options, calls one library function and formats the result. User
errors become one line on stderr and a non-zero exit, never a traceback. Commands that live in
their own module register themselves through `register(app)` (see COMMAND_MODULES).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys

# numpy's OpenBLAS starts a thread per core at import, and each spins before it sleeps: CPU
# paid by every command that imports numpy, none of which does linear algebra (a user's own
# setting wins). Set before anything imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from pathlib import Path
from typing import Annotated, Optional

import typer

from servelens.parsers import ENGINES, SERVERS

from ..store.manifest import write_failure
from .options import (
    ForceOpt, SinceOpt, StoreOpt, UntilOpt, check_output_path, fail, refresh_deferred_rollups, store_path,
    write_output_file,
)

# No polars, pyarrow or duckdb at import: `servelens --help` and the commands that do not
# read the store import them where they need them (pipeline/store/commit.py imports polars).

app = typer.Typer(
    name="servelens",
    help=(
        "Log ingestion and observability analytics for LLM inference servers "
        f"({', '.join(SERVERS.values())}).\n\n"
        "Example:\n\n"
        "  servelens ingest sample_logs/ && servelens sql \"select event, count(*) from events group by all\""
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

# Modules of this package that define `register(app)`.
COMMAND_MODULES: tuple[str, ...] = ("report", "dashboard", "tail", "simulate", "store", "serve", "info", "views", "show", "top", "scrape")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"servelens {version('servelens')}")
        except PackageNotFoundError:  # a bare checkout, not installed
            typer.echo("servelens (not installed)")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Log ingestion and observability analytics for LLM inference servers."""


# Rows `servelens sql` prints as a table before it stops and says how many were left
# (a `select * from events` would otherwise fill the terminal with every event)
TABLE_ROWS = 1000


@app.command()
def ingest(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="Log files or directories (searched recursively; .gz is fine); - reads standard input.", show_default=False)] = None,
    store: StoreOpt = None,  # type: ignore[assignment]
    engine: Annotated[str, typer.Option(help=f"auto (detect per file), or one of: {', '.join(ENGINES)}.")] = "auto",
    instance: Annotated[Optional[str], typer.Option(help="Instance name for every file (default: from each file's name).")] = None,
    year: Annotated[Optional[int], typer.Option(help="Year of timestamps printed without one (default: from the file's modification time).")] = None,
    instance_from: Annotated[Optional[str], typer.Option(help="Name each file's instance from its path: a template over {stem} {name} {parent} {grandparent} {dir} {pod} {namespace} {container}, e.g. '{parent}/{stem}'.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or per-file lines; summary only.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object on stdout (for scripts).")] = False,
    no_rollups: Annotated[bool, typer.Option("--no-rollups", help="Leave the rollups (the stored window_metrics) to a later ingest, tail or compact: a bulk load in many runs pays for them once. Queries compute them from the events meanwhile.")] = False,
    defer_rollups: Annotated[Optional[bool], typer.Option("--defer-rollups/--refresh-rollups", help="Leave the rollups (the stored window_metrics) to the first query that reads them (servelens sql, report, dashboard, serve): it refreshes them once and says what that cost, so an ingest whose store is asked one question pays nothing for them. --refresh-rollups brings them up to date before the ingest returns. Default: defer.")] = None,
    no_follow_symlinks: Annotated[bool, typer.Option("--no-follow-symlinks", help="Pass over the files of a named directory that lead out of it through a symlink (read by default: /var/log/containers is such links). For directories whose writers you trust less than this reader.")] = False,
    keep_lines: Annotated[bool, typer.Option("--keep-lines", help="Keep the text (`message`) of every event, in this and every later ingest or tail into the store. By default the bulk events whose columns say what the line said (requests, engine stats, batches, HTTP access) keep none: a vLLM request's prompt, an iteration's JSON. Unparsed, error, warning and start-up lines always keep theirs.")] = False,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Processes that read large files (64 MiB or more) of different instances side by side, this one and N-1 workers, each writing its own parts and holding its own memory (default: one per core, as many as the available memory holds at 1 GiB each; 1: every file read in this process, one at a time).", show_default=False)] = None,
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Instead of PATHs, read the samples a Prometheus server holds over --since .. --until (its HTTP API) into the store, as if scraped (docs/sources.md).", show_default=False)] = None,
    match: Annotated[Optional[list[str]], typer.Option("--match", help="With --prometheus: a series selector to read (repeatable; default: every engine's metrics, vllm:*, sglang:*, llamacpp:*, tgi_*, trtllm*).", show_default=False)] = None,
    step: Annotated[Optional[str], typer.Option("--step", help="With --prometheus: read the series evaluated every STEP (query_range) instead of the raw samples at their scrape times.", show_default=False)] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
) -> None:
    """Parse log files into the store. Re-ingesting adds only what is new.

    \b
    Examples:
      servelens ingest sample_logs/
      servelens ingest /var/log/incident-0612/ --store incident.store
      servelens ingest vllm.log.1.gz --engine vllm --instance gpu-node-3 --year 2025
      servelens ingest hosts/ --instance-from '{parent}/{stem}'
      servelens ingest day1/ --no-rollups && servelens ingest day2/
      servelens ingest fleet-logs/ --workers 8
      kubectl logs vllm-0 | servelens ingest - --instance vllm-0 --json
      servelens ingest --prometheus http://prometheus:9090 --since 2026-06-12T02:00Z --until 2026-06-12T04:00Z --match '{job="vllm"}'
    """
    if prometheus is not None or match or step is not None or since or until:
        from .scrape import ingest_prometheus_command

        return ingest_prometheus_command(paths, store, prometheus, match, step, since, until, instance, as_json)
    if not paths:
        raise fail("give the log files or directories to ingest (or --prometheus URL --since T to read a Prometheus server)")
    if no_rollups and defer_rollups is not None:
        raise fail("--no-rollups and --defer-rollups / --refresh-rollups exclude each other: choose one")
    import tempfile

    from ..workers import keep_freed_pages, lasting_imports, prestart, worker_count

    target = store_path(store)
    show_progress = not quiet and not as_json and sys.stderr.isatty()
    unkeep = keep_freed_pages()  # (before the workers start: they inherit it)
    pool = None
    try:
        # the worker processes' imports then run beside this process's own, below
        if instance is None and not any(str(p) == "-" for p in paths):
            pool = prestart(paths, target, worker_count(workers), show_progress)
        with lasting_imports("servelens.pipeline.ingest"):
            from ..ingest import IngestError, ingest as run_ingest
            from .console import print_file_line, print_summary, progress_bar, summary_dict
            from ..store.manifest import StoreError

        spool = None
        if any(str(p) == "-" for p in paths):
            if sum(str(p) == "-" for p in paths) > 1:
                raise fail("- (standard input) can be given once")
            # standard input is spooled to a file (named stdin.log, so the instance defaults to
            # `stdin`): the ingest reads files, and the content fingerprint still dedupes a re-run
            spool = tempfile.TemporaryDirectory(prefix="servelens-stdin-")
            spooled = Path(spool.name) / "stdin.log"
            with open(spooled, "wb") as out:
                import shutil

                shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
            paths = [spooled if str(p) == "-" else p for p in paths]
        try:
            with progress_bar(paths, enabled=show_progress) as advance:
                summary = run_ingest(
                    paths,
                    target,
                    engine=engine,
                    instance=instance,
                    year=year,
                    instance_from=instance_from,
                    on_progress=advance,
                    on_stage=getattr(advance, "stage", None),
                    follow_symlinks=not no_follow_symlinks,
                    on_file=None if quiet or as_json else print_file_line,
                    rollups=False if no_rollups else True if defer_rollups is False else "defer",
                    keep_lines=keep_lines,
                    workers=worker_count(workers),
                    pool=pool,
                )
        except (IngestError, StoreError) as e:
            raise fail(str(e)) from None
        finally:
            if spool is not None:
                spool.cleanup()
        if as_json:
            import json

            typer.echo(json.dumps(summary_dict(summary, target), indent=2))
        else:
            print_summary(summary, target)
        if summary.files and all(f.status == "skipped" for f in summary.files):
            raise fail("nothing was ingested (see the reasons above)")
        if summary.failed:
            raise fail(f"{len(summary.failed)} file(s) could not be read to the end (see above)")
    except KeyboardInterrupt:
        raise fail(_interrupted(target), code=130) from None
    finally:
        if pool is not None:
            pool.close()  # (unused, or stopped short: never left running)
        unkeep()


def _interrupted(target: Path) -> str:
    """What an ingest stopped by Ctrl-C leaves: the commits made before it, and how to go on."""
    from ..store.manifest import StoreError, read_manifest

    try:
        files = read_manifest(target)["files"].values()
        held = f"the store holds {len(files):,} file(s), {sum(e.get('lines', 0) for e in files):,} lines committed in all"
    except (StoreError, OSError):
        held = "what was committed before the stop is in the store"
    return (f"interrupted: {held}; run the same command again to go on where it stopped "
            "(committed lines are not read again)")


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="A read-only SQL query (DuckDB dialect).", show_default=False)],
    store: StoreOpt = None,  # type: ignore[assignment]
    format: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the result to this file instead of stdout (never inside a store; an existing file only with --force).")] = None,
    force: ForceOpt = False,
    limit: Annotated[int, typer.Option("--limit", help="Rows a table shows on the terminal; 0 for all (csv, json and --output are never cut).")] = TABLE_ROWS,
    raw_csv: Annotated[bool, typer.Option("--raw-csv", help="Write CSV cells as they are: by default a cell that starts with = + - @ or a tab/CR is prefixed with ' so a spreadsheet shows it as text instead of running it as a formula.")] = False,
    window: Annotated[Optional[str], typer.Option(help="Window of the windowed views, e.g. 30s, 1m, 5m (default 1m).")] = None,
    thresholds: Annotated[Optional[Path], typer.Option(help="TOML file overriding signal thresholds (see sql/thresholds.toml).")] = None,
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Answer from the intact parts of a damaged store (with a warning) instead of refusing.")] = False,
    timeout: Annotated[Optional[str], typer.Option(help="Stop the query after this many seconds; 0 for no limit (default: $SERVELENS_QUERY_TIMEOUT or 60).", show_default=False)] = None,
    memory_limit: Annotated[Optional[str], typer.Option("--memory-limit", help="Memory the query may use, e.g. 512MB, 8GB (default: $SERVELENS_QUERY_MEMORY or 4GB).", show_default=False)] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    no_rollups: Annotated[bool, typer.Option("--no-rollups", help="Compute window_metrics (and the views over it) from the events even when the store's rollup is fresh, e.g. to compare the two.")] = False,
) -> None:
    """Run SQL over the store: `events` and the metric views (requests, latency_percentiles,
    queue_depth, batch_fill, kv_cache, throughput, errors, scaling_signals, ...).

    The query only reads: it sees the store's committed data and nothing else (no other file,
    no network, no extension, no setting; see docs/security.md), within a time and a memory
    limit.

    \b
    Examples:
      servelens sql "select event, count(*) as n from events group by all order by n desc"
      servelens sql "select * from latency_percentiles order by window_start" --format csv -o p.csv
      servelens sql "select * from scaling_signals" --window 5m --thresholds my-slo.toml
      servelens sql "select * from requests" --timeout 300 --memory-limit 16GB
      servelens sql "select * from latency_percentiles" --since 2026-05-12T08:00Z --until 2026-05-12T09:00Z
    """
    from ..query.connect import Limits, QueryError, run
    from ..query.textresult import fetcher
    from ..store.manifest import StoreError

    if format not in ("table", "csv", "json"):
        raise fail(f"unknown --format {format!r}; use table, csv or json")
    if limit < 0:
        raise fail(f"--limit {limit} must be 0 (all rows) or more")
    check_output_path(output, force)
    from .durations import parse_duration
    from ..query.views import resolve_variables

    try:
        variables = resolve_variables({"window_s": parse_duration(window)} if window else {}, thresholds)
    except ValueError as e:
        raise fail(str(e)) from None
    overrides = {k: v for k, v in (("timeout_s", timeout), ("memory_bytes", memory_limit)) if v is not None}
    try:
        limits = Limits.from_env(**overrides)
    except ValueError as e:
        raise fail(f"{e} (--timeout, --memory-limit)") from None
    from ..store.integrity import allowing_partial
    from ..query.timerange import TimeRange

    try:
        time_range = TimeRange.parse(since, until)
    except ValueError as e:
        raise fail(f"{e} (--since, --until)") from None
    from ..query import bounded

    # DuckDB writes the result's text (no polars or pyarrow in this process); a table on the
    # terminal shows `limit` rows and says how many there were
    fetch = fetcher(format, limit=limit if format == "table" and output is None else 0, safe_csv=not raw_csv)

    if not no_rollups:
        from ..query.views import named_views

        refresh_deferred_rollups(store_path(store), named_views(query))

    def answer():  # in a child process this one watches (pipeline/query/bounded.py)
        with allowing_partial(allow_partial):
            return run(store_path(store), query, variables=variables, limits=limits, time_range=time_range,
                       rollups=False if no_rollups else None, fetch=fetch)

    try:
        result = bounded.call(answer, timeout_s=limits.timeout_s, memory_bytes=limits.memory_bytes,
                              raise_timeout=limits.raise_timeout, raise_memory=limits.raise_memory)
    except (QueryError, StoreError, bounded.Exceeded) as e:
        raise fail(str(e)) from None
    except Exception as e:  # noqa: BLE001 - whatever else a query met: its one line, never a traceback
        raise fail(f"the query failed ({type(e).__name__}: {' '.join(str(e).split())[:300]})") from None
    if result.rows == 0 and time_range is not None:
        from ..query.connect import range_note

        typer.echo(f"servelens: note: {range_note(store_path(store), time_range)}", err=True)
    if output is not None:
        write_output_file(output, result.text, force)
        typer.echo(f"{result.rows} rows written to {output}", err=True)
    else:
        typer.echo(result.text, nl=not result.text.endswith("\n"))


_built = False


def build_app() -> typer.Typer:
    """The whole `servelens` app: the commands of this module and of every COMMAND_MODULES."""
    global _built
    if not _built:
        for name in COMMAND_MODULES:
            importlib.import_module(f"{__package__}.{name}").register(app)
        _built = True
    return app


def _cheap_exit() -> None:
    """At the interpreter's exit, every object frozen first: its last collection then walks
    none of the libraries' objects (a large share of a short command's exit), and the
    modules are still torn down as usual. Registered once however often `main` runs in a
    process (tests run it many times)."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


# The commands defined in this module: running one of them needs no other command registered
# (importing the other command modules and building their options costs tens of ms at every
# start, and `servelens sql` is run by scripts once per query).
OWN_COMMANDS = frozenset({"ingest", "sql"})


def main() -> None:
    _cheap_exit()
    try:
        if sys.argv[1:2] and sys.argv[1] in OWN_COMMANDS:
            app()
            return
        build_app()()
    except OSError as e:
        # a full disk, a read-only or immutable store in a writer that has no message of its
        # own for it (compact, prune, repair, a manifest that cannot be replaced): one line
        line = write_failure(e)
        if line is None:
            raise
        typer.echo(f"servelens: error: {line}", err=True)
        sys.exit(1)
