"""The provider table: one record per deployment, and the path of every client wire through it.

A *deployment* is one place a model alias's requests can go (today one per route: its
``Upstream``; the router will give an alias several). Its record (``Deployment``) says, once, at
start-up, everything routefit needs to reach it:

- ``native``: the provider wires it accepts as they are (an OpenAI-compatible API: chat, and
  responses on OpenAI itself; Anthropic: messages; Google AI Studio, ``gemini/``: gemini; any
  other litellm provider: none);
- ``urls``: the endpoint of each native wire under its API base;
- ``auth``: which header carries its key, with which scheme, and the ``anthropic-version`` it
  needs;
- ``bounds``: what it may send back (a whole answer, one SSE event), whatever carries it;
- ``adapter``: how a chat request reaches it when chat is not native — ``PASSTHROUGH`` (chat is
  native), ``CHAT_TO_MESSAGES`` (routefit's own translation to an Anthropic provider, litellm
  only for what that cannot map) or ``LITELLM``.

``Deployment.paths`` answers, per client wire, the provider wire it is written in and the
adapter that carries it: the client's own wire when the deployment speaks it, else chat through
the adapter. ``ProviderTable`` binds each path to its transport once, so choosing how a request
goes is one lookup (``ProviderTable.leg``). A new provider dialect is one branch of
``deployment`` here and, when it is not plain HTTP, one transport module.

The transport contract lives here too, because the table is where a path ends in a transport:
``Transport.send(deployment, outbound)`` returns the whole answer or the event stream
(``Outbound.stream`` says which), ``aclose`` releases its client. Transports implement it
structurally; nothing here imports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol
from urllib.parse import urlsplit

from proxy.config import Upstream
from proxy.exchange import (
    CHAT,
    GEMINI,
    MESSAGES,
    RESPONSES,
    WIRES,
    Completion,
    EventStream,
    Outbound,
)
from proxy.exchange.sse import MAX_EVENT_BYTES

__all__ = [
    "ANTHROPIC_BASE",
    "ANTHROPIC_VERSION",
    "GEMINI_BASE",
    "MAX_BODY_BYTES",
    "Adapter",
    "Auth",
    "Bounds",
    "Deployment",
    "Leg",
    "ProviderTable",
    "Transport",
    "WirePath",
    "deployment",
    "gemini_url",
]

ANTHROPIC_BASE = "https://api.anthropic.com"
#: Sent when the client named none: the version Anthropic's SDKs send today.
ANTHROPIC_VERSION = "2023-06-01"
#: Google AI Studio's Gemini API, with its version, as litellm reads a ``gemini/`` api_base.
GEMINI_BASE = "https://generativelanguage.googleapis.com/v1beta"
#: The default bound of a whole provider answer.
MAX_BODY_BYTES = 64 * 1024 * 1024


class Adapter(StrEnum):
    """How a request in a provider wire reaches a deployment."""

    #: As it is, over routefit's HTTP client (``proxy.transports.passthrough``).
    PASSTHROUGH = "passthrough"
    #: Chat translated to Messages by routefit (``proxy.transports.anthropic``).
    CHAT_TO_MESSAGES = "chat_to_messages"
    #: Chat through litellm's translation (``proxy.transports.litellm``).
    LITELLM = "litellm"


@dataclass(frozen=True, slots=True)
class Auth:
    """Where a deployment's key goes: ``header: scheme + key``, plus a fixed version header."""

    header: str | None = None
    scheme: str = ""
    #: ``anthropic-version`` sent unless the client named its own.
    anthropic_version: str | None = None

    def headers(self, key: str | None) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.anthropic_version is not None:
            out["anthropic-version"] = self.anthropic_version
        if key and self.header is not None:
            out[self.header] = self.scheme + key
        return out


#: OpenAI's API, where a route to ``openai/`` models goes when it names no ``api_base``.
OPENAI_API = "https://api.openai.com/v1"


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a deployment may send back (``routefit_settings.max_provider_body_bytes`` for a
    whole answer, ``max_sse_event_bytes`` for one event of a stream)."""

    max_body: int = MAX_BODY_BYTES
    max_event: int = MAX_EVENT_BYTES


@dataclass(frozen=True, slots=True)
class WirePath:
    """How one client wire reaches one deployment: the provider wire and the adapter."""

    wire: str
    adapter: Adapter


@dataclass(frozen=True, slots=True)
class Deployment:
    """One place requests can go, and how (see the module docstring)."""

    name: str
    upstream: Upstream
    native: frozenset[str]
    urls: Mapping[str, str]
    auth: Auth
    adapter: Adapter
    bounds: Bounds = Bounds()
    #: Per client wire, computed once from the fields above.
    paths: Mapping[str, WirePath] = field(init=False)

    def __post_init__(self) -> None:
        paths = {
            wire: WirePath(wire, Adapter.PASSTHROUGH)
            if wire in self.native
            else WirePath(CHAT, Adapter.PASSTHROUGH if CHAT in self.native else self.adapter)
            for wire in WIRES
        }
        object.__setattr__(self, "paths", paths)

    def translates(self, client_wire: str) -> bool:
        """Whether a ``client_wire`` request reaches this deployment translated to chat by its
        wire (it does not speak that wire): what the estimate prices it for
        (``pricing.route.Route.translated``), before the gateway takes the same path
        (``ProviderTable.leg``)."""
        path = self.paths.get(client_wire)
        return path is not None and path.wire != client_wire

    @property
    def chat_cap(self) -> str:
        """The field a chat request routefit translated carries its output cap in here:
        ``max_completion_tokens`` at OpenAI's own API, which documents ``max_tokens`` as
        deprecated and refuses it from its reasoning models (o-series, gpt-5: 400 "Unsupported
        parameter"), so a Messages or Gemini client of such a route was refused every request;
        ``max_tokens`` everywhere else, the name every OpenAI-compatible server knows (not all
        know the new one). A chat client's own body names its cap as its client wrote it."""
        if self.upstream.provider != "openai":
            return "max_tokens"
        host = urlsplit(self.upstream.api_base or OPENAI_API).hostname
        return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"

    def keyed(self, up: Upstream) -> Deployment:
        """This deployment reached with ``up`` (the same, or carrying the client's own key)."""
        if up is self.upstream:
            return self
        return Deployment(
            self.name, up, self.native, self.urls, self.auth, self.adapter, self.bounds
        )


def _messages_url(api_base: str | None) -> str:
    base = (api_base or ANTHROPIC_BASE).rstrip("/")
    return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"


def _gemini_model_url(api_base: str | None, model: str) -> str:
    """``{api_base}/models/{model}``: the api_base carries the API version (``/v1beta``), as
    litellm joins it for the same route's chat requests."""
    return f"{(api_base or GEMINI_BASE).rstrip('/')}/models/{model}"


def gemini_url(target: Deployment, stream: bool) -> str:
    """The method a Gemini request calls: SSE when streamed (``alt=sse``), else whole."""
    method = ":streamGenerateContent?alt=sse" if stream else ":generateContent"
    return target.urls[GEMINI] + method


def deployment(name: str, up: Upstream, bounds: Bounds | None = None) -> Deployment:
    """The record of ``up``, by its transport (``proxy.config.transport``)."""
    bounds = bounds or Bounds()
    if up.provider == "gemini" and up.transport == "litellm":
        # Google AI Studio: Gemini clients natively, the other wires' chat through litellm
        return Deployment(
            name,
            up,
            frozenset({GEMINI}),
            {GEMINI: _gemini_model_url(up.api_base, up.model_name)},
            Auth("x-goog-api-key"),
            Adapter.LITELLM,
            bounds,
        )
    if up.transport == "openai":
        base = (up.api_base or "").rstrip("/")
        native = frozenset({CHAT, RESPONSES} if up.provider == "openai" else {CHAT})
        urls = {CHAT: f"{base}/chat/completions", RESPONSES: f"{base}/responses"}
        return Deployment(
            name,
            up,
            native,
            {w: u for w, u in urls.items() if w in native},
            Auth("authorization", "Bearer "),
            Adapter.PASSTHROUGH,
            bounds,
        )
    if up.transport == "anthropic":
        # litellm_params beyond routefit's own are litellm's to apply: chat goes through it
        adapter = Adapter.LITELLM if up.extra else Adapter.CHAT_TO_MESSAGES
        return Deployment(
            name,
            up,
            frozenset({MESSAGES}),
            {MESSAGES: _messages_url(up.api_base)},
            Auth("x-api-key", "", ANTHROPIC_VERSION),
            adapter,
            bounds,
        )
    return Deployment(name, up, frozenset(), {}, Auth(), Adapter.LITELLM, bounds)


class Transport(Protocol):
    """A way of reaching deployments, shaped like httpx's transports: one send, one close."""

    async def send(self, target: Deployment, out: Outbound) -> Completion | EventStream:
        """``out`` to ``target``: a ``Completion``, or an ``EventStream`` when ``out.stream``."""

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Leg:
    """One client wire's way to one deployment, bound to the transport that carries it."""

    deployment: Deployment
    wire: str
    adapter: Adapter
    transport: Transport


class ProviderTable:
    """Every deployment's legs, bound once at start-up to the app's transports."""

    def __init__(
        self, deployments: Iterable[Deployment], transports: Mapping[Adapter, Transport]
    ) -> None:
        self.deployments = {d.name: d for d in deployments}
        self._transports = dict(transports)
        self._legs = {
            (d.name, wire): Leg(d, path.wire, path.adapter, transports[path.adapter])
            for d in self.deployments.values()
            for wire, path in d.paths.items()
        }

    @property
    def needs_litellm(self) -> bool:
        """Whether a deployment's chat goes through litellm whatever the request (so litellm is
        imported at start-up; the chat→Messages adapter imports it on first unmapped use)."""
        return any(d.adapter is Adapter.LITELLM for d in self.deployments.values())

    def leg(self, name: str, client_wire: str) -> Leg:
        """How a ``client_wire`` request goes to deployment ``name``: natively when the
        deployment speaks it, else the way chat does, translated by the wire."""
        found = self._legs.get((name, client_wire))
        return found if found is not None else self._legs[(name, CHAT)]

    async def aclose(self) -> None:
        for transport in {id(t): t for t in self._transports.values()}.values():
            await transport.aclose()
