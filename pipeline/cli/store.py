"""`servelens check` (verify the store in depth) and `servelens repair` (drop what is lost,
roll back the offsets it held, so re-ingesting restores it). See docs/failure-modes.md."""

from __future__ import annotations

from typing import Annotated

import typer

from .options import StoreOpt, fail, store_path


def register(app: typer.Typer) -> None:
    @app.command()
    def check(
        store: StoreOpt = None,  # type: ignore[assignment]
        deep: Annotated[bool, typer.Option("--deep", help="Also decode every page of every part (reads all the data).")] = False,
    ) -> None:
        """Verify the store: every part the manifest lists exists, its footer opens, its
        columns have the schema's types and its row count is the one recorded when it was
        committed. Exit 1 when something is wrong (then run servelens repair).

        \b
        Examples:
          servelens check
          servelens check --store live.store --deep
        """
        from ..store.manifest import StoreError
        from ..store.repair import check as run_check

        target = store_path(store)
        try:
            result = run_check(target, deep=deep)
        except StoreError as e:
            raise fail(str(e)) from None
        for rel, what in sorted(result.damaged.items()):
            typer.echo(f"damaged  {rel}: {what}")
        for rel in result.unreferenced:
            typer.echo(f"unreferenced  {rel} (no manifest lists it; repair deletes it)")
        if result.unrecorded:
            typer.echo(f"note: {len(result.unrecorded)} part(s) predate the record of what they hold; "
                       "if one is lost, re-ingesting cannot restore it")
        intact = result.parts - len(result.damaged)
        typer.echo(f"{target}: {intact} of {result.parts} parts intact, {result.rows:,} rows")
        if not result.ok:
            raise fail(f"{len(result.damaged)} part(s) missing or damaged; run servelens repair --store {target}")

    @app.command()
    def repair(
        store: StoreOpt = None,  # type: ignore[assignment]
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be done; change nothing.")] = False,
        deep: Annotated[bool, typer.Option("--deep", help="Judge parts by decoding every page, not only their footers.")] = False,
    ) -> None:
        """Repair the store: drop missing or damaged parts and roll back the file offsets
        they held (so re-ingesting the same logs restores exactly the lost events), delete
        files no manifest references. A store whose manifest is missing or unreadable is
        started again empty, its parts kept aside in lost+found/: re-ingest the logs.

        \b
        Examples:
          servelens repair && servelens ingest /var/log/vllm/
          servelens repair --store live.store --dry-run
        """
        from ..store.manifest import StoreError
        from ..query import rollups
        from ..store.repair import repair as run_repair

        target = store_path(store)
        try:
            result = run_repair(target, dry_run=dry_run, deep=deep, rebuild=rollups.rebuild)
        except StoreError as e:
            raise fail(str(e)) from None
        will = "would " if dry_run else ""
        if result.reset is not None:
            typer.echo(f"{target}: the manifest is missing or unreadable; {will}set the parts aside in "
                       f"{result.reset} and {will}start the store empty: re-ingest every log to rebuild it")
            return
        for rel in result.dropped:
            typer.echo(f"{will}drop {rel} (missing or damaged)")
        for rel in result.dropped_overlap:
            typer.echo(f"{will}drop {rel} (intact, but its events are read again)")
        for src, (offset, lines) in sorted(result.rolled_back.items()):
            where = "its start" if offset == 0 else f"line {lines + 1} (byte {offset:,})"
            typer.echo(f"{will}roll back {src} to {where}")
        for rel in result.deleted_unreferenced:
            typer.echo(f"{will}delete {rel} (no manifest lists it)")
        if result.retimed:
            typer.echo(f"recorded the modification times of {result.retimed:,} intact part(s) that had other times "
                       "than their commits (copied without them): reads no longer read them whole to check them")
        for rel in result.unrestorable:
            typer.echo(f"warning: {rel} predates the record of what it holds: its events cannot be restored by re-ingesting")
        for rel in result.not_deleted:
            typer.echo(f"warning: could not delete {rel} (check the directory's permissions); "
                       "no manifest lists it, so servelens never reads it; the next repair deletes it")
        if result.rollup is not None:
            r = result.rollup
            views = ", ".join(f"{v} {n:,} rows" for v, n in (r.views or {"window_metrics": r.rows}).items())
            typer.echo(f"{'rebuilt' if r.whole else 'refreshed'} the rollups ({views}; {r.seconds:.1f}s)")
        if result.rollup_error:
            typer.echo(f"warning: the rollup could not be rebuilt ({result.rollup_error}); queries compute it from the events")
        if not (result.dropped or result.dropped_overlap or result.deleted_unreferenced):
            typer.echo(f"{target}: nothing to repair")
        elif result.rolled_back and not dry_run:
            typer.echo("now re-ingest the same logs (servelens ingest ... or a running servelens tail) to restore the lost events")
