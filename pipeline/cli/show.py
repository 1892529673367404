"""`servelens show`: one request's story, or the lines around a time (pipeline/report/story.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import StoreOpt, TIME_FORMS, fail, store_path


def register(app: typer.Typer) -> None:
    @app.command()
    def show(
        request_id: Annotated[Optional[str], typer.Argument(help="The request id as the engine logs it (a unique part of it is enough).", show_default=False)] = None,
        store: StoreOpt = None,  # type: ignore[assignment]
        around: Annotated[Optional[str], typer.Option("--around", help=f"Without a request id: every line within --span of this time; with one: only its events near it (an id a restarted server used again). {TIME_FORMS}.", show_default=False)] = None,
        span: Annotated[Optional[str], typer.Option("--span", help="How far around --around: 5s by default without a request id, 10m with one.", show_default=False)] = None,
        instance: Annotated[Optional[str], typer.Option(help="Only this instance's lines.")] = None,
        logs: Annotated[Optional[list[Path]], typer.Option("--logs", help="A directory (or file) where moved or rotated logs are now: searched by fingerprint. Repeatable.", show_default=False)] = None,
        format: Annotated[str, typer.Option("--format", "-f", help="text or json.")] = "text",
        full: Annotated[bool, typer.Option("--full", help="Show long lines whole (a request's prompt), not cut at 600 characters.")] = False,
    ) -> None:
        """Show one request's story: every line that names it, in time order, across files and
        engines (the benchmark client's row included), read back from the log files by their
        stored offsets, then the queue, batch and KV state at its arrival and its finish with
        the stats lines around them. A file moved or rotated since the ingest is found by its
        fingerprint (beside it, or under --logs); without it, a store ingested with
        --keep-lines shows the text it kept, and any other the parsed columns.

        \b
        Examples:
          servelens show chatcmpl-7d1b8aba0ff24ad5cdcd2acc457bfd7b --store incident.store
          servelens show 7d1b8aba --format json
          servelens show --around 2026-05-12T08:03:10Z --span 3s --instance vllm-b
          servelens show cmpl-42 --logs /var/log/vllm/rotated/
        """
        from .durations import parse_duration
        from ..query.connect import QueryError
        from ..report.story import ShowError, story, to_json, to_text
        from ..store.manifest import StoreError
        from ..query.timerange import parse_time

        if format not in ("text", "json"):
            raise fail(f"unknown --format {format!r}; use text or json")
        try:
            t = parse_time(around) if around else None
            span_s = parse_duration(span) if span else None
        except ValueError as e:
            raise fail(f"{e} (--around, --span)") from None
        try:
            s = story(store_path(store), request_id, t, span_s, instance, logs or (), full)
        except (ShowError, StoreError, QueryError) as e:
            raise fail(str(e)) from None
        typer.echo(to_json(s) if format == "json" else to_text(s), nl=False)
