"""Config loading: LiteLLM compatibility, defaults, errors that name the file and key."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.config import ConfigError, load_config, parse_config
from strategies.policy import FitPolicy


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
    assert config.routes["claude-sonnet"].upstream.transport == "anthropic"


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
            litellm_params: {model: gpt-4o, rpm: 100, seed: 7}
            model_info: {id: abc}
          - model_name: gpt-4o-azure
            litellm_params: {model: azure/gpt-4o, api_base: https://x.openai.azure.com}
        litellm_settings: {drop_params: true}
        general_settings: {master_key: sk-1234, database_url: "postgresql://x"}
    """,
        ),
        environ={},
    )
    assert list(config.routes) == ["gpt-4o", "gpt-4o-azure"]
    text = "\n".join(config.warnings)
    assert "general_settings.database_url" in text
    # LiteLLM's drop_params is read: every route's litellm calls drop what a provider refuses
    assert "litellm_settings" not in text
    assert all(rc.upstream.drop_params for rc in config.routes.values())
    # the master key is LiteLLM's admin key: honoured (never a warning and an open gateway)
    assert "master_key" not in text and not config.open
    assert config.settings.access.master_key_hash is not None
    # model_info.id is the deployment's id; rpm is the router's, read and never forwarded
    assert "model_info.id" not in text
    assert config.routes["gpt-4o"].deployment_id == "abc"
    assert config.routes["gpt-4o"].rpm == 100
    # unknown litellm_params are kept for litellm, not warned about
    assert config.routes["gpt-4o"].upstream.extra == {"seed": 7}


def test_every_entry_of_an_alias_is_one_of_its_deployments(tmp_path):
    """Was: a warning, the first entry used alone (issue 29: 6 of 6 requests answered 500 with
    the healthy second entry never tried); then refused until the gateway routed."""
    text = """
        model_list:
          - model_name: gpt-4o
            litellm_params: {model: gpt-4o}
          - model_name: gpt-4o
            litellm_params: {model: azure/gpt-4o, api_base: https://x.openai.azure.com}
    """
    config = load_config(write(tmp_path, text), environ={})
    deployments = config.deployments("gpt-4o")
    assert [rc.upstream.model for rc in deployments] == ["gpt-4o", "azure/gpt-4o"]
    assert len({rc.deployment_id for rc in deployments}) == 2


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
        (
            "routefit: {fit: {low_water: 3}}",
            "model_list[0].routefit.fit.low_water: low_water must be between",
        ),
        ("routefit: {fit: {pin: 0.5}}", "model_list[0].routefit.fit.pin: unknown key"),
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


def test_exact_prompt_headers_is_a_boolean(tmp_path):
    routes = [{"model_name": "x", "litellm_params": {"model": "gpt-4o"}}]
    parsed = parse_config(
        {"model_list": routes, "routefit_settings": {"exact_prompt_headers": True}},
        "c.yaml",
        environ={},
    )
    assert parsed.settings.exact_prompt_headers
    assert not parse_config(
        {"model_list": routes}, "c.yaml", environ={}
    ).settings.exact_prompt_headers
    with pytest.raises(ConfigError, match=r"exact_prompt_headers: must be true or false"):
        parse_config(
            {"model_list": routes, "routefit_settings": {"exact_prompt_headers": "yes"}},
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


# --- routefit-owned blocks are strict, LiteLLM-owned blocks are loose -------------------------


def _model(routefit: str = "", extra: str = "") -> str:
    return f"""
        model_list:
          - model_name: m
            litellm_params: {{model: openai/gpt-4o}}
          - model_name: n
            litellm_params: {{model: openai/gpt-4o-mini}}
            {routefit}
        {extra}
    """


@pytest.mark.parametrize(
    ("text", "path", "hint"),
    [
        (
            _model("routefit: {tokeniser: o200k_base}"),
            "model_list[1].routefit.tokeniser",
            "'tokenizer'",
        ),
        (
            _model("routefit: {fit: {low_watter: 0.5}}"),
            "model_list[1].routefit.fit.low_watter",
            "'low_water'",
        ),
        (
            _model("routefit: {image_fetch: {allow_host: [a.example]}}"),
            "model_list[1].routefit.image_fetch.allow_host",
            "'allow_hosts'",
        ),
        (
            _model("routefit: {image_limits: {max_images_count: 3}}"),
            "model_list[1].routefit.image_limits.max_images_count",
            "'max_images'",
        ),
        (
            _model("routefit: {framing: {family: generic, per_mesage: 4}}"),
            "model_list[1].routefit.framing.per_mesage",
            "'per_message'",
        ),
        (
            _model("routefit: {image_rule: {kind: anthropic, token_limt: 900}}"),
            "model_list[1].routefit.image_rule.token_limt",
            "'token_limit'",
        ),
        (_model("routefitt: {tokenizer: o200k_base}"), "model_list[1].routefitt", "'routefit'"),
        (_model(extra="routefit_setings: {}"), ": routefit_setings: ", "'routefit_settings'"),
        (
            _model(extra="routefit_settings: {redis_ulr: redis://x}"),
            "routefit_settings.redis_ulr",
            "'redis_url'",
        ),
        (
            _model(extra="routefit_settings: {calibration: {windw: 5}}"),
            "routefit_settings.calibration.windw",
            "'window'",
        ),
        (
            _model(extra="routefit_settings: {teams: [{id: a, keys: [k], route: [m]}]}"),
            "routefit_settings.teams[0].route",
            "'routes'",
        ),
        (
            _model(
                extra="routefit_settings: {teams: [{id: a, keys: [k], quotas: {tokens_per_mi: 5}}]}"
            ),
            "routefit_settings.teams[0].quotas.tokens_per_mi",
            "'tokens_per_minute'",
        ),
        (
            _model(
                extra="routefit_settings: {teams: [{id: a, keys: [k], fit: {pin_fractoin: 0}}]}"
            ),
            "routefit_settings.teams[0].fit.pin_fractoin",
            "'pin_fraction'",
        ),
    ],
)
def test_an_unknown_key_in_a_routefit_block_is_an_error_with_a_did_you_mean(
    tmp_path, text, path, hint
):
    config = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(config, environ={})
    message = str(err.value)
    assert message.startswith(f"{config}: ")
    assert path in message
    assert f"unknown key (did you mean {hint}?)" in message


def test_an_unknown_key_without_a_close_match_lists_the_known_ones(tmp_path):
    with pytest.raises(
        ConfigError, match=r"routefit\.zzz: unknown key \(known: context_fallback, context_window, "
    ):
        load_config(write(tmp_path, _model("routefit: {zzz: 1}")), environ={})


def test_litellm_owned_blocks_still_only_warn(tmp_path):
    config = load_config(
        write(
            tmp_path,
            _model(
                "model_info: {mode: chat, base_model: gpt-4o}\n            region: eu",
                "litellm_settings: {drop_params: false, set_verbose: true}\n"
                "        general_settings: {store_model_in_db: x}\n"
                "        environment_variables: {X: y}",
            ),
        ),
        environ={},
    )
    text = "\n".join(config.warnings)
    for path in (
        "model_list[1].model_info.mode",
        "model_list[1].region",
        "litellm_settings.set_verbose",
        "general_settings.store_model_in_db",
        "environment_variables",
    ):
        assert path in text
    assert "litellm_settings.drop_params" not in text
    assert "base_model" not in text  # read: the map's facts of the model it names
    assert set(config.routes) == {"m", "n"}
    assert not any(rc.upstream.drop_params for rc in config.routes.values())


def test_litellm_settings_drop_params_must_be_a_boolean(tmp_path):
    path = write(tmp_path, _model("", "litellm_settings: {drop_params: sure}"))
    with pytest.raises(ConfigError, match=r"litellm_settings\.drop_params"):
        load_config(path, environ={})


def test_route_image_fetch_lives_on_the_route_config_not_the_pure_route(tmp_path):
    config = load_config(
        write(tmp_path, _model("routefit: {image_fetch: {allow_hosts: [img.example.com]}}")),
        environ={},
    )
    assert config.routes["n"].image_fetch.allow_hosts == ("img.example.com",)
    assert config.routes["n"].image_fetch.enabled and not config.routes["m"].image_fetch.enabled
    assert not hasattr(config.routes["n"].route, "image_fetch")


# --- teams are parsed once, their fit overrides included --------------------------------------

_KNOBS = {
    "output_reserve": st.none() | st.integers(0, 10**6),
    "safety_margin": st.none() | st.integers(0, 10**5),
    "message_cap_tokens": st.none() | st.integers(0, 10**6),
    "cap_fraction": st.floats(0.01, 1.0),
    "low_water": st.floats(0.01, 1.0),
    "pin_fraction": st.floats(0.0, 1.0),
    "image_offload_step": st.integers(1, 64),
    "strategies": st.lists(st.sampled_from(["cap", "offload_images", "elide"]), unique=True),
    "cap_roles": st.lists(st.sampled_from(["tool", "user", "assistant", "system"]), unique=True),
    # below 16 a budget holds no prompt: refused at load (test_config_edges_hunt.py)
    "max_prompt_tokens": st.none() | st.integers(16, 10**6),
}


@settings(max_examples=60, deadline=None)
@given(overrides=st.fixed_dictionaries({}, optional=_KNOBS), base_reserve=st.integers(0, 9999))
def test_team_policy_overrides_apply_as_the_second_parse_did(overrides, base_reserve):
    config = parse_config(
        {
            "model_list": [
                {
                    "model_name": "m",
                    "litellm_params": {"model": "openai/gpt-4o"},
                    "routefit": {"output_reserve": base_reserve, "fit": {"low_water": 0.5}},
                }
            ],
            "routefit_settings": {"teams": [{"id": "t", "keys": ["k"], "fit": overrides}]},
        },
        "c.yaml",
        environ={},
    )
    team, base = config.teams[0], config.routes["m"].policy
    assert base.merged(team.policy_overrides) == FitPolicy.parse(team.fit, base=base)
    assert team.fit == overrides


def test_a_team_policy_includes_its_prompt_quota(tmp_path):
    config = load_config(
        write(
            tmp_path,
            _model(
                extra="""routefit_settings:
          teams:
            - {id: a, keys: [ka], quotas: {max_prompt_tokens: 1000}, fit: {max_prompt_tokens: 5000}}
            - {id: b, keys: [kb], fit: {pin_fraction: 0.25}}""",
            ),
        ),
        environ={},
    )
    base = config.routes["m"].policy
    a, b = config.teams
    assert a.fit_policy(base).max_prompt_tokens == 1000
    assert b.fit_policy(base).pin_fraction == 0.25 and b.fit_policy(base).max_prompt_tokens is None


def test_team_errors_name_their_path(tmp_path):
    for extra, message in [
        (
            "routefit_settings: {teams: [{id: a, keys: [k], fit: {low_water: 7}}]}",
            "teams[0].fit.low_water: low_water must be between",
        ),
        (
            "routefit_settings: {teams: [{id: a, keys: [k], routes: [nope]}]}",
            "teams[0].routes: unknown model alias(es) ['nope']",
        ),
        (
            "routefit_settings: {teams: [{id: a, keys: [k]}, {id: b, keys: [k]}]}",
            "teams[1].keys[0]: the same key is given to two teams",
        ),
        (
            "routefit_settings: {teams: [{id: a, keys: ['sha256:12']}]}",
            "teams[0].keys[0]: sha256: must be followed by 64 hex digits",
        ),
        (
            "routefit_settings: {teams: [{id: a, keys: [k], quotas: {usd_per_month: -1}}]}",
            "teams[0].quotas.usd_per_month: must be a positive number",
        ),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config(write(tmp_path, _model(extra=extra)), environ={})
        assert f"routefit_settings.{message}" in str(err.value)
