"""Watchers for what routefit reads and writes of a prompt: a proof's tokenizer that tells what
it was asked to count (the pieces, in order), and orjson as a module sees it, telling how often
and how long it was asked to write (a key that writes a long text out again, a body written to
check it)."""

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
    """orjson as a module sees it (its reads and names passed through), noting how often it was
    asked to write and the longest JSON it wrote."""

    def __init__(self) -> None:
        self.wrote = 0
        self.longest = 0

    def dumps(self, value: Any, option: int = 0) -> bytes:
        data = orjson.dumps(value, option=option)
        self.wrote += 1
        self.longest = max(self.longest, len(data))
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(orjson, name)  # loads, JSONDecodeError, the OPT_ flags


def watch_writes(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> Writes:
    """One ``Writes`` in place of orjson in each of ``modules``."""
    writes = Writes()
    for module in modules:
        monkeypatch.setattr(module, "orjson", writes)
    return writes
