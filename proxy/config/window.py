"""A route's window and limits: what the model accepts, from ``model_info`` or litellm's map.

``routefit.context_window`` wins, then ``model_info``, then the model map litellm ships; a model
in none of them gets a conservative 128k window and a warning rather than a refusal to start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.config.reader import Reader, pick

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


def read_window(
    own: Mapping[str, Any],
    info: Mapping[str, Any],
    entry: Mapping[str, Any],
    model: str,
    where: str,
    rd: Reader,
) -> Window:
    """``own`` is the route's routefit block, ``info`` its model_info, ``entry`` the map's."""
    window_raw = pick("context_window", own) or pick("max_input_tokens", info, entry)
    if window_raw is None:
        window_raw = DEFAULT_WINDOW
        rd.warn(
            f"{where}.model_info.max_input_tokens",
            f"model {model!r} is not in litellm's model map; assuming a "
            f"{DEFAULT_WINDOW}-token window",
        )
    max_out = pick("max_output_tokens", info, entry) or pick("max_tokens", info, entry)
    vision = pick("supports_vision", info, entry)
    return Window(
        context_window=rd.integer(window_raw, f"{where}.model_info.max_input_tokens", 1),
        max_output_tokens=rd.integer(
            max_out or DEFAULT_MAX_OUTPUT, f"{where}.model_info.max_output_tokens", 1
        ),
        supports_vision=bool(vision) if vision is not None else False,
        input_cost_per_token=_cost(pick("input_cost_per_token", info, entry)),
        output_cost_per_token=_cost(pick("output_cost_per_token", info, entry)),
    )
