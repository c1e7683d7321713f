"""A route's window and limits: what the model accepts, from ``model_info`` or litellm's map.

``routefit.context_window`` wins, then ``model_info``, then the model map litellm ships (under
``model_info.base_model`` when written: ``proxy.config.routes``); a model in none of them gets a
128k window and a 4,096-token output limit, and a warning that says both and where to write the
real ones, rather than a refusal to start.

Decided where the docs were silent (a ``cohere/command-r-plus``, say, is in no map): the assumed
window stays, flagged, rather than a smaller "safe" one. A route is never forwarded unfitted:
the request is fitted to the assumed window like any other, and a provider whose window is
smaller refuses with its own count, which routefit reads and refits by once (proxy/overflow.py);
a smaller assumption would cut every conversation on the many models whose window is larger.
``routefit check`` and the start-up log carry the warning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.config.reader import Reader, scalar

__all__ = ["DEFAULT_WINDOW", "Window", "read_window"]

DEFAULT_WINDOW = 128_000
DEFAULT_MAX_OUTPUT = 4096


@dataclass(frozen=True, slots=True)
class Window:
    context_window: int
    max_output_tokens: int
    supports_vision: bool
    input_cost_per_token: float | None
    output_cost_per_token: float | None


def _cost(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _limit(block: Mapping[str, Any], key: str, where: str, rd: Reader) -> int | None:
    """A limit the file writes, checked where it is written: ``0`` or ``"128k"`` is a mistake
    to name, never a cue to fall back to the model map's value (an ``or`` chain did that)."""
    value = block.get(key)
    return None if value is None else rd.integer(value, f"{where}.{key}", 1)


def _written_cost(block: Mapping[str, Any], key: str, where: str, rd: Reader) -> float | None:
    """A price a block (``where``: its path) writes: a number >= 0 (or a string of one, as
    LiteLLM reads it). Anything else is refused: read as none it made the route free to a
    ``usd_per_month`` quota, and a negative price gave the budget back with every request."""
    value = block.get(key)
    if value is None:
        return None
    value = scalar(value)  # YAML reads ``2e-06`` (no dot) as a string; LiteLLM takes it
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise rd.error(f"{where}.{key}", "must be a number >= 0 (USD per token)")
    return float(value)


#: What LiteLLM (pydantic) reads as a boolean in ``model_info``.
_TRUE = frozenset({"true", "yes", "on", "t", "y", "1"})
_FALSE = frozenset({"false", "no", "off", "f", "n", "0"})


def _vision(info: Mapping[str, Any], entry: Mapping[str, Any], where: str, rd: Reader) -> bool:
    """``supports_vision`` as LiteLLM reads it: a quoted ``"no"`` or ``"false"`` was truthy
    here (``bool("no")``), so images were priced and forwarded to a model that cannot take
    them; what LiteLLM would not read as a boolean is an error."""
    value = info.get("supports_vision")
    if value is None:
        return bool(entry.get("supports_vision"))
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise rd.error(f"{where}.model_info.supports_vision", "must be true or false")


def _map_limit(entry: Mapping[str, Any], key: str) -> int | None:
    """The model map's value (litellm's, not the operator's: what it lacks is no error)."""
    value = entry.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _output_limit(
    info: Mapping[str, Any], entry: Mapping[str, Any], where: str, rd: Reader
) -> int | None:
    """The file's output limit before the map's: ``max_tokens`` is LiteLLM's older name for
    the same limit (its map's spec: the output limit where the provider gives one), so an
    operator who wrote only it meant it over whatever the map ships (a deployment limited
    below the public model). ``max_output_tokens`` wins when both are written."""
    written = _limit(info, "max_output_tokens", where, rd)
    legacy = _limit(info, "max_tokens", where, rd)
    return (
        written
        or legacy
        or _map_limit(entry, "max_output_tokens")
        or _map_limit(entry, "max_tokens")
    )


def read_window(
    own: Mapping[str, Any],
    info: Mapping[str, Any],
    entry: Mapping[str, Any],
    model: str,
    where: str,
    rd: Reader,
    params: Mapping[str, Any] | None = None,
) -> Window:
    """``own`` is the route's routefit block, ``info`` its model_info, ``entry`` the map's,
    ``params`` its litellm_params (read for prices only). Each value the file writes is checked
    at its own path; the map fills only what it omits."""
    window = (
        _limit(own, "context_window", f"{where}.routefit", rd)
        or _limit(info, "max_input_tokens", f"{where}.model_info", rd)
        or _map_limit(entry, "max_input_tokens")
    )
    info_where = f"{where}.model_info"
    max_out = _output_limit(info, entry, info_where, rd)
    if window is None:
        window = DEFAULT_WINDOW
        output = "" if max_out else f" and a {DEFAULT_MAX_OUTPUT}-token output limit"
        rd.warn(
            f"{where}.model_info.max_input_tokens",
            f"model {model!r} is not in litellm's model map; assuming a "
            f"{DEFAULT_WINDOW}-token window{output} (write model_info.max_input_tokens"
            f"{'' if max_out else ' and max_output_tokens'}, or the model_info.base_model "
            "the map lists)",
        )
    return Window(
        context_window=window,
        max_output_tokens=max_out or DEFAULT_MAX_OUTPUT,
        supports_vision=_vision(info, entry, where, rd),
        input_cost_per_token=_price(info, params or {}, entry, "input_cost_per_token", where, rd),
        output_cost_per_token=_price(info, params or {}, entry, "output_cost_per_token", where, rd),
    )


def _price(
    info: Mapping[str, Any],
    params: Mapping[str, Any],
    entry: Mapping[str, Any],
    key: str,
    where: str,
    rd: Reader,
) -> float | None:
    """The file's price, else the map's. LiteLLM reads a deployment's own price in
    ``model_info`` or in ``litellm_params`` (its custom pricing): one written in
    ``litellm_params`` alone was not read, so a team's ``usd_per_month`` was charged the map's
    price, or nothing for a model the map does not know. Two different prices are refused."""
    info_price = _written_cost(info, key, f"{where}.model_info", rd)
    params_price = _written_cost(params, key, f"{where}.litellm_params", rd)
    if info_price is not None and params_price is not None and info_price != params_price:
        raise rd.error(
            f"{where}.model_info.{key}", f"also set as litellm_params.{key}, to another price"
        )
    written = info_price if info_price is not None else params_price
    return written if written is not None else _cost(entry.get(key))
