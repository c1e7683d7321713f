"""Sizes of URL images, learnt by reading the first bytes of each image (opt-in per route).

An image given by URL has no size until someone reads it. By default nobody does: the meter
prices it at its rule's worst case. A route whose ``image_fetch`` policy allowlists hosts lets
the proxy read just the header of each image (a few hundred bytes, at most ``max_bytes``), so
the estimate is exact instead of worst-case.

Fetching URLs that callers chose is how gateways become SSRF proxies, so every fetch is fenced:

- http and https only; the host must be on the route's allowlist;
- the name is resolved here, every address it resolves to is checked (loopback, private,
  link-local, multicast, reserved, unspecified; IPv4 hidden in IPv6 forms is unwrapped), and
  the connection goes to the checked address: the URL is rewritten to the IP with the original
  ``Host`` header and TLS SNI/certificate name, so DNS cannot change its answer in between;
- cloud metadata addresses and all link-local space are refused even with ``allow_private``;
- redirects are followed only up to the policy's count, each hop checked like the first;
- bytes are streamed and capped, content encodings refused (no decompression bombs), and the
  whole fetch, DNS included, runs under one deadline;
- failures leave the URL unsized (priced at the worst case); they never fail the request.

Results are cached by URL in a bounded LRU with a TTL (failures for a shorter time), and
concurrent requests for the same URL share one fetch — both per team (``scope``): a size is a
fact about a prompt, and a cached one answers without a round trip to the image's host, so a
team could time its own request to learn that another team sent that URL. One bound serves all
teams; a URL two teams send is fetched once for each.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pricing.messages import ChatRequest, ImagePart
from pricing.probe import Header, Size, check_header, read_header, size_of
from pricing.route import ImageLimits

if TYPE_CHECKING:  # imported where a fetch needs it: most deployments never fetch (see ImageSizer)
    import httpx

__all__ = [
    "METADATA_ADDRESSES",
    "FetchRefused",
    "ImageFetchPolicy",
    "ImageSizer",
    "Resolver",
    "address_refusal",
    "image_urls",
    "parse_fetch_policy",
]

log = logging.getLogger("routefit.fetch")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Resolves (host, port) to IP address strings; injectable so tests need no DNS.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

#: Instance-metadata endpoints of cloud providers: refused whatever the policy says.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, ...
        "169.254.170.2",  # AWS ECS task credentials
        "169.254.0.23",  # Tencent Cloud
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (classic)
        "fd00:ec2::254",  # AWS IMDS over IPv6
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True, slots=True)
class ImageFetchPolicy:
    """Whether the proxy may fetch the first bytes of a URL image to learn its size.

    The default fetches nothing: a URL image is then priced at the rule's worst case. Fetching
    makes the gateway a client of URLs its callers chose, so it is opt-in per route, limited to
    allowlisted hosts (``images.example.com`` exactly, ``*.example.com`` for its subdomains,
    ``*`` for any public host), and never reaches loopback, private, link-local or metadata
    addresses unless ``allow_private`` is set (metadata addresses never). ``ImageSizer`` does
    the I/O; this value only says what is allowed.
    """

    allow_hosts: tuple[str, ...] = ()
    allow_private: bool = False
    #: Bytes read at most per image (headers are tiny; JPEG metadata may need more).
    max_bytes: int = 65_536
    #: Whole-fetch deadline per image, DNS included.
    timeout_s: float = 2.0
    #: Redirects followed, each hop re-checked against the allowlist and address rules.
    max_redirects: int = 2
    #: URL images fetched per request at most (the rest are priced at the worst case).
    max_urls: int = 16

    def __post_init__(self) -> None:
        hosts = tuple(h.strip().lower().rstrip(".") for h in self.allow_hosts)
        for host in hosts:
            bare = host.removeprefix("*.")
            if host != "*" and (not bare or "*" in bare or "/" in host or "@" in host):
                raise ValueError(
                    f"allow_hosts entry {host!r} must be a host name, '*.suffix' or '*'"
                )
        object.__setattr__(self, "allow_hosts", hosts)
        if self.max_bytes < 64 or self.timeout_s <= 0 or self.max_redirects < 0:
            raise ValueError("image fetch needs max_bytes >= 64, timeout_s > 0, max_redirects >= 0")
        if self.max_urls < 0:
            raise ValueError("image fetch max_urls must not be negative")

    @property
    def enabled(self) -> bool:
        return bool(self.allow_hosts) and self.max_urls > 0

    def allows_host(self, host: str) -> bool:
        """Whether ``host`` (a name or an IP literal, as in the URL) is on the allowlist."""
        host = host.lower().rstrip(".")
        for allowed in self.allow_hosts:
            if allowed == "*" or host == allowed:
                return True
            if allowed.startswith("*.") and host.endswith(allowed[1:]):
                return True
        return False


class FetchRefused(Exception):
    """A URL the policy does not let the proxy fetch (reason in the message)."""


def _judged_addresses(ip: IPAddress) -> list[IPAddress]:
    """The addresses that decide where a connection to ``ip`` really goes.

    IPv4-mapped and NAT64 addresses are mere carriers of an IPv4 address: only that address
    counts (Python files the carriers under "reserved", which would refuse ``::ffff:10.0.0.1``
    even where private addresses are allowed). 6to4 and Teredo addresses are IPv6 hosts that
    also tunnel to an IPv4 address: both count.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return [ip.ipv4_mapped]
        if ip in _NAT64:
            return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
        if ip.sixtofour is not None:
            return [ip, ip.sixtofour]
        if ip.teredo is not None:
            return [ip, ip.teredo[1]]
    return [ip]


def address_refusal(ip: IPAddress, allow_private: bool) -> str | None:
    """Why the proxy must not connect to ``ip`` (None: it may)."""
    for addr in _judged_addresses(ip):
        if addr in METADATA_ADDRESSES:
            return f"{ip} is a cloud metadata address"
        if addr.is_link_local:
            return f"{ip} is link-local"
        if addr.is_multicast or addr.is_unspecified:
            return f"{ip} is not a unicast host address"
        if addr.is_loopback:  # before "reserved": Python files ::1 under ::/8 too
            if not allow_private:
                return f"{ip} is a loopback address"
            continue
        if addr.is_reserved:
            return f"{ip} is a reserved address"
        if not addr.is_global and not allow_private:
            return f"{ip} is a private address"
    return None


def _host_allowed(url: httpx.URL, policy: ImageFetchPolicy) -> bool:
    """The allowlist may name a host in Unicode or in its IDNA (punycode) form."""
    return policy.allows_host(url.host) or policy.allows_host(url.raw_host.decode("ascii"))


async def _system_resolver(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def image_urls(request: ChatRequest) -> tuple[str, ...]:
    """The distinct http(s) image URLs of a request, in order of first appearance."""
    seen: dict[str, None] = {}
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, ImagePart) and part.url[:8].lower().startswith(
                ("http://", "https://")
            ):
                seen.setdefault(part.url, None)
    return tuple(seen)


def parse_fetch_policy(spec: Mapping[str, Any] | None) -> ImageFetchPolicy:
    """``image_fetch: {allow_hosts: [...], allow_private: false, max_bytes: 65536, ...}``.

    Raises ValueError naming the bad key; the config loader prefixes file and key path.
    """
    if spec is None:
        return ImageFetchPolicy()
    if not isinstance(spec, Mapping):
        raise ValueError("image_fetch must be a mapping")
    known = set(ImageFetchPolicy.__dataclass_fields__)
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"unknown image_fetch key(s) {unknown} (known: {sorted(known)})")
    values = dict(spec)
    hosts = values.get("allow_hosts") or ()  # ``allow_hosts:`` left empty in YAML: none
    if not isinstance(hosts, list | tuple) or not all(isinstance(h, str) for h in hosts):
        raise ValueError("image_fetch.allow_hosts must be a list of host names")
    values["allow_hosts"] = tuple(hosts)
    if not isinstance(values.get("allow_private", False), bool):
        raise ValueError("image_fetch.allow_private must be true or false")
    for key in ("max_bytes", "max_redirects", "max_urls"):
        value = values.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"image_fetch.{key} must be an integer")
    timeout = values.get("timeout_s", 1.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError("image_fetch.timeout_s must be a number")
    try:
        return ImageFetchPolicy(**values)
    except ValueError as exc:
        raise ValueError(f"image_fetch: {exc}") from None


#: What a fetched size is cached under: (scope, URL, whether private addresses were allowed).
_Key = tuple[str, str, bool]


class _TTLCache:
    """A bounded LRU whose entries expire; a failure (None) expires sooner than a size."""

    def __init__(self, maxsize: int, ttl_s: float, failure_ttl_s: float) -> None:
        self.maxsize, self.ttl_s, self.failure_ttl_s = maxsize, ttl_s, failure_ttl_s
        self._data: OrderedDict[_Key, tuple[float, Size | None]] = OrderedDict()

    def get(self, key: _Key) -> tuple[bool, Size | None]:
        """(found, size) — found is False when absent or expired."""
        entry = self._data.get(key)
        if entry is None:
            return False, None
        expires, size = entry
        if expires < time.monotonic():
            del self._data[key]
            return False, None
        self._data.move_to_end(key)
        return True, size

    def put(self, key: _Key, size: Size | None) -> None:
        ttl = self.ttl_s if size is not None else self.failure_ttl_s
        self._data[key] = (time.monotonic() + ttl, size)
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


#: A whole image fetched for a translated leg: (content type, bytes).
Fetched = tuple[str, bytes]


class _Held:
    """Whole images fetched while sizing, kept for the request's translated leg to inline
    (``ImageSizer.fetch_image``) instead of fetching them a second time. Bounded by their bytes
    (the least recently used go first) and briefly kept: the same request's attempts, not a
    content cache."""

    def __init__(self, budget: int, ttl_s: float) -> None:
        self.budget, self.ttl_s, self.used = budget, ttl_s, 0
        self._data: OrderedDict[_Key, tuple[float, Fetched]] = OrderedDict()

    def get(self, key: _Key) -> Fetched | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            self._drop(key)
            return None
        self._data.move_to_end(key)
        return entry[1]

    def put(self, key: _Key, fetched: Fetched) -> None:
        if key in self._data:
            self._drop(key)
        if len(fetched[1]) > self.budget:
            return
        self._data[key] = (time.monotonic() + self.ttl_s, fetched)
        self.used += len(fetched[1])
        while self.used > self.budget:
            self._drop(next(iter(self._data)))

    def _drop(self, key: _Key) -> None:
        _, (_, data) = self._data.pop(key)
        self.used -= len(data)


class ImageSizer:
    """Fetches image headers for URL images; one per process, shared by all requests.

    Give it a dedicated ``httpx.AsyncClient`` or let it make one: it relies on no proxies from
    the environment (``trust_env=False``: a proxy would connect to a name, not the checked IP)
    and no pooled connections (a pooled TLS connection for one host must not carry a request
    for another host on the same IP). The client it makes, and httpx itself, come with the first
    fetch: a deployment whose routes never fetch (the default) pays neither (~7 MiB of a worker's
    memory, an SSL context with its CA bundle among it).
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        resolver: Resolver | None = None,
        limits: ImageLimits | None = None,
        cache_size: int = 4096,
        ttl_s: float = 600.0,
        failure_ttl_s: float = 60.0,
        max_concurrency: int = 32,
        held_bytes: int = 64 << 20,
        held_ttl_s: float = 60.0,
    ) -> None:
        self._given = client
        self._made: httpx.AsyncClient | None = None
        self._max_concurrency = max_concurrency
        self._resolve = resolver or _system_resolver
        self._limits = limits or ImageLimits()
        self._cache = _TTLCache(cache_size, ttl_s, failure_ttl_s)
        self._inflight: dict[tuple[_Key, bool], asyncio.Task[Size | None]] = {}
        self._held = _Held(held_bytes, held_ttl_s)
        self._gate = asyncio.Semaphore(max_concurrency)
        self.fetches = 0

    @property
    def _client(self) -> httpx.AsyncClient:
        if self._given is not None:
            return self._given
        if self._made is None:
            import httpx

            self._made = httpx.AsyncClient(
                trust_env=False,
                follow_redirects=False,
                limits=httpx.Limits(
                    max_connections=self._max_concurrency, max_keepalive_connections=0
                ),
            )
        return self._made

    async def aclose(self) -> None:
        if self._made is not None:
            await self._made.aclose()

    async def __aenter__(self) -> ImageSizer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def sizes(
        self, urls: Iterable[str], policy: ImageFetchPolicy, scope: str = "", whole: int = 0
    ) -> dict[str, Size]:
        """``{url: (width, height)}`` for the URLs whose headers could be read under ``policy``
        (``(width, height, True)`` for one its orientation may turn: ``pricing.probe.Size``).

        URLs that are not allowed, fail or time out are simply absent (priced at worst case).
        ``scope``: the team asking (empty: no teams); only its own earlier fetches answer it.
        ``whole`` > 0: the request's leg inlines its URL images (``proxy.inline``), so each is
        fetched whole (at most ``whole`` bytes) and kept for ``fetch_image``: fetched once.
        """
        if not policy.enabled:
            return {}
        wanted = [u for u in dict.fromkeys(urls) if self._allowed(u, policy)][: policy.max_urls]
        # One deadline for the whole call: an image's wait for a free slot, and the first
        # fetch's setup (its client, its TLS context), count against it like its own fetch.
        deadline = asyncio.get_running_loop().time() + policy.timeout_s
        results = await asyncio.gather(
            *(self._size(u, policy, scope, deadline, whole) for u in wanted)
        )
        return {u: size for u, size in zip(wanted, results, strict=True) if size is not None}

    def allowed(self, url: str, policy: ImageFetchPolicy) -> bool:
        """Whether ``policy`` lets this URL be fetched at all (scheme and host)."""
        return policy.enabled and self._allowed(url, policy)

    async def fetch_image(
        self, url: str, policy: ImageFetchPolicy, limit: int, scope: str = ""
    ) -> Fetched:
        """(content type, bytes) of a whole image under ``policy``'s fences, for a transport
        that must be handed images inline. At most ``limit`` bytes; raises ``FetchRefused``
        with the reason when the policy refuses it or the fetch fails. The bytes ``sizes``
        fetched whole for ``scope`` (the team) serve without another fetch."""
        if not self.allowed(url, policy):
            raise FetchRefused("its host is not on the route's image_fetch.allow_hosts")
        key = (scope, url, policy.allow_private)
        held = self._held.get(key)
        if held is not None and len(held[1]) <= limit:
            return held
        try:
            async with asyncio.timeout(policy.timeout_s), self._gate:
                self.fetches += 1
                fetched = await self._whole(url, policy, limit)
        except FetchRefused:
            raise
        except Exception as exc:
            raise FetchRefused(f"it could not be fetched: {type(exc).__name__}") from None
        self._held.put(key, fetched)  # a retried attempt inlines it again
        return fetched

    async def _whole(self, url: str, policy: ImageFetchPolicy, limit: int) -> Fetched:
        response = await self._final(url, policy, whole=limit)
        if response is None:
            raise FetchRefused("it did not answer with an image")
        try:
            return await _read_whole(response, limit)
        finally:
            await response.aclose()

    @staticmethod
    def _allowed(url: str, policy: ImageFetchPolicy) -> bool:
        import httpx

        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, ValueError):
            return False
        return parsed.scheme in ("http", "https") and _host_allowed(parsed, policy)

    async def _size(
        self, url: str, policy: ImageFetchPolicy, scope: str, deadline: float, whole: int
    ) -> Size | None:
        key = (scope, url, policy.allow_private)
        found, size = self._cache.get(key)
        if found:
            return size  # a leg that inlines it fetches it then, once
        flight = (key, whole > 0)  # a header read holds no bytes for a whole one to share
        task = self._inflight.get(flight)
        if task is None:
            task = asyncio.ensure_future(self._fetch(url, policy, key, deadline, whole))
            self._inflight[flight] = task
            task.add_done_callback(lambda _: self._inflight.pop(flight, None))
        size = await asyncio.shield(task)
        return size

    async def _fetch(
        self, url: str, policy: ImageFetchPolicy, key: _Key, deadline: float, whole: int
    ) -> Size | None:
        try:
            # One deadline for everything, waiting for a free slot included.
            async with asyncio.timeout_at(deadline), self._gate:
                self.fetches += 1
                if whole:
                    size = await self._held_size(url, policy, key, whole)
                else:
                    size = await self._follow(url, policy)
        except FetchRefused as exc:
            log.info("image fetch refused for %s: %s", url, exc)
            return None  # a policy answer, not a fact about the URL: not cached
        except Exception as exc:  # any failure leaves the URL unsized; never fails a request
            log.info("image fetch failed for %s: %r", url, exc)
            size = None
        self._cache.put(key, size)
        return size

    async def _held_size(
        self, url: str, policy: ImageFetchPolicy, key: _Key, whole: int
    ) -> Size | None:
        """The size of the image fetched whole, its bytes kept for ``fetch_image``."""
        fetched = await self._whole(url, policy, whole)
        header = read_header(fetched[1], final=True)
        if not isinstance(header, Header):
            return None
        size = self._checked(header)
        self._held.put(key, fetched)
        return size

    async def _follow(self, url: str, policy: ImageFetchPolicy) -> Size | None:
        response = await self._final(url, policy)
        if response is None:
            return None
        try:
            return await self._read_size(response, policy)
        finally:
            await response.aclose()

    async def _final(
        self, url: str, policy: ImageFetchPolicy, whole: int = 0
    ) -> httpx.Response | None:
        """The open 200/206 response at the end of the checked redirects (None: none)."""
        import httpx

        target = httpx.URL(url)
        for _ in range(policy.max_redirects + 1):
            response = await self._send_pinned(target, policy, whole)
            keep = False
            try:
                if response.is_redirect:
                    location = response.headers.get("location")
                    if not location:
                        return None
                    target = target.join(location)
                    continue
                if response.status_code not in (200, 206):
                    return None
                keep = True
                return response
            finally:
                if not keep:
                    await response.aclose()
        raise FetchRefused(f"more than {policy.max_redirects} redirect(s)")

    async def _send_pinned(
        self, target: httpx.URL, policy: ImageFetchPolicy, whole: int = 0
    ) -> httpx.Response:
        """GET ``target`` from one of its host's checked addresses, tried in resolver order."""
        import httpx

        addresses = await self._checked_addresses(target, policy)
        failure: Exception | None = None
        for ip in addresses:
            request = self._pinned_request(target, ip, policy, whole)
            try:
                return await self._client.send(request, stream=True, follow_redirects=False)
            except httpx.ConnectError as exc:  # e.g. ::1 first while the server is on 127.0.0.1
                failure = exc
        assert failure is not None
        raise failure

    async def _checked_addresses(
        self, target: httpx.URL, policy: ImageFetchPolicy
    ) -> list[IPAddress]:
        if target.scheme not in ("http", "https"):
            raise FetchRefused(f"scheme {target.scheme!r} is not fetched")
        if not _host_allowed(target, policy):
            raise FetchRefused(f"host {target.host!r} is not on the allowlist")
        port = target.port or (443 if target.scheme == "https" else 80)
        answers = await self._resolve(target.raw_host.decode("ascii"), port)
        if not answers:
            raise FetchRefused(f"{target.host!r} did not resolve")
        checked: list[IPAddress] = []
        for text in answers:
            ip = ipaddress.ip_address(text.split("%", 1)[0])
            reason = address_refusal(ip, policy.allow_private)
            if reason is not None:  # one bad record taints the name: no "pick the good one"
                raise FetchRefused(f"{target.host!r} resolves to {reason}")
            if ip not in checked:
                checked.append(ip)
        return checked

    def _pinned_request(
        self, target: httpx.URL, ip: IPAddress, policy: ImageFetchPolicy, whole: int = 0
    ) -> httpx.Request:
        """A request to the checked ``ip``, carrying ``target``'s name for Host and TLS; for
        the first ``policy.max_bytes`` bytes, or the whole image when ``whole`` > 0."""
        headers = {
            "Host": target.netloc.decode("ascii"),
            "Accept": "image/*",
            "Accept-Encoding": "identity",
            "User-Agent": "routefit-image-sizer",
        }
        if not whole:
            headers["Range"] = f"bytes=0-{policy.max_bytes - 1}"
        extensions: dict[str, Any] = {}
        if target.scheme == "https":
            extensions["sni_hostname"] = target.raw_host.decode("ascii")
        return self._client.build_request(
            "GET",
            target.copy_with(host=str(ip)),
            headers=headers,
            extensions=extensions,
            timeout=policy.timeout_s,
        )

    async def _read_size(self, response: httpx.Response, policy: ImageFetchPolicy) -> Size | None:
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return None  # never inflate a stream of unknown ratio
        data = bytearray()
        need = 12
        # Identity-only (checked above), so aiter_bytes inflates nothing; unlike aiter_raw it also
        # serves a response whose body was read already.
        async for chunk in response.aiter_bytes():
            data += chunk[: policy.max_bytes - len(data)]
            if len(data) >= need:
                result = read_header(bytes(data))
                if isinstance(result, Header):
                    return self._checked(result)
                need = result
            if need > policy.max_bytes or len(data) >= policy.max_bytes:
                break  # the rest lies beyond what this route lets us read
        # No more bytes: a JPEG whose frame header was read is sized, its orientation unknown
        # when its metadata was cut (priced both ways); else the URL stays unsized.
        result = read_header(bytes(data), final=True)
        return self._checked(result) if isinstance(result, Header) else None

    def _checked(self, header: Header) -> Size:
        check_header(header, self._limits)
        return size_of(header)


async def _read_whole(response: httpx.Response, limit: int) -> Fetched:
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise FetchRefused(f"it came {encoding}-encoded")
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if not kind.startswith("image/"):
        raise FetchRefused(f"it is not an image ({kind or 'no content type'})")
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            raise FetchRefused(f"it is larger than {limit:,} bytes")
    return kind, bytes(data)
