"""The URL image sizes a request is priced with: one rule for the fit and the count endpoints.

A URL image has no size until routefit reads it, which it does only on a route whose
``image_fetch`` policy allows the image's host (``proxy.fetch``: every fence applies); an image
left unsized is priced at its rule's worst case. The fit of a request (``proxy.estimate``) and a
count endpoint's answer for the same request must price its images alike, or the count is not
the number the request is fitted and charged on: both take their sizes from ``fetched_sizes``.

The rule: nothing is fetched unless the route's policy is enabled, and then only what
``ImageSizer.sizes`` allows (host allowlist, address checks, ``max_urls``, ``max_bytes``, the
deadline); a leg that inlines its URL images (``proxy.inline.inlined``) has each fetched whole
once, so the request that follows a count finds it in the team's cache. Sizes are cached per
team (``scope``), as every prompt-derived fact is.
"""

from __future__ import annotations

from pricing.messages import ChatRequest
from pricing.probe import Size
from proxy.config import RouteConfig
from proxy.fetch import ImageSizer, image_urls
from proxy.inline import inlined

__all__ = ["Sizes", "fetched_sizes"]

#: ``{url: size}`` of the URL images whose size was read (absent: priced at the worst case).
Sizes = dict[str, Size]


async def fetched_sizes(
    sizer: ImageSizer, rc: RouteConfig, wire: str, request: ChatRequest, scope: str | None
) -> Sizes:
    """The sizes of ``request``'s URL images as its route lets routefit read them: sent by a
    client on ``wire``, by team ``scope`` (None: no teams). Empty when the route fetches
    nothing; a failed or refused fetch leaves its URL out, never fails the request."""
    if not rc.image_fetch.enabled:
        return {}
    whole = rc.route.image_limits.max_image_bytes if inlined(rc, wire) else 0
    return await sizer.sizes(image_urls(request), rc.image_fetch, scope or "", whole)
