"""The provider table: per deployment, which wires it speaks, where, with which key header, and
how each client wire reaches it (``proxy.providers``) — read from real config files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.config import load_config
from proxy.exchange import CHAT, GEMINI, MESSAGES, RESPONSES, Outbound
from proxy.providers import Adapter, WirePath, deployment
from proxy.transports.provider_http import provider_request


def _upstreams(tmp_path: Path, *entries: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "routefit.yaml"
    data = {"model_list": list(entries), "routefit_settings": {"store_path": ":memory:"}}
    path.write_text(yaml.safe_dump(data))
    return {alias: rc.upstream for alias, rc in load_config(str(path)).routes.items()}


def _entry(alias: str, model: str, **params: Any) -> dict[str, Any]:
    own = params.pop("routefit", None)
    entry: dict[str, Any] = {
        "model_name": alias,
        "litellm_params": {"model": model, "api_key": "sk-test", **params},
    }
    if own:
        entry["routefit"] = own
    return entry


@pytest.fixture
def upstreams(tmp_path: Path) -> dict[str, Any]:
    return _upstreams(
        tmp_path,
        _entry("gpt", "openai/gpt-4o"),
        _entry("deepseek", "deepseek/deepseek-chat"),
        _entry("claude", "anthropic/claude-sonnet-4-5"),
        _entry("claude-extra", "anthropic/claude-sonnet-4-5", drop_params=True),
        _entry("gemini", "gemini/gemini-2.0-flash"),
    )


def test_each_client_wire_has_one_path_per_deployment(upstreams: dict[str, Any]) -> None:
    paths = {alias: deployment(alias, up).paths for alias, up in upstreams.items()}
    native = Adapter.PASSTHROUGH
    assert paths["gpt"] == {
        CHAT: WirePath(CHAT, native),
        MESSAGES: WirePath(CHAT, native),
        RESPONSES: WirePath(RESPONSES, native),
        GEMINI: WirePath(CHAT, native),
    }
    assert paths["deepseek"][RESPONSES] == WirePath(CHAT, native)
    assert paths["claude"] == {
        CHAT: WirePath(CHAT, Adapter.CHAT_TO_MESSAGES),
        MESSAGES: WirePath(MESSAGES, native),
        RESPONSES: WirePath(CHAT, Adapter.CHAT_TO_MESSAGES),
        GEMINI: WirePath(CHAT, Adapter.CHAT_TO_MESSAGES),
    }
    # litellm_params beyond routefit's own are litellm's: chat goes through it
    assert paths["claude-extra"][CHAT] == WirePath(CHAT, Adapter.LITELLM)
    assert paths["claude-extra"][MESSAGES] == WirePath(MESSAGES, native)
    # Google AI Studio speaks Gemini natively; the other wires' chat goes through litellm
    assert paths["gemini"].pop(GEMINI) == WirePath(GEMINI, native)
    assert set(paths["gemini"].values()) == {WirePath(CHAT, Adapter.LITELLM)}


def test_anthropic_routes_say_they_are_anthropic_not_litellm(upstreams: dict[str, Any]) -> None:
    assert upstreams["claude"].transport == "anthropic"
    assert upstreams["gemini"].transport == "litellm"
    assert upstreams["gpt"].transport == "openai"


def test_the_request_carries_the_deployments_url_and_auth(upstreams: dict[str, Any]) -> None:
    gpt = deployment("gpt", upstreams["gpt"])
    sent = provider_request(gpt, Outbound(RESPONSES, {"model": "gpt", "input": "hi"}))
    assert sent.url == "https://api.openai.com/v1/responses"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert b'"model":"gpt-4o"' in sent.body

    claude = deployment("claude", upstreams["claude"])
    out = Outbound(MESSAGES, {"model": "claude"}, {"anthropic-version": "2024-01-01"})
    sent = provider_request(claude, out)
    assert sent.url == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == "sk-test"
    assert "authorization" not in sent.headers
    assert sent.headers["anthropic-version"] == "2024-01-01"  # the client's own wins

    gemini = deployment("gemini", upstreams["gemini"])
    body = {"contents": [{"parts": [{"text": "hi"}]}]}
    sent = provider_request(gemini, Outbound(GEMINI, body, stream=True))
    base = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash"
    assert sent.url == base + ":streamGenerateContent?alt=sse"
    assert sent.headers["x-goog-api-key"] == "sk-test"
    assert "authorization" not in sent.headers
    assert sent.body == b'{"contents":[{"parts":[{"text":"hi"}]}]}'  # no model: it is in the URL
    assert provider_request(gemini, Outbound(GEMINI, body)).url == base + ":generateContent"


def test_a_client_key_reaches_the_same_deployment(upstreams: dict[str, Any]) -> None:
    gpt = deployment("gpt", upstreams["gpt"])
    theirs = gpt.keyed(replace(gpt.upstream, api_key="sk-client"))
    assert theirs.paths == gpt.paths and theirs.urls == gpt.urls
    assert provider_request(theirs, Outbound(CHAT, {})).headers["authorization"] == (
        "Bearer sk-client"
    )
    assert gpt.keyed(gpt.upstream) is gpt
