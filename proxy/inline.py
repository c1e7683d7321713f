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
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

from pricing.route import Route
from proxy.config import RouteConfig
from proxy.errors import ProxyError
from proxy.fetch import FetchRefused, ImageSizer

__all__ = ["inline_images"]


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


def _refusal(param: str, url: str, route: Route, reason: str) -> ProxyError:
    shown = url if len(url) <= 120 else url[:117] + "..."
    return ProxyError(
        400,
        f"{param}: the image URL {shown!r} cannot be used on route {route.alias!r}: {reason}. "
        "Send the image inline as a data: URL, or allow its host in the route's "
        "routefit.image_fetch.allow_hosts.",
        param=f"{param}.image_url.url",
        code="image_url_not_allowed",
    )


async def inline_images(
    body: Mapping[str, Any], rc: RouteConfig, fetcher: ImageSizer
) -> Mapping[str, Any]:
    """``body`` with every image URL replaced by the fetched image as a data URL (a copy of
    the messages when anything changes); ``ProxyError`` 400 naming the first refused part."""
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
            raise _refusal(param, url, route, "only http(s) and data: URLs are accepted")
        if not fetcher.allowed(url, policy):
            raise _refusal(param, url, route, "its host is not on the route's image_fetch list")
    if len({url for _, _, url in parts}) > policy.max_urls:
        raise _refusal(parts[0][0], parts[0][2], route, f"more than {policy.max_urls} URLs")
    limit = route.image_limits.max_image_bytes
    urls = list(dict.fromkeys(url for _, _, url in parts))
    results = await asyncio.gather(
        *(fetcher.fetch_image(u, policy, limit) for u in urls), return_exceptions=True
    )
    fetched: dict[str, str] = {}
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, FetchRefused):
                raise result
            param = next(p for p, _, u in parts if u == url)
            raise _refusal(param, url, route, str(result))
        kind, data = result
        fetched[url] = f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"
    for _, image, url in parts:
        image["url"] = fetched[url]
    return out


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
