"""Teams, budgets, unknown paths and BYOK on ``/v1/messages``: every refusal in Anthropic's shape
(the anthropic SDK maps them to its own exception types), and the client's own provider key
forwarded only where a route opts in — never the team's routefit key."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from harness import gateway_config
from inprocess import run_inprocess

TEAM_KEY = "sk-team-anthropic-auth"
TINY_KEY = "sk-team-tiny-anthropic-auth"
TINY_DAY = 4_150
PROVIDER_KEY = "sk-ant-client-own-key"
HELLO = [{"role": "user", "content": "hello"}]


def _claude(alias: str, sim_url: str, **routefit: object) -> dict:
    entry: dict = {
        "model_name": alias,
        "litellm_params": {"model": "anthropic/claude-sim", "api_base": sim_url},
    }
    if routefit:
        entry["routefit"] = routefit
    else:
        entry["litellm_params"]["api_key"] = "sk-ant-route-key"
    return entry


def _config(path, sim_url: str, teams: bool):
    routes = [_claude("claude", sim_url), _claude("claude-byok", sim_url, forward_client_key=True)]
    settings: dict = {}
    if teams:
        settings["teams"] = [
            {"id": "alpha", "keys": [TEAM_KEY]},
            # a day that holds a short prompt's reservation with 4,096 for the output, but not
            # once a longer prompt was charged (a window no request fits at all is a 400)
            {"id": "tiny", "keys": [TINY_KEY], "quotas": {"tokens_per_day": TINY_DAY}},
        ]
    return gateway_config(path, routes, **settings)


@pytest.fixture(scope="module")
def teams_gw(sim, tmp_path_factory):
    path = tmp_path_factory.mktemp("anthropic-auth") / "teams.yaml"
    with run_inprocess(_config(path, sim.base_url, teams=True)) as running:
        yield running


@pytest.fixture(scope="module")
def open_gw(sim, tmp_path_factory):
    path = tmp_path_factory.mktemp("anthropic-auth") / "open.yaml"
    with run_inprocess(_config(path, sim.base_url, teams=False)) as running:
        yield running


def _client(gw, **keys: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url, max_retries=0, **keys)


def _anthropic_error(body: object, kind: str) -> None:
    assert isinstance(body, dict) and body["type"] == "error", body
    assert body["error"]["type"] == kind and body["error"]["message"], body


def test_missing_and_wrong_keys_are_401_authentication_error(teams_gw):
    r = httpx.post(
        teams_gw.base_url + "/v1/messages",
        json={"model": "claude", "max_tokens": 8, "messages": HELLO},
    )
    assert r.status_code == 401
    _anthropic_error(r.json(), "authentication_error")
    with pytest.raises(anthropic.AuthenticationError) as info:
        _client(teams_gw, api_key="sk-wrong").messages.create(
            model="claude", max_tokens=8, messages=HELLO
        )
    _anthropic_error(info.value.body, "authentication_error")
    with pytest.raises(anthropic.AuthenticationError):
        _client(teams_gw, api_key="sk-wrong").messages.count_tokens(model="claude", messages=HELLO)


def test_team_key_as_x_api_key_or_bearer_is_served(teams_gw, fresh_sim):
    for keys in ({"api_key": TEAM_KEY}, {"auth_token": TEAM_KEY}):
        reply = _client(teams_gw, **keys).messages.create(
            model="claude", max_tokens=8, messages=HELLO
        )
        assert reply.content[0].text
        sent = fresh_sim.last_request("/v1/messages")["headers"]
        assert sent["x-api-key"] == "sk-ant-route-key"  # the route's key, not the team's
        assert "authorization" not in sent


def test_team_over_its_budget_is_429_rate_limit_error(teams_gw, fresh_sim):
    client = _client(teams_gw, api_key=TINY_KEY)
    longer = [{"role": "user", "content": "Say hello to every one of these: " + "friend " * 100}]
    client.messages.create(model="claude", max_tokens=16, messages=longer)  # held, then charged
    served = len(fresh_sim.requests(path="/v1/messages"))
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model="claude", max_tokens=4096, messages=HELLO)
    _anthropic_error(info.value.body, "rate_limit_error")
    assert int(info.value.response.headers["retry-after"]) >= 1
    assert len(fresh_sim.requests(path="/v1/messages")) == served
    with (
        pytest.raises(anthropic.RateLimitError),
        client.messages.stream(model="claude", max_tokens=4096, messages=HELLO) as stream,
    ):
        for _ in stream:
            pass


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("POST", "/v1/messages/batches", 404, "not_found_error"),
        ("GET", "/v1/messages/nope/deeper", 404, "not_found_error"),
        ("GET", "/v1/messages", 405, "invalid_request_error"),
        ("PUT", "/v1/messages/count_tokens", 405, "invalid_request_error"),
    ],
)
def test_unknown_paths_and_methods_under_messages_are_anthropic_shaped(
    open_gw, method, path, status, kind
):
    r = httpx.request(method, open_gw.base_url + path)
    assert r.status_code == status, r.text
    _anthropic_error(r.json(), kind)
    if status == 405:
        assert "POST" in r.headers["allow"]


def test_paths_elsewhere_stay_openai_shaped(open_gw):
    r = httpx.get(open_gw.base_url + "/v1/nothing-here")
    assert r.status_code == 404 and set(r.json()) == {"error"}


def test_byok_open_gateway_forwards_the_clients_own_key(open_gw, fresh_sim):
    for keys in ({"api_key": PROVIDER_KEY}, {"auth_token": PROVIDER_KEY}):
        reply = _client(open_gw, **keys).messages.create(
            model="claude-byok", max_tokens=8, messages=HELLO
        )
        assert reply.content[0].text
        assert fresh_sim.last_request("/v1/messages")["headers"]["x-api-key"] == PROVIDER_KEY
    # a route without forward_client_key keeps its own key whatever the client sends
    _client(open_gw, api_key=PROVIDER_KEY).messages.create(
        model="claude", max_tokens=8, messages=HELLO
    )
    assert fresh_sim.last_request("/v1/messages")["headers"]["x-api-key"] == "sk-ant-route-key"


def test_byok_with_teams_takes_x_api_key_beside_the_bearer_team_key(teams_gw, fresh_sim):
    # as Claude Code sends them with ANTHROPIC_AUTH_TOKEN=<team key>, ANTHROPIC_API_KEY=<own key>
    # (measured with 2.1.x); the SDK takes one credential, so the second is a header here
    both = _client(teams_gw, auth_token=TEAM_KEY, default_headers={"x-api-key": PROVIDER_KEY})
    assert both.messages.create(model="claude-byok", max_tokens=8, messages=HELLO).content
    assert fresh_sim.last_request("/v1/messages")["headers"]["x-api-key"] == PROVIDER_KEY
    header = _client(
        teams_gw, api_key=TEAM_KEY, default_headers={"x-provider-key": PROVIDER_KEY + "-h"}
    )
    assert header.messages.create(model="claude-byok", max_tokens=8, messages=HELLO).content
    assert fresh_sim.last_request("/v1/messages")["headers"]["x-api-key"] == PROVIDER_KEY + "-h"


def test_byok_without_a_provider_key_is_401_and_never_forwards_the_team_key(teams_gw, fresh_sim):
    for keys in ({"api_key": TEAM_KEY}, {"auth_token": TEAM_KEY}):
        with pytest.raises(anthropic.AuthenticationError) as info:
            _client(teams_gw, **keys).messages.create(
                model="claude-byok", max_tokens=8, messages=HELLO
            )
        _anthropic_error(info.value.body, "authentication_error")
        assert "x-provider-key" in info.value.body["error"]["message"]
    assert fresh_sim.requests(path="/v1/messages") == []
