"""`servelens views`: the metric views of sql/ as SQL for another engine (Spark, Trino) or DuckDB."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .options import fail


def register(app: typer.Typer) -> None:
    @app.command()
    def views(
        dialect: Annotated[str, typer.Option(metavar="NAME", help="SQL dialect: spark, trino or duckdb (the views as written).")] = "duckdb",
        view: Annotated[Optional[list[str]], typer.Option("--view", metavar="NAME", help="Only this view and the views it reads (repeatable).", show_default=False)] = None,
        window: Annotated[Optional[str], typer.Option(help="Window of the per-window views, e.g. 30s, 1m, 5m (default 1m).")] = None,
        thresholds: Annotated[Optional[str], typer.Option(help="TOML file (or preset:NAME) overriding signal thresholds (see sql/thresholds.toml).")] = None,
        list_only: Annotated[bool, typer.Option("--list", help="Print the view names in load order, not their SQL.")] = False,
    ) -> None:
        """Print the metric views of sql/ as SQL for another engine, translated with sqlglot.

        The script creates each view after the views it reads, over a table or view named
        `events` with the store's columns. Parameters (window, thresholds) are bound as
        literals. Functions with no equivalent are replaced by hand (exact interpolating
        percentiles, ASOF joins, epoch arithmetic in microseconds, zipped unnests): see
        docs/spark.md.

        \b
        Examples:
          servelens views --dialect spark > views-spark.sql
          servelens views --dialect spark --view scaling_signals --window 5m
          servelens views --dialect trino --view latency_percentiles
          servelens views --list
        """
        from .durations import parse_duration
        from ..query.dialects import DialectError, views as translate

        try:
            extra = {"window_s": parse_duration(window)} if window else {}
            found = translate(dialect.lower(), list(view or []) or None, extra, thresholds, names_only=list_only)
        except (DialectError, ValueError) as e:
            raise fail(str(e)) from None
        if list_only:
            typer.echo("\n".join(name for name, _ in found))
            return
        typer.echo("\n".join(sql for _, sql in found), nl=False)
