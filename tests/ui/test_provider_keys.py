"""Never forward keyless: the pure check, the error, and forward_client_key."""

from __future__ import annotations

import orjson
import pytest
import yaml

from proxy.config import parse_config
from proxy.errors import ProxyError, error_body
from proxy.provider_keys import ProviderKeys, key_sources, missing_provider_keys

CONFIG = """
model_list:
  - model_name: keyed
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/KEYED_KEY}
  - model_name: unset
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/UNSET_KEY}
  - model_name: byok
    litellm_params: {model: openai/gpt-4o, api_key: os.environ/UNSET_KEY}
    routefit: {forward_client_key: true}
  - model_name: local-vllm
    litellm_params: {model: hosted_vllm/llama, api_base: "http://127.0.0.1:9/v1"}
"""


def _keys(teams_open: bool = True) -> tuple[object, ProviderKeys]:
    data = yaml.safe_load(CONFIG)
    config = parse_config(data, "routes.yaml", environ={"KEYED_KEY": "sk-real"})
    return config, ProviderKeys(config, key_sources(data["model_list"]), teams_open)


def test_only_routes_whose_named_variable_is_unset_are_missing() -> None:
    data = yaml.safe_load(CONFIG)
    config = parse_config(data, "routes.yaml", environ={"KEYED_KEY": "sk-real"})
    missing = list(missing_provider_keys(config, key_sources(data["model_list"])).values())
    assert [(m.alias, m.env) for m in missing] == [("unset", "UNSET_KEY")]
    assert "UNSET_KEY is unset" in missing[0].warning()


def test_a_keyless_route_answers_provider_key_missing_naming_the_variable() -> None:
    config, keys = _keys()
    with pytest.raises(ProxyError) as info:
        keys.upstream(config.routes["unset"], {})
    err = info.value
    body = orjson.loads(error_body(err))["error"]
    assert err.status == 503 and body["code"] == "provider_key_missing"
    assert "UNSET_KEY" in body["message"] and body["type"] == "service_unavailable_error"
    assert err.headers["x-should-retry"] == "false"
    assert keys.upstream(config.routes["keyed"], {}).api_key == "sk-real"
    assert keys.upstream(config.routes["local-vllm"], {}).api_key is None


def test_forward_client_key_uses_the_bearer_in_open_mode_and_a_header_with_teams() -> None:
    config, keys = _keys(teams_open=True)
    rc = config.routes["byok"]
    assert keys.upstream(rc, {"authorization": "Bearer sk-client"}).api_key == "sk-client"
    with pytest.raises(ProxyError) as info:
        keys.upstream(rc, {})
    assert info.value.code == "provider_key_required"
    config, keys = _keys(teams_open=False)
    upstream = keys.upstream(
        rc, {"authorization": "Bearer team-key", "x-provider-key": "sk-client"}
    )
    assert upstream.api_key == "sk-client"  # never the team's routefit key
    with pytest.raises(ProxyError):
        keys.upstream(rc, {"authorization": "Bearer team-key"})


def test_from_file_reads_the_variable_names_from_the_config_file(tmp_path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(CONFIG)
    config = parse_config(yaml.safe_load(CONFIG), str(path), environ={})
    keys = ProviderKeys.from_file(config, teams_open=True)
    assert {a: m.env for a, m in keys.missing.items()} == {
        "keyed": "KEYED_KEY",
        "unset": "UNSET_KEY",
    }


def test_a_config_parsed_from_data_knows_its_key_sources_without_a_file() -> None:
    """A config built from data (an embedding program, the in-process harness) has no file to
    read its key sources back from: its own copy of ``model_list`` gives them, so a
    ``forward_client_key`` route still forwards the client's key, never the configured one."""
    config = parse_config(yaml.safe_load(CONFIG), "<no such file>", environ={})
    keys = ProviderKeys.from_file(config, teams_open=True)
    byok = config.routes["byok"]
    assert keys.upstream(byok, {"authorization": "Bearer sk-client"}).api_key == "sk-client"
    assert [m.env for m in keys.missing.values()] == ["KEYED_KEY", "UNSET_KEY"]
