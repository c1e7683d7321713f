"""A Hugging Face byte-level BPE file, counted by tiktoken.

The legacy Anthropic tokenizer litellm ships is GPT-2's kind of tokenizer: NFKC, GPT-2's
pre-tokenizer regex over bytes, 64,739 merges. Hugging Face's ``tokenizers`` counts a big new
text 6-17× slower than tiktoken does the same text (270k tokens: 4.07 s against 238 ms on the
bench machine, bench/REPORT.md 1e), and every Anthropic route prices its new text with it; the
memory is about the same either way (~13 MiB). tiktoken's
byte-level BPE over the same merges gives the same tokens when every merge makes a token no
other merge makes: a merge's priority is then its token's rank, which is how tiktoken picks
the next merge (GPT-2's own tiktoken file is built that way). This module checks that a
``tokenizer.json`` is exactly such a BPE and builds the tiktoken encoding; any other file (a
different pre-tokenizer, dropout, a word suffix, added tokens matched after normalisation)
stays with Hugging Face (``pricing.tokenizers``).

What Hugging Face does around the model is done here in the same order: added tokens are found
in the raw text first (each one token), every stretch between them is normalised (NFKC when the
file says so) and then split and merged. Token ids are tiktoken's ranks, not the file's ids:
routefit only counts and finds token starts. tests/pricing/test_byte_level.py compares counts
with Hugging Face's on generated text in many scripts and on every token of the vocabulary.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, wraps
from pathlib import Path
from typing import Any

__all__ = ["ByteLevel", "counter", "load"]

#: GPT-2's pre-tokenizer, as Hugging Face's ``ByteLevel`` pre-tokenizer applies it.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, reversed (how byte-level files spell bytes)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


#: Bytes per rank in the buffer tiktoken's core fills (``counter``).
_RANK_BYTES = 4
#: Texts at least this long are counted from the buffer; below it the list is cheaper (the
#: core's ``encode`` looks for special tokens first): 25 characters 1.6 against 2.3 µs, 1 KB of
#: one repeated word 26.5 against 28.6 µs; 2 KB of words and numbers 79 against 74 µs.
_BUFFER_FROM = 2048
#: What ``counter`` checks its fast path on before trusting it: scripts, digits, whitespace
#: runs and a special token's text (encoded as ordinary text).
_PROBE = "Hello, wörld! 12345 <|endoftext|> 中文字 ☃ \n\n\t  x = f(y) {'k': [1, 2]}  "
#: Whitespace runs are cut into pieces of this many characters when tiktoken gives up on a text
#: (``_spaced_out``).
_RUN = 65536
_LONG_RUN = re.compile(rf"\s{{{_RUN},}}")


@cache
def counter(encoding: Any) -> Callable[[str], int]:
    """How many tokens ``encoding.encode_ordinary`` makes of a text, without the list.

    routefit counts; ``encode_ordinary`` turns every token into a Python int in a new list,
    holding the GIL, and the caller drops it after ``len``: 15-20% of counting a big new
    prompt (486 KB of prose, 103k tokens: 18.7 against 15.5 ms, bench/REPORT.md 1i). tiktoken's
    core also fills a buffer of 4-byte ranks (what ``Encoding.encode_to_numpy`` reads), and with
    no special token allowed its ``encode`` is ``encode_ordinary``. That path is private to
    tiktoken, so it is taken only when the core has it and it counts a probe text as
    ``encode_ordinary`` does; else the list is counted, as are short texts (``_BUFFER_FROM``).
    Once per encoding (every team's view of a tokenizer shares it). tests/pricing/
    test_split_count.py and test_byte_level.py compare the counts with the tokens themselves."""

    def listed(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    fill = getattr(getattr(encoding, "_core_bpe", None), "encode_to_tiktoken_buffer", None)
    if fill is None:
        return listed
    allowed: set[str] = set()

    def buffered(text: str) -> int:
        return memoryview(fill(text, allowed)).nbytes // _RANK_BYTES

    def by_size(text: str) -> int:
        return buffered(text) if len(text) >= _BUFFER_FROM else listed(text)

    try:
        same = buffered(_PROBE) == listed(_PROBE)
    except Exception:  # another tiktoken's signature
        same = False
    return _spaced_out(by_size if same else listed)


def _spaced_out(count: Callable[[str], int]) -> Callable[[str], int]:
    """``count``, and for a text tiktoken's regex gives up on, the sum of its pieces with every
    whitespace run cut every ``_RUN`` characters.

    The pre-tokenizers' ``\\s+(?!\\S)`` backtracks a character at a time through a whitespace
    run before a non-space, and the regex engine stops at a million steps: ~1 MB of spaces (or
    tabs, or U+3000) and a letter raised ``ValueError`` out of every tiktoken count, a 500 on
    every OpenAI and Anthropic route for a body well under ``max_body_bytes``. Cut, each piece's
    run is short; a cut inside one run of whitespace may change that run's count by a token
    (one in 64K characters), and only texts that could not be counted at all are cut."""

    @wraps(count)  # named as the count it guards (which path ``counter`` took)
    def whole_or_cut(text: str) -> int:
        try:
            return count(text)
        except ValueError:
            if _LONG_RUN.search(text) is None:
                raise
        total, start = 0, 0
        for run in _LONG_RUN.finditer(text):
            for cut in range(run.start() + _RUN, run.end(), _RUN):
                total += count(text[start:cut])
                start = cut
        return total + count(text[start:])

    return whole_or_cut


@dataclass(frozen=True)
class ByteLevel:
    """The encoding and what Hugging Face does around it."""

    encoding: Any  # tiktoken.Encoding over the file's merges
    nfkc: bool
    #: The file's added tokens, longest first (None: it has none).
    specials: re.Pattern[str] | None
    #: ``encoding``'s count (``counter``).
    _count: Callable[[str], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_count", counter(self.encoding))

    def _normal(self, text: str) -> str:
        return unicodedata.normalize("NFKC", text) if self.nfkc and not text.isascii() else text

    def count(self, text: str) -> int:
        """Tokens in ``text``: each added token is one and splits the text around it; each
        stretch between them is normalised (NFKC when the file says so), then counted."""
        pieces = self.specials.split(text) if self.specials is not None else (text,)
        return len(pieces) - 1 + sum(self._count(self._normal(p)) for p in pieces)

    def boundaries(self, text: str) -> list[int]:
        """Character offsets where each token starts, one per token. Exact where nothing is
        normalised; in a stretch NFKC rewrote, the normalised text's starts scaled onto the raw
        stretch (a cut snapped there may fall inside a token: the capper re-counts every
        candidate anyway)."""
        out: list[int] = []
        start = 0
        found = self.specials.finditer(text) if self.specials is not None else ()
        for special in (*found, None):
            stop = len(text) if special is None else special.start()
            out += self._starts(text[start:stop], start)
            if special is not None:
                out.append(special.start())
                start = special.end()
        return out

    def _starts(self, raw: str, at: int) -> list[int]:
        normal = self._normal(raw)
        tokens = self.encoding.encode_ordinary(normal)
        _, offsets = self.encoding.decode_with_offsets(tokens)
        if normal == raw:
            return [at + o for o in offsets]
        scale = len(raw) / len(normal)
        return [at + min(len(raw) - 1, int(o * scale)) for o in offsets]


def load(path: Path, name: str) -> ByteLevel | None:
    """The file as a tiktoken encoding, or None when it is not exactly a byte-level BPE whose
    merges each make their own token (Hugging Face then keeps it)."""
    built = _encoding(path, f"{name} (byte-level BPE)")
    if built is None:
        return None
    encoding, joined, nfkc = built
    added = joined.split(_SEP) if joined is not None else []
    specials = (
        re.compile("|".join(re.escape(a) for a in sorted(added, key=len, reverse=True)))
        if added
        else None
    )
    return ByteLevel(encoding, nfkc, specials)


def _encoding(path: Path, name: str) -> tuple[Any, str | None, bool] | None:
    """The encoding, the added tokens joined by ``_SEP`` (None: there are none) and whether the
    file normalises by NFKC.

    Reading the file makes ~10 MiB of small Python objects (its JSON, then the rank table) that
    die here. What outlives them must not be made among them: every allocator arena a survivor
    lands in stays resident, mostly empty, for the worker's life (measured: the legacy Anthropic
    file left 9 MiB so, bench/REPORT.md 2b). So the checks use concrete types (an ABC's
    ``isinstance`` caches a new entry), the added tokens leave as one string, and only the
    encoding itself is made beside the ranks."""
    import tiktoken

    decoder = _byte_decoder()  # made before the temporaries, as are ``name`` and ``special``
    special: dict[str, int] = {}
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(spec, dict) or not _plain_byte_level(spec):
        return None
    tokens = spec.get("added_tokens") or []
    if not isinstance(tokens, list) or not all(_plain_added(a) for a in tokens):
        return None
    added = _SEP.join(str(a["content"]) for a in tokens)
    nfkc = spec.get("normalizer") == {"type": "NFKC"}
    ranks = _ranks(spec["model"], frozenset(added.split(_SEP)) if tokens else frozenset(), decoder)
    del spec
    if ranks is None:
        return None
    encoding = tiktoken.Encoding(
        name=name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=special
    )
    # As for the shipped tiktoken files: the Python copy of the ranks is only for pickling.
    if hasattr(encoding, "_mergeable_ranks"):
        del encoding._mergeable_ranks
    return encoding, added if tokens else None, nfkc  # split by the caller, the ranks gone


#: Joins the added tokens while the file's objects live (a file with a token that holds it is
#: left to Hugging Face's library).
_SEP = "\x00"


def _plain_byte_level(spec: Mapping[str, Any]) -> bool:
    """GPT-2's recipe and nothing else: NFKC or no normaliser, the byte-level pre-tokenizer with
    its regex and no prefix space, a BPE model without dropout, unknown token or affixes."""
    model = spec.get("model")
    pre = spec.get("pre_tokenizer")
    if spec.get("normalizer") not in (None, {"type": "NFKC"}):
        return False
    if not isinstance(pre, dict) or pre.get("type") != "ByteLevel":
        return False
    if pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return False
    if not isinstance(model, dict) or model.get("type") != "BPE":
        return False
    off = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix")
    flags = ("fuse_unk", "byte_fallback", "ignore_merges")
    return all(not model.get(k) for k in off) and all(not model.get(k) for k in flags)


def _plain_added(token: Any) -> bool:
    """An added token Hugging Face finds in the raw text as it stands (before normalising)."""
    if not isinstance(token, dict) or not isinstance(token.get("content"), str):
        return False
    if _SEP in token["content"]:
        return False
    return not any(token.get(k) for k in ("single_word", "lstrip", "rstrip", "normalized"))


def _ranks(
    model: Mapping[str, Any], added: frozenset[str], decoder: Mapping[str, int]
) -> dict[bytes, int] | None:
    """Each byte, then each merge's token in merge order; None unless every merge makes a new
    token and the vocabulary (the added tokens aside) is exactly the bytes and the merges'
    tokens."""

    def raw(piece: str) -> bytes | None:
        try:
            return bytes(decoder[ch] for ch in piece)
        except KeyError:
            return None

    ranks = {bytes([b]): b for b in range(256)}
    for merge in model.get("merges") or []:
        parts = merge.split(" ") if isinstance(merge, str) else merge
        if not isinstance(parts, list | tuple) or len(parts) != 2:
            return None
        left, right = raw(str(parts[0])), raw(str(parts[1]))
        if left is None or right is None or left + right in ranks:
            return None
        ranks[left + right] = len(ranks)
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        return None
    spelled = {raw(str(token)) for token in vocab if token not in added}
    return ranks if spelled == set(ranks) else None
