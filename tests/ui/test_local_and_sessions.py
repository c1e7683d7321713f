"""sim:// routes are pointed at a bound loopback port; dashboard sessions verify and expire."""

from __future__ import annotations

import pytest
import yaml

from proxy.config import ConfigError, parse_config
from proxy.errors import ProxyError
from proxy.local_provider import attach
from proxy.teams import TeamDirectory, hash_key
from proxy.ui.auth import Sessions


def _config(model: str):
    data = yaml.safe_load(
        f"""
        model_list:
          - model_name: local
            litellm_params: {{model: openai/{model}, api_base: "sim://local"}}
            model_info: {{max_input_tokens: 8192}}
          - model_name: remote
            litellm_params: {{model: openai/gpt-4o, api_key: sk-x}}
        """
    )
    return parse_config(data, "routes.yaml", environ={})


def test_attach_rewrites_only_sim_routes_to_a_bound_port() -> None:
    config, local = attach(_config("gpt-4o-small"))
    assert local is not None
    try:
        base = config.routes["local"].upstream.api_base
        assert base == local.base_url + "/v1" and base.startswith("http://127.0.0.1:")
        assert config.routes["remote"].upstream.api_base == "https://api.openai.com/v1"
    finally:
        local.sock.close()
    plain = parse_config(
        {"model_list": [{"model_name": "r", "litellm_params": {"model": "openai/gpt-4o"}}]},
        environ={},
    )
    assert attach(plain) == (plain, None)


def test_a_sim_route_for_a_model_the_simulator_lacks_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a simulator model"):
        attach(_config("gpt-5-imaginary"))


def test_sessions_need_the_admin_key_and_expire() -> None:
    sessions = Sessions(TeamDirectory([], hash_key("admin")), hash_key("admin"))
    with pytest.raises(ProxyError) as info:
        sessions.login("guess")
    assert info.value.status == 403
    token = sessions.login("admin")
    assert sessions.valid(token)
    sessions.authorize({}, {"routefit_ui": token})
    expiry, _, mac = token.partition(".")
    assert not sessions.valid(f"{int(expiry) + 1}.{mac}")  # a forged expiry
    assert not sessions.valid(token, now=int(expiry) + 1)
    other = Sessions(TeamDirectory([], hash_key("rotated")), hash_key("rotated"))
    assert not other.valid(token)  # a new admin key ends every session
    with pytest.raises(ProxyError) as info:
        sessions.authorize({}, {})
    assert info.value.status == 401
    sessions.authorize({"authorization": "Bearer admin"}, {})
