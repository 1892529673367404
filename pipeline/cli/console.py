"""What `servelens ingest` shows a person: a progress bar over the bytes to read, one line
per file, and a one-screen summary at the end (to stderr, so stdout stays clean)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator

import typer

from ..ingest import FileResult, IngestSummary
from ..termsafe import shown as printable


@contextlib.contextmanager
def progress_bar(paths: list[Path], enabled: bool) -> Iterator[Callable[[int], None] | None]:
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    total = 0
    for p in paths:
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        elif p.exists():
            total += p.stat().st_size
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as progress:
        task = progress.add_task("ingesting", total=total or None)

        class Advance:
            """The bar's progress (called with bytes read) and its stage after the reading
            (`stage("refreshing rollups")`): a full bar that says nothing looks hung."""

            def __call__(self, n: int) -> None:
                progress.advance(task, n)

            def stage(self, what: str) -> None:
                progress.update(task, description=what, completed=total or None, refresh=True)

        yield Advance()


def print_file_line(f: FileResult) -> None:
    if f.status == "skipped":
        typer.echo(f"  skipped   {printable(f.source)}: {printable(f.reason)}", err=True)
        return
    if f.status == "unchanged":
        typer.echo(f"  unchanged {printable(f.source)} ({printable(f.reason)})", err=True)
        return
    how = f.engine
    if f.detected_score is not None:
        how = f"{f.engine}, detected" if f.engine != "unknown" else "engine not recognised: lines kept as unparsed; use --engine to force one"
    if f.decode:  # the wrappers undone first, outside in
        how = f"{' > '.join(f.decode)} > {how}"
    extra = []
    if f.counts.get("unparsed"):
        extra.append(f"{f.counts['unparsed']:,} unparsed")
    if f.invalid_utf8:
        extra.append("invalid UTF-8 replaced")
    if f.parse_failures:
        extra.append(f"{f.parse_failures:,} record(s) the {f.engine} parser failed on kept as unparsed "
                     "(attrs.parse_error; a servelens bug, please report it)")
    if f.nul_bytes:
        extra.append(f"{f.nul_bytes:,} NUL bytes dropped")
    if f.invalid:
        extra.append(f"{sum(f.invalid.values()):,} impossible values nulled")
    if f.reason:
        extra.append(f.reason)
    if f.held_bytes:
        extra.append(f"its last line ({f.held_bytes:,} bytes, no newline yet) left for the next ingest: the file was "
                     "written to in the last minute and may still be growing")
    tail = f"; {', '.join(extra)}" if extra else ""
    typer.echo(
        f"  ingested  {printable(f.source)} [{how}] instance={printable(f.instance)}: {f.lines:,} lines -> {f.events:,} events{tail}",
        err=True,
    )


def summary_dict(s: IngestSummary, store: Path) -> dict:
    """The ingest summary as plain data (`servelens ingest --json`)."""
    return {
        "store": str(__import__("servelens.pipeline.store.remote", fromlist=["store_url"]).store_url(store) or store),
        "files": [{"source": f.source, "engine": f.engine, "instance": f.instance, "status": f.status,
                   "lines": f.lines, "events": f.events, "reason": f.reason or None, "incomplete": f.failed,
                   "invalid_utf8": f.invalid_utf8, "held_bytes": f.held_bytes} for f in s.files],
        "ingested": sum(1 for f in s.files if f.status == "ingested"),
        "unchanged": sum(1 for f in s.files if f.status == "unchanged"),
        "skipped": len(s.skipped),
        "passed_over": [{"source": src, "reason": why} for src, why in s.passed_over],
        "incomplete": len(s.failed),
        "lines": s.lines,
        "events": s.events,
        "unparsed": s.unparsed,
        "events_by_kind": dict(s.events_by_kind.most_common()),
        "rollup": None if s.rollup is None else {"instances": s.rollup.instances, "rows": s.rollup.rows,
                                                  "whole": s.rollup.whole, "seconds": round(s.rollup.seconds, 3),
                                                  "cpu_s": round(s.rollup.cpu_s, 3), "views": s.rollup.views},
    }


def print_summary(s: IngestSummary, store: Path) -> None:
    n_ing = sum(1 for f in s.files if f.status == "ingested")
    n_same = sum(1 for f in s.files if f.status == "unchanged")
    n_skip = len(s.skipped)
    lines = [
        f"files: {len(s.files)} ({n_ing} ingested, {n_same} unchanged, {n_skip} skipped)",
        f"lines: {s.lines:,}    events: {s.events:,}    unparsed: {s.unparsed:,}",
    ]
    if s.events_by_kind:
        kinds = ", ".join(f"{k} {v:,}" for k, v in s.events_by_kind.most_common())
        lines.append(f"events by kind: {kinds}")
    if s.invalid:
        cols = ", ".join(f"{k} {v:,}" for k, v in s.invalid.most_common())
        lines.append(f"impossible values nulled (kept in attrs.invalid): {cols}")
    if s.rollup is not None:
        r = s.rollup
        views = ", ".join(f"{v} {n:,} rows" for v, n in (r.views or {"window_metrics": r.rows}).items())
        lines.append(f"rollups of {r.instances:,} instance(s) refreshed in {r.seconds:.1f}s ({views}; "
                     f"the views over them read these instead of every event)")
    for note in s.notes:
        lines.append(f"note: {note}")
    for f in s.skipped:
        lines.append(f"skipped {printable(f.source)}: {printable(f.reason)}")
    if s.passed_over:
        shown = ", ".join(printable(src) for src, _ in s.passed_over[:5])
        more = f" and {len(s.passed_over) - 5:,} more (--json lists them all)" if len(s.passed_over) > 5 else ""
        lines.append(f"passed over {len(s.passed_over):,} file(s) that are not logs: {shown}{more}")
    for f in s.failed:
        lines.append(f"incomplete {printable(f.source)}: {printable(f.reason)}")
    from ..store.remote import store_url

    store = store_url(store) or store  # s3://bucket/prefix, not pathlib's s3:/bucket/prefix
    lines.append(f"store: {store}   (try: servelens sql \"select event, count(*) from events group by all\" --store {store})")
    typer.echo("\n".join(lines), err=True)
