"""A route's tokenizer and chat framing: the model's own where public, overridable per route."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pricing.framing import Framing, default_framing, parse_framing
from pricing.tokenizers import TokenizerError, default_tokenizer, parse_tokenizer_spec
from proxy.config.reader import Reader

__all__ = ["read_framing", "read_tokenizer"]

_FRAMING_KEYS = frozenset(Framing.__dataclass_fields__)


def read_tokenizer(own: Mapping[str, Any], model: str, where: str, rd: Reader) -> str:
    spec = own.get("tokenizer")
    try:
        return parse_tokenizer_spec(str(spec if spec is not None else default_tokenizer(model)))
    except TokenizerError as exc:
        raise rd.error(f"{where}.tokenizer", str(exc)) from None


def read_framing(
    own: Mapping[str, Any], model: str, tokenizer: str, provider: str, where: str, rd: Reader
) -> Framing:
    spec = own.get("framing")
    if isinstance(spec, Mapping):
        rd.strict(spec, _FRAMING_KEYS, f"{where}.framing")
    try:
        framing = default_framing(model, tokenizer, provider)
        return framing if spec is None else parse_framing(spec, framing)
    except ValueError as exc:
        raise rd.error(f"{where}.framing", str(exc)) from None
