"""Operator mistakes that loaded silently, or ended in a traceback, and now are named errors.

Each test is one mistake an operator makes in the config file or on ``routefit serve``'s command
line; the error must name the file (or the flag) and the key path, and nothing may load with a
meaning other than the one written.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from harness import routefit_command

from proxy.cli import build_parser, main
from proxy.config import ConfigError, load_config

_ROUTE = """
model_list:
  - model_name: a
    litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9"}
"""


def write(tmp_path: Path, *parts: str) -> Path:
    """The file of ``parts``, each dedented on its own (a block in a test, ``_ROUTE``)."""
    path = tmp_path / "routes.yaml"
    path.write_text("".join(textwrap.dedent(part) for part in parts))
    return path


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    return message


# -- a key written twice ---------------------------------------------------------------------


def test_a_second_routefit_settings_block_does_not_silently_drop_the_first(tmp_path):
    """YAML keeps the last of two equal keys: the first block's admin key vanished and the
    gateway ran OPEN, admitting anyone."""
    path = write(
        tmp_path,
        """
        routefit_settings:
          admin_key: an-admin-key
        """,
        _ROUTE,
        """
        routefit_settings:
          store_path: ":memory:"
        """,
    )
    message = refused(path)
    assert "line 9: routefit_settings: written twice (also at line 2)" in message


def test_a_teams_quotas_written_twice_is_an_error_naming_its_path(tmp_path):
    path = write(
        tmp_path,
        _ROUTE,
        """
        routefit_settings:
          teams:
            - id: search
              keys: [k1]
              quotas: {tokens_per_minute: 1000}
              quotas: {tokens_per_day: 5000000}
        """,
    )
    message = refused(path)
    assert "routefit_settings.teams[0].quotas: written twice" in message


def test_merge_keys_may_still_be_overridden(tmp_path):
    """``<<: *anchor`` then the same key: YAML's override, not a duplicate."""
    path = write(
        tmp_path,
        """
        x-base: &base
          model_name: base
          litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9"}
        model_list:
          - <<: *base
            model_name: a
          - <<: *base
            model_name: b
        """,
    )
    config = load_config(path, environ={})
    assert list(config.routes) == ["a", "b"]


@pytest.mark.parametrize(
    "text",
    [
        "model_list: " + "[" * 3000 + "]" * 3000 + "\n",
        _ROUTE + "routefit_settings: &s {calibration: *s}\n",
    ],
    ids=["nested", "self-reference"],
)
def test_a_file_nested_past_the_limit_is_an_error_not_a_traceback(tmp_path, text):
    assert "nested too deeply" in refused(write(tmp_path, text))


# -- keys shared between roles ---------------------------------------------------------------


def test_a_team_key_equal_to_the_admin_key_is_refused(tmp_path):
    """Every holder of that team's key would read every team's usage and the dashboard."""
    path = write(
        tmp_path,
        _ROUTE,
        """
        routefit_settings:
          admin_key: shared-key
          teams:
            - {id: ops, keys: [other]}
            - {id: search, keys: [shared-key]}
        """,
    )
    message = refused(path)
    assert "routefit_settings.admin_key: is also routefit_settings.teams[1] ('search')" in message


# -- values taken for "unset", or read with another meaning ----------------------------------


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("routefit: {context_window: 0}", "model_list[0].routefit.context_window"),
        ("routefit: {context_window: 128k}", "model_list[0].routefit.context_window"),
        ("model_info: {max_output_tokens: 0}", "model_list[0].model_info.max_output_tokens"),
        ("model_info: {max_tokens: 0}", "model_list[0].model_info.max_tokens"),
        ("routefit: {upstream_timeout: 0}", "model_list[0].routefit.upstream_timeout"),
        ("model_info: {supports_vision: maybe}", "model_list[0].model_info.supports_vision"),
        ("model_info: {input_cost_per_token: -1e-6}", "model_list[0].model_info."),
        ("model_info: {output_cost_per_token: cheap}", "model_list[0].model_info."),
        ("routefit: {forward_client_key: 'yes'}", "model_list[0].routefit.forward_client_key"),
    ],
)
def test_a_written_value_is_checked_where_it_is_written(tmp_path, extra, path):
    """``0`` fell back to the model map's or the default value, ``"no"`` read as true, a
    negative price refunded a dollar budget, and a string price made the route free."""
    text = _ROUTE + f"    {extra}\n"
    assert f": {path}" in refused(write(tmp_path, text))


@pytest.mark.parametrize(("written", "vision"), [("'no'", False), ("'false'", False), (1, True)])
def test_supports_vision_is_read_as_litellm_reads_it(tmp_path, written, vision):
    """``bool("no")`` is true: a quoted "no" priced and forwarded images to a text model."""
    path = write(tmp_path, _ROUTE + f"    model_info: {{supports_vision: {written}}}\n")
    assert load_config(path, environ={}).routes["a"].route.supports_vision is vision


def test_a_litellm_timeout_of_zero_names_its_own_key(tmp_path):
    text = _ROUTE.replace('api_base: "http://127.0.0.1:9"', 'api_base: "http://x", timeout: 0')
    assert "model_list[0].litellm_params.timeout: must be a positive number" in refused(
        write(tmp_path, text)
    )


def test_prices_as_litellm_writes_them_still_load(tmp_path):
    """YAML reads ``2e-06`` (no dot) as a string; LiteLLM takes it as a number, so do we."""
    path = write(
        tmp_path,
        _ROUTE + "    model_info: {input_cost_per_token: 2e-06, output_cost_per_token: 0}\n",
    )
    rc = load_config(path, environ={}).routes["a"]
    assert (rc.input_cost_per_token, rc.output_cost_per_token) == (2e-06, 0.0)


# -- routefit serve's flags and TLS files ----------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--port", "70000"),
        ("--port", "-1"),
        ("--workers", "0"),
        ("--drain-seconds", "nan"),
        ("--drain-seconds", "-1"),
        ("--header-timeout", "-5"),
        ("--max-connections", "-1"),
    ],
)
def test_a_bad_serve_flag_is_refused_before_anything_starts(tmp_path, capsys, flag, value):
    """``--port 70000`` was an OverflowError traceback, ``--drain-seconds nan`` one at shutdown,
    ``--workers 0`` a supervisor serving nothing, a negative deadline taken as given. (The
    command line is parsed as ``main`` parses it; nothing is served whatever it accepts.)"""
    config = write(tmp_path, _ROUTE)
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["serve", "--config", str(config), flag, value])
    assert caught.value.code == 2
    assert f"argument {flag}: " in capsys.readouterr().err


def test_a_tls_file_that_is_not_pem_is_one_line_not_a_traceback(tmp_path):
    config = write(tmp_path, _ROUTE + "routefit_settings: {store_path: ':memory:'}\n")
    bogus = tmp_path / "cert.pem"
    bogus.write_text("not a certificate\n")
    tls = ["--ssl-certfile", str(bogus), "--ssl-keyfile", str(bogus)]
    out = subprocess.run(
        [*routefit_command(), "serve", "--config", str(config), "--port", "0", *tls],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "serving" not in out.stderr
    assert f"TLS certificate {bogus} and key {bogus} cannot be loaded" in out.stderr


def test_check_flags_a_config_tls_file_serve_could_not_load(tmp_path, capsys):
    bogus = tmp_path / "cert.pem"
    bogus.write_text("not a certificate\n")
    config = write(
        tmp_path,
        _ROUTE + f"routefit_settings: {{tls: {{certfile: '{bogus}', keyfile: '{bogus}'}}}}\n",
    )
    with pytest.raises(SystemExit) as caught:
        main(["check", "--config", str(config)])
    assert caught.value.code == 2
    assert "cannot be loaded" in capsys.readouterr().err
