"""A bare pass-through served the way ``routefit serve`` serves, with nothing of routefit in it:
the floor a bench reads routefit's figures against (``procs.Servers.floor``; stack_floor.py,
new_text.py's target ``floor``).

It reads the body from the ASGI messages, posts it through one kept aiohttp session to
``$FLOOR_UPSTREAM`` and sends the answer back with its status and content type — what any proxy
on routefit's stack (uvicorn on uvloop with httptools, aiohttp) must do for a request, and no
more: no parse, no price, no record."""

from __future__ import annotations

import os
from typing import Any

import aiohttp

UPSTREAM = os.environ["FLOOR_UPSTREAM"]
_session: aiohttp.ClientSession | None = None


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope: Any, receive: Any, send: Any) -> None:
    global _session
    if scope["type"] == "lifespan":
        return await _lifespan(receive, send)
    if scope["path"] == "/readyz":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    if _session is None:
        _session = aiohttp.ClientSession()
    async with _session.post(
        UPSTREAM + scope["path"],
        data=b"".join(chunks),
        headers={"content-type": "application/json", "authorization": "Bearer x"},
    ) as answer:
        kind = answer.headers.get("content-type", "application/json").encode()
        head = {
            "type": "http.response.start",
            "status": answer.status,
            "headers": [(b"content-type", kind)],
        }
        if kind.startswith(b"text/event-stream"):
            await send(head)
            async for chunk in answer.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            data = await answer.read()
            await send(head)
            await send({"type": "http.response.body", "body": data})
