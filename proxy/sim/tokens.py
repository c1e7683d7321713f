"""The simulator's own tokenizers: token *ids*, not just counts (the prefix cache needs them).

Loaded offline from the files litellm ships (tiktoken encodings under their SHA-1 cache names,
Hugging Face ``tokenizer.json`` files), independently of ``pricing.tokenizers``: the simulator is
the oracle routefit's estimates are checked against, so it must not share routefit's code path.

Synthetic tokens (chat framing, image tokens, fillers of a scaled tokenizer) are negative ids, so
they never collide with real ones and still take part in prefix caching.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "END",
    "FILL",
    "IMAGE",
    "NAME",
    "START",
    "Encoder",
    "get_encoder",
    "image_token_ids",
    "litellm_tokenizer_dir",
    "specials",
]

# Synthetic token ids (negative: never a real token).
START = -1  # opens a message
END = -2  # closes a message / per-message scaffolding
NAME = -3  # the extra token a ``name`` costs
CALL = -4  # scaffolding of an assistant tool call
PRIME = -5  # reply priming
FILL = -6  # function-schema constants and other fixed overheads
IMAGE = -7  # body of an image's tokens (the first one carries the image's digest)
TOOLS = -8  # Anthropic tool-use system prompt
SCALE_BASE = -(10**7)  # fillers of a scaled tokenizer: SCALE_BASE - previous token id
IMAGE_BASE = -(2**40)  # first token of an image: IMAGE_BASE - digest

_TIKTOKEN_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "p50k_base": "https://openaipublic.blob.core.windows.net/encodings/p50k_base.tiktoken",
}
_HF_FILES = {
    "deepseek": "deepseek_tokenizer.json",
    "anthropic-legacy": "anthropic_tokenizer.json",
}
_lock = threading.Lock()


class Encoder(Protocol):
    @property
    def name(self) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def count(self, text: str) -> int: ...


def specials(token: int, n: int) -> list[int]:
    """``n`` copies of a synthetic token (``n <= 0`` gives none)."""
    return [token] * max(n, 0)


def image_token_ids(digest: str, n: int) -> list[int]:
    """The token ids of one image costing ``n`` tokens (distinct images → distinct prefixes)."""
    if n <= 0:
        return []
    return [IMAGE_BASE - int(digest[:10], 16), *specials(IMAGE, n - 1)]


def litellm_tokenizer_dir() -> Path:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("litellm is not installed; the simulator needs its tokenizer files")
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


#: A whitespace run this long sends a text to ``_Tiktoken._split``: tiktoken's regex engine
#: gives up (a Rust panic, not even an ``Exception``) on a run of about a million characters.
_LONG = 1 << 16
_LONG_RUN = re.compile(rf"\s{{{_LONG},}}")


@dataclass(frozen=True)
class _Tiktoken:
    name: str
    enc: Any

    def encode(self, text: str) -> list[int]:
        # Ordinary text: a user who types "<|endoftext|>" gets the literal characters.
        if not text:
            return []
        if _LONG_RUN.search(text) is not None:
            return self._split(text)
        return list(self.enc.encode_ordinary(text))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def _split(self, text: str) -> list[int]:
        """The tokens tiktoken would give ``text`` if its regex engine did not stop at a
        million backtracking steps (``\\s+(?!\\S)`` steps back through a long whitespace run
        one character at a time).

        The ``regex`` module (tiktoken's own dependency, whose ``\\s`` is Unicode White_Space
        like the Rust engine's) splits the text with the encoding's pattern, without a step
        limit; each long piece is merged on its own (``_encode_single_piece``: byte-pair merges
        never cross a piece) and the stretches between them are encoded as usual. Exact, not
        an approximation: the provider's count of such a text is its tokenizer's count."""
        import regex  # type: ignore[import-untyped]  # no stubs installed

        out: list[int] = []
        start = 0
        for piece in regex.finditer(self.enc._pat_str, text):
            if piece.end() - piece.start() < _LONG:
                continue
            if piece.start() > start:
                out += self.enc.encode_ordinary(text[start : piece.start()])
            out += self.enc._encode_single_piece(piece.group().encode())
            start = piece.end()
        if start < len(text):
            out += self.enc.encode_ordinary(text[start:])
        return out

    def piece(self, tok: int) -> str:
        return str(self.enc.decode_single_token_bytes(tok).decode("utf-8", "replace"))


@dataclass(frozen=True)
class _HF:
    name: str
    tok: Any

    def encode(self, text: str) -> list[int]:
        # Added tokens (DeepSeek's role and tool markers) are matched inside the text.
        return list(self.tok.encode(text, add_special_tokens=False).ids) if text else []

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def piece(self, tok: int) -> str:
        return str(self.tok.decode([tok]))


@dataclass(frozen=True)
class _Scaled:
    """A tokenizer routefit does not know: ``ceil(base_count × factor)`` tokens per text.

    The extra tokens are interleaved deterministically (a filler after the tokens where
    ``ceil(i × (factor - 1))`` steps up), so the same text always yields the same ids and a
    longer text extends a shorter one's prefix.
    """

    name: str
    base: Encoder
    factor: float

    def encode(self, text: str) -> list[int]:
        ids = self.base.encode(text)
        extra = self.factor - 1.0
        out: list[int] = []
        for i, tok in enumerate(ids):
            if extra > 0:
                steps = math.ceil(round((i + 1) * extra, 9)) - math.ceil(round(i * extra, 9))
                out.extend(specials(SCALE_BASE - tok, steps))
            out.append(tok)
        return out

    def count(self, text: str) -> int:
        n = self.base.count(text)
        return n + max(0, math.ceil(round(n * (self.factor - 1.0), 9)))


_CLASS_NAMES = ("word", "punct", "digit", "script", "space")


def _token_class(piece: str) -> str:
    """The class of one base token's text: digits, other scripts, whitespace, punctuation or
    (by default) a word piece."""
    core = piece.strip()
    if not core:
        return "space"
    if any(ch.isdigit() for ch in core):
        return "digit"
    if any(ord(ch) > 0x24F and ch.isalpha() for ch in core):
        return "script"
    if not any(ch.isalnum() for ch in core):
        return "punct"
    return "word"


@dataclass(frozen=True)
class _ByClass:
    """A tokenizer routefit does not know, whose ratio to its base varies by content: each base
    token of class ``k`` costs ``rates[k]`` tokens on average (a running sum per class decides,
    left to right, so a rate below 1 merges tokens and one above splits them); ``digit: 0``
    means one token per digit (as tokenizers that split numbers digit by digit do)."""

    name: str
    base: Any  # _Tiktoken or _HF: needs ``decode_piece``
    rates: tuple[tuple[str, float], ...]

    def encode(self, text: str) -> list[int]:
        rates = dict(self.rates)
        acc = dict.fromkeys(_CLASS_NAMES, 0.0)
        done = dict.fromkeys(_CLASS_NAMES, 0)
        out: list[int] = []
        for tok in self.base.encode(text):
            piece = self.base.piece(tok)
            k = _token_class(piece)
            rate = rates.get(k, 1.0)
            if k == "digit" and rate == 0:
                rate = float(sum(ch.isdigit() for ch in piece))
            acc[k] += rate
            n = math.floor(round(acc[k], 9)) - done[k]
            done[k] += n
            if n > 0:
                out.append(tok)
                out.extend(specials(SCALE_BASE - tok, n - 1))
        return out

    def count(self, text: str) -> int:
        return len(self.encode(text))


def _load_tiktoken(name: str) -> Any:
    import tiktoken

    folder = litellm_tokenizer_dir()
    cached = folder / hashlib.sha1(_TIKTOKEN_URLS[name].encode(), usedforsecurity=False).hexdigest()
    if not cached.is_file():
        raise RuntimeError(f"sim: litellm's offline copy of {name} ({cached}) is missing")
    with _lock:
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        try:
            return tiktoken.get_encoding(name)
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous


def _load_hf(path: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def parse_classes(spec: str) -> tuple[tuple[str, float], ...]:
    """``"word=1.06,punct=1.35,digit=0"`` → rates per token class (see ``_ByClass``)."""
    rates = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, value = item.partition("=")
        if name not in _CLASS_NAMES:
            raise ValueError(f"sim: unknown token class {name!r} (known: {_CLASS_NAMES})")
        rate = float(value)
        if rate < 0 or (rate == 0 and name != "digit"):
            raise ValueError(f"sim: token class rate {item!r} must be positive")
        rates.append((name, rate))
    return tuple(rates)


@cache
def get_encoder(spec: str, scale: float = 1.0, classes: str = "") -> Encoder:
    """``o200k_base`` · ``cl100k_base`` · ``p50k_base`` · ``deepseek`` · ``anthropic-legacy`` ·
    ``hf:PATH``; with ``scale != 1`` the count of every text is ``ceil(count × scale)``; with
    ``classes`` (``"word=1.06,digit=0,..."``) each base token costs its class's rate."""
    base: Encoder
    if spec in _TIKTOKEN_URLS:
        base = _Tiktoken(spec, _load_tiktoken(spec))
    elif spec in _HF_FILES:
        base = _HF(spec, _load_hf(litellm_tokenizer_dir() / _HF_FILES[spec]))
    elif spec.startswith("hf:"):
        base = _HF(spec, _load_hf(Path(spec[3:]).expanduser()))
    else:
        known = ", ".join([*_TIKTOKEN_URLS, *_HF_FILES, "hf:PATH"])
        raise ValueError(f"sim: unknown tokenizer {spec!r} (known: {known})")
    if classes:
        if scale != 1.0:
            raise ValueError("sim: token_scale and class_rates do not combine")
        return _ByClass(f"{spec}[{classes}]", base, parse_classes(classes))
    if scale == 1.0:
        return base
    if scale < 1.0:
        raise ValueError("sim: token_scale must be >= 1")
    return _Scaled(f"{spec}*{scale:g}", base, scale)


def digest(data: str | bytes) -> str:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def as_ids(seq: Sequence[int]) -> bytes:
    """Token ids as bytes (for hashing prefixes)."""
    import array

    return array.array("q", seq).tobytes()
