"""Config loading: LiteLLM compatibility, defaults, errors that name the file and key."""

from __future__ import annotations

import textwrap

import pytest

from proxy.config import ConfigError, load_config, parse_config


def write(tmp_path, text: str):
    path = tmp_path / "routes.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_example_config_loads(example_config):
    config = load_config(example_config, environ={})
    assert {"gpt-4o", "gpt-4", "deepseek-chat", "claude-sonnet"} <= set(config.routes)
    gpt4o = config.routes["gpt-4o"]
    assert gpt4o.route.tokenizer == "o200k_base"
    assert gpt4o.route.framing.family == "openai"
    assert gpt4o.upstream.transport == "openai"
    assert gpt4o.upstream.api_key is None  # unset env var: null, noted, not an error
    assert any("OPENAI_API_KEY" in m for m in config.missing_env)
    assert config.routes["gpt-4"].route.tokenizer == "cl100k_base"
    assert config.routes["deepseek-chat"].route.framing.family == "deepseek"
    assert config.routes["claude-sonnet"].upstream.transport == "litellm"


def test_defaults_come_from_litellms_model_map(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """
        model_list:
          - model_name: fast
            litellm_params: {model: openai/gpt-4o}
    """,
        ),
        environ={},
    )
    route = config.routes["fast"].route
    # gpt-4o in the map: 128k input window, 16,384 output tokens, vision.
    assert (route.context_window, route.max_output_tokens, route.supports_vision) == (
        128000,
        16384,
        True,
    )
    assert config.routes["fast"].input_cost_per_token == pytest.approx(2.5e-06)


def test_model_info_and_routefit_keys_override_defaults(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """
        model_list:
          - model_name: local
            litellm_params:
              model: hosted_vllm/my-model
              api_base: http://127.0.0.1:8000/v1
            model_info: {max_input_tokens: 32768, max_output_tokens: 2048,
                         supports_vision: false}
            routefit:
              tokenizer: heuristic:3.5
              framing: {family: generic, per_message: 5}
              output_reserve: 1024
              safety_margin: 100
              fit: {pin_fraction: 0.0}
    """,
        ),
        environ={},
    )
    rc = config.routes["local"]
    assert rc.route.context_window == 32768
    assert rc.route.tokenizer == "heuristic:3.5"
    assert rc.route.framing.per_message == 5
    assert rc.policy.output_reserve == 1024
    assert rc.policy.safety_margin == 100
    assert rc.policy.pin_fraction == 0.0
    assert rc.upstream.transport == "openai"
    assert rc.upstream.api_base == "http://127.0.0.1:8000/v1"
    assert rc.upstream.model_name == "my-model"


def test_environment_references_resolve(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """
        model_list:
          - model_name: gpt-4o
            litellm_params: {model: gpt-4o, api_key: os.environ/MY_KEY}
        routefit_settings:
          redis_url: os.environ/MY_REDIS
    """,
        ),
        environ={"MY_KEY": "sk-123", "MY_REDIS": "redis://10.0.0.1:6379/2"},
    )
    assert config.routes["gpt-4o"].upstream.api_key == "sk-123"
    assert config.settings.redis_url == "redis://10.0.0.1:6379/2"


def test_a_litellm_config_loads_as_is_with_warnings(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """
        model_list:
          - model_name: gpt-4o
            litellm_params: {model: gpt-4o, rpm: 100}
            model_info: {id: abc}
          - model_name: gpt-4o
            litellm_params: {model: azure/gpt-4o, api_base: https://x.openai.azure.com}
        litellm_settings: {drop_params: true}
        general_settings: {master_key: sk-1234}
    """,
        ),
        environ={},
    )
    assert list(config.routes) == ["gpt-4o"]
    text = "\n".join(config.warnings)
    assert "litellm_settings" in text and "general_settings" in text
    assert "model_list[0].model_info.id" in text
    assert "duplicate alias 'gpt-4o'" in text
    # unknown litellm_params are kept for litellm, not warned about
    assert config.routes["gpt-4o"].upstream.extra == {"rpm": 100}


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            "routefit: {tokenizer: o300k}",
            "model_list[0].routefit.tokenizer: unknown tokenizer 'o300k'",
        ),
        ("routefit: {framing: chatml}", "model_list[0].routefit.framing: unknown framing family"),
        ("routefit: {image_rule: banana}", "model_list[0].routefit.image_rule:"),
        ("routefit: {transport: grpc}", "model_list[0].routefit.transport: must be one of"),
        ("routefit: {fit: {low_water: 3}}", "model_list[0].routefit: low_water must be between"),
        ("routefit: {fit: {pin: 0.5}}", "model_list[0].routefit: unknown fit policy key 'pin'"),
        (
            "model_info: {max_input_tokens: -5}",
            "model_list[0].model_info.max_input_tokens: must be an integer",
        ),
        (
            "routefit: {image_limits: {max_image_bytes: 0}}",
            "model_list[0].routefit.image_limits.max_image_bytes: must be an integer >= 1",
        ),
    ],
)
def test_errors_name_the_file_and_key_path(tmp_path, snippet, message):
    path = write(
        tmp_path,
        f"""
        model_list:
          - model_name: m
            litellm_params: {{model: openai/gpt-4o}}
            {snippet}
    """,
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_structural_errors(tmp_path):
    with pytest.raises(ConfigError, match="model_list: must be a non-empty list"):
        parse_config({"model_list": []}, "c.yaml", environ={})
    with pytest.raises(ConfigError, match=r"model_list\[0\].litellm_params.model"):
        parse_config(
            {"model_list": [{"model_name": "x", "litellm_params": {}}]}, "c.yaml", environ={}
        )
    with pytest.raises(ConfigError, match=r"routefit_settings\.redis_url"):
        parse_config(
            {
                "model_list": [{"model_name": "x", "litellm_params": {"model": "gpt-4o"}}],
                "routefit_settings": {"redis_url": "http://nope"},
            },
            "c.yaml",
            environ={},
        )


def test_unreadable_and_invalid_yaml_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model_list:\n  - model_name: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)


def test_unknown_model_gets_a_conservative_default_and_a_warning(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """
        model_list:
          - model_name: mystery
            litellm_params: {model: openai/mystery-model-9, api_base: http://127.0.0.1:1/v1}
    """,
        ),
        environ={},
    )
    assert config.routes["mystery"].route.context_window == 128000
    assert any("not in litellm's model map" in w for w in config.warnings)
