"""A provider on loopback: a real HTTP server in a thread (bound to no event loop), for what a
litellm route reaches over litellm's own client and so never through routefit's mock
transport (proxy/transports/litellm.py, "Tests")."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Loopback"]


class Loopback:
    """``handler`` served on 127.0.0.1 until ``close``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
