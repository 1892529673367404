"""`servelens dashboard`: start the Streamlit dashboard (dashboards/app.py) over a store.

The command checks its arguments, then replaces itself with `python -m streamlit run` (exec,
so that signals reach Streamlit directly), bound to localhost unless `--host` says otherwise,
with usage statistics off and no browser opened.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from .cli import StoreOpt, fail, store_path


def app_path() -> Path:
    """The installed dashboards/app.py."""
    from servelens import dashboards

    return Path(next(iter(dashboards.__path__))) / "app.py"


def streamlit_command(store: Path, port: int, host: str, thresholds: Path | None = None) -> list[str]:
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(app_path()),
        "--server.port", str(port),
        "--server.address", host,
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        # the installed app does not change while it runs: no file watcher, no rerun on save
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--client.toolbarMode", "viewer",
        "--", "--store", str(store),
    ]
    if thresholds is not None:
        cmd += ["--thresholds", str(thresholds)]
    return cmd


def _port_free(host: str, port: int) -> bool:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError:
            return False
    return True


def register(app: typer.Typer) -> None:
    @app.command()
    def dashboard(
        store: StoreOpt = None,  # type: ignore[assignment]
        port: Annotated[int, typer.Option("--port", "-p", help="Port to serve on.")] = 8501,
        host: Annotated[str, typer.Option(help="Address to bind (default: localhost only; 0.0.0.0 serves every interface).")] = "127.0.0.1",
        thresholds: Annotated[Path | None, typer.Option(help="A TOML file overriding signal thresholds (see sql/thresholds.toml).")] = None,
    ) -> None:
        """Open the dashboard: scaling verdict per instance, the evidence over time, ad-hoc SQL.

        \b
        Examples:
          servelens dashboard --store incident.store
          servelens dashboard --port 8600 --host 0.0.0.0
        """
        target = store_path(store).resolve()
        if not target.exists():
            raise fail(f"store {target} does not exist; ingest logs first (servelens ingest PATH --store {target})")
        if not 1 <= port <= 65535:
            raise fail(f"--port {port} is not a TCP port (1-65535)")
        if thresholds is not None:
            from .metrics import resolve_variables

            try:
                resolve_variables(thresholds=thresholds)
            except ValueError as e:
                raise fail(str(e)) from None
            thresholds = thresholds.resolve()
        try:
            socket.getaddrinfo(host, port)
        except socket.gaierror:
            raise fail(f"cannot resolve --host {host!r}; use an address such as 127.0.0.1 or 0.0.0.0") from None
        if not _port_free(host, port):
            raise fail(f"port {port} on {host} is in use; choose another with --port")
        typer.echo(f"servelens dashboard: http://{host}:{port}  (store {target}; Ctrl+C to stop)", err=True)
        env = dict(os.environ, SERVELENS_STORE=str(target))
        cmd = streamlit_command(target, port, host, thresholds)
        # Replace this process with Streamlit: signals (Ctrl+C, a supervisor's SIGTERM) then
        # reach the server itself and no orphan is left behind.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(cmd[0], cmd, env)
