"""The exporter's HTTP side: `GET /metrics`, `/api/signals`, `/healthz` over an `Exporter`
(serve.py), for `servelens serve` and `servelens tail --serve-port`. Each request only reads
the exporter's current snapshot."""

from __future__ import annotations

import json
import signal
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import parse_qs, urlsplit

from .snapshot import DEFAULT_REFRESH_S, Exporter, ServeError, iso_utc


# A connection gets this long in all to send its request and read the answer: the per-read
# timeout alone lets a client that sends one byte every few seconds hold a thread forever.
REQUEST_DEADLINE_S = 15.0
# Connections the kernel queues while every thread is busy (the standard library's 5 made a
# crowd of scrapers time out); the kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG = 1024
# What a client that hangs up or stalls mid-request raises: not the exporter's fault, not
# worth a traceback on stderr.
_CLIENT_GONE = (ConnectionError, TimeoutError, socket.timeout, OSError)


class _Server(ThreadingHTTPServer):
    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        err = sys.exc_info()[1]
        if isinstance(err, _CLIENT_GONE):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    exporter: Exporter  # set on the subclass made by make_server
    timeout = 10  # s: a client that sends nothing does not hold a thread
    server_version = "servelens"

    def setup(self) -> None:
        super().setup()
        # the whole exchange within REQUEST_DEADLINE_S: past it the socket is shut, which
        # ends any read or write the handler thread is blocked in
        self._deadline = threading.Timer(REQUEST_DEADLINE_S, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def finish(self) -> None:
        self._deadline.cancel()
        try:
            super().finish()
        except _CLIENT_GONE:
            pass

    def handle(self) -> None:
        try:
            super().handle()
        except _CLIENT_GONE:
            pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        if url.path == "/metrics":
            body, ctype = self.exporter.metrics(self.headers.get("Accept"))
            self._send(200, body, ctype)
        elif url.path == "/api/signals":
            query = parse_qs(url.query)
            server = (query.get("server") or [None])[0]
            try:
                max_age = float(query["max_age"][0]) if "max_age" in query else None
            except ValueError:
                self._send(400, json.dumps({"error": "max_age must be a number of seconds"}).encode(), "application/json")
                return
            data = self.exporter.signals(server, max_age)
            if server is not None and not data["servers"]:
                self._send(404, json.dumps({"error": f"no server {server!r} in the store"}).encode(), "application/json")
            else:
                self._send(200, json.dumps(data, default=str).encode(), "application/json")
        elif url.path == "/healthz":
            # ready only once the first snapshot is built: before it /metrics has no engine
            # series, and a readiness probe or an autoscaler must not read that as "idle"
            alive = self.exporter.alive()
            snap = self.exporter.snapshot
            status = "refresher stopped" if not alive else "starting: no snapshot yet" if not snap.built_at else "ok"
            body = {"status": status, "snapshot_at": iso_utc(snap.built_at) if snap.built_at else None, "error": snap.error}
            self._send(200 if status == "ok" else 503, json.dumps(body).encode(), "application/json")
        else:
            self._send(404, b"not found: try /metrics, /api/signals or /healthz\n", "text/plain; charset=utf-8")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # scrapes every 15 s: keep stderr quiet
        pass


def make_server(exporter: Exporter, host: str = "127.0.0.1", port: int = 9464) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"exporter": exporter})
    try:
        server = _Server((host, port), handler)
    except OSError as e:
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror}; choose another --port or --host") from None
    return server


def serve(store: Path | str, *, host: str = "127.0.0.1", port: int = 9464,
          variables: Mapping[str, Any] | None = None, refresh_s: float = DEFAULT_REFRESH_S,
          stop: threading.Event | None = None, on_ready: Callable[[str], None] | None = None) -> None:
    """Run the exporter until `stop` is set (or forever)."""
    exporter = Exporter(store, variables, refresh_s=refresh_s)
    server = make_server(exporter, host, port)
    exporter.start()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    if on_ready:
        on_ready(f"http://{host}:{server.server_address[1]}")
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C, and the SIGTERM Kubernetes sends a pod it stops (SIGINT may be ignored in a
        # background job: set both handlers explicitly)
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.shutdown()
        server.server_close()
        exporter.stop()


def start_beside(store: Path | str, *, host: str, port: int, variables: Mapping[str, Any] | None = None,
                 refresh_s: float = DEFAULT_REFRESH_S) -> Callable[[], None]:
    """Start the exporter in background threads (for `servelens tail --serve-port`); returns
    the function that stops it."""
    exporter = Exporter(store, variables, refresh_s=refresh_s)
    server = make_server(exporter, host, port)
    exporter.start()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        exporter.stop()

    return stop
