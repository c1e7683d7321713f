"""Facts about models from the cost map file litellm ships, read without importing litellm.

Importing litellm costs seconds and may reach for the network; the file is plain JSON beside its
code. Windows, output limits, vision support and prices are read from it as defaults that a
route's config can override.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["lookup", "model_map_path", "prefetch", "prefix"]

_FILE = "model_prices_and_context_window_backup.json"

#: Every key ever probed: its entry, or None when the map has none. A lookup whose keys were
#: all probed before (a route's model at request time) is answered from here, without the map.
_probed: dict[str, dict[str, Any] | None] = {}


def model_map_path() -> Path | None:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / _FILE
    return path if path.is_file() else None


def _entries(keys: Sequence[str]) -> dict[str, dict[str, Any] | None]:
    """The map's entries under these keys (None where it has none), from one read of the file.

    Decoding the file makes ~5 MiB of small Python objects (4,900 entries) that die at once.
    Nothing long-lived may be made while they live: whatever is lands among them, and every
    allocator arena it lands in stays resident, mostly empty, for the worker's life (measured:
    the map kept while the routes were built left 5 MiB so, bench/REPORT.md 2b). So the entries
    asked leave as one JSON text, the map goes, and they are decoded after it."""
    path = model_map_path()
    if path is None:
        return dict.fromkeys(keys)
    with path.open("rb") as f:
        data = json.load(f)
    wanted = json.dumps({k: data[k] for k in keys if isinstance(data.get(k), dict)})
    del data
    found = json.loads(wanted)
    return {k: found.get(k) for k in keys}


def _candidates(model: str, provider: str | None) -> list[str]:
    """The keys a model may be under: as given, without its provider prefix, then with the
    provider prefix (the map keys some providers' models as ``gemini/...``, others bare)."""
    bare = model.split("/", 1)[-1]
    return [model, bare, *([f"{provider}/{bare}"] if provider else [])]


def prefix(model: str) -> str | None:
    """The provider a litellm model string names before its ``/``, if any."""
    head, slash, _ = model.partition("/")
    return head if slash else None


def prefetch(models: Iterable[str]) -> None:
    """Probe every key these models may be under with one read of the file: a config's routes
    are read this way, so the file is decoded once however many routes it has."""
    _probe([key for m in models for key in _candidates(m, prefix(m))])


def _probe(keys: Sequence[str]) -> None:
    missing = list(dict.fromkeys(key for key in keys if key not in _probed))
    if missing:
        _probed.update(_entries(missing))


def lookup(model: str, provider: str | None = None) -> dict[str, Any]:
    """The model map entry for a litellm model string, or {} when unknown.

    Tries the keys ``_candidates`` names, in its order."""
    candidates = _candidates(model, provider)
    _probe(candidates)  # every one, so a later lookup by another spelling is answered
    for key in candidates:
        entry = _probed[key]
        if entry is not None:
            return entry
    return {}
