"""What several commands share: option types declared once, the one-line error, output files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


# Options shared by every command that reads or writes the store.
StoreOpt = Annotated[
    Path,
    typer.Option(
        "--store",
        "-s",
        help="Store directory (default: $SERVELENS_STORE or ./servelens-store).",
        show_default=False,
    ),
]


# What --since / --until / --before accept (pipeline/timerange.parse_time reads it)
TIME_FORMS = ("ISO 8601 (2026-05-12T08:00Z; UTC unless a zone is given), a time of day today in UTC "
              "(08:00), a time ago (30m, 2h, 7d) or now / today / yesterday")


SinceOpt = Annotated[Optional[str], typer.Option(
    "--since", help=f"Only events from this time on, and the rows that fall after it: {TIME_FORMS}; the scans read only the range.",
    show_default=False)]


UntilOpt = Annotated[Optional[str], typer.Option(
    "--until", help="Only events before this time (exclusive); the same forms as --since.", show_default=False)]


ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite the --output file if it exists.")]


def check_output_path(output: Optional[Path], force: bool) -> None:
    """Refuse an --output inside a store or over an existing file (without --force), before
    any work is done."""
    if output is None:
        return
    from ..outfile import OutputRefused, check_output

    try:
        check_output(output, force=force)
    except OutputRefused as e:
        raise fail(str(e)) from None


def write_output_file(output: Path, data: str | bytes, force: bool) -> None:
    from ..outfile import OutputRefused, write_output

    try:
        write_output(output, data, force=force)
    except OutputRefused as e:
        raise fail(str(e)) from None
    except OSError as e:
        raise fail(f"cannot write {output}: {e.strerror}") from None


def fail(message: str, code: int = 1) -> "typer.Exit":
    """Print one line saying what is wrong and what to do; exit non-zero."""
    typer.echo(f"servelens: error: {message}", err=True)
    return typer.Exit(code)


def store_path(store: Optional[Path]) -> Path:
    from ..store.manifest import default_store

    return store if store is not None else default_store()


ThresholdsOpt = Annotated[
    Optional[str],
    typer.Option(help="TOML file overriding signal thresholds, or preset:NAME (vllm-production-stack, kserve, llm-d, aibrix).")]


WindowOpt = Annotated[Optional[str], typer.Option(help="Window of the gauges and percentiles, e.g. 15s, 30s, 1m (default 1m).")]


def thresholds_variables(window: str | None, thresholds: str | None) -> dict:
    from .durations import parse_duration
    from ..query.views import resolve_variables

    try:
        return resolve_variables({"window_s": parse_duration(window)} if window else {}, thresholds)
    except ValueError as e:
        raise fail(str(e)) from None


def duration_option(text: str | None, option: str) -> float | None:
    """The seconds of a duration option (None when not given), or the one-line error naming it."""
    if text is None:
        return None
    from .durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as e:
        raise fail(f"{option}: {e}") from None


def refresh_deferred_rollups(target: Path, views: set[str] | None = None) -> None:
    """The rollup refresh an ingest left to the first query (--defer-rollups), or that the
    views of another servelens call for (stored.older_sql), before a command reads a stored
    view: once, with a one-line note of what it cost. The look is one
    manifest read; a failure is a note, the query then reads the raw views. Not when the
    rollups are turned off ($SERVELENS_NO_ROLLUPS)."""
    import os

    from ..store.manifest import ROLLUPS_DEFERRED, StoreError, read_manifest
    from ..store import remote

    if os.environ.get("SERVELENS_NO_ROLLUPS", "") not in ("", "0"):
        return
    from ..query.stored import deferred, reads_a_rollup

    if not reads_a_rollup(views):
        return  # decided before the manifest read and the refresh's imports: a query of the events pays nothing
    try:
        if remote.store_url(target) is not None or remote.is_fleet(target):
            return
        manifest = read_manifest(target)
        if not deferred(target, manifest, views):
            return
    except (StoreError, OSError, ValueError):
        return
    why = "as the last ingest deferred them" if manifest.get(ROLLUPS_DEFERRED) else "as another servelens's views had computed them"
    from ..query import rollups

    try:
        r = rollups.refresh_deferred(target, views)
    except Exception as e:  # noqa: BLE001 - an optimisation: the query reads the raw views
        typer.echo(f"servelens: note: the deferred rollup refresh failed ({' '.join(str(e).split())[:200]}); "
                   "this query computes the views from the events", err=True)
        return
    if r is not None:
        typer.echo(f"servelens: note: rollups refreshed now, {why}: {r.instances:,} "
                   f"instance(s) in {r.seconds:.1f}s ({r.cpu_s:.1f} CPU-s), once; later queries read them", err=True)
