"""One YAML file → routes, fit policies, upstreams, teams and settings.

The file is a LiteLLM proxy config (``model_list`` with ``model_name``, ``litellm_params``,
``model_info``) so its users can bring theirs as is. routefit's own keys sit beside them: a
``routefit:`` block per model and a top-level ``routefit_settings:`` block. Every routefit key is
optional, with defaults from the model name and the model map litellm ships.

Errors name the file and the key path (``routes.yaml: model_list[2].routefit.tokenizer: ...``).
An unknown key inside a routefit block is an error with the closest known key; keys of LiteLLM's
blocks that routefit does not use are accepted with one warning each, so a LiteLLM config loads
as is. ``os.environ/NAME`` values resolve from the environment; an unset variable becomes null
(the key's default) with a note in ``Config.missing_env`` (a missing provider key must not stop
pricing or ``/routefit/fit`` from working); a set one is text, read as YAML would read it where a
key takes a number or a switch (``reader.EnvText``).

One module per concern: ``reader`` (paths, environment, strict/loose blocks), ``window``,
``tokenizing``, ``images``, ``policy``, ``transport``, ``settings``, ``teams``, ``routes`` (one
model entry), ``deployments`` (an entry as one deployment of its alias), ``router_settings``
(LiteLLM's router block) and ``loader`` (the file); ``describe`` renders a loaded config for
``routefit check``.
"""

from proxy.config.loader import Config, load_config, parse_config
from proxy.config.reader import ENV_PREFIX, ConfigError
from proxy.config.routes import RouteConfig
from proxy.config.settings import Settings
from proxy.config.transport import DEFAULT_API_BASES, OPENAI_COMPATIBLE, TRANSPORTS, Upstream

__all__ = [
    "DEFAULT_API_BASES",
    "ENV_PREFIX",
    "OPENAI_COMPATIBLE",
    "TRANSPORTS",
    "Config",
    "ConfigError",
    "RouteConfig",
    "Settings",
    "Upstream",
    "load_config",
    "parse_config",
]
