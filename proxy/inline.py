"""URL images on translated legs (litellm, routefit's chat→Messages): fetched by routefit, or
refused.

litellm downloads image URLs itself, inside the proxy's process, for providers that want images
inline (Anthropic, Bedrock, Gemini, ...): a second, unfenced fetcher next to routefit's
(``proxy.fetch``), reachable by any client. So on a leg whose adapter is not the passthrough
(``proxy.providers.Adapter``; the chat→Messages adapter may fall back to litellm) no URL is left
for litellm to fetch: each http(s) image URL in the chat body is fetched by routefit's own
fetcher under the route's ``image_fetch`` policy (allowlist, address checks, redirects,
deadline) and handed on as a ``data:`` URL, or the request is refused with a 400 naming the
part. ``data:`` URLs pass as they are; any other scheme is refused.

The 400 names the part as the client wrote it (``proxy.wires.base.client_terms``), not by its
place in the translated chat body: a Responses ``input_image``, a Gemini ``fileData.fileUri``, a
chat ``image_url`` given as a string are the fields their clients know, and the translated body's
indices (instructions, tool outputs and elision markers are messages of their own there) are
not theirs.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pricing.images.kinds import GOOGLE_KINDS
from pricing.messages import ChatRequest, ImagePart
from pricing.probe import GOOGLE_ONLY, ImageError, check_header, read_header
from pricing.route import Route
from proxy.config import RouteConfig
from proxy.errors import ProxyError
from proxy.fetch import FetchRefused, ImageSizer
from proxy.providers import Adapter, deployment
from proxy.wires.base import Wire, client_terms

__all__ = ["Client", "inline_images", "inlined"]


def inlined(rc: RouteConfig, wire: str) -> bool:
    """Whether a ``wire`` request to ``rc``'s deployment has its URL images inlined (its leg is
    translated: ``inline_images``), so sizing fetches each whole, once (``ImageSizer.sizes``),
    rather than its header now and the whole image again when the leg inlines it."""
    path = deployment(rc.deployment_id, rc.upstream).paths.get(wire)
    return path is not None and path.adapter is not Adapter.PASSTHROUGH


def _url_parts(body: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """(param path, the image_url object, its URL) for every non-data image URL."""
    found: list[tuple[str, dict[str, Any], str]] = []
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            image = part.get("image_url")
            if isinstance(image, str):
                image = part["image_url"] = {"url": image}
            if not isinstance(image, dict):
                continue
            url = image.get("url")
            if isinstance(url, str) and url[:5].lower() != "data:":
                found.append((f"messages[{i}].content[{j}]", image, url))
    return found


@dataclass(frozen=True, slots=True)
class Client:
    """The request as its client's wire parsed it: what a refusal is named in."""

    wire: Wire
    request: ChatRequest

    def field(self, url: str) -> str | None:
        """The part holding ``url`` in chat's terms of the parsed request (pricing's names,
        which ``client_terms`` maps to the client's), or None when no part holds it."""
        for i, message in enumerate(self.request.messages):
            for j, part in enumerate(message.parts):
                if isinstance(part, ImagePart) and part.url == url:
                    return f"messages[{i}].content[{j}].image_url.url"
        return None


def _refusal(
    param: str, url: str, route: Route, reason: str, client: Client | None = None
) -> ProxyError:
    """The 400 for a refused URL: named in the client's terms when its part is found in the
    request it sent (``client``), else by ``param``, the part in the translated body."""
    where = (client.field(url) if client is not None else None) or f"{param}.image_url.url"
    shown = url if len(url) <= 120 else url[:117] + "..."
    message = (
        f"{where}: the image URL {shown!r} cannot be used on route {route.alias!r}: {reason}. "
        "Send the image inline as a data: URL, or allow its host in the route's "
        "routefit.image_fetch.allow_hosts."
    )
    named: str | None = where
    if client is not None:
        message, named = client_terms(client.wire, client.request, message, where)
    return ProxyError(400, message, param=named, code="image_url_not_allowed")


async def inline_images(
    body: Mapping[str, Any],
    rc: RouteConfig,
    fetcher: ImageSizer,
    client: Client | None = None,
    scope: str = "",
) -> Mapping[str, Any]:
    """``body`` with every image URL replaced by the fetched image as a data URL (a copy of
    the messages when anything changes); ``ProxyError`` 400 naming the first refused part, as
    ``client`` wrote it when given. ``scope``: the team, whose images sizing fetched whole
    are inlined without a second fetch."""
    if not isinstance(body.get("messages"), list):
        return body
    out = dict(body)
    out["messages"] = _copied(body["messages"])
    parts = _url_parts(out)
    if not parts:
        return body
    route, policy = rc.route, rc.image_fetch
    for param, _, url in parts:
        if not url[:8].lower().startswith(("http://", "https://")):
            raise _refusal(param, url, route, "only http(s) and data: URLs are accepted", client)
        if not fetcher.allowed(url, policy):
            reason = "its host is not on the route's image_fetch list"
            raise _refusal(param, url, route, reason, client)
    if len({url for _, _, url in parts}) > policy.max_urls:
        reason = f"more than {policy.max_urls} URLs"
        raise _refusal(parts[0][0], parts[0][2], route, reason, client)
    limit = route.image_limits.max_image_bytes
    urls = list(dict.fromkeys(url for _, _, url in parts))
    results = await asyncio.gather(
        *(fetcher.fetch_image(u, policy, limit, scope) for u in urls), return_exceptions=True
    )
    fetched: dict[str, str] = {}
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, FetchRefused):
                raise result
            param = next(p for p, _, u in parts if u == url)
            raise _refusal(param, url, route, str(result), client)
        _, data = result
        try:
            kind = _media_type(data, route)
        except ImageError as exc:
            param = next(p for p, _, u in parts if u == url)
            raise _refusal(param, url, route, exc.message, client) from None
        fetched[url] = f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"
    for _, image, url in parts:
        image["url"] = fetched[url]
    return out


#: The media type of each format ``pricing.probe`` reads, as providers spell it (Anthropic takes
#: exactly image/jpeg, png, gif and webp, and refuses bytes that are not what they are declared
#: as: docs/images.md § URL images).
_MEDIA_TYPES = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "heif": "image/heif",
}


def _media_type(data: bytes, route: Route) -> str:
    """The media type a fetched image is declared as: what its bytes are (its header), never
    the server's ``Content-Type`` (``image/jpg``, a PNG served as ``image/jpeg``: both refused
    by Anthropic for a request the client wrote right). ``ImageError`` for bytes that are no
    image the route's provider reads, or whose header no provider would accept."""
    header = read_header(data, final=True)  # the whole image: nothing more will come
    if isinstance(header, int):
        raise ImageError("truncated image: the data ends inside its header")
    check_header(header, route.image_limits)
    if header.format in GOOGLE_ONLY and route.image_rule.kind not in GOOGLE_KINDS:
        raise ImageError(f"this route's provider does not take {header.format.upper()} images")
    return _MEDIA_TYPES[header.format]


def _copied(messages: list[Any]) -> list[Any]:
    """Messages copied down to their content parts (the fitted body is not ours to change)."""
    out = []
    for message in messages:
        if isinstance(message, Mapping) and isinstance(message.get("content"), list):
            message = dict(message)
            message["content"] = [
                {**p, "image_url": dict(p["image_url"])}
                if isinstance(p, Mapping) and isinstance(p.get("image_url"), Mapping)
                else (dict(p) if isinstance(p, Mapping) else p)
                for p in message["content"]
            ]
        out.append(message)
    return out
