"""`servelens top`: the live terminal view of a store (pipeline/serve/top.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .options import StoreOpt, ThresholdsOpt, WindowOpt, fail, store_path, thresholds_variables


def register(app: typer.Typer) -> None:
    @app.command()
    def top(
        store: StoreOpt = None,  # type: ignore[assignment]
        interval: Annotated[float, typer.Option(help="Seconds between redraws (the store is read again when it has committed).")] = 1.0,
        sort: Annotated[str, typer.Option(help="Initial sort key: w queue, r running, k KV, t throughput, f TTFT, e e2e, n name.")] = "w",
        window: WindowOpt = None,
        thresholds: ThresholdsOpt = None,
        once: Annotated[bool, typer.Option("--once", help="Print one frame and exit (what it does anyway without a terminal).")] = False,
    ) -> None:
        """Watch a store live in the terminal, like htop: per instance the queue, running
        requests, KV-cache usage, throughput, p50/p99 TTFT and end-to-end latency of its
        latest complete window, the age of its newest event and its active signals, redrawn
        every second and read again whenever the store commits (point it at a `servelens
        tail` store). Keys: w/r/k/t/f/e/n sort (again: reverse), / filter, Esc clears, q quits.
        Over SSH, no browser needed.

        \b
        Examples:
          servelens top --store live.store
          servelens top --store incident.store --sort k
          servelens top --once | head -20
        """
        from ..query.connect import QueryError
        from ..serve.snapshot import store_key
        from ..store.manifest import StoreError
        from ..serve.top import SORT_KEYS, View, frame, read, run

        target = store_path(store)
        if sort not in SORT_KEYS:
            raise fail(f"unknown --sort {sort!r}; use one of {', '.join(SORT_KEYS)}")
        if interval <= 0:
            raise fail("--interval must be more than 0 seconds")
        variables = thresholds_variables(window, thresholds)
        try:
            # read once before the screen is taken, so that a wrong --store is one plain line
            key = store_key(target)
            snap = read(target, variables, 900.0)
        except (QueryError, StoreError) as e:
            raise fail(str(e)) from None
        if once or not (sys.stdin.isatty() and sys.stdout.isatty()):
            view = View(sort=sort, descending=SORT_KEYS[sort][2])
            typer.echo(frame(target, snap, view, 200, color=False), nl=False)
            return
        try:
            run(target, variables, interval_s=interval, initial_sort=sort, first=(key, snap))
        except KeyboardInterrupt:
            pass
