"""An OpenAI-compatible upstream that answers every chat request at once (run as its own process).

    python bench/instant.py PORT

The simulator reads and counts every prompt, as a provider does: a 120k-token prompt takes it
~20-30 ms, and a gateway's own count of the prompt, begun beside the forward, runs inside that
time. A mock upstream that reads the body and answers without counting (the kind issue 34's
harness used) leaves nothing to hide a count in: what the gateway counts on the way to the
answer, or after it while the next request comes, is added latency. ``new_text.py --upstream
instant`` measures against it. The answer carries no usage (a count it would have to make up),
so what a gateway learns from usage is not measured here; what it counts for learning is.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

Message = dict[str, Any]

ANSWER = (
    b'{"id":"chatcmpl-instant","object":"chat.completion","created":1,"model":"instant",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},'
    b'"finish_reason":"stop"}]}'
)
HEAD = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]


async def app(
    scope: Message,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    while (await receive()).get("more_body"):  # the whole body read, as a provider would
        pass
    await send({"type": "http.response.start", "status": 200, "headers": HEAD})
    await send({"type": "http.response.body", "body": ANSWER})


if __name__ == "__main__":
    port = int(sys.argv[1])
    print(f"instant listening on http://127.0.0.1:{port}", flush=True)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        loop="uvloop",
        http="httptools",
        lifespan="off",
    )
