"""`servelens report`: the post-mortem of an incident window, as Markdown, HTML or JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

# module level so that the string annotations (from __future__) resolve when typer
# inspects the command
from .options import (
    ForceOpt,
    SinceOpt,
    StoreOpt,
    UntilOpt,
    check_output_path,
    fail,
    refresh_deferred_rollups,
    store_path,
    write_output_file,
)
from ..query.timerange import parse_time


def register(app: typer.Typer) -> None:
    @app.command()
    def report(
        store: StoreOpt = None,  # type: ignore[assignment]
        since: SinceOpt = None,
        until: UntilOpt = None,
        instance: Annotated[Optional[str], typer.Option(help="Only this instance.")] = None,
        format: Annotated[str, typer.Option("--format", "-f", help="md, html or json.")] = "md",
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report to this file instead of stdout (never inside a store; an existing file only with --force).")] = None,
        force: ForceOpt = False,
        thresholds: Annotated[Optional[Path], typer.Option(help="TOML file overriding signal thresholds (see sql/thresholds.toml).")] = None,
        window: Annotated[Optional[str], typer.Option(help="Window of the per-window metrics and signals, e.g. 30s, 1m, 5m (default 1m).")] = None,
        top: Annotated[int, typer.Option(help="How many of the slowest requests to list per instance.")] = 5,
    ) -> None:
        """Write a post-mortem of an incident window: per instance, the timeline of signals
        and the first error, the peaks (queue, KV cache, p99 latency) with when they
        happened, the slowest requests, what the logs could and could not tell, and the
        recommendations.

        \b
        Examples:
          servelens report --since 2026-05-12T08:00Z --until 2026-05-12T09:00Z
          servelens report --instance gpu-3 --format html -o incident.html
          servelens report --format json --thresholds my-slo.toml
        """
        from .durations import parse_duration
        from ..query.views import resolve_variables
        from ..report.build import build_report, render
        from ..store.manifest import StoreError

        if format not in ("md", "html", "json"):
            raise fail(f"unknown --format {format!r}; use md, html or json")
        check_output_path(output, force)
        try:
            t0 = parse_time(since) if since else None
            t1 = parse_time(until) if until else None
            extra = {"window_s": parse_duration(window)} if window else {}
            variables = resolve_variables(extra, thresholds)
        except ValueError as e:
            raise fail(str(e)) from None
        if t0 and t1 and t1 <= t0:
            raise fail("--until must be after --since")
        try:
            from ..query.connect import connect

            from ..query.timerange import TimeRange

            refresh_deferred_rollups(store_path(store))
            # the scans read only the range (widened by a margin for requests cut by its edges)
            con = connect(store_path(store), variables, time_range=TimeRange(t0, t1) if t0 or t1 else None, shared=True)
        except StoreError as e:
            raise fail(str(e)) from None
        try:
            if instance is not None:
                _instance_in_range(con, instance)
            data = build_report(con, since=t0, until=t1, instance=instance, top_n=top,
                                charts=format == "html", thresholds=variables)
        finally:
            con.close()
        if instance is not None and not data["instances"]:
            raise fail(f"no events of instance {instance!r} in this range")
        if (t0 or t1) and not data["instances"]:
            from ..query.connect import range_note
            from ..query.timerange import TimeRange

            data["range_note"] = range_note(store_path(store), TimeRange(t0, t1))
            typer.echo(f"servelens: note: {data['range_note']}", err=True)
        text = render(data, format)
        if output is not None:
            write_output_file(output, text, force)
            typer.echo(f"report on {len(data['instances'])} instance(s) written to {output}", err=True)
        else:
            typer.echo(text, nl=not text.endswith("\n"))


def _instance_in_range(con, instance: str) -> None:
    """Fail before building anything (every preset's calibration) when no event of the range
    names `instance`, saying which instances it holds."""
    from ..termsafe import shown

    names = [r[0] for r in con.execute(
        "select distinct instance from events where instance is not null order by 1").fetchall()]
    if instance in names:
        return
    # (the names come from file names and log labels: written escaped, never as controls)
    listed = ", ".join(shown(n) for n in names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    raise fail(f"no events of instance {instance!r} in this range"
               + (f"; its instances: {listed}" if names else ""))
