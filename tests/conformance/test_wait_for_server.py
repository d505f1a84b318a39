"""--tt-wait-for-server: a starting server is waited for, a dead one fails at the bound."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from tt_conformance.server import wait_for_server


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_comes_up_late_is_waited_for() -> None:
    port = _free_port()
    servers: list[HTTPServer] = []

    def start_later() -> None:
        time.sleep(1.0)
        server = HTTPServer(("127.0.0.1", port), _Health)
        servers.append(server)
        server.serve_forever()

    threading.Thread(target=start_later, daemon=True).start()
    start = time.monotonic()
    try:
        assert wait_for_server(f"http://127.0.0.1:{port}", 20.0) is True
        assert 0.9 <= time.monotonic() - start < 10.0
    finally:
        for server in servers:
            server.shutdown()


def test_no_server_fails_at_the_bound() -> None:
    start = time.monotonic()
    assert wait_for_server(f"http://127.0.0.1:{_free_port()}", 1.0) is False
    assert 1.0 <= time.monotonic() - start < 4.0
