"""Every key the loader accepts, block by block: the sets each reader checks its block against,
gathered in one place so docs/configuration.md can be checked against them (tests/proxy/
test_configuration_doc.py) and cannot drift from what the loader does.

Blocks are named by their path (``model_list[].routefit.fit``); the top level is ``""``. An
image rule's constants depend on its kind: ``image_rule_constants`` lists them per kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from pricing.images.kinds import KINDS
from proxy.config.access import _GENERAL_REFUSED, _GENERAL_USED, _SIM_KEYS, _TLS_KEYS
from proxy.config.deployments import DEPLOYMENT_PARAMS
from proxy.config.images import _FETCH_KEYS, _LIMIT_KEYS, _rule_keys
from proxy.config.loader import _TOP_KEYS, LITELLM_SETTINGS_USED
from proxy.config.policy import FIT_KEYS
from proxy.config.router_settings import ALLOWED_FAILS_POLICY_KEYS, RETRY_POLICY_KEYS, ROUTER_KEYS
from proxy.config.routes import ENTRY_KEYS, MODEL_INFO_KEYS, ROUTEFIT_KEYS
from proxy.config.settings import _CALIBRATION_KEYS, REQUEST_LOG_KEYS, SETTINGS_KEYS
from proxy.config.teams import _QUOTA_KEYS, TEAM_KEYS
from proxy.config.tokenizing import _FRAMING_KEYS
from proxy.config.transport import LITELLM_PARAMS

__all__ = ["BLOCKS", "RULE_KEYS", "image_rule_constants"]

#: The keys an image rule mapping takes whatever its kind.
RULE_KEYS = frozenset({"kind", "model", "variant"})

BLOCKS: Mapping[str, frozenset[str]] = {
    "": _TOP_KEYS,
    "model_list[]": ENTRY_KEYS,
    "model_list[].litellm_params": LITELLM_PARAMS | DEPLOYMENT_PARAMS,
    "model_list[].model_info": MODEL_INFO_KEYS,
    "model_list[].routefit": ROUTEFIT_KEYS,
    "model_list[].routefit.fit": FIT_KEYS,
    "model_list[].routefit.framing": _FRAMING_KEYS,
    "model_list[].routefit.image_rule": RULE_KEYS,
    "model_list[].routefit.image_limits": _LIMIT_KEYS,
    "model_list[].routefit.image_fetch": _FETCH_KEYS,
    "routefit_settings": SETTINGS_KEYS,
    "routefit_settings.calibration": _CALIBRATION_KEYS,
    "routefit_settings.request_log": REQUEST_LOG_KEYS,
    "routefit_settings.tls": _TLS_KEYS,
    "routefit_settings.simulator": _SIM_KEYS,
    "routefit_settings.teams[]": TEAM_KEYS,
    "routefit_settings.teams[].quotas": _QUOTA_KEYS,
    "routefit_settings.teams[].fit": FIT_KEYS,
    "general_settings": _GENERAL_USED | frozenset(_GENERAL_REFUSED),
    "litellm_settings": LITELLM_SETTINGS_USED,
    "router_settings": ROUTER_KEYS,
    "router_settings.retry_policy": RETRY_POLICY_KEYS,
    "router_settings.allowed_fails_policy": ALLOWED_FAILS_POLICY_KEYS,
    "routefit_settings.teams[].router_settings": ROUTER_KEYS,
    "routefit_settings.teams[].router_settings.retry_policy": RETRY_POLICY_KEYS,
    "routefit_settings.teams[].router_settings.allowed_fails_policy": ALLOWED_FAILS_POLICY_KEYS,
}


def image_rule_constants() -> dict[str, frozenset[str]]:
    """Per rule kind, the constants an ``image_rule`` mapping of that kind may set."""
    out: dict[str, frozenset[str]] = {}
    for kind in KINDS:
        keys = _rule_keys({"kind": kind})
        assert keys is not None  # every registered kind is known to the loader
        out[kind] = frozenset(keys - RULE_KEYS)
    return out
