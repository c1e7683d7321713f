"""A fake LLM provider on loopback that fails on purpose: a real HTTP server in a thread.

The routing tests in process (tests/proxy/test_routing_e2e.py) fail providers through the mock
transport; the tests whose point is a real process (two ``routefit serve`` replicas, an agent
CLI) and bench/failover.py need a provider with a real socket. ``FakeProvider`` answers every
request with one scripted failure — a 500, Anthropic's 529 "overloaded", a 401 — at once, and
counts what it received, so a test can say whether a deployment was tried at all.

``python tests/fake_provider.py --status 500`` serves one from the command line (bench/ runs it
as its own process so the load generator does not share its interpreter) and prints
``fake provider listening on http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FakeProvider", "fake_provider"]

_BODIES: dict[int, dict] = {
    500: {"error": {"message": "internal error", "type": "server_error"}},
    529: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    401: {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}},
}


class FakeProvider:
    """Answers every POST with ``status`` (and a provider-shaped error body); ``hits`` counts
    the POSTs, ``paths`` keeps their paths in order."""

    def __init__(self, status: int, port: int = 0) -> None:
        self.status = status
        self.hits = 0
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a provider's load balancer would
            # One send per answer (headers and body buffered, flushed by the server after each
            # request) and no Nagle: else the body waits on the client's delayed ACK of the
            # headers, and every failover "costs" the 40 ms of that stall (bench/failover.py).
            wbufsize = -1
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                with fake._lock:
                    fake.hits += 1
                    fake.paths.append(self.path)
                body = json.dumps(_BODIES.get(fake.status, _BODIES[500])).encode()
                self.send_response(fake.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def fake_provider(status: int) -> Iterator[FakeProvider]:
    provider = FakeProvider(status)
    provider.start()
    try:
        yield provider
    finally:
        provider.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--status", type=int, default=500)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    provider = FakeProvider(args.status, args.port)
    print(f"fake provider listening on {provider.url}", flush=True)
    provider.server.serve_forever()


if __name__ == "__main__":
    main()
