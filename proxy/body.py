"""Reading a client's JSON body within the configured limits.

The body is read in chunks and refused as soon as it passes ``max_body_bytes``, whatever its
``Content-Length`` claims, and it must be JSON that routefit can write back (orjson reads 1024
levels of nesting but writes only 254, and routefit writes the body again to forward it and to
key anchors): refused now as a 400 rather than as a 500 later.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from proxy.errors import ProxyError

__all__ = ["read_json"]

#: Nesting orjson can write back (it reads deeper JSON than it writes).
_MAX_DEPTH = 254


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413, f"request body exceeds the limit of {limit:,} bytes", code="request_too_large"
    )


async def read_json(request: Request, limit: int) -> tuple[Any, int]:
    """(the parsed body, its size in bytes)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _too_large(limit)
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        raise ProxyError(
            400, "the request body is empty; expected a JSON object", code="invalid_json"
        )
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProxyError(
            400, f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    try:
        orjson.dumps(body)  # microseconds (~0.1 ms for a 1 MB body)
    except TypeError:
        raise ProxyError(
            400,
            f"the request body is nested more than {_MAX_DEPTH} levels deep",
            code="invalid_json",
        ) from None
    return body, size
