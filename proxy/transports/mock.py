"""An in-process transport answered by a function, like httpx's ``MockTransport``.

For tests whose point is the gateway itself (wires, fitting, budgets, errors) rather than the
network: ``create_app(config, transports=...)`` with a ``MockTransport`` runs the whole request
path without a provider process. The real-HTTP end-to-end tests stay; this is for the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import orjson

from proxy.config import Upstream
from proxy.transports.base import CHAT, MESSAGES, RESPONSES, Completion, Outbound

__all__ = ["MockTransport", "Reply"]

#: What a handler answers: a JSON value (a whole answer) or a list of SSE events (a stream).
Reply = Any | Sequence[bytes]
Handler = Callable[[Upstream, Outbound], Awaitable[Reply] | Reply]


class _Replay:
    def __init__(self, events: Sequence[bytes]) -> None:
        self.events = list(events)
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event

    async def aclose(self) -> None:
        self.closed = True


class MockTransport:
    """Calls ``handler(upstream, outbound)`` for every request; records what it was sent."""

    def __init__(self, handler: Handler, wires: frozenset[str] = frozenset({CHAT})) -> None:
        self.handler = handler
        self.wires = wires
        self.sent: list[Outbound] = []

    def speaks(self, up: Upstream) -> frozenset[str]:
        return self.wires & frozenset({CHAT, MESSAGES, RESPONSES})

    def start(self) -> None:
        return None

    @property
    def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None

    async def _reply(self, up: Upstream, out: Outbound) -> Reply:
        self.sent.append(out)
        reply = self.handler(up, out)
        if isinstance(reply, Awaitable):
            reply = await reply
        return reply

    async def complete(self, up: Upstream, out: Outbound) -> Completion:
        data = await self._reply(up, out)
        return Completion(orjson.dumps(data), data)

    async def stream(self, up: Upstream, out: Outbound) -> _Replay:
        return _Replay(await self._reply(up, out))
