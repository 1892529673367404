"""`servelens dashboard`: start the Streamlit dashboard (dashboards/app.py) over a store.

The command checks its arguments, then replaces itself with `streamlit run` (exec, so that
signals reach Streamlit directly; through dashboards/serve.py, which first starts a thread
building the store's connection so that the first visitor does not wait for it), bound to localhost unless `--host` says otherwise,
with usage statistics off and no browser opened.

Serving beyond this machine is an explicit decision: an address other than loopback needs
`--allow-remote`, and then an access token (`--token` or $SERVELENS_DASHBOARD_TOKEN, asked for
on the page) or the SQL page switched off (`--no-sql`). The token, the SQL switch and the
visitors' query limits reach the app in its environment (see dashboards/access.py), never on
its command line. docs/security.md has the reverse-proxy setup.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from .options import SinceOpt, StoreOpt, UntilOpt, fail, refresh_deferred_rollups, store_path


def app_path() -> Path:
    """The installed dashboards/entry/app.py, which runs dashboards/app.py (see there why)."""
    from servelens import dashboards

    return Path(next(iter(dashboards.__path__))) / "entry" / "app.py"


def streamlit_command(store: Path, port: int, host: str, thresholds: Path | None = None,
                      since: str | None = None, until: str | None = None) -> list[str]:
    cmd = [
        # Streamlit's own command line, behind a launcher that warms the store's connection
        # while the server starts (dashboards/serve.py)
        sys.executable, "-m", "servelens.dashboards.serve", "run", str(app_path()),
        "--server.port", str(port),
        "--server.address", host,
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        # the installed app does not change while it runs: no file watcher, no rerun on save
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--client.toolbarMode", "viewer",
        # no page takes a file: refuse every upload (Streamlit keeps an upload in memory, and
        # any session may send one, before or without the token)
        "--server.maxUploadSize", "0",
        "--", "--store", str(store),
    ]
    if thresholds is not None:
        cmd += ["--thresholds", str(thresholds)]
    for name, value in (("--since", since), ("--until", until)):
        if value is not None:
            cmd += [name, value]
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


MIN_TOKEN_LENGTH = 16
TOKEN_ENV = "SERVELENS_DASHBOARD_TOKEN"


def is_loopback(host: str) -> bool:
    """True when every address `host` names is this machine's loopback (127.0.0.0/8, ::1)."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    addrs = {info[4][0].split("%")[0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a).is_loopback for a in addrs)


def app_environment(
    target: Path, token: str | None, sql: bool, query_timeout: str | None, query_memory: str | None
) -> dict[str, str]:
    """The Streamlit process's environment: the store, and the access settings dashboards/
    access.py and the SQL page read."""
    env = dict(os.environ, SERVELENS_STORE=str(target))
    env.pop(TOKEN_ENV, None)
    if token:
        env[TOKEN_ENV] = token
    env["SERVELENS_DASHBOARD_SQL"] = "on" if sql else "off"
    if query_timeout is not None:
        env["SERVELENS_DASHBOARD_QUERY_TIMEOUT"] = query_timeout
    if query_memory is not None:
        env["SERVELENS_DASHBOARD_QUERY_MEMORY"] = query_memory
    return env


def register(app: typer.Typer) -> None:
    @app.command()
    def dashboard(
        store: StoreOpt = None,  # type: ignore[assignment]
        port: Annotated[int, typer.Option("--port", "-p", help="Port to serve on.")] = 8501,
        host: Annotated[str, typer.Option(help="Address to bind (default: localhost only). Any other address needs --allow-remote.")] = "127.0.0.1",
        thresholds: Annotated[Path | None, typer.Option(help="A TOML file overriding signal thresholds (see sql/thresholds.toml).")] = None,
        allow_remote: Annotated[bool, typer.Option("--allow-remote", help="Allow --host to be an address other machines reach (needs --token or --no-sql).")] = False,
        token: Annotated[str | None, typer.Option(help=f"Access token visitors type once per session (at least {MIN_TOKEN_LENGTH} characters; default: ${TOKEN_ENV}).", show_default=False)] = None,
        no_sql: Annotated[bool, typer.Option("--no-sql", help="Switch the SQL page off.")] = False,
        query_timeout: Annotated[str | None, typer.Option(help="Seconds a visitor's SQL query may run (default: $SERVELENS_DASHBOARD_QUERY_TIMEOUT or 15).", show_default=False)] = None,
        query_memory: Annotated[str | None, typer.Option(help="Memory a visitor's SQL query may use, e.g. 1GB (default: $SERVELENS_DASHBOARD_QUERY_MEMORY or 2GB).", show_default=False)] = None,
        since: SinceOpt = None,
        until: UntilOpt = None,
    ) -> None:
        """Open the dashboard: scaling verdict per instance, the evidence over time, ad-hoc SQL.

        It serves this machine only unless told otherwise; see docs/security.md before sharing
        it (a reverse proxy with its own login is the recommended way).

        \b
        Examples:
          servelens dashboard --store incident.store
          servelens dashboard --port 8600 --query-timeout 30
          servelens dashboard --since 2026-05-12T08:00Z --until 2026-05-12T09:00Z
          SERVELENS_DASHBOARD_TOKEN=$(openssl rand -hex 16) servelens dashboard --host 0.0.0.0 --allow-remote
          servelens dashboard --host 0.0.0.0 --allow-remote --no-sql
        """
        target = store_path(store).resolve()
        if not target.exists():
            raise fail(f"store {target} does not exist; ingest logs first (servelens ingest PATH --store {target})")
        refresh_deferred_rollups(target)  # once at the start: no page of the dashboard pays for it
        if not 1 <= port <= 65535:
            raise fail(f"--port {port} is not a TCP port (1-65535)")
        from ..query.timerange import TimeRange

        try:
            rng = TimeRange.parse(since, until)
        except ValueError as e:
            raise fail(f"{e} (--since, --until)") from None
        if thresholds is not None:
            from ..query.views import resolve_variables

            try:
                resolve_variables(thresholds=thresholds)
            except ValueError as e:
                raise fail(str(e)) from None
            thresholds = thresholds.resolve()
        try:
            socket.getaddrinfo(host, port)
        except socket.gaierror:
            raise fail(f"cannot resolve --host {host!r}; use an address such as 127.0.0.1 or 0.0.0.0") from None
        token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        if token is not None and len(token) < MIN_TOKEN_LENGTH:
            raise fail(f"the access token is too short ({len(token)} characters); use at least {MIN_TOKEN_LENGTH}, e.g. $(openssl rand -hex 16)")
        if not is_loopback(host):
            if not allow_remote:
                raise fail(
                    f"--host {host} serves other machines: add --allow-remote, with an access token "
                    f"(--token or ${TOKEN_ENV}) or --no-sql; see docs/security.md"
                )
            if token is None and not no_sql:
                raise fail(
                    f"--allow-remote needs an access token (--token or ${TOKEN_ENV}) or --no-sql; "
                    "see docs/security.md"
                )
        from ..query.sandbox import parse_size, parse_timeout

        try:
            if query_timeout is not None:
                parse_timeout(query_timeout)
            if query_memory is not None:
                parse_size(query_memory)
        except ValueError as e:
            raise fail(f"{e} (--query-timeout, --query-memory)") from None
        if not _port_free(host, port):
            raise fail(f"port {port} on {host} is in use; choose another with --port")
        guard = ("access token required" if token else "no access token") + (", SQL page off" if no_sql else "")
        typer.echo(f"servelens dashboard: http://{host}:{port}  (store {target}; {guard}; Ctrl+C to stop)", err=True)
        env = app_environment(target, token, not no_sql, query_timeout, query_memory)
        cmd = streamlit_command(target, port, host, thresholds,
                                rng.since.isoformat() if rng and rng.since else None,
                                rng.until.isoformat() if rng and rng.until else None)
        # Replace this process with Streamlit: signals (Ctrl+C, a supervisor's SIGTERM) then
        # reach the server itself and no orphan is left behind.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(cmd[0], cmd, env)
