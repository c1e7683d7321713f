"""Watchers for what routefit reads and writes of a prompt: a proof's tokenizer that tells what
it was asked to count (the pieces, in order), and orjson as a module sees it, telling the
longest JSON it was asked to write (a key that writes a long text out again)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import orjson
import pytest

from pricing.bounds import Proof
from pricing.tokenizers import Tokenizer


class Watched:
    """``real``, noting every piece it counts in ``pieces``."""

    def __init__(self, real: Tokenizer) -> None:
        self.real = real
        self.name = real.name
        self.pieces: list[str] = []

    def count(self, piece: str) -> int:
        self.pieces.append(piece)
        return self.real.count(piece)


def watch(proof: Proof) -> Watched:
    """Put a ``Watched`` in place of ``proof``'s tokenizer (its own back with ``proof.tok =
    watched.real``)."""
    assert proof.tok is not None
    watched = Watched(proof.tok)
    proof.tok = watched  # type: ignore[assignment]
    return watched


class Writes:
    """orjson as a module sees it, noting the longest JSON it was asked to write."""

    OPT_SORT_KEYS = orjson.OPT_SORT_KEYS

    def __init__(self) -> None:
        self.longest = 0

    def dumps(self, value: Any, option: int = 0) -> bytes:
        data = orjson.dumps(value, option=option)
        self.longest = max(self.longest, len(data))
        return data


def watch_writes(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> Writes:
    """One ``Writes`` in place of orjson in each of ``modules``."""
    writes = Writes()
    for module in modules:
        monkeypatch.setattr(module, "orjson", writes)
    return writes
