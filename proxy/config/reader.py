"""Reading one config file: key paths in errors, environment references, strict and loose blocks.

Two kinds of block live in one file. routefit's own (``routefit:``, ``routefit_settings:`` and
everything under them) are strict: an unknown key there is a typo that would silently change
behaviour, so it is an error naming its path with the closest known key. LiteLLM's
(``litellm_params``, ``model_info``, ``litellm_settings``, ...) are loose: routefit reads what
it needs and warns about the rest, so a LiteLLM config loads as is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import inf
from typing import Any

__all__ = ["ENV_PREFIX", "ConfigError", "EnvText", "Reader", "scalar", "unknown_key"]

ENV_PREFIX = "os.environ/"
#: LiteLLM's own top-level and per-model keys: never taken for a misspelt routefit key.
_LITELLM_KEYS = frozenset(
    {
        "litellm_settings",
        "general_settings",
        "router_settings",
        "environment_variables",
        "credential_list",
        "include",
        "model_info",
        "litellm_params",
    }
)


class ConfigError(ValueError):
    """A config mistake; the message names the file and the key path."""


class EnvText(str):
    """A value read from the environment (``os.environ/NAME``): always text, where the file
    could have written a number or a switch. It is a ``str`` to every reader of text (keys,
    URLs); the readers of numbers and switches read it (as any text: ``scalar``) as YAML would
    have read it in the file, so ``max_body_bytes: os.environ/MAX_BODY`` is not refused for
    being ``"1048576"``."""


#: What YAML (and LiteLLM's pydantic) read as a switch.
_TRUE = frozenset({"true", "yes", "on"})
_FALSE = frozenset({"false", "no", "off"})


def scalar(value: Any) -> Any:
    """``value`` as a reader of numbers and switches takes it. An environment value's text
    becomes the integer, number or boolean it spells; a quoted number in the file becomes the
    number (LiteLLM's pydantic reads ``rpm: "60"`` as 60, and a templating tool, a Helm chart's
    ``"{{ .Values.rpm }}"``, writes numbers quoted: such a config did not load). A quoted
    switch in the file stays text, refused by the reader of switches: ``'yes'`` is a string to
    YAML 1.2 and a switch to 1.1, and a file that quotes it may mean either. Anything else
    stays text, for the caller to refuse."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if isinstance(value, EnvText) and (text in _TRUE or text in _FALSE):
        return text in _TRUE
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return value


def _close(word: str, names: Iterable[str], cutoff: float) -> list[str]:
    """The name nearest ``word`` when one is that close (difflib: imported for a config with a
    key it does not know, not by every worker)."""
    import difflib

    return difflib.get_close_matches(word, list(names), 1, cutoff)


def unknown_key(key: object, known: Iterable[str]) -> str:
    """ "unknown key (did you mean 'x'?)", or the known keys when none is close."""
    names = sorted(known)
    close = _close(str(key), names, 0.6)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    return f"unknown key (known: {', '.join(names) or 'none'})"


class Reader:
    """Reads values out of one file's data, collecting warnings and unset environment names."""

    def __init__(self, path: str, environ: Mapping[str, str]) -> None:
        self.path = path
        self.environ = environ
        self.warnings: list[str] = []
        self.missing_env: list[str] = []
        #: Path → the unset variable it names (``resolve``).
        self.unset: dict[str, str] = {}

    def error(self, where: str, message: str) -> ConfigError:
        return ConfigError(
            f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}"
        )

    def warn(self, where: str, message: str) -> None:
        self.warnings.append(f"{self.path}: {where}: {message}")

    def resolve(self, value: Any, where: str) -> Any:
        """Resolve ``os.environ/NAME`` references anywhere in a value (unset: null, noted).

        A mapping's key whose variable is unset is left out, as if not written: it takes the
        key's default, as docs/configuration.md says (``max_body_bytes: os.environ/UNSET`` was
        refused as a null that is not an integer). ``unset`` keeps where, for a key whose
        default would widen what the file allows (a team's ``routes``)."""
        if isinstance(value, str) and value.startswith(ENV_PREFIX):
            name = value[len(ENV_PREFIX) :]
            if name not in self.environ:
                self.missing_env.append(f"{where} ({name})")
                self.unset[where] = name
                return None
            return EnvText(self.environ[name])
        if isinstance(value, Mapping):
            out = {k: self.resolve(v, f"{where}.{k}") for k, v in value.items()}
            return {
                k: v for k, v in out.items() if v is not None or f"{where}.{k}" not in self.unset
            }
        if isinstance(value, list):
            return [self.resolve(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(where, "must be a mapping")
        return value

    def strict(self, value: Any, known: Iterable[str], where: str) -> Mapping[str, Any]:
        """A routefit-owned mapping: any key outside ``known`` is an error."""
        block = self.mapping(value, where)
        names = set(known)
        for key in block:
            if key not in names:
                raise self.error(f"{where}.{key}", unknown_key(key, names))
        return block

    def loose(self, block: Mapping[str, Any], known: Iterable[str], where: str) -> None:
        """A LiteLLM-owned mapping: keys routefit does not read get one warning each."""
        names = set(known)
        for key in block:
            if key not in names:
                self.warn(f"{where}.{key}", "not used by routefit; ignored")

    def shared(
        self, block: Mapping[str, Any], known: Iterable[str], owned: Iterable[str], where: str
    ) -> None:
        """A level LiteLLM and routefit share (the top level, a model entry): unknown keys warn,
        except near-misses of routefit's own keys (``routefit_setings:``), which are errors."""
        names, mine = set(known), set(owned)
        for key in block:
            if key in names:
                continue
            text = str(key)
            near = _close(text, mine, 0.9) and text not in _LITELLM_KEYS
            if text.startswith("routefit") or near:
                raise self.error(f"{where}.{key}" if where else text, unknown_key(key, mine))
            self.warn(f"{where}.{key}" if where else text, "not used by routefit; ignored")

    def integer(self, value: Any, where: str, minimum: int = 0, maximum: int | None = None) -> int:
        """An integer in bounds; one past ``maximum`` is refused by name rather than clamped, so
        the file never says more than routefit does."""
        value = scalar(value)
        wrong = isinstance(value, bool) or not isinstance(value, int) or value < minimum
        if maximum is not None and (wrong or value > maximum):
            raise self.error(where, f"must be an integer from {minimum} to {maximum}")
        if wrong:
            raise self.error(where, f"must be an integer >= {minimum}")
        return int(value)

    def boolean(self, value: Any, where: str) -> bool:
        value = scalar(value)
        if not isinstance(value, bool):
            raise self.error(where, "must be true or false")
        return value

    def number(self, value: Any, where: str) -> float:
        """A positive finite number: YAML's ``.nan`` passed ``value <= 0`` and timed every
        request out at once (a NaN deadline), or spun a refresh loop without a pause."""
        value = scalar(value)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < inf:
            raise self.error(where, "must be a positive number (not .inf or .nan)")
        return float(value)

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(where, "must be a non-empty string")
        return value
