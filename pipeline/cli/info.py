"""`servelens info` (what a store holds) and `servelens prune` (drop old events)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

import typer

from .options import StoreOpt, fail, store_path


def store_info(root) -> dict[str, Any]:
    """Instances, engines, models, time range, events, parts and bytes of a store."""
    from ..query.connect import run
    from ..store.manifest import committed_parts, read_manifest

    manifest = read_manifest(root)
    parts = committed_parts(root)
    info: dict[str, Any] = {
        "store": str(root),
        "parts": len(parts),
        "bytes": sum(p.stat().st_size for p in parts),
        "files_ingested": len(manifest.get("files", {})),
        "committed_at": manifest.get("committed_at"),
    }
    per = run(root, "select engine, instance, count(*) as events, timezone('UTC', min(ts)) as first_ts, "
                    "timezone('UTC', max(ts)) as last_ts, "
                    "count(*) filter (where event = 'unparsed') as unparsed, "
                    "string_agg(distinct model, ', ' order by model) as models "
                    "from events group by all order by instance, engine", fetch=_rows)
    _utc(per)
    info["events"] = sum(r["events"] for r in per)
    info["unparsed"] = sum(r["unparsed"] for r in per)
    info["engines"] = sorted({r["engine"] for r in per})
    info["models"] = sorted({m for r in per if r["models"] for m in r["models"].split(", ")})
    info["first_ts"] = min((r["first_ts"] for r in per if r["first_ts"] is not None), default=None)
    info["last_ts"] = max((r["last_ts"] for r in per if r["last_ts"] is not None), default=None)
    info["instances"] = per
    info["samples"] = _samples_info(root, manifest)
    return info


def _rows(rel, _limits) -> list[dict[str, Any]]:
    """DuckDB's rows as they are (no DataFrame: `info` imports neither polars nor pyarrow)."""
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()] if rel is not None else []


def _utc(rows: list[dict[str, Any]]) -> None:
    """first_ts / last_ts, selected as UTC wall times whatever the session's zone, marked UTC."""
    for r in rows:
        for k in ("first_ts", "last_ts"):
            r[k] = r[k].replace(tzinfo=dt.timezone.utc) if r[k] is not None else None


def _samples_info(root, manifest: dict) -> dict[str, Any]:
    """The scraped samples: how many, in how many parts, over which times, per instance."""
    from ..query.connect import run
    from ..store.sample_parts import sample_entries

    entry = sample_entries(manifest)
    out: dict[str, Any] = {"samples": 0, "parts": len(entry["parts"]), "first_ts": None, "last_ts": None,
                           "instances": []}
    if not entry["parts"]:
        return out
    per = run(root, "select instance, engine, count(*) as samples, count(distinct (name, labels, le, quantile)) as series, "
                    "count(distinct ts) as scrapes, timezone('UTC', min(ts)) as first_ts, "
                    "timezone('UTC', max(ts)) as last_ts "
                    "from samples group by all order by instance, engine", fetch=_rows)
    _utc(per)
    out["samples"] = sum(r["samples"] for r in per)
    out["first_ts"] = min((r["first_ts"] for r in per if r["first_ts"] is not None), default=None)
    out["last_ts"] = max((r["last_ts"] for r in per if r["last_ts"] is not None), default=None)
    out["instances"] = per
    return out


def _ts(t: Any) -> str:
    return "-" if t is None else t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def register(app: typer.Typer) -> None:
    @app.command()
    def info(
        store: StoreOpt = None,  # type: ignore[assignment]
        as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of text.")] = False,
    ) -> None:
        """Say what a store holds: instances (engine, models, time range, events), the
        store's events, parts and bytes on disk, and the samples of scraped /metrics.

        \b
        Examples:
          servelens info
          servelens info --store incident.store --json
        """
        from ..query.connect import QueryError
        from ..store.manifest import StoreError

        root = store_path(store)
        if not (root / "manifest.json").exists():
            raise fail(f"store {root} does not exist or holds nothing yet; ingest logs first (servelens ingest PATH --store {root})")
        try:
            data = store_info(root)
        except (StoreError, QueryError) as e:
            raise fail(str(e)) from None
        if as_json:
            typer.echo(json.dumps(data, default=lambda o: o.isoformat() if hasattr(o, "isoformat") else str(o), indent=2))
            return
        from ..termsafe import shown as printable

        lines = [f"store: {data['store']}",
                 f"time range: {_ts(data['first_ts'])} -> {_ts(data['last_ts'])}",
                 f"events: {data['events']:,} ({data['unparsed']:,} unparsed) in {data['parts']:,} parts, "
                 f"{_size(data['bytes'])}; {data['files_ingested']:,} log files ingested",
                 f"engines: {', '.join(data['engines']) or '-'}",
                 f"models: {printable(', '.join(data['models'])) or '-'}",
                 f"instances: {len(data['instances'])}"]
        for r in data["instances"]:  # names from logs and file names: control characters as escapes
            lines.append(f"  {printable(r['instance'])} ({printable(r['engine'])}): {r['events']:,} events, {_ts(r['first_ts'])} -> "
                         f"{_ts(r['last_ts'])}" + (f", model {printable(r['models'])}" if r["models"] else ""))
        sm = data["samples"]
        if sm["parts"]:
            lines.append(f"samples (scraped /metrics): {sm['samples']:,} in {sm['parts']:,} parts, "
                         f"{_ts(sm['first_ts'])} -> {_ts(sm['last_ts'])}")
            for r in sm["instances"]:
                lines.append(f"  {printable(r['instance'])} ({printable(r['engine'])}): {r['samples']:,} samples of "
                             f"{r['series']:,} series in {r['scrapes']:,} scrapes, {_ts(r['first_ts'])} -> {_ts(r['last_ts'])}")
        typer.echo("\n".join(lines))

    @app.command()
    def prune(
        before: Annotated[str, typer.Option("--before", help="Drop events older than this: ISO 8601 (2026-05-01; UTC unless a zone is given), or a time ago (30d, 2w).", show_default=False)],
        store: StoreOpt = None,  # type: ignore[assignment]
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be dropped.")] = False,
    ) -> None:
        """Drop the events older than a date from the store, in one atomic commit (readers see
        the store before or after, never half of it). Events without a time are kept.

        \b
        Examples:
          servelens prune --before 2026-05-01
          servelens prune --before 2026-05-12T08:00Z --store incident.store --dry-run
        """
        from ..query.timerange import parse_time
        from ..store.prune import prune as run_prune
        from ..store.commit import Store
        from ..store.manifest import StoreError

        try:
            cutoff = parse_time(before)
        except ValueError as e:
            raise fail(str(e)) from None
        root = store_path(store)
        if not (root / "manifest.json").exists():
            raise fail(f"store {root} does not exist; nothing to prune")
        from ..outfile import is_store_dir

        if not is_store_dir(root):
            raise fail(f"{root} is not a servelens store (its manifest.json is not a store's); nothing was changed: give --store")
        try:
            with Store.open(root, purpose="prune") as st:
                r = run_prune(st, cutoff, dry_run=dry_run)
                if not dry_run:  # rows are gone: the rollups are rebuilt (pipeline/query/rollups.py)
                    from ..ingest import refresh_rollups

                    notes: list[str] = []
                    refresh_rollups(st, notes)
                    for note in notes:
                        typer.echo(f"warning: {note}", err=True)
        except StoreError as e:
            raise fail(str(e)) from None
        verb = "would drop" if dry_run else "dropped"
        typer.echo(f"{verb} {r.rows_removed:,} events older than {_ts(cutoff)}: {r.parts_removed} part(s) removed, "
                   f"{r.parts_rewritten} rewritten (keeping {r.rows_kept_in_rewritten:,} newer events)", err=True)
