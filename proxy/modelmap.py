"""Facts about models from the cost map file litellm ships, read without importing litellm.

Importing litellm costs seconds and may reach for the network; the file is plain JSON beside its
code. Windows, output limits, vision support and prices are read from it as defaults that a
route's config can override.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

__all__ = ["lookup", "model_map_path", "release"]

_FILE = "model_prices_and_context_window_backup.json"

#: The whole map while it is kept (from a lookup that needs it until ``release``).
_kept: dict[str, dict[str, Any]] | None = None
#: Every key ever probed: its entry, or None when the map has none. A lookup whose keys were
#: all probed before (a route's model at request time) is answered from here, without the map.
_probed: dict[str, dict[str, Any] | None] = {}


def model_map_path() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / _FILE
    return path if path.is_file() else None


def _read() -> dict[str, dict[str, Any]]:
    path = model_map_path()
    if path is None:
        return {}
    with path.open("rb") as f:
        data = json.load(f)
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _map() -> dict[str, dict[str, Any]]:
    global _kept
    if _kept is None:
        _kept = _read()
    return _kept


def release() -> None:
    """Drop the whole map (4,900 entries, ~4 MiB of Python objects kept by an idle worker) once
    a config's routes have been read: what they asked stays answered from ``_probed``; a
    lookup of a model never probed reads the file again."""
    global _kept
    _kept = None


def lookup(model: str, provider: str | None = None) -> dict[str, Any]:
    """The model map entry for a litellm model string, or {} when unknown.

    Tries the string as given, then without its provider prefix, then with the provider prefix
    (the map keys some providers' models as ``gemini/...``, others bare).
    """
    bare = model.split("/", 1)[1] if "/" in model else model
    candidates = [model, bare]
    if provider:
        candidates.append(f"{provider}/{bare}")
    if any(key not in _probed for key in candidates):
        data = _map()
        for key in candidates:  # every one, so a later lookup by another spelling is answered
            _probed[key] = data.get(key)
    for key in candidates:
        entry = _probed[key]
        if entry is not None:
            return entry
    return {}
