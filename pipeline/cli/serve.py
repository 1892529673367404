"""`servelens serve` (the Prometheus/OpenMetrics exporter) and `servelens export` (the same
series with timestamps, for backfilling Prometheus)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import (
    ForceOpt, SinceOpt, StoreOpt, ThresholdsOpt, UntilOpt, WindowOpt, check_output_path, fail,
    refresh_deferred_rollups, store_path, thresholds_variables, write_output_file,
)


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        store: StoreOpt = None,  # type: ignore[assignment]
        port: Annotated[int, typer.Option(help="TCP port to listen on.")] = 9464,
        host: Annotated[str, typer.Option(help="Address to bind (127.0.0.1: this machine only; 0.0.0.0: every interface).")] = "127.0.0.1",
        window: WindowOpt = None,
        thresholds: ThresholdsOpt = None,
        refresh: Annotated[float, typer.Option(help="Seconds between re-evaluations of the views when no commit arrives (each commit triggers one).")] = 5.0,
    ) -> None:
        """Serve the store's current metrics and scaling signals over HTTP, for Prometheus,
        autoscalers (KEDA, HPA via prometheus-adapter) and Grafana. GET /metrics (Prometheus
        text or OpenMetrics), GET /api/signals (JSON, for KEDA's metrics-api scaler),
        GET /healthz. Values come from a snapshot refreshed after each commit; run it beside
        `servelens tail` (or use `servelens tail --serve-port`). See docs/prometheus.md.

        \b
        Examples:
          servelens serve --store live.store --port 9464
          servelens serve --store live.store --port 9464 --host 0.0.0.0 --thresholds preset:vllm-production-stack
          curl -s localhost:9464/api/signals | jq .totals
        """
        from ..serve.snapshot import ServeError
        from ..serve.http import serve as run_serve

        target = store_path(store)
        if not target.exists():
            raise fail(f"store {target} does not exist; ingest or tail logs first (servelens tail PATH --store {target})")
        refresh_deferred_rollups(target)  # once at the start: no query of the server pays for it
        if not 0 <= port <= 65535:
            raise fail(f"--port {port} is not a TCP port (0-65535)")
        if refresh <= 0:
            raise fail("--refresh must be more than 0 seconds")
        variables = thresholds_variables(window, thresholds)
        try:
            run_serve(target, host=host, port=port, variables=variables, refresh_s=refresh,
                      on_ready=lambda url: typer.echo(f"servelens: serving {target} at {url}/metrics (Ctrl-C stops)", err=True))
        except ServeError as e:
            raise fail(str(e)) from None
        typer.echo("servelens: stopped", err=True)

    @app.command()
    def export(
        store: StoreOpt = None,  # type: ignore[assignment]
        format: Annotated[str, typer.Option("--format", "-f", help="openmetrics (the only format: what promtool backfills).")] = "openmetrics",
        output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of stdout (never inside a store; an existing file only with --force).")] = None,
        force: ForceOpt = False,
        since: SinceOpt = None,
        until: UntilOpt = None,
        window: WindowOpt = None,
        thresholds: ThresholdsOpt = None,
    ) -> None:
        """Write the series `servelens serve` publishes, with timestamps, over the store's
        range (one sample per window, stamped with the window's end), as OpenMetrics. Turn it
        into Prometheus blocks with `promtool tsdb create-blocks-from openmetrics FILE DIR`
        (Prometheus' retention must reach back to the incident; see docs/prometheus.md).

        \b
        Examples:
          servelens export --store incident.store -o incident.om
          servelens export --since 2026-05-12T08:00Z --until 2026-05-12T09:00Z -o incident.om
          promtool tsdb create-blocks-from openmetrics incident.om /var/lib/prometheus/metrics2
        """
        from ..query.timerange import parse_time
        from ..query.connect import QueryError
        from ..serve.export import export_openmetrics
        from ..store.manifest import StoreError

        if format != "openmetrics":
            raise fail(f"unknown --format {format!r}; use openmetrics")
        try:
            t0 = parse_time(since) if since else None
            t1 = parse_time(until) if until else None
        except ValueError as e:
            raise fail(str(e)) from None
        if t0 and t1 and t1 <= t0:
            raise fail("--until must be after --since")
        check_output_path(output, force)
        variables = thresholds_variables(window, thresholds)
        target = store_path(store)
        refresh_deferred_rollups(target)
        try:
            if output is None:
                n = export_openmetrics(target, sys.stdout.buffer, variables=variables, since=t0, until=t1)
                sys.stdout.buffer.flush()
            else:
                buf = io.BytesIO()  # the file is written only once the export succeeded
                n = export_openmetrics(target, buf, variables=variables, since=t0, until=t1)
        except (QueryError, StoreError) as e:
            raise fail(str(e)) from None
        except OSError as e:
            raise fail(f"cannot write to standard output: {e.strerror}") from None
        if output is not None:
            write_output_file(output, buf.getvalue(), force)
            typer.echo(f"{n:,} samples written to {output}", err=True)
