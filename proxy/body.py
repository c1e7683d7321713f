"""Reading a client's JSON body within the configured limits.

The body is read in chunks and refused as soon as it passes ``max_body_bytes``, whatever its
``Content-Length`` claims, and it must be JSON that routefit can write back (orjson reads 1024
levels of nesting but writes only 254, and routefit writes the body again to forward it and to
key anchors): refused now as a 400 rather than as a 500 later.

``Content-Encoding: gzip`` or ``deflate`` bodies are inflated as they arrive, and the *inflated*
size is held to the same limit: a few kilobytes that inflate to gigabytes (a zip bomb) are refused
with a 413 after at most ``limit`` bytes of output, never inflated whole. Other encodings are
refused with a 415 naming the ones routefit reads.

What a body holds in memory counts against its caller's share of bytes in flight as it is read
(``proxy.fairness.BodyShare``, when the reader is given one): a body whose ``Content-Length``
alone takes the caller past its share is refused before a byte of it is read, an encoded one as
soon as its inflated size does.

A client that goes away while sending its body is not routefit's error: it is a 499 (the status
nginx made the name for), and one that stops sending is a 408 (``proxy.middleware``).
"""

from __future__ import annotations

import zlib
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request

from proxy.disconnect import client_closed
from proxy.errors import ProxyError
from proxy.fairness import THREAD_ABOVE, BodyShare, json_work
from proxy.middleware import BodyTimeout
from proxy.types import Receive

__all__ = ["read_body", "read_json"]

#: Nesting orjson can write back (it reads deeper JSON than it writes).
_MAX_DEPTH = 254
_ENCODINGS = ("gzip", "deflate", "identity")


def _too_large(limit: int) -> ProxyError:
    return ProxyError(
        413, f"request body exceeds the limit of {limit:,} bytes", code="request_too_large"
    )


def _decoder(encoding: str) -> Any:
    """A streaming inflater for ``encoding`` (None: identity)."""
    if encoding in ("", "identity"):
        return None
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        # RFC 9110 "deflate" is zlib-wrapped; some clients send raw deflate: accept both.
        return _Deflate()
    raise ProxyError(
        415,
        f"Content-Encoding {encoding!r} is not supported; send the body as it is, "
        f"or encoded with one of: {', '.join(_ENCODINGS)}",
        code="unsupported_content_encoding",
    )


class _Deflate:
    """zlib-wrapped deflate, or raw deflate when the first bytes are no zlib header."""

    def __init__(self) -> None:
        self._inner: Any = None
        #: The first bytes, held until the two a zlib header takes are in (a body's first piece
        #: may be one byte: a client's choice, or the network's).
        self._head = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._inner is None:
            self._head += data
            if len(self._head) < 2:
                return b""  # never decided: ``eof`` stays false, a body that ends here is truncated
            data, self._head = self._head, b""
            raw = (data[0] & 0x0F) != 8 or ((data[0] << 8) | data[1]) % 31 != 0
            self._inner = zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
        out: bytes = self._inner.decompress(data, max_length)
        return out

    @property
    def unconsumed_tail(self) -> bytes:
        return b"" if self._inner is None else bytes(self._inner.unconsumed_tail)

    @property
    def eof(self) -> bool:
        return self._inner is not None and bool(self._inner.eof)


async def _message(receive: Receive) -> tuple[bytes, bool]:
    """The next piece of the body and whether more follows, straight from the server (read
    without Starlette's ``Request.stream``: two generators a request less on the hot path,
    and no code reads the body twice); a departed client becomes a 499 and a stalled one a
    408."""
    try:
        message = await receive()
    except BodyTimeout as exc:
        raise ProxyError(408, str(exc), code="request_timeout") from None
    if message["type"] != "http.request":  # http.disconnect
        raise client_closed()
    return message.get("body", b""), bool(message.get("more_body", False))


async def read_body(
    request: Request, limit: int, share: BodyShare | None = None
) -> tuple[bytes, int]:
    """(the decoded body, its size on the wire), within the limit whatever it claims, and held
    in ``share`` (when given) as it grows."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _too_large(limit)
    encoding = request.headers.get("content-encoding", "").strip().lower()
    decoder = _decoder(encoding)
    if share is not None and decoder is None and length is not None and length.isdigit():
        share.grow_to(int(length))  # refused before reading when that alone is too much
    out = bytearray()
    size = 0
    more = True
    while more:
        chunk, more = await _message(request.receive)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if decoder is None:
            out += chunk
            if share is not None:
                share.grow_to(len(out))
            continue
        data = chunk
        while data:
            try:
                # Never more output than the limit allows: a bomb stops here.
                out += decoder.decompress(data, limit + 1 - len(out))
            except zlib.error as exc:
                raise ProxyError(
                    400, f"the {encoding} request body is corrupt: {exc}", code="invalid_body"
                ) from None
            if len(out) > limit:
                raise _too_large(limit)
            if share is not None:
                share.grow_to(len(out))
            data = decoder.unconsumed_tail
    if decoder is not None and size and not decoder.eof:
        raise ProxyError(400, f"the {encoding} request body is truncated", code="invalid_body")
    return bytes(out), size


async def read_json(
    request: Request, limit: int, share: BodyShare | None = None
) -> tuple[Any, int, int]:
    """(the parsed body, its size in bytes once decoded, the size its work is judged by:
    ``proxy.fairness.json_work``); ``share``: as ``read_body``."""
    raw, _ = await read_body(request, limit, share)
    if not raw:
        raise ProxyError(
            400, "the request body is empty; expected a JSON object", code="invalid_json"
        )
    if len(raw) > THREAD_ABOVE:  # orjson reads ~500 MB/s: a 9 MB body held the loop ~20 ms
        return await anyio.to_thread.run_sync(_decode, raw), len(raw), len(raw)
    return _decode(raw), len(raw), json_work(raw)


def _decode(raw: bytes) -> Any:
    """The body as JSON routefit can write back; a 400 naming what is wrong otherwise."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProxyError(
            400, f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    shallow = None
    if len(raw) > _WALK_ABOVE and _escaped(raw):
        shallow = _shallow(body, len(raw) // _BYTES_A_CONTAINER)
    if shallow is None:
        try:
            orjson.dumps(body)
            shallow = True
        except TypeError:
            shallow = False
    if not shallow:
        raise ProxyError(
            400,
            f"the request body is nested more than {_MAX_DEPTH} levels deep",
            code="invalid_json",
        )
    return body


#: A body over this size whose strings are escaped densely (``_escaped``: a session's JSON
#: tool outputs) has its nesting checked by walking its objects and arrays, when it has at most
#: one per ``_BYTES_A_CONTAINER`` bytes; any other by writing it, which is then as quick.
_WALK_ABOVE = 64 * 1024
_BYTES_A_CONTAINER = 256
#: Escapes (a backslash) at least once in this many bytes make writing a body slow: ~60,000 in a
#: 600 KB session of JSON tool outputs took 0.75 ms to write, one of prose 0.05 ms.
_ESCAPED_EVERY = 64
_SLICE = 1024


def _escaped(raw: bytes) -> bool:
    """Whether ``raw``'s strings are escaped densely, read from eight slices spread over it
    (counting every backslash of a body where they are frequent costs what writing it does)."""
    step = len(raw) // 8
    found = sum(raw.count(b"\\", i, i + _SLICE) for i in range(0, 8 * step, step))
    return found * _ESCAPED_EVERY >= 8 * _SLICE


def _shallow(body: Any, most: int) -> bool | None:
    """Whether ``body`` is nested at most ``_MAX_DEPTH`` deep — what orjson reads and cannot
    write back (it reads lone surrogates and numbers past a double's range not at all); None
    when it holds more than ``most`` objects and arrays, for the caller to write it instead.

    Writing a body to find out escapes every quote and newline of its strings: 0.75 ms for a
    600 KB session whose tool outputs are JSON, where walking its few hundred objects takes
    0.03 ms; a body of many small objects, or of few escapes, writes faster than it walks
    (20,000 objects: 0.6 against 5.6 ms; a 400-message session of prose 0.05 against 0.17), hence
    ``most`` and ``_escaped``."""
    if type(body) is not dict and type(body) is not list:
        return True  # a string, a number: nothing nested (and the wire refuses it)
    stack = [(body, 1)]
    pop, push = stack.pop, stack.append
    seen = 0
    while stack:
        value, depth = pop()
        seen += 1
        if depth > _MAX_DEPTH:
            return False
        if seen > most:
            return None
        for item in value.values() if type(value) is dict else value:
            if type(item) is dict or type(item) is list:
                push((item, depth + 1))
    return True
