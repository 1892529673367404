"""The exporter under a crowd, on loopback: 200 simultaneous scrapes all answered with the
whole exposition while 20 slow clients trickle bytes (each is cut at the request deadline,
not held forever), disconnects leave stderr quiet, and /healthz says 503 until the first
snapshot exists."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from servelens.pipeline.serve import http as serve_http
from servelens.pipeline.query.views import resolve_variables
from servelens.pipeline.serve.snapshot import Exporter
from servelens.pipeline.serve.http import make_server

INCIDENT = Path(__file__).resolve().parents[2] / "sample_logs" / "incident"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from servelens.pipeline.ingest import ingest

    s = tmp_path_factory.mktemp("crowd") / "store"
    ingest(sorted((INCIDENT / "vllm").glob("*.log")), s, year=2026)
    return s


def _serve(exporter, deadline_s=None, monkeypatch=None):
    if deadline_s is not None:
        monkeypatch.setattr(serve_http, "REQUEST_DEADLINE_S", deadline_s)
    server = make_server(exporter, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _stable(body: bytes) -> list[bytes]:
    """The exposition without the ages computed at scrape time."""
    return [line for line in body.splitlines() if b"age_seconds" not in line]


def test_healthz_is_503_until_the_first_snapshot(store, monkeypatch):
    exporter = Exporter(store, resolve_variables(), refresh_s=3600)
    monkeypatch.setattr(exporter, "alive", lambda: True)  # a refresher running its first refresh
    server, url = _serve(exporter)
    try:
        code, body = _get(url + "/healthz")
        assert code == 503 and json.loads(body)["status"].startswith("starting")
        assert b"servelens_requests_waiting" not in _get(url + "/metrics")[1]
        exporter.refresh()
        code, body = _get(url + "/healthz")
        assert code == 200 and json.loads(body)["status"] == "ok"
        assert b'servelens_requests_waiting{engine="vllm"' in _get(url + "/metrics")[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_crowd_and_slow_clients_are_all_served_and_the_slow_ones_cut(store, monkeypatch, capfd):
    exporter = Exporter(store, resolve_variables(), refresh_s=3600)
    exporter.refresh()
    monkeypatch.setattr(exporter, "alive", lambda: True)
    whole = _stable(exporter.metrics(None)[0])
    assert any(line.startswith(b"servelens_requests_waiting{") for line in whole)
    server, url = _serve(exporter, deadline_s=2.0, monkeypatch=monkeypatch)
    port = server.server_address[1]
    slow = []
    try:
        # 20 clients that send half a request line and then nothing
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"GET /met")
            slow.append(s)
        # 200 scrapes at once
        with ThreadPoolExecutor(max_workers=200) as pool:
            results = list(pool.map(lambda _: _get(url + "/metrics"), range(200)))
        assert [code for code, _ in results] == [200] * 200
        assert all(_stable(body) == whole for _, body in results)
        # the slow ones were cut by the deadline: each read ends (empty or reset), none hangs
        for s in slow:
            try:
                assert s.recv(1024) == b""
            except ConnectionResetError:
                pass
        # clients that hang up mid-answer
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.close()
        assert _get(url + "/healthz")[0] == 200
    finally:
        for s in slow:
            s.close()
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err


def test_api_signals_leaves_stale_servers_out_of_the_totals(store, monkeypatch):
    exporter = Exporter(store, resolve_variables(), refresh_s=3600)
    exporter.refresh()
    server, url = _serve(exporter)
    try:
        every = json.loads(_get(url + "/api/signals")[1])
        assert every["totals"]["servers"] == 2 and every["totals"]["stale_servers"] == 0
        assert not any(s["stale"] for s in every["servers"])
        # the sample's events are from May 2026: older than an hour, so stale
        old = json.loads(_get(url + "/api/signals?max_age=3600")[1])
        assert old["totals"]["servers"] == 0 and old["totals"]["stale_servers"] == 2
        assert old["totals"]["waiting"] is None and all(s["stale"] for s in old["servers"])
        code, body = _get(url + "/api/signals?max_age=soon")
        assert code == 400 and "max_age" in json.loads(body)["error"]
    finally:
        server.shutdown()
        server.server_close()
