"""Facts about models from the cost map file litellm ships, read without importing litellm.

Importing litellm costs seconds and may reach for the network; the file is plain JSON beside its
code. Windows, output limits, vision support and prices are read from it as defaults that a
route's config can override.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["lookup", "model_map_path"]

_FILE = "model_prices_and_context_window_backup.json"


def model_map_path() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / _FILE
    return path if path.is_file() else None


@cache
def _load() -> dict[str, dict[str, Any]]:
    path = model_map_path()
    if path is None:
        return {}
    with path.open("rb") as f:
        data = json.load(f)
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def lookup(model: str, provider: str | None = None) -> dict[str, Any]:
    """The model map entry for a litellm model string, or {} when unknown.

    Tries the string as given, then without its provider prefix, then with the provider prefix
    (the map keys some providers' models as ``gemini/...``, others bare).
    """
    data = _load()
    bare = model.split("/", 1)[1] if "/" in model else model
    candidates = [model, bare]
    if provider:
        candidates.append(f"{provider}/{bare}")
    for key in candidates:
        entry = data.get(key)
        if entry is not None:
            return entry
    return {}
