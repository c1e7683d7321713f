"""A proof's tokenizer that tells what it was asked to count (the pieces, in order): what a
proof, a sample or a fit read of a text is what these tests are about."""

from __future__ import annotations

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
