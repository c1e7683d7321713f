"""Operator configuration edges: what the file writes wins, or is refused at its path at load.

Each test is one way a config loaded with a meaning other than the one written (a map's value
over the operator's, a silent clamp, a team that could reach nothing, a NaN deadline, an
environment value that could never be a number) and now loads as written or names its key.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from test_operator_hunt import _ROUTE, write

from proxy.cli import main
from proxy.config import Config, ConfigError, load_config


def loaded(tmp_path: Path, *parts: str, environ: dict[str, str] | None = None) -> Config:
    return load_config(write(tmp_path, *parts), environ=environ or {})


def refused(tmp_path: Path, *parts: str, environ: dict[str, str] | None = None) -> str:
    """The error's text, which must name the file first."""
    path = write(tmp_path, *parts)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ or {})
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    return message


# -- the operator's output limit over the model map's ------------------------------------------


def test_model_info_max_tokens_wins_over_the_maps_output_limit(tmp_path):
    """LiteLLM's ``max_tokens`` is the output limit's older name: written alone, it lost to
    the map's ``max_output_tokens`` (gpt-4o's 16,384), so a deployment limited to 1,000 was
    sent and reserved for 16 times its limit."""
    mapped = loaded(tmp_path, _ROUTE).routes["a"].route.max_output_tokens
    assert mapped != 1000  # the map has its own value: the file's must beat it
    text = _ROUTE + "    model_info: {max_tokens: 1000}\n"
    assert loaded(tmp_path, text).routes["a"].route.max_output_tokens == 1000


def test_max_output_tokens_wins_over_max_tokens_when_both_are_written(tmp_path):
    text = _ROUTE + "    model_info: {max_tokens: 3000, max_output_tokens: 2000}\n"
    assert loaded(tmp_path, text).routes["a"].route.max_output_tokens == 2000


def test_model_info_limits_may_come_from_the_environment(tmp_path):
    """model_info was never resolved: ``os.environ/WINDOW`` was read as that text, refused."""
    text = _ROUTE + "    model_info: {max_input_tokens: os.environ/WINDOW}\n"
    config = loaded(tmp_path, text, environ={"WINDOW": "32768"})
    assert config.routes["a"].route.context_window == 32768


# -- upstream_retries past its bound --------------------------------------------------------------


def test_upstream_retries_past_five_is_refused_not_clamped(tmp_path):
    """``upstream_retries: 9`` loaded as 5, silently."""
    message = refused(tmp_path, _ROUTE, "routefit_settings: {upstream_retries: 9}\n")
    assert "routefit_settings.upstream_retries: must be an integer from 0 to 5" in message


def test_upstream_retries_at_its_bound_loads_as_written(tmp_path):
    config = loaded(tmp_path, _ROUTE, "routefit_settings: {upstream_retries: 5}\n")
    assert config.settings.upstream_retries == 5


# -- a team that can reach nothing ----------------------------------------------------------------


def test_a_team_with_an_empty_routes_list_is_refused(tmp_path):
    """``routes: []`` loaded a team whose every request was a 403."""
    team = "routefit_settings: {teams: [{id: t, keys: [k], routes: []}]}\n"
    assert "routefit_settings.teams[0].routes: is empty" in refused(tmp_path, _ROUTE, team)


def test_a_teams_routes_from_an_unset_variable_never_mean_every_route(tmp_path):
    """Null is a key's default, and a team's default is every route: an unset variable opened
    every route to a team the file meant to hold to some."""
    team = "routefit_settings: {teams: [{id: t, keys: [k], routes: os.environ/TEAM_ROUTES}]}\n"
    message = refused(tmp_path, _ROUTE, team)
    assert "routefit_settings.teams[0].routes: os.environ/TEAM_ROUTES is unset" in message


# -- NaN and infinity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "path"),
    [
        ("routefit_settings: {upstream_timeout: .nan}", "routefit_settings.upstream_timeout"),
        ("routefit_settings: {upstream_timeout: .inf}", "routefit_settings.upstream_timeout"),
        ("router_settings: {timeout: .nan}", "router_settings.timeout"),
        (
            "routefit_settings: {calibration: {refresh_seconds: .nan}}",
            "routefit_settings.calibration.refresh_seconds",
        ),
        (
            "routefit_settings: {calibration: {anchor_ttl: .inf}}",
            "routefit_settings.calibration.anchor_ttl",
        ),
        (
            "routefit_settings: {teams: [{id: t, keys: [k], quotas: {usd_per_month: .nan}}]}",
            "routefit_settings.teams[0].quotas.usd_per_month",
        ),
        (
            "routefit_settings: {teams: [{id: t, keys: [k], quotas: {usd_per_month: .inf}}]}",
            "routefit_settings.teams[0].quotas.usd_per_month",
        ),
    ],
)
def test_a_nan_or_infinite_number_is_refused_at_its_path(tmp_path, block, path):
    """``.nan`` passed ``value <= 0``: a NaN deadline timed every request out at once, a NaN
    refresh spun without a pause, a NaN dollar quota failed the team's every budget check."""
    assert f"{path}: must be a positive number" in refused(tmp_path, _ROUTE, block + "\n")


@pytest.mark.parametrize("written", [".nan", ".inf"])
def test_a_nan_or_infinite_route_timeout_or_weight_is_refused(tmp_path, written):
    for key in ("timeout", "weight"):
        text = _ROUTE.replace('"http://127.0.0.1:9"', f'"http://127.0.0.1:9", {key}: {written}')
        assert f"model_list[0].litellm_params.{key}: must be a positive number" in refused(
            tmp_path, text
        )


def test_calibration_interval_zero_turns_the_interval_off_as_documented(tmp_path):
    """docs/calibration.md: ``calibration.interval``, 0: none. It was refused as not positive."""
    config = loaded(tmp_path, _ROUTE, "routefit_settings: {calibration: {interval: 0}}\n")
    assert config.settings.calibration.interval == 0


# -- values from the environment ----------------------------------------------------------------


def test_numbers_and_switches_may_come_from_the_environment(tmp_path):
    """An environment value is always text: every integer, number and boolean key written as
    ``os.environ/NAME`` was refused, though the docs say any value may be one."""
    text = (
        _ROUTE.replace('"http://127.0.0.1:9"', '"http://127.0.0.1:9", rpm: os.environ/RPM')
        + "    routefit: {fit: {low_water: os.environ/WATER}}\n"
        + textwrap.dedent(
            """
            routefit_settings:
              max_body_bytes: os.environ/MAX_BODY
              upstream_timeout: os.environ/TIMEOUT
              exact_prompt_headers: os.environ/EXACT
              calibration: {quantile: os.environ/QUANTILE}
              teams: [{id: t, keys: [k], quotas: {tokens_per_minute: os.environ/TPM}}]
            litellm_settings: {drop_params: os.environ/DROP}
            router_settings: {num_retries: os.environ/RETRIES, cooldown_time: os.environ/COOL}
            """
        )
    )
    environ = {
        "RPM": "12",
        "WATER": "0.8",
        "MAX_BODY": "1048576",
        "TIMEOUT": "30",
        "EXACT": "true",
        "QUANTILE": "0.9",
        "TPM": "5000",
        "DROP": "yes",
        "RETRIES": "3",
        "COOL": "7.5",
    }
    config = loaded(tmp_path, text, environ=environ)
    rc = config.routes["a"]
    assert (rc.rpm, rc.policy.low_water, rc.upstream.drop_params) == (12, 0.8, True)
    settings = config.settings
    assert (settings.max_body_bytes, settings.upstream_timeout) == (1048576, 30.0)
    assert settings.exact_prompt_headers is True
    assert settings.calibration.quantile == 0.9
    assert config.teams[0].quotas.tokens_per_minute == 5000
    assert (config.router.num_retries, config.router.cooldown_time) == (3, 7.5)


def test_environment_text_that_is_no_number_is_refused_at_its_path(tmp_path):
    text = _ROUTE + "routefit_settings: {max_body_bytes: os.environ/MAX_BODY}\n"
    message = refused(tmp_path, text, environ={"MAX_BODY": "32MB"})
    assert "routefit_settings.max_body_bytes: must be an integer >= 1024" in message


@pytest.mark.parametrize(
    "block",
    [
        "routefit_settings: {max_body_bytes: os.environ/UNSET}",
        "routefit_settings: {upstream_retries: os.environ/UNSET}",
        "routefit_settings: {store_path: os.environ/UNSET}",
        "routefit_settings: {budget_failure_mode: os.environ/UNSET}",
        "routefit_settings: {request_log: {keep: os.environ/UNSET}}",
        "routefit_settings: {calibration: {min_samples: os.environ/UNSET}}",
        "routefit_settings: {simulator: {fetch_loopback_images: os.environ/UNSET}}",
        "litellm_settings: {drop_params: os.environ/UNSET}",
    ],
)
def test_an_unset_variable_is_the_keys_default(tmp_path, block):
    """docs/configuration.md: an unset NAME is null, the key's default. Each of these was
    refused as a null that is no integer, path or switch."""
    config = loaded(tmp_path, _ROUTE, block + "\n")
    assert config.settings == loaded(tmp_path, _ROUTE).settings
    assert any("(UNSET)" in m for m in config.missing_env)


def test_an_unset_rpm_is_no_limit(tmp_path):
    text = _ROUTE.replace('"http://127.0.0.1:9"', '"http://127.0.0.1:9", rpm: os.environ/UNSET')
    assert loaded(tmp_path, text).routes["a"].rpm is None


# -- where a route goes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "key"),
    [
        ("api_base: 8000", "api_base"),
        ('api_base: "localhost:8000/v1"', "api_base"),
        ("base_url: [http://x]", "base_url"),
        ("api_key: 12345", "api_key"),
    ],
)
def test_a_provider_url_or_key_of_the_wrong_shape_is_refused(tmp_path, written, key):
    """``api_base: 8000`` became the URL "8000", a base without a scheme loaded, and an
    integer key stayed an integer: each failed every request instead of the load."""
    text = _ROUTE.replace('api_base: "http://127.0.0.1:9"', written)
    assert f"model_list[0].litellm_params.{key}: " in refused(tmp_path, text)


@pytest.mark.parametrize("model", ["openai/", "/gpt-4o"])
def test_a_model_string_with_an_empty_part_is_refused(tmp_path, model):
    """``openai/`` sent the model "" upstream; ``/gpt-4o`` made "" the provider."""
    text = _ROUTE.replace("openai/gpt-4o", model)
    assert "model_list[0].litellm_params.model: " in refused(tmp_path, text)


def test_a_model_name_with_slashes_after_the_provider_loads(tmp_path):
    text = _ROUTE.replace("openai/gpt-4o", "openai/org/my-model")
    assert loaded(tmp_path, text).routes["a"].upstream.model_name == "org/my-model"


# -- routefit check --------------------------------------------------------------------------------


def test_check_names_a_refused_key_and_exits_2_without_a_traceback(tmp_path, capsys):
    path = write(tmp_path, _ROUTE, "routefit_settings: {upstream_retries: 9}\n")
    with pytest.raises(SystemExit) as caught:
        main(["check", "--config", str(path)])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "routefit_settings.upstream_retries: must be an integer from 0 to 5" in err
    assert "Traceback" not in err


# -- aliases that collide ----------------------------------------------------------------------


def test_an_alias_spelt_like_another_deployments_calibration_key_is_refused(tmp_path):
    """A deployment counting unlike its alias's first learns under ``alias@id``: a model_name
    ``a@d1`` shared its corrections and anchors with deployment d1 of ``a`` (another model)."""
    text = """
    model_list:
      - model_name: a
        litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9"}
      - model_name: a
        litellm_params: {model: openai/gpt-4, api_base: "http://127.0.0.1:8"}
        model_info: {id: d1}
      - model_name: a@d1
        litellm_params: {model: openai/gpt-4o-mini, api_base: "http://127.0.0.1:7"}
    """
    assert "model_list[2].model_name: 'a@d1' is also the calibration key" in refused(tmp_path, text)


# -- fit knobs at their bounds -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "path"),
    [
        ("    routefit: {fit: {max_prompt_tokens: 0}}\n", "model_list[0].routefit.fit"),
        (
            "routefit_settings: {teams: [{id: t, keys: [k], fit: {max_prompt_tokens: 0}}]}\n",
            "routefit_settings.teams[0].fit",
        ),
    ],
)
def test_a_prompt_budget_that_holds_no_prompt_is_refused(tmp_path, block, path):
    """``max_prompt_tokens: 0`` loaded; every request of the route (or team) was then refused
    as too large, however small."""
    message = refused(tmp_path, _ROUTE + block)
    assert f"{path}.max_prompt_tokens: must be at least" in message


def test_a_prompt_budget_at_its_least_loads(tmp_path):
    from strategies.policy import MIN_PROMPT_TOKENS

    text = _ROUTE + f"    routefit: {{fit: {{max_prompt_tokens: {MIN_PROMPT_TOKENS}}}}}\n"
    assert loaded(tmp_path, text).routes["a"].policy.max_prompt_tokens == MIN_PROMPT_TOKENS


def test_a_nan_image_fetch_deadline_is_refused(tmp_path):
    """``timeout_s: .nan`` passed ``<= 0``: every fetch timed out at once."""
    text = _ROUTE + "    routefit: {image_fetch: {allow_hosts: [x.example], timeout_s: .nan}}\n"
    message = refused(tmp_path, text)
    assert "model_list[0].routefit.image_fetch.timeout_s: must be a positive number" in message
