"""Provider transports: the outgoing seam, bound to the provider table once per app.

A transport is httpx-shaped (``proxy.providers.Transport``): ``send(deployment, outbound)``
returns the whole answer or the event stream, ``aclose`` releases its client. The modules:
``passthrough`` (aiohttp, the socket) and ``mock`` (an httpx handler, in process) share
``provider_http`` (the request a deployment asks for, what its response means); ``anthropic``
is routefit's own chat→Messages adapter over either; ``litellm`` is the only litellm importer
(and owns that import and the event loop its calls run on: ``preload`` / ``loaded``); ``retry``
wraps any transport.

``provider_table`` builds the app's ``ProviderTable``: one record per deployment and each
adapter's transport, every one wrapped in bounded retries. ``http`` replaces the passthrough's
aiohttp client (a ``MockTransport`` runs the whole gateway in process). ``start`` (the app's
lifespan) begins what the table needs loaded, ``ready`` says whether it is: the transports
themselves have no lifecycle beyond ``aclose``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from proxy.config import Upstream
from proxy.providers import Adapter, Bounds, ProviderTable, Transport, deployment
from proxy.transports.anthropic import AnthropicChat
from proxy.transports.litellm import LiteLLM, loaded, preload
from proxy.transports.passthrough import Passthrough
from proxy.transports.retry import Retrying, RetryPolicy

__all__ = ["Bounds", "RetryPolicy", "provider_table", "ready", "start"]


def provider_table(
    upstreams: Mapping[str, Upstream],
    retry: RetryPolicy,
    on_retry: Callable[[str], None] | None = None,
    bounds: Bounds | None = None,
    http: Transport | None = None,
) -> ProviderTable:
    """The table of ``upstreams`` (one deployment per name) and the transports its paths end
    in. ``bounds``: what a provider may send back, each deployment's whatever carries it (the
    passthrough, an injected transport, the Anthropic translation over either, litellm)."""
    http = http if http is not None else Passthrough()
    litellm = LiteLLM()
    transports: dict[Adapter, Transport] = {
        Adapter.PASSTHROUGH: Retrying(http, retry, on_retry),
        Adapter.CHAT_TO_MESSAGES: Retrying(AnthropicChat(http, litellm), retry, on_retry),
        Adapter.LITELLM: Retrying(litellm, retry, on_retry),
    }
    deployments = (deployment(name, up, bounds) for name, up in upstreams.items())
    return ProviderTable(deployments, transports)


def start(table: ProviderTable) -> None:
    """Begin importing litellm, in a thread, when a deployment needs it for every chat
    request (a chat→Messages deployment imports it only on its first unmapped request)."""
    if table.needs_litellm:
        preload()


def ready(table: ProviderTable) -> bool:
    """Whether every deployment can be served at once (litellm imported, where needed)."""
    return not table.needs_litellm or loaded()
