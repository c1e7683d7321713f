"""Native passthrough over one pooled aiohttp client: the socket side of the provider's HTTP.

The request is built from the deployment's table entry and the response read by the shared
rules (``proxy.transports.provider_http``: the same ones the in-process ``MockTransport``
applies); this module only owns the connection — pooling, timeouts, and which failures before
the response headers another attempt may meet (``Transient``).

Why aiohttp and not httpx: measured side by side on the benchmark machine
(bench/profile_proxy.py), the same proxy path did 958 requests/s with aiohttp's client and 232
with httpx's at concurrency 16 (0.61 vs 2.65 ms of CPU per request); httpcore scans its whole
pool on every request. The passthrough is the hot path, so it gets the faster client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp

from proxy.errors import ProxyError
from proxy.exchange import Completion, EventStream, Outbound, Transient
from proxy.providers import Deployment
from proxy.transports.provider_http import ReadBroken, interpret, provider_request

__all__ = ["Passthrough"]


class _Response:
    """An aiohttp response as ``provider_http.RawResponse``."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    @property
    def content_length(self) -> int | None:
        return self._resp.content_length

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except TimeoutError:  # aiohttp's ServerTimeoutError is one too
            raise TimeoutError from None
        except aiohttp.ClientError as exc:
            raise ReadBroken(type(exc).__name__) from None

    def at_eof(self) -> bool:
        return self._resp.content.at_eof()

    async def whole(self) -> bytes:
        try:
            return await self._resp.read()
        except TimeoutError:
            raise TimeoutError from None
        except aiohttp.ClientError as exc:
            raise ReadBroken(type(exc).__name__) from None

    async def finish(self, whole: bool) -> None:
        if whole:
            self._resp.release()
        else:
            self._resp.close()


class Passthrough:
    """The pooled HTTP client of one app (created on the running loop, as aiohttp requires)."""

    def __init__(self, max_connections: int = 512) -> None:
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self.max_connections, limit_per_host=0, ttl_dns_cache=300
                ),
                timeout=aiohttp.ClientTimeout(total=None),
                trust_env=False,
                auto_decompress=True,
                # Every team's requests share this session: a cookie one provider answer set
                # (api.openai.com's edge sets __cf_bm on every new client) would go out with
                # every later team's request. A tenant's state is never another's.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        return await interpret(await self._post(target, out), target, out)

    async def _post(self, target: Deployment, out: Outbound) -> _Response:
        """The provider's response once its headers arrived (body unread).

        Failures before the headers are ``Transient`` when nothing can have been processed (the
        connection failed or was reset). ``timeout`` bounds connecting and every wait for bytes
        (not the whole response: a long stream is fine as long as it keeps streaming)."""
        up = target.upstream
        request = provider_request(target, out)
        seconds = up.timeout_for(out.stream)
        timeout = aiohttp.ClientTimeout(total=None, connect=min(10.0, seconds), sock_read=seconds)
        try:
            resp = await self.session.post(
                request.url,
                data=request.body,
                headers=request.headers,
                timeout=timeout,
                allow_redirects=False,
            )
        except aiohttp.ConnectionTimeoutError:
            raise Transient(
                504, f"upstream {up.model} timed out connecting", code="upstream_timeout"
            ) from None
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise ProxyError(
                504, f"upstream {up.model} timed out", code="upstream_timeout"
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise Transient(
                502,
                f"upstream {up.model} is unreachable: {type(exc).__name__}",
                code="upstream_unreachable",
            ) from None
        return _Response(resp)
