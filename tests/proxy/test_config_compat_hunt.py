"""LiteLLM proxy configs brought as they are: each key means what it means in LiteLLM's proxy,
or is refused at load naming it, never loaded as something else.

Each test is one key an operator's LiteLLM ``config.yaml`` writes that routefit loaded with
another meaning (or refused where LiteLLM takes it), loaded through the real loader.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_config_edges_hunt import loaded, refused
from test_operator_hunt import write
from test_routing_e2e import CHAT, Providers, deployment, post, serve, write_config

from proxy.cli import main
from proxy.config import ConfigError, load_config
from proxy.config.describe import describe
from proxy.config.window import DEFAULT_MAX_OUTPUT, DEFAULT_WINDOW
from tests.inprocess import asgi_client, run_inprocess

_ENTRY = """
model_list:
  - model_name: a
    litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9"}
"""


# -- a null deployment fact is an unwritten one -------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        "litellm_params: {model: openai/gpt-4o, rpm: null, tpm: null, weight: null}",
        "rpm: null\n    tpm: null\n    litellm_params: {model: openai/gpt-4o}",
    ],
)
def test_a_null_rpm_tpm_or_weight_is_unset_as_in_litellm(tmp_path, written):
    """LiteLLM reads ``rpm: null`` as no limit (``Optional[int] = None``); routefit refused
    it ("must be an integer >= 1"), and a null beside a value counted as written twice."""
    text = f"model_list:\n  - model_name: a\n    {written}\n"
    rc = loaded(tmp_path, text).routes["a"]
    assert (rc.rpm, rc.tpm, rc.weight) == (None, None, 1.0)
    both = "model_list:\n  - model_name: a\n    rpm: 7\n"
    both += "    litellm_params: {model: openai/gpt-4o, rpm: null}\n"
    assert loaded(tmp_path, both).routes["a"].rpm == 7


# -- quoted numbers, as LiteLLM (and a Helm template) writes them ------------------------------


def test_quoted_numbers_are_read_as_litellm_reads_them(tmp_path):
    """``rpm: "60"`` is 60 to LiteLLM's pydantic, and a Helm chart's ``"{{ .Values.x }}"``
    writes every number quoted: routefit refused such a file ("must be an integer >= 1")."""
    text = (
        'model_list:\n  - model_name: a\n    rpm: "60"\n'
        '    litellm_params: {model: openai/gpt-4o, tpm: "90000"}\n'
        '    model_info: {max_input_tokens: "32768", max_output_tokens: "4096"}\n'
        'routefit_settings:\n  max_body_bytes: "1048576"\n'
        '  calibration: {refresh_seconds: "2.5"}\n'
    )
    config = loaded(tmp_path, text)
    rc = config.routes["a"]
    assert (rc.rpm, rc.tpm) == (60, 90000)
    assert (rc.route.context_window, rc.route.max_output_tokens) == (32768, 4096)
    settings = config.settings
    assert (settings.max_body_bytes, settings.calibration_refresh) == (1048576, 2.5)
    # text that spells no number is still refused by name
    wrong = text.replace('"32768"', '"32k"')
    assert "model_info.max_input_tokens: must be an integer" in refused(tmp_path, wrong)


# -- the entry's own rpm/tpm from the environment ---------------------------------------------


def test_an_entry_level_rpm_and_tpm_may_come_from_the_environment(tmp_path):
    """``rpm: os.environ/RPM`` beside ``litellm_params`` (LiteLLM's older place for it) was not
    resolved: read as the text ``os.environ/RPM``, refused as no integer. An unset name is no
    limit, noted as every unset reference is."""
    text = (
        "model_list:\n  - model_name: a\n    rpm: os.environ/RPM\n    tpm: os.environ/TPM\n"
        "    litellm_params: {model: openai/gpt-4o}\n"
    )
    config = loaded(tmp_path, text, environ={"RPM": "60", "TPM": "90000"})
    assert (config.routes["a"].rpm, config.routes["a"].tpm) == (60, 90000)
    unset = loaded(tmp_path, text, environ={"RPM": "60"})
    assert unset.routes["a"].tpm is None
    assert any("model_list[0].tpm (TPM)" in m for m in unset.missing_env)


# -- model_info.base_model: what the map knows the deployment as --------------------------------

_AZURE = """
model_list:
  - model_name: az
    litellm_params: {model: azure/my-gpt4o-prod, api_base: "https://x.openai.azure.com"}
    model_info: {base_model: azure/gpt-4o}
  - model_name: public
    litellm_params: {model: azure/gpt-4o, api_base: "https://x.openai.azure.com"}
"""


_OLDER = _AZURE.replace(
    'api_base: "https://x.openai.azure.com"}\n    model_info: {base_model: azure/gpt-4o}',
    'api_base: "https://x.openai.azure.com", base_model: azure/gpt-4o}',
)


@pytest.mark.parametrize("text", [_AZURE, _OLDER], ids=["model_info", "litellm_params"])
def test_base_model_gives_an_azure_deployment_its_models_facts(tmp_path, text):
    """LiteLLM reads an Azure deployment's window, limits and prices by ``base_model`` (the
    deployment's own name is in no map). Ignored with a warning, the deployment of a gpt-4o got
    the assumed 128k window, a 4,096 output limit, no vision (images refused) and no price
    (free to ``usd_per_month``). It now counts, limits and prices as the model it names, and
    its provider is still sent the deployment's name. ``litellm_params.base_model`` (LiteLLM's
    older place for it, still read by its router) was not read at all."""
    assert text.count("base_model") == 1
    config = loaded(tmp_path, text)
    named, public = config.routes["az"], config.routes["public"]
    assert named.route.model == "azure/my-gpt4o-prod"
    assert named.upstream.model_name == "my-gpt4o-prod"
    same = ("context_window", "max_output_tokens", "tokenizer", "framing", "image_rule")
    for fact in (*same, "supports_vision"):
        assert getattr(named.route, fact) == getattr(public.route, fact), fact
    assert named.route.supports_vision
    assert named.input_cost_per_token == public.input_cost_per_token is not None
    assert named.output_cost_per_token == public.output_cost_per_token is not None
    assert not any("base_model" in w or "my-gpt4o-prod" in w for w in config.warnings)


def test_a_base_model_the_map_does_not_list_is_refused_by_name(tmp_path):
    text = _AZURE.replace("base_model: azure/gpt-4o", "base_model: azure/gpt-4oo")
    message = refused(tmp_path, text)
    assert "model_list[0].model_info.base_model: 'azure/gpt-4oo' is not in litellm's" in message


def test_check_says_what_a_route_in_no_map_is_assumed_to_take(tmp_path, capsys):
    """A ``cohere/command-r-plus`` is in no map: it is fitted to an assumed window and its
    clients' output caps are clamped to an assumed limit. ``check`` said only the window;
    it now names both and where the real ones are written."""
    text = "model_list:\n  - model_name: co\n    litellm_params: {model: cohere/command-r-plus}\n"
    main(["check", "--config", str(write(tmp_path, text))])
    out = capsys.readouterr().out
    assert f"window {DEFAULT_WINDOW:,}  max output {DEFAULT_MAX_OUTPUT:,}" in out
    (warning,) = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert "'cohere/command-r-plus' is not in litellm's model map" in warning
    for said in (f"{DEFAULT_WINDOW}-token window", f"{DEFAULT_MAX_OUTPUT}-token output limit"):
        assert said in warning
    assert "model_info.base_model" in warning


# -- litellm_params.order: the backup deployment waits its turn ---------------------------------


def _ordered(host: str, order: int | str, weight: int = 1) -> dict[str, object]:
    entry = deployment(host, weight=weight)
    entry["litellm_params"]["order"] = order
    return entry


def test_order_keeps_a_backup_deployment_idle_until_the_primary_fails(tmp_path):
    """LiteLLM's ``order``: the alias's lowest order takes the requests, a higher one only
    when those fail. Not read, it was forwarded as a provider parameter and ignored by the
    router: the backup (``order: 2``, here also weighted far above the primary, which alone
    would send it nearly every request) took traffic from a healthy primary."""
    providers = Providers()
    models = [_ordered("backup.test", 2, weight=1_000_000), _ordered("primary.test", "1")]
    with serve(write_config(tmp_path, models), providers) as gw:
        healthy = [post(gw, {"model": "chat", **CHAT}) for _ in range(4)]
        providers.fail["primary.test"] = "500"
        failing = post(gw, {"model": "chat", **CHAT})
    assert [r.status_code for r in healthy] == [200] * 4, healthy[-1].text
    assert {r.headers["x-routefit-deployment"] for r in healthy} == {"primary.test"}
    assert providers.hits["backup.test"] == 1  # the failing primary's retry, and only it
    assert failing.status_code == 200, failing.text
    assert failing.headers["x-routefit-deployment"] == "backup.test"
    config = load_config(write_config(tmp_path, models), environ={})
    assert all("order" not in rc.upstream.extra for rc in config.deployments("chat"))


# -- simple-shuffle weighs by rpm (else tpm) where no weight is written -----------------------


def _limited(host: str, **limits: int) -> dict[str, object]:
    entry = deployment(host)
    entry["litellm_params"].update(limits)
    return entry


def test_simple_shuffle_weighs_deployments_by_rpm_when_none_writes_a_weight(tmp_path):
    """LiteLLM's simple-shuffle weighs by ``weight``, else ``rpm``, else ``tpm`` (the first any
    deployment of the alias sets; one without it weighs 0). routefit weighed every deployment
    1 unless ``weight`` was written, so a 1,000,000-rpm and a 1-rpm deployment split the
    traffic evenly and the small one was rate-limited."""
    providers = Providers()
    models = [_limited("small.test", rpm=1), _limited("large.test", rpm=1_000_000)]
    with serve(write_config(tmp_path, models), providers) as gw:
        answers = [post(gw, {"model": "chat", **CHAT}) for _ in range(6)]
    assert [r.status_code for r in answers] == [200] * 6, answers[-1].text
    assert {r.headers["x-routefit-deployment"] for r in answers} == {"large.test"}
    by_tpm = [_limited("a.test", tpm=300), _limited("b.test", tpm=100), _limited("c.test")]
    config = load_config(write_config(tmp_path, by_tpm), environ={})
    assert [rc.weight for rc in config.deployments("chat")] == [300.0, 100.0, 0.0]
    written = [*by_tpm[:2], deployment("c.test", weight=2)]
    config = load_config(write_config(tmp_path, written), environ={})
    assert [rc.weight for rc in config.deployments("chat")] == [1.0, 1.0, 2.0]


# -- fallbacks: LiteLLM's generic "*" chain --------------------------------------------------


def test_a_generic_fallback_serves_an_alias_without_its_own_chain(tmp_path):
    """``fallbacks: [{"*": [spare]}]`` is LiteLLM's generic fallback, tried for any model
    group without its own chain. It was refused ("'*' is not a model_name of model_list"),
    so a LiteLLM config with a catch-all did not load. It is now the default fallbacks: a
    failing alias without a chain is answered by the generic one's alias, and one with its own
    chain keeps it."""
    providers = Providers()
    providers.fail["primary.test"] = "500"
    models = [
        deployment("primary.test"),
        deployment("spare.test", alias="spare"),
        deployment("other.test", alias="other"),
    ]
    router = {"num_retries": 0, "fallbacks": [{"*": ["spare"]}]}
    with serve(write_config(tmp_path, models, router), providers) as gw:
        answer = post(gw, {"model": "chat", **CHAT})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-routefit-deployment"] == "spare.test"
    own = {"fallbacks": [{"*": ["spare"]}, {"chat": ["other"]}]}
    settings = load_config(write_config(tmp_path, models, own), environ={}).router
    assert (settings.default_fallbacks, dict(settings.fallbacks)) == (
        ("spare",),
        {"chat": ("other",)},
    )


def test_the_generic_fallback_and_default_fallbacks_together_are_refused(tmp_path):
    models = [deployment("primary.test"), deployment("spare.test", alias="spare")]
    both = {"fallbacks": [{"*": ["spare"]}], "default_fallbacks": ["spare"]}
    message = refused_path(write_config(tmp_path, models, both))
    assert "router_settings.fallbacks: '*' and default_fallbacks both name" in message
    context = {"context_window_fallbacks": [{"*": ["spare"]}]}
    message = refused_path(write_config(tmp_path, models, context))
    assert "router_settings.context_window_fallbacks[0].*: LiteLLM's generic '*'" in message


def test_enable_pre_call_checks_loads_what_routefit_does_anyway(tmp_path):
    """LiteLLM's ``enable_pre_call_checks`` (skip a deployment whose window cannot hold the
    prompt) is what routefit always does; a config with it was refused ("LiteLLM router key
    not implemented"). ``true`` loads silently, ``false`` with a warning, a non-switch not."""
    models = [deployment("primary.test")]
    on = load_config(write_config(tmp_path, models, {"enable_pre_call_checks": True}), environ={})
    assert not [w for w in on.warnings if "pre_call" in w]
    off = write_config(tmp_path, models, {"enable_pre_call_checks": False, "num_retries": 1})
    config = load_config(off, environ={})
    assert config.router.num_retries == 1  # the rest of the block is read as before
    assert [w for w in config.warnings if "router_settings.enable_pre_call_checks" in w]
    wrong = write_config(tmp_path, models, {"enable_pre_call_checks": "sometimes"})
    assert "enable_pre_call_checks: must be true or false" in refused_path(wrong)


def refused_path(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    return str(caught.value)


# -- a deployment's own timeout wins over router_settings.timeout ---------------------------


def test_a_deployments_own_timeout_wins_over_the_routers(tmp_path, fresh_sim):
    """LiteLLM times a call by the deployment's ``litellm_params.timeout`` before the router's
    ``timeout``. routefit's router timeout replaced every route's: a deployment written to wait
    30 s for a slow model was cut at the router's 1 s (504 ``upstream_timeout``). It now waits
    its own; a route that writes none still takes the router's."""
    base = fresh_sim.url("/v1")
    text = f"""
    model_list:
      - model_name: patient
        litellm_params: {{model: openai/gpt-4o, api_base: "{base}", api_key: k, timeout: 30}}
      - model_name: plain
        litellm_params: {{model: openai/gpt-4o, api_base: "{base}", api_key: k}}
    router_settings: {{timeout: 1, num_retries: 0}}
    """
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 20}
    with run_inprocess(write(tmp_path, text)) as gw:
        fresh_sim.inject("delay:2")
        patient = post(gw, {"model": "patient", **body})
        fresh_sim.inject("delay:2")
        plain = post(gw, {"model": "plain", **body})
    assert patient.status_code == 200, patient.text
    assert plain.status_code == 504, plain.text
    assert plain.json()["error"]["code"] == "upstream_timeout"


def test_a_streams_own_timeout_times_streams_alone(tmp_path, fresh_sim):
    """LiteLLM times a streamed call by ``litellm_params.stream_timeout`` in place of
    ``timeout``. routefit accepted it and waited ``timeout`` (600 s by default) for a stream
    that was to fail over after 1 s; a whole answer still waits ``timeout``."""
    base = fresh_sim.url("/v1")
    params = f'model: openai/gpt-4o, api_base: "{base}", api_key: k'
    text = f"""
    model_list:
      - model_name: quick
        litellm_params: {{{params}, timeout: 30, stream_timeout: 1}}
    router_settings: {{num_retries: 0}}
    """
    body = {"model": "quick", "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 20}
    with run_inprocess(write(tmp_path, text)) as gw:
        fresh_sim.inject("delay:2")
        whole = post(gw, body)
        fresh_sim.inject("delay:2")
        streamed = post(gw, {**body, "stream": True})
    assert whole.status_code == 200, whole.text
    assert streamed.status_code == 504, streamed.text
    assert streamed.json()["error"]["code"] == "upstream_timeout"


# -- litellm_params only litellm applies, on a route litellm does not serve ---------------------


def test_litellm_params_the_openai_transport_never_sends_are_each_a_warning(tmp_path, capsys):
    """LiteLLM applies every litellm_params key (``temperature`` as the deployment's default,
    ``organization``, ``extra_headers``, ``max_retries``). On the openai transport routefit
    forwards the request itself and dropped them without a word: ``check`` said nothing. Each
    is now a warning there; through litellm they are forwarded, as before, without one."""
    unsent = ("temperature", "organization", "max_retries")
    params = "temperature: 0.2, organization: org-1, max_retries: 3, input_cost_per_token: 1e-6"
    text = f"""
    model_list:
      - model_name: direct
        litellm_params: {{model: openai/gpt-4o, {params}}}
      - model_name: translated
        litellm_params: {{model: openai/gpt-4o, {params}}}
        routefit: {{transport: litellm}}
    """
    main(["check", "--config", str(write(tmp_path, text))])
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    for key in unsent:
        (line,) = [w for w in warnings if f".litellm_params.{key}:" in w]
        assert "model_list[0]" in line and "not sent on the openai transport" in line
    assert not any("model_list[1]" in w or "input_cost_per_token" in w for w in warnings)


# -- a deployment's litellm_params are defaults the request overrides -------------------------


def test_the_clients_parameters_win_over_a_deployments_litellm_params(tmp_path, fresh_sim):
    """LiteLLM's router calls litellm with ``{**deployment params, **request}``: a
    deployment's ``temperature`` or ``max_tokens`` is a default. routefit laid them over the
    client's body, so a client's ``temperature: 0`` reached the provider as the deployment's
    0.7, and its ``max_tokens: 20`` as 50, past the output cap the fit reserved for."""
    text = f"""
    model_list:
      - model_name: via
        litellm_params:
          model: openai/gpt-4o
          api_base: "{fresh_sim.url("/v1")}"
          api_key: k
          temperature: 0.7
          max_tokens: 50
        routefit: {{transport: litellm}}
    """
    said = [{"role": "user", "content": "Say hello."}]
    with run_inprocess(write(tmp_path, text)) as gw:
        own = post(gw, {"model": "via", "messages": said, "temperature": 0, "max_tokens": 20})
        assert own.status_code == 200, own.text
        sent = fresh_sim.last_request("/v1/chat/completions")["body"]
        assert (sent["temperature"], sent["max_tokens"]) == (0, 20)
        default = post(gw, {"model": "via", "messages": said})
        assert default.status_code == 200, default.text
        assert fresh_sim.last_request("/v1/chat/completions")["body"]["temperature"] == 0.7


# -- custom pricing in litellm_params keeps an Anthropic route on routefit's own mapping ------


def test_a_price_in_litellm_params_keeps_an_anthropic_route_on_routefits_mapping(
    tmp_path, fresh_sim
):
    """LiteLLM's custom pricing may sit in ``litellm_params`` (routefit reads it there). Left
    among the parameters litellm is handed, it took every chat request of an ``anthropic/``
    route off routefit's own chat → Messages mapping onto litellm's, where an OpenAI hint
    routefit drops (``prompt_cache_key``) was litellm's 400. The price is read, not handed on."""
    text = f"""
    model_list:
      - model_name: claude
        litellm_params:
          model: anthropic/claude-sonnet-4-5
          api_base: "{fresh_sim.base_url}"
          api_key: k
          input_cost_per_token: 3.0e-6
          output_cost_per_token: 1.5e-5
    """
    config = load_config(write(tmp_path, text), environ={})
    assert config.routes["claude"].input_cost_per_token == 3.0e-6
    body = {
        "model": "claude",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 20,
        "prompt_cache_key": "session-1",
    }
    with run_inprocess(write(tmp_path, text)) as gw:
        answer = post(gw, body)
    assert answer.status_code == 200, answer.text


# -- LiteLLM's wildcard model routing -----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model", "path"),
    [
        ("openai/*", "openai/*", "model_list[0].model_name"),
        ("gpt", "openai/*", "model_list[0].litellm_params.model"),
        ("*", "*", "model_list[0].model_name"),
    ],
)
def test_a_wildcard_route_is_refused_by_name(tmp_path, name, model, path):
    """LiteLLM's wildcard routing (``model_name: openai/*``) serves any model of the provider,
    sent as requested. routefit loaded it as the literal alias ``openai/*`` (every request for
    ``openai/gpt-4o`` unknown) whose provider model was ``*``, with an assumed window; it
    prices each route by its model at load, so the file is refused at the key instead."""
    text = f'model_list:\n  - model_name: "{name}"\n    litellm_params: {{model: "{model}"}}\n'
    message = refused(tmp_path, text)
    assert f"{path}: '{name if path.endswith('model_name') else model}'" in message
    assert "wildcard routing is not implemented" in message


# -- LITELLM_MASTER_KEY: LiteLLM's master key when general_settings names none -----------------


@pytest.mark.anyio
async def test_litellm_master_key_from_the_environment_asks_for_auth(tmp_path):
    """LiteLLM's proxy takes ``general_settings.master_key``, else ``LITELLM_MASTER_KEY`` from
    its environment. A LiteLLM deployment keyed that way alone ran open under routefit:
    every request admitted, keyless or not. It is now the master key, and ``check`` says so."""
    path = write(tmp_path, f"model_list:\n{deployment_yaml()}")
    environ = {"LITELLM_MASTER_KEY": "sk-master-0123456789"}
    config = load_config(path, environ=environ)
    assert not config.open
    assert describe(config)["master_key_set"]
    body = {"model": "chat", **CHAT}
    async with asgi_client(config, Providers()) as client:
        keyless = await client.post("/v1/chat/completions", json=body)
        keyed = await client.post(
            "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {environ['LITELLM_MASTER_KEY']}"},
        )
    assert keyless.status_code == 401, keyless.text
    assert keyed.status_code == 200, keyed.text
    assert load_config(path, environ={}).open  # no key anywhere: open, as before


def deployment_yaml() -> str:
    params = '{model: openai/gpt-4o, api_base: "http://p.test/v1", api_key: k}'
    return f"  - model_name: chat\n    litellm_params: {params}\n"


# -- model_info.rpm/tpm: LiteLLM's third place for a deployment's limits -----------------------


def test_model_info_rpm_and_tpm_are_the_deployments_limits(tmp_path):
    """LiteLLM's usage-based routing reads a deployment's ``rpm``/``tpm`` on the entry, in
    ``litellm_params``, then in ``model_info``. routefit warned ``model_info.rpm`` away as
    unused, and the deployment had no limit to be ranked by; written twice, it is an error."""
    text = "model_list:\n  - model_name: a\n    litellm_params: {model: openai/gpt-4o}\n"
    config = loaded(tmp_path, text + "    model_info: {rpm: 60, tpm: 9000}\n")
    assert (config.routes["a"].rpm, config.routes["a"].tpm) == (60, 9000)
    assert not [w for w in config.warnings if "model_info.rpm" in w or "model_info.tpm" in w]
    twice = text.replace("gpt-4o}", "gpt-4o, rpm: 60}") + "    model_info: {rpm: 60}\n"
    message = refused(tmp_path, twice)
    assert "model_list[0].litellm_params.rpm: also set as model_info.rpm; keep one" in message
