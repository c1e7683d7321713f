"""Deployments and LiteLLM's router_settings: parsed and validated whole; what the gateway does
not do yet (context-window fallbacks) refused with an error that says so rather than a warning
(issue 29: ``router_settings.fallbacks`` was ignored with a warning and ``routefit check`` exited
0)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ConfigError, loader, parse_config
from proxy.config.reader import Reader
from proxy.config.router_settings import RouterSettings, read_router_settings

_A = {"model_name": "a", "litellm_params": {"model": "openai/gpt-4o", "api_key": "k"}}
_B = {"model_name": "b", "litellm_params": {"model": "anthropic/claude-sonnet-4-5"}}
_A2 = {
    "model_name": "a",
    "litellm_params": {"model": "deepseek/deepseek-chat", "weight": 3, "rpm": 60, "tpm": 9000},
    "model_info": {"id": "a-deepseek"},
}


def _parse(router: Any = None, models: list[Any] | None = None) -> loader.Config:
    data: dict[str, Any] = {"model_list": models or [_A, _B]}
    if router is not None:
        data["router_settings"] = router
    return parse_config(data, "r.yaml", environ={})


@pytest.fixture
def routed() -> None:
    """The gateway routes: the router's features are accepted."""


def test_the_route_stays_the_first_deployment_and_deployments_lists_them_all(routed: None) -> None:
    config = _parse(models=[_A, _B, _A2])
    first, second = config.deployments("a")
    assert config.route("a") is first and first.first and not second.first
    assert first.route.model == "openai/gpt-4o" and second.route.model == "deepseek/deepseek-chat"
    # each deployment has its own route facts: tokenizer, window
    assert first.route.tokenizer != second.route.tokenizer
    assert second.deployment_id == "a-deepseek"
    assert (second.weight, second.rpm, second.tpm) == (3.0, 60, 9000)
    assert "weight" not in second.upstream.extra and "rpm" not in second.upstream.extra
    assert config.deployments("b") == (config.route("b"),)
    assert config.deployments("nope") == ()
    # calibration keys: the first keeps the alias (what it learnt carries over)
    assert first.calibration_key == "a" and second.calibration_key == "a@a-deepseek"


def test_derived_ids_are_stable_and_unique(routed: None) -> None:
    twin = {"model_name": "a", "litellm_params": {"model": "openai/gpt-4o", "api_key": "k2"}}
    one = _parse(models=[_A, twin, _B])
    again = _parse(models=[_B, _A, twin])
    ids = [d.deployment_id for d in one.deployments("a")]
    assert len(set(ids)) == 2 and all(i.startswith("a-") for i in ids)
    assert ids == [d.deployment_id for d in again.deployments("a")]


def test_deployments_that_count_alike_are_calibrated_as_one(routed: None) -> None:
    """One model under two keys (or in two regions) counts one way: its samples and anchors
    are shared; another model, or another window for the same one, keeps its own."""
    twin = {"model_name": "a", "litellm_params": {"model": "openai/gpt-4o", "api_key": "k2"}}
    small = {**twin, "model_info": {"max_input_tokens": 8192}}
    config = _parse(models=[_A, twin, small, _B])
    keys = [d.calibration_key for d in config.deployments("a")]
    assert keys[:2] == ["a", "a"]
    assert keys[2] == f"a@{config.deployments('a')[2].deployment_id}"


def test_a_repeated_model_info_id_is_an_error(routed: None) -> None:
    dup = {**_B, "model_info": {"id": "a-deepseek"}}
    with pytest.raises(ConfigError, match=r"model_list\[2\]\.model_info\.id: 'a-deepseek' is also"):
        _parse(models=[_A, _A2, dup])


def test_every_router_key_is_parsed(routed: None) -> None:
    config = _parse(
        {
            "routing_strategy": "usage-based-routing-v2",
            "num_retries": 2,
            "retry_after": 1,
            "allowed_fails": 1,
            "cooldown_time": 30,
            "timeout": 20,
            "fallbacks": [{"a": ["b"]}],
            "default_fallbacks": ["b"],
            "retry_policy": {"RateLimitErrorRetries": 4},
            "allowed_fails_policy": {"AuthenticationErrorAllowedFails": 2},
        }
    )
    r = config.router
    assert r.routing_strategy == "usage-based-routing-v2" and r.num_retries == 2
    assert (r.retry_after, r.allowed_fails, r.cooldown_time, r.timeout) == (1.0, 1, 30.0, 20.0)
    assert r.fallbacks == {"a": ("b",)} and r.default_fallbacks == ("b",)
    assert r.retry_policy == {"rate_limit": 4} and r.allowed_fails_policy == {"auth": 2}
    # parsed as LiteLLM writes it (one name for a list)
    rd = Reader("r.yaml", {})
    windows = read_router_settings({"context_window_fallbacks": [{"b": "a"}]}, ["a", "b"], rd)
    assert windows.context_window_fallbacks == {"b": ("a",)}


@pytest.mark.parametrize(
    ("router", "message"),
    [
        ({"redis_host": "x"}, r"router_settings\.redis_host: LiteLLM router key not implemented"),
        ({"model_group_retry_policy": {}}, r"model_group_retry_policy: LiteLLM router key not"),
        ({"routing_strategy": "round-robin"}, r"routing_strategy: must be one of simple-shuffle"),
        ({"num_retries": -1}, r"num_retries: must be an integer >= 0"),
        ({"cooldown_time": "5s"}, r"cooldown_time: must be a number of seconds"),
        ({"fallbacks": {"a": ["b"]}}, r"fallbacks: must be a list like"),
        ({"fallbacks": [{"a": ["zz"]}]}, r"fallbacks\[0\]\.a\[0\]: 'zz' is not a model_name"),
        ({"fallbacks": [{"zz": ["a"]}]}, r"fallbacks\[0\]\.zz: 'zz' is not a model_name"),
        ({"fallbacks": [{"a": ["a"]}]}, r"fallbacks\[0\]\.a: 'a' falls back to itself"),
        ({"fallbacks": [{"a": ["b"]}, {"a": ["b"]}]}, r"fallbacks\[1\]\.a: 'a' has fallbacks"),
        ({"default_fallbacks": ["b", "b"]}, r"default_fallbacks\[1\]: 'b' is listed twice"),
        ({"retry_policy": {"RateLimitRetries": 1}}, r"retry_policy\.RateLimitRetries: unknown"),
    ],
)
def test_a_wrong_router_key_is_an_error_naming_it(
    routed: None, router: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _parse(router)


@pytest.mark.parametrize(
    "router",
    [
        {"fallbacks": [{"a": ["b"]}]},
        {"default_fallbacks": ["b"]},
        {"num_retries": 2},
        {"cooldown_time": 60},
    ],
)
def test_the_router_s_features_load(router: dict[str, Any]) -> None:
    [key] = router
    assert key in _parse(router).router.written


def test_context_window_fallbacks_load() -> None:
    config = _parse({"context_window_fallbacks": [{"a": ["b"]}]})
    assert config.router.context_window_fallbacks == {"a": ("b",)}


def test_until_the_gateway_routes_what_changes_nothing_loads() -> None:
    """A strategy over one deployment per alias, and keys written at their defaults."""
    config = _parse({"routing_strategy": "least-busy", "num_retries": 0, "fallbacks": []})
    assert config.router.routing_strategy == "least-busy"
    assert config.router.written == {"routing_strategy", "num_retries", "fallbacks"}
    assert _parse().router == RouterSettings()


def test_usage_limits_load_under_usage_routing() -> None:
    limited = {**_B, "litellm_params": {**_B["litellm_params"], "rpm": 5}}
    config = _parse({"routing_strategy": "usage-based-routing-v2"}, models=[_A, limited])
    assert config.route("b").rpm == 5 and config.router.routing_strategy == "usage-based-routing-v2"


def test_a_limit_in_both_places_is_an_error(routed: None) -> None:
    both = {**_B, "rpm": 5, "litellm_params": {**_B["litellm_params"], "rpm": 5}}
    with pytest.raises(ConfigError, match=r"model_list\[1\]\.rpm: also set as litellm_params"):
        _parse(models=[_A, both])


def _teams(*blocks: dict[str, Any], routes: list[str] | None = None) -> list[dict[str, Any]]:
    teams = []
    for i, block in enumerate(blocks):
        team: dict[str, Any] = {"id": f"t{i}", "keys": [f"k{i}"], "router_settings": block}
        if routes is not None:
            team["routes"] = routes
        teams.append(team)
    return teams


def test_a_team_s_router_settings_override_the_global_ones_key_by_key(routed: None) -> None:
    data = {
        "model_list": [_A, _B],
        "router_settings": {"num_retries": 1, "fallbacks": [{"a": ["b"]}], "cooldown_time": 9},
        "routefit_settings": {"teams": [*_teams({"num_retries": 4, "fallbacks": []}), _T_PLAIN]},
    }
    config = parse_config(data, "r.yaml", environ={})
    team = config.router_for("t0")
    assert (team.num_retries, team.fallbacks, team.cooldown_time) == (4, {}, 9.0)
    assert config.router_for("plain") is config.router and config.router_for(None) is config.router
    assert config.router.num_retries == 1


_T_PLAIN = {"id": "plain", "keys": ["kp"]}


def test_a_team_s_fallbacks_stay_within_its_routes(routed: None) -> None:
    data = {
        "model_list": [_A, _B],
        "routefit_settings": {"teams": _teams({"fallbacks": [{"a": ["b"]}]}, routes=["a"])},
    }
    with pytest.raises(ConfigError, match=r"teams\[0\]\.router_settings: names \['b'\], outside"):
        parse_config(data, "r.yaml", environ={})


def test_a_team_s_router_keys_are_as_strict_as_the_global_ones() -> None:
    wrong = {"model_list": [_A, _B], "routefit_settings": {"teams": _teams({"redis_host": "x"})}}
    with pytest.raises(ConfigError, match=r"teams\[0\]\.router_settings\.redis_host: LiteLLM"):
        parse_config(wrong, "r.yaml", environ={})
    block = {"context_window_fallbacks": [{"a": ["b"]}]}
    mine = {"model_list": [_A, _B], "routefit_settings": {"teams": _teams(block)}}
    config = parse_config(mine, "r.yaml", environ={})
    assert config.router_for("t0").context_window_fallbacks == {"a": ("b",)}


def test_check_describes_every_deployment_and_the_router(routed: None) -> None:
    import json

    from proxy.config.describe import describe, window_problems

    tiny = {**_A2, "routefit": {"context_window": 1000}}
    config = _parse({"num_retries": 2, "fallbacks": [{"a": ["b"]}]}, models=[_A, _B, tiny])
    shown = json.loads(json.dumps(describe(config)))
    assert shown["routes"]["a"]["deployment_id"] == config.route("a").deployment_id
    assert [d["deployment_id"] for d in shown["deployments"]["a"]] == ["a-deepseek"]
    assert "b" not in shown["deployments"]
    assert shown["router"]["settings"]["num_retries"] == 2
    assert shown["router"]["settings"]["fallbacks"] == {"a": ["b"]}
    errors, _ = window_problems(config)
    assert any("route 'a@a-deepseek'" in e for e in errors)  # every deployment is checked
    from proxy.cli import check_text

    text = check_text(shown)
    first = config.route("a").deployment_id
    assert f"  deployment {first} -> openai/gpt-4o" in text
    assert "  deployment a-deepseek -> deepseek/deepseek-chat" in text
    assert "weight 3  rpm 60  tpm 9000" in text
    assert "deployment" not in text.split("route b ->")[1].split("route ")[0]  # one: not listed


def test_a_route_s_context_fallback_choice_is_read_and_checked() -> None:
    paying = {**_B, "routefit": {"context_fallback": "pay_less"}}
    config = _parse(models=[_A, paying])
    assert config.route("a").context_fallback == "keep_more"
    assert config.route("b").context_fallback == "pay_less"
    wrong = {**_B, "routefit": {"context_fallback": "cheapest"}}
    with pytest.raises(ConfigError, match=r"routefit\.context_fallback: must be one of keep_more"):
        _parse(models=[_A, wrong])


def test_litellm_settings_router_keys_are_read_and_router_settings_wins() -> None:
    """LiteLLM's proxy docs put ``fallbacks``, ``num_retries`` and ``request_timeout`` under
    ``litellm_settings`` (its router falls back to them); routefit warned "not used" and a
    copied config loaded, then never fell back or retried."""
    data = {
        "model_list": [_A, _B],
        "litellm_settings": {
            "num_retries": 3,
            "request_timeout": 10,
            "fallbacks": [{"a": ["b"]}],
            "context_window_fallbacks": [{"b": ["a"]}],
            "allowed_fails": 1,
            "set_verbose": True,
        },
        "router_settings": {"num_retries": 1},
    }
    config = parse_config(data, "r.yaml", environ={})
    router = config.router
    assert router.fallbacks == {"a": ("b",)} and router.context_window_fallbacks == {"b": ("a",)}
    assert (router.num_retries, router.timeout, router.allowed_fails) == (1, 10.0, 1)
    assert {"num_retries", "timeout", "fallbacks"} <= router.written
    assert [w for w in config.warnings if "litellm_settings" in w] == [
        "r.yaml: litellm_settings.set_verbose: not used by routefit; ignored"
    ]
    data["litellm_settings"] = {"fallbacks": [{"a": ["nope"]}]}
    with pytest.raises(ConfigError, match=r"litellm_settings\.fallbacks\[0\]\.a\[0\]: 'nope'"):
        parse_config(data, "r.yaml", environ={})
