"""The ASGI layer in front of the routes: bounded body reads and paths without redirects.

uvicorn bounds the wait for a request's headers (``proxy.protocol``) and the number of
connections, but once the headers are in, nothing bounds how long a client may take to send its
body: eight connections trickling a body held their sockets open for minutes. ``Guard`` wraps
``receive`` so that every wait for the next body chunk ends by a deadline — ``body_timeout``
seconds of silence, or less than ``min_rate`` bytes per second on average after the first
``body_timeout`` seconds — and raises ``BodyTimeout``, which ``proxy.body`` answers with a 408. A
response that starts before its request's body was read to the end (a 401, a 404, that 408)
carries ``Connection: close``, so the server drops the rest of the body with the connection
instead of waiting for it.

What a request holds until its response is done (its body's share of its team's bytes in flight,
``proxy.fairness``) is let go by ``Guard`` once the app is through with the request, however it
ended: ``at_end`` registers it.

Paths with a trailing slash are served as the path without it. Starlette would answer them with a
redirect whose ``Location`` is built from the client's ``Host`` header, an open redirect for
anyone who can make a client send a forged ``Host``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from proxy.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyTimeout", "Guard", "ReadLimits", "at_end"]

#: The scope key of a request's list of what ``Guard`` calls when the app is through with it.
_AT_END = "routefit.at_end"


def at_end(scope: Scope, release: Callable[[], None]) -> bool:
    """Have ``release`` called once the app is through with the request (its response sent, or
    the request failed or was cancelled); False, and nothing registered, outside ``Guard``."""
    ends = scope.get(_AT_END)
    if ends is None:
        return False
    ends.append(release)
    return True


class BodyTimeout(Exception):
    """The client stopped sending its body, or sends it too slowly."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body was not received within {seconds:g} s")
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """How long a body may take: ``body_timeout`` seconds of silence at most, and after the
    first ``body_timeout`` seconds at least ``min_rate`` bytes/s on average (0: no rate).
    ``routefit serve --body-timeout / --body-min-rate`` set them (``proxy.serve_settings``)."""

    body_timeout: float
    min_rate: float

    def wait(self, started: float, received: int, now: float) -> float:
        """Seconds the next chunk may take to arrive (<= 0: too late already)."""
        if self.body_timeout <= 0:
            return math.inf
        allowed = self.body_timeout
        if self.min_rate > 0:
            total = started + self.body_timeout + received / self.min_rate
            allowed = min(allowed, total - now)
        return allowed


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
    return False


class Guard:
    """Bounded body reads and slash-tolerant paths around the app (see the module doc)."""

    def __init__(self, app: ASGIApp, limits: ReadLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if len(path) > 1 and path.endswith("/"):
            scope = dict(scope)
            scope["path"] = path.rstrip("/") or "/"
            raw = scope.get("raw_path")
            if isinstance(raw, bytes):
                scope["raw_path"] = raw.rstrip(b"/") or b"/"
        ends: list[Callable[[], None]] = []
        scope[_AT_END] = ends  # the request's own scope (Starlette's router writes to it too)
        pending = _has_body(scope)
        started = time.monotonic()
        received = 0

        async def bounded_receive() -> Message:
            nonlocal pending, received
            if not pending:
                return await receive()
            wait = self.limits.wait(started, received, time.monotonic())
            if wait <= 0:
                raise BodyTimeout(self.limits.body_timeout)
            try:
                # asyncio's own timeout: half the cost of anyio's scope, on every body chunk
                async with asyncio.timeout(None if math.isinf(wait) else wait):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeout(self.limits.body_timeout) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                pending = bool(message.get("more_body", False))
            else:
                pending = False
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start" and pending:
                headers = list(message.get("headers", ()))
                headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, bounded_receive, closing_send)
        finally:
            for release in ends:
                release()
