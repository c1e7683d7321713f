"""Offline tokenizers and the per-content count cache.

Every tokenizer here loads from files already on disk: tiktoken's ``o200k_base`` / ``cl100k_base``
from the copies litellm ships, Hugging Face ``tokenizer.json`` files (the DeepSeek and legacy
Anthropic ones litellm ships, or a path the operator gives). The network is never touched: a
gateway that stalls on a CDN at start-up, or in the middle of a request, is worse than one that
counts approximately.

Counting is the hot path of the whole proxy. A conversation is re-sent every turn with one or two
new messages, so counts are memoised per (tokenizer, scope, content digest) in a bounded LRU: a
long conversation is tokenized once, not once per turn. The scope is the tenant whose prompt the
text is (``Route.scope``): a count is reused only for the tenant that sent the text, so no one
can time a request to learn whether another tenant sent a text first (``CountCache``).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import ctypes.util
import gc
import hashlib
import importlib.util
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Protocol

import xxhash

from pricing import byte_level
from pricing.byte_level import ByteLevel
from pricing.chunks import content_chunks
from pricing.utf8 import utf8

__all__ = [
    "CHUNK_ABOVE",
    "CountCache",
    "Tokenizer",
    "TokenizerError",
    "count_cache_lookups",
    "count_each",
    "default_tokenizer",
    "get_tokenizer",
    "litellm_tokenizer_dir",
    "memoised",
    "parse_tokenizer_spec",
    "recall_each",
    "remember",
    "remember_each",
    "shared_out",
    "tiktoken_file",
    "warm_up",
]

#: Names accepted in config besides ``hf:PATH`` and ``heuristic:CHARS_PER_TOKEN``.
NAMED_TOKENIZERS = ("o200k_base", "cl100k_base", "deepseek", "anthropic-legacy")

_TIKTOKEN_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}
_HF_SHIPPED = {
    "deepseek": "deepseek_tokenizer.json",
    "anthropic-legacy": "anthropic_tokenizer.json",
}

# Strings shorter than this are their own cache key: hashing them costs more than comparing.
_SHORT = 64
# A parallel batch pays for its threads only when there is enough text to share out.
_BATCH_MIN_CHARS = 64 * 1024
_THREADS = max(1, min(8, os.cpu_count() or 1))
#: Text at least this long to count at once (a text without chunks, cut by ``split_for_count``,
#: or the chunks of one that are not memoised) is shared out between ``_THREADS`` threads.
_SPLIT_ABOVE = 32 * 1024
#: A text at least this long is counted a chunk at a time (``pricing.chunks``), each chunk's count
#: memoised: a long text that is mostly one seen before recounts only what changed. Below it a
#: text is a chunk or two (16 KB on average), and its whole count is memoised anyway.
CHUNK_ABOVE = 32 * 1024
#: Where a text may be cut for counting: before an ASCII space that follows a printable ASCII
#: character (see ``split_for_count``).
_CUT = re.compile(r"[!-~] ")
#: Spaces ``_next_cut`` tries one by one before the regex takes over (a run of spaces, where
#: few follow a printable character).
_FIND_TRIES = 8


def _worth_batching(texts: Sequence[str]) -> bool:
    return len(texts) > 1 and sum(map(len, texts)) >= _BATCH_MIN_CHARS


class TokenizerError(ValueError):
    """A tokenizer spec that cannot be honoured offline (unknown name, missing file)."""


class Tokenizer(Protocol):
    """What pricing needs from a tokenizer: counts, and token boundaries for cutting text."""

    name: str

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (memoised)."""
        ...

    def prefetch(self, texts: Sequence[str]) -> None:
        """Count the uncached ones among ``texts`` in one parallel batch (a cold conversation
        is tokenized on every core at once instead of string by string)."""
        ...

    def boundaries(self, text: str) -> list[int]:
        """Character offset at which each token of ``text`` starts, ascending.

        Capping cuts text at token boundaries so a cut never splits a token (or a multi-byte
        character inside a byte-level token) and the kept part costs what it claims.
        """
        ...


class CountCache:
    """A bounded, thread-safe LRU from (scope, content) to token count for one tokenizer.

    ``scope`` is the tenant whose prompt the text came from (``Route.scope``): an entry serves
    only lookups of the same scope, so a count one tenant paid for never makes another's
    request faster — a hit is ~500x faster than counting a 100 KB text, a difference a
    stranger could time to confirm a guess of what someone else sent. The bound is shared by
    all scopes (one LRU): it does not grow with the number of tenants.

    ``hits`` and ``misses`` count lookups of long texts (``_SHORT`` characters or more): a hit
    is a count served from the cache, a miss a text counted because the cache did not hold it
    (a new entry); a long text counted a chunk at a time (``counts``) adds its chunks' lookups
    beside its own miss. The proxy exports them (``routefit_count_cache_lookups_total``).
    """

    def __init__(self, maxsize: int = 131072) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[bytes, int] = OrderedDict()
        # Short strings (roles, names, ids) are their own key in a plain dict: no hashing, no
        # LRU bookkeeping; it is simply emptied when full.
        self._short: dict[tuple[bytes, str], int] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(text: str, scope: bytes = b"") -> bytes:
        # xxh3-128: a content digest at memory speed (a 400 KB conversation costs ~0.1 ms); the
        # digest has a fixed length, so digest + scope is unambiguous.
        return xxhash.xxh3_128_digest(utf8(text)) + scope

    def get_or_compute(self, text: str, compute: Callable[[str], int], scope: bytes = b"") -> int:
        if len(text) < _SHORT:
            n = self._short.get((scope, text))
            if n is None:
                n = compute(text)
                if len(self._short) >= self.maxsize:
                    self._short.clear()
                self._short[(scope, text)] = n
            return n
        k = self.key(text, scope)
        n = self._data.get(k)  # a dict read is atomic under the GIL: no lock on the hot path
        if n is not None:
            with contextlib.suppress(KeyError):  # evicted by another thread meanwhile
                self._data.move_to_end(k)
            self.hits += 1
            return n
        n = compute(text)
        self.put(text, n, scope)
        return n

    def peek(self, text: str, scope: bytes = b"") -> int | None:
        """The memoised count of ``text`` in ``scope``, if any (nothing is counted)."""
        if len(text) < _SHORT:
            return self._short.get((scope, text))
        n = self._data.get(self.key(text, scope))
        if n is not None:
            self.hits += 1
        return n

    def find(self, texts: Sequence[str], scope: bytes = b"") -> list[int | None]:
        """Each text's memoised count in ``scope`` (None: not memoised), by its digest however
        short: these are the chunks of a long text (``pricing.chunks``)."""
        data = self._data
        found = [data.get(self.key(text, scope)) for text in texts]
        self.hits += sum(n is not None for n in found)
        return found

    def file(self, texts: Sequence[str], counts: Sequence[int], scope: bytes = b"") -> None:
        """Memoise each text's count by its digest (``find`` reads them)."""
        keys = [self.key(text, scope) for text in texts]
        with self._lock:
            for k, n in zip(keys, counts, strict=True):
                if k not in self._data:
                    self.misses += 1
                self._data[k] = n
                self._data.move_to_end(k)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def counts(
        self,
        texts: Sequence[str],
        count_each: Callable[[Sequence[str]], list[int]],
        scope: bytes = b"",
    ) -> list[int]:
        """Each text's count: the memoised ones found, the others counted by one call of
        ``count_each`` (which shares them out between threads; a text that repeats, once) and
        memoised."""
        found = self.find(texts, scope)
        todo = list(dict.fromkeys(t for t, n in zip(texts, found, strict=True) if n is None))
        if not todo:
            return [n for n in found if n is not None]
        counted = count_each(todo)
        self.file(todo, counted, scope)
        fresh = dict(zip(todo, counted, strict=True))
        return [fresh[t] if n is None else n for t, n in zip(texts, found, strict=True)]

    def missing(self, texts: Sequence[str], scope: bytes = b"") -> list[str]:
        """The distinct texts among ``texts`` that are not cached in ``scope`` yet.

        A conversation re-sent with one new turn has all but its newest texts cached; when the
        second-longest text is cached, that is assumed and nothing is returned, so the warm path
        does not hash every text twice (once here, once when it is counted).
        """
        long = sorted((t for t in texts if len(t) >= _SHORT), key=len)
        if len(long) >= 2 and self.key(long[-2], scope) in self._data:
            return []
        out: dict[bytes, str] = {}
        for text in long:
            k = self.key(text, scope)
            if k not in self._data:
                out.setdefault(k, text)
        return list(out.values())

    def put(self, text: str, n: int, scope: bytes = b"") -> None:
        if len(text) < _SHORT:
            self._short[(scope, text)] = n
            return
        self.file([text], [n], scope)

    def __len__(self) -> int:
        return len(self._data) + len(self._short)


def split_for_count(text: str, parts: int) -> list[str]:
    r"""``text`` in at most ``parts`` pieces of about equal length whose counts add up to the
    count of the whole, for every tokenizer routefit ships (tests/pricing/test_split_count.py
    checks it against counting the whole on generated text).

    Each cut is before an ASCII space whose preceding character is printable ASCII. Why counts
    add there: every tokenizer here first splits the text with a pre-tokenizer regex and encodes
    the pieces independently, so it is enough that the pieces of the whole are the pieces of the
    two halves. No alternative of those regexes (tiktoken's ``o200k_base`` / ``cl100k_base``,
    GPT-2's byte-level one behind the legacy Anthropic file, DeepSeek's split sequence) lets a
    piece run on from a non-space character into a following space, and the only lookahead
    (``\s+(?!\S)``) closes a piece that ends in whitespace, which the character before a cut is
    not. So a piece starts at the space in the whole text, as it does at the start of the second
    half; the regexes have no lookbehind, so from there on both match alike. The characters at
    a cut are ASCII, which NFKC (the Anthropic file) leaves alone and never composes with, and no
    added token of the shipped files contains a space or strips one."""
    if parts <= 1:
        return [text]
    step = len(text) // parts
    out: list[str] = []
    start = 0
    for k in range(1, parts):
        cut = _next_cut(text, max(start, k * step))
        if cut < 0:
            break
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def _next_cut(text: str, after: int) -> int:
    """The first cut (``_CUT``'s: a space that follows printable ASCII) past ``after``; -1 when
    there is none. Found by jumping from space to space (``str.find``): the regex reads every
    character, and a text with no space to cut at (CJK) was read whole for every cut a proof
    looked for (129k characters, 0.36 ms)."""
    at = after
    for _ in range(_FIND_TRIES):
        at = text.find(" ", at + 1)
        if at < 0:
            return -1
        if "!" <= text[at - 1] <= "~":
            return at
    found = _CUT.search(text, at)  # ``text[at - 1]`` is no cut's: the next one is past ``at``
    return -1 if found is None else found.start() + 1


@cache
def _pool() -> ThreadPoolExecutor:
    """Threads kept for counting pieces side by side: tiktoken's batch call starts new threads
    every time, which cost more than the count they share out on a loaded machine. They, not
    the thread that asks, count every piece (``enrol``)."""
    return ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="routefit-count")


_enrolled = threading.Event()


def enrol(tally: Callable[[str], int]) -> None:
    """Give each counting thread its number in the regex crate's cache pools, one after
    another, before anything else counts on them (the start-up's ``warm_up``).

    The crate hands a thread that does not own a regex's cache one from a stack chosen by a
    number the thread draws at its first use of any regex (in tiktoken's library: one counter
    for every encoding), modulo 8; two threads of the same stack counting at once take turns
    with its caches and build new ones, and both count at half speed (bench/REPORT.md 1j, 1n).
    Threads that draw one after another are on different stacks. Drawn as they came, the pair
    that counts a big prompt was the event loop's thread and the pool's, whose numbers depended
    on which thread had counted first since start-up: after a workload that counted on other
    threads first, a 120k-token prompt took 64-67 ms of CPU where it took 32-38. So the pool's
    threads draw theirs together, and count every piece of a text counted side by side."""
    if _enrolled.is_set():
        return
    pool = _pool()
    together = threading.Barrier(_THREADS)
    turn = threading.Lock()

    def draw() -> None:
        together.wait(timeout=30)  # every draw on a thread of its own
        with turn:
            tally("a number for this thread")

    try:
        for future in [pool.submit(draw) for _ in range(_THREADS)]:
            future.result()
    except threading.BrokenBarrierError:  # a thread busy for long (a reload under load): as drawn
        return
    _enrolled.set()


def _tally_all(pieces: Sequence[str], tally: Callable[[str], int]) -> list[int]:
    return [tally(piece) for piece in pieces]


def shared_out(pieces: Sequence[str], tally: Callable[[str], int]) -> list[int]:
    """Each piece's count, the pieces shared out in ``_THREADS`` runs of about equal length,
    counted on the pool's threads: one call per thread however many pieces (a call per piece
    would cost a thread's wake-up and the GIL handed back and forth each). Less than
    ``_SPLIT_ABOVE`` in all is counted in this thread: a wake-up would cost more."""
    total = sum(map(len, pieces))
    if _THREADS == 1 or len(pieces) < 2 or total < _SPLIT_ABOVE:
        return _tally_all(pieces, tally)
    runs: list[list[str]] = [[]]
    done = 0
    for piece in pieces:
        if done * _THREADS >= total * len(runs) and len(runs) < _THREADS:
            runs.append([])
        runs[-1].append(piece)
        done += len(piece)
    futures = [_pool().submit(_tally_all, run, tally) for run in runs]  # see ``enrol``
    return [n for future in futures for n in future.result()]


def _count_long(cache: CountCache, scope: bytes, text: str, tally: Callable[[str], int]) -> int:
    """Tokens in a long text whose whole count is not memoised: the counts of its chunks
    that are (``pricing.chunks``), the others counted side by side and memoised; a text with
    no chunk cut in pieces for the counting threads, as fixed pieces are not worth keeping."""
    chunks = content_chunks(text)
    if len(chunks) > 1:
        return sum(cache.counts(chunks, lambda todo: shared_out(todo, tally), scope))
    return _side_by_side([text], tally)[0]


def _side_by_side(texts: Sequence[str], tally: Callable[[str], int]) -> list[int]:
    """Each text's count on the counting threads (``shared_out``); fewer texts than threads
    each cut in a part per thread (``split_for_count``: the parts' counts add up)."""
    if len(texts) >= _THREADS or sum(map(len, texts)) < _SPLIT_ABOVE:
        return shared_out(texts, tally)  # (too little to share: counted here, uncut)
    parts = [split_for_count(text, _THREADS) for text in texts]
    counts = iter(shared_out([p for ps in parts for p in ps], tally))
    return [sum(next(counts) for _ in ps) for ps in parts]


def count_each(tok: Tokenizer, texts: Sequence[str], side_by_side: bool = True) -> list[int]:
    """Each text's count, not memoised (what a proof counts, ``pricing.bounds.Proof``, it
    memoises itself, as chunks or whole). ``side_by_side``: on the counting threads
    (``_side_by_side``), else all counted in this thread."""
    tally = _counter(tok)
    if tally is None:
        return [tok.count(text) for text in texts]
    return _side_by_side(texts, tally) if side_by_side else _tally_all(texts, tally)


def recall_each(tok: Tokenizer, texts: Sequence[str]) -> list[int | None]:
    """The memoised count of each of ``texts`` (chunks of one text) in ``tok``'s scope."""
    if isinstance(tok, _Tiktoken | _HuggingFace):
        return tok.cache.find(texts, tok.scope)
    return [None] * len(texts)


def remember_each(tok: Tokenizer, texts: Sequence[str], counts: Sequence[int]) -> None:
    """Memoise the counts of ``texts`` (chunks of one text, counted by a proof)."""
    if isinstance(tok, _Tiktoken | _HuggingFace):
        tok.cache.file(texts, counts, tok.scope)


def memoised(tok: Tokenizer, text: str) -> int | None:
    """The memoised count of ``text`` in ``tok``'s scope when there is one (nothing is
    counted)."""
    if isinstance(tok, _Tiktoken | _HuggingFace):
        return tok.cache.peek(text, tok.scope)
    return None


def remember(tok: Tokenizer, text: str, n: int) -> None:
    """Memoise ``n`` as the count of ``text`` in ``tok``'s scope (counted another way, e.g.
    piece by piece)."""
    if isinstance(tok, _Tiktoken | _HuggingFace) and text:
        tok.cache.put(text, n, tok.scope)


def _counter(tok: Tokenizer) -> Callable[[str], int] | None:
    """The tokenizer's own count of a text, never memoised (None: it has no such count)."""
    return tok._tally if isinstance(tok, _Tiktoken | _HuggingFace) else None


@dataclass
class _Tiktoken:
    name: str
    _enc: Any
    cache: CountCache = field(default_factory=CountCache)
    #: Whose texts this view counts (``get_tokenizer``): the key the cache files them under.
    scope: bytes = b""
    #: A Hugging Face byte-level BPE file counted by tiktoken (``pricing.byte_level``): what it
    #: does around the merges (added tokens, NFKC). None: one of tiktoken's own files.
    bpe: ByteLevel | None = None

    #: A text's count, unmemoised (``byte_level.counter``, or the file's rules around it).
    _tally: Callable[[str], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._tally = byte_level.counter(self._enc) if self.bpe is None else self.bpe.count

    def _count(self, text: str) -> int:
        if len(text) >= CHUNK_ABOVE:
            return _count_long(self.cache, self.scope, text, self._tally)
        return self._tally(text)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return self.cache.get_or_compute(text, self._count, self.scope)

    def prefetch(self, texts: Sequence[str]) -> None:
        todo = self.cache.missing(texts, self.scope)
        if not _worth_batching(todo):
            return
        # a long text a chunk at a time (its chunks memoised for the text it becomes); the
        # others on this thread and the kept pool (tiktoken's batch call starts threads)
        short = [text for text in todo if len(text) < CHUNK_ABOVE]
        for text in todo:
            if len(text) >= CHUNK_ABOVE:
                self.cache.put(text, self._count(text), self.scope)
        for text, n in zip(short, shared_out(short, self._tally), strict=True):
            self.cache.put(text, n, self.scope)

    def boundaries(self, text: str) -> list[int]:
        if not text:
            return []
        if self.bpe is not None:
            return self.bpe.boundaries(text)
        tokens = self._enc.encode_ordinary(text)
        _, offsets = self._enc.decode_with_offsets(tokens)
        return list(offsets)


@dataclass
class _HuggingFace:
    name: str
    _tok: Any
    cache: CountCache = field(default_factory=CountCache)
    #: Whose texts this view counts (``get_tokenizer``): the key the cache files them under.
    scope: bytes = b""

    #: Whether ``split_for_count`` holds for this file (checked for the files routefit ships;
    #: an operator's file may pre-tokenize in ways a cut would change, e.g. a leading ``▁``).
    splittable: bool = False

    def _count(self, text: str) -> int:
        if self.splittable and len(text) >= CHUNK_ABOVE:
            return _count_long(self.cache, self.scope, text, self._tally)
        return self._tally(text)

    def _tally(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return self.cache.get_or_compute(text, self._count, self.scope)

    def prefetch(self, texts: Sequence[str]) -> None:
        todo = self.cache.missing(texts, self.scope)
        if not _worth_batching(todo):
            return
        encoded = self._tok.encode_batch(todo, add_special_tokens=False)
        for text, enc in zip(todo, encoded, strict=True):
            self.cache.put(text, len(enc.ids), self.scope)

    def boundaries(self, text: str) -> list[int]:
        if not text:
            return []
        offsets = self._tok.encode(text, add_special_tokens=False).offsets
        starts = [start for start, _ in offsets]
        # Byte-level pieces of one character share its offset; keep starts monotone.
        for i in range(1, len(starts)):
            if starts[i] < starts[i - 1]:
                starts[i] = starts[i - 1]
        return starts


@dataclass
class _Heuristic:
    """Characters-per-token estimate for routes whose tokenizer is not public.

    Deliberately simple: calibration against provider usage corrects the level, and a ratio is
    honest about being an approximation.
    """

    name: str
    chars_per_token: float

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token) if text else 0

    def prefetch(self, texts: Sequence[str]) -> None:
        return None

    def boundaries(self, text: str) -> list[int]:
        step = self.chars_per_token
        return [int(i * step) for i in range(self.count(text))]


def litellm_tokenizer_dir() -> Path:
    """The directory of tokenizer files litellm ships, found without importing litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError("litellm is not installed; its shipped tokenizer files are needed")
    return Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"


#: The two OpenAI encodings routefit counts with: the SHA-256 of the published rank file, the
#: pre-tokenizer pattern and the special tokens, as tiktoken's ``tiktoken_ext.openai_public``
#: defines them (tests/pricing/test_tokenizers.py checks they still agree with tiktoken's).
_TIKTOKEN_SPECS: dict[str, tuple[str, str, dict[str, int]]] = {
    "o200k_base": (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": (
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
        r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}


def tiktoken_file(name: str, folder: Path | None = None) -> Path:
    """Where litellm keeps its offline copy of an encoding's rank file (named, as tiktoken's
    own cache names it, by the SHA-1 of the file's published URL)."""
    folder = litellm_tokenizer_dir() if folder is None else folder
    return folder / hashlib.sha1(_TIKTOKEN_URLS[name].encode()).hexdigest()  # noqa: S324


def _read_ranks(path: Path, expected_sha256: str) -> dict[bytes, int]:
    """A tiktoken rank file (one ``base64-token rank`` per line), checked against the
    published hash so a damaged copy fails loudly instead of counting wrong."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"tiktoken rank file {path} cannot be read: {exc}") from None
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        raise TokenizerError(f"tiktoken rank file {path} does not match its published hash")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _load_tiktoken(name: str, folder: Path | None = None) -> Any:
    """Build the encoding from the file litellm ships, handed to tiktoken directly.

    tiktoken's own loader only reads local copies through its cache directory (an environment
    variable) and writes copies there; building the ``Encoding`` from the ranks read here touches
    neither the environment nor any cache, and never the network.
    """
    import tiktoken

    path = tiktoken_file(name, folder)
    if not path.is_file():
        raise TokenizerError(f"tokenizer {name!r}: litellm's offline copy {path} is missing")
    sha256, pattern, special = _TIKTOKEN_SPECS[name]
    enc = tiktoken.Encoding(
        name=name,
        pat_str=pattern,
        mergeable_ranks=_read_ranks(path, sha256),
        special_tokens=special,
    )
    # An Encoding keeps a Python copy of its merge table (200k entries, ~27 MB for o200k_base)
    # only to be picklable; encoding runs on the Rust core's own copy. routefit never pickles
    # an encoding, so the copy goes: a third of a worker's idle memory.
    with contextlib.suppress(AttributeError):
        del enc._mergeable_ranks
    gc.collect()
    return enc


def _load_hf(path: Path) -> Any:
    from tokenizers import Tokenizer as HFTokenizer

    if not path.is_file():
        raise TokenizerError(f"tokenizer file {path} does not exist")
    try:
        return HFTokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception subclasses
        raise TokenizerError(f"tokenizer file {path} could not be loaded: {exc}") from exc


def parse_tokenizer_spec(spec: str) -> str:
    """Validate a tokenizer spec from config and return it normalised; raise TokenizerError."""
    spec = spec.strip()
    if spec in NAMED_TOKENIZERS:
        return spec
    if spec.startswith("hf:") and len(spec) > 3:
        return spec
    if spec.startswith("heuristic:"):
        try:
            ratio = float(spec.split(":", 1)[1])
        except ValueError:
            raise TokenizerError(f"heuristic tokenizer needs a number: {spec!r}") from None
        if not 0.5 <= ratio <= 32:
            raise TokenizerError(f"heuristic chars per token must be in [0.5, 32]: {spec!r}")
        return f"heuristic:{ratio:g}"
    known = ", ".join((*NAMED_TOKENIZERS, "hf:PATH", "heuristic:CHARS_PER_TOKEN"))
    raise TokenizerError(f"unknown tokenizer {spec!r} (known: {known})")


def get_tokenizer(spec: str, scope: bytes = b"") -> Tokenizer:
    """The process-wide tokenizer for a spec, counting for ``scope`` (``Route.scope``: whose
    prompts these are; empty: one tenant). The encoder is loaded once and every scope shares it
    and its one bounded count cache, each finding there only what was counted in its own scope.
    """
    return _loaded(spec) if not scope else _scoped(spec, scope)


def warm_up(spec: str) -> Tokenizer:
    """``get_tokenizer(spec)`` loaded and its first text encoded on a thread of its own, which
    then ends: a server's start-up and reloads load through here.

    The first thread to encode with a tiktoken encoding owns a cache of its regex (measured:
    the regex crate keeps one for the first thread of a pool). Alone, the owner counts ~30%
    faster; but while the owner and any other thread count at once, both run at about half
    speed — two counting threads then take longer, and twice the CPU, than two that own
    nothing (bench/count_threads.py, bench/REPORT.md 1j). routefit counts on several threads
    at once (the event loop, the kept counting pool, the pricing threads), so none of them may
    be the owner: the thread that made the first encode is gone before the first request. It
    has the counting pool's threads draw their numbers first (``enrol``)."""

    def load() -> Tokenizer:
        tok = get_tokenizer(spec)
        tok.count("warm up")
        if isinstance(tok, _Tiktoken) and _THREADS > 1:  # tiktoken's library counts most
            enrol(tok._tally)
        return tok

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="routefit-warm-up") as once:
        return once.submit(load).result()  # its error raised again here


@lru_cache(maxsize=1024)
def _scoped(spec: str, scope: bytes) -> Tokenizer:
    """A view of the loaded tokenizer that counts in ``scope`` (same encoder, same cache)."""
    tok = _loaded(spec)
    return replace(tok, scope=scope) if isinstance(tok, _Tiktoken | _HuggingFace) else tok


def count_cache_lookups() -> tuple[int, int]:
    """(hits, misses) of every loaded tokenizer's count cache since the process started (see
    ``CountCache``): what the proxy exports as ``routefit_count_cache_lookups_total``."""
    hits = misses = 0
    for cache_ in _CACHES:
        hits += cache_.hits
        misses += cache_.misses
    return hits, misses


#: The count caches of the tokenizers loaded so far (one per spec, however many scopes).
_CACHES: list[CountCache] = []


@cache
def _loaded(spec: str) -> Tokenizer:
    """The tokenizer for a spec, loaded once; its count cache is shared with every view."""
    spec = parse_tokenizer_spec(spec)
    if spec.startswith("heuristic:"):
        return _Heuristic(spec, float(spec.split(":", 1)[1]))
    _fix_mmap_threshold()
    if spec in _TIKTOKEN_URLS:
        found: _Tiktoken | _HuggingFace = _Tiktoken(spec, _load_tiktoken(spec))
    else:
        shipped = spec in _HF_SHIPPED
        path = litellm_tokenizer_dir() / _HF_SHIPPED[spec] if shipped else Path(spec[3:])
        found = _hugging_face(spec, path.expanduser(), shipped)
    _CACHES.append(found.cache)
    _return_freed_memory()
    return found


def _hugging_face(spec: str, path: Path, shipped: bool) -> _Tiktoken | _HuggingFace:
    """A ``tokenizer.json``: counted by tiktoken when it is GPT-2's kind of byte-level BPE
    (``pricing.byte_level``: the same counts in a fraction of the time), else by
    Hugging Face's library. ``split_for_count`` holds for the files routefit ships and for any
    byte-level BPE (GPT-2's regex); an operator's other file may pre-tokenize in ways a cut
    would change."""
    bpe = byte_level.load(path, spec) if path.is_file() else None
    if bpe is not None:
        return _Tiktoken(spec, bpe.encoding, bpe=bpe)
    return _HuggingFace(spec, _load_hf(path), splittable=shipped)


@cache
def _glibc() -> Any:
    """The C library when it is glibc (the only one whose ``mallopt`` numbers are used here)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "gnu_get_libc_version") else None


def _malloc_trim() -> Callable[[int], int] | None:
    libc = _glibc()
    return getattr(libc, "malloc_trim", None) if libc is not None else None


# glibc's mallopt parameters (malloc.h) and the fixed thresholds routefit sets.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 4 << 20


@cache
def _fix_mmap_threshold() -> None:
    """Pin glibc's mmap threshold at 4 MiB before the first tokenizer file is loaded.

    glibc raises the threshold to the size of the largest mapped block freed so far (up to 32
    MiB), and building an encoding frees multi-MB temporaries (the rank table, hash tables
    rehashed while they grow). From then on the multi-MB tables are carved from a heap arena
    between long-lived blocks, where what they leave when freed stays resident: measured, an
    idle worker with an ``o200k_base`` and an ``anthropic-legacy`` route (loaded in a thread,
    as at start-up) held 4 MiB more, 134 against 130 MiB. With the threshold pinned, a block
    of 4 MiB or more is its own mapping and goes back to the OS whole when freed; smaller
    blocks are served as before (the trim threshold is set to the 2x glibc would pair with it,
    so the heap top is not returned and re-grown under load). Process-wide, once; a no-op on
    other C libraries."""
    libc = _glibc()
    if libc is None:
        return
    libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, 2 * _MMAP_THRESHOLD)


def _return_freed_memory() -> None:
    """Give the heap that loading a tokenizer freed back to the OS.

    Building an encoding parses a rank or JSON file of megabytes into temporaries that are freed
    at once, but glibc keeps freed heap mapped: measured, an idle worker with an o200k and a
    legacy Anthropic route held 16 MiB less after ``malloc_trim`` (bench/REPORT.md, section 2).
    A no-op where the C library has no ``malloc_trim`` (musl, macOS)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def default_tokenizer(model: str) -> str:
    """The tokenizer a model name implies: the provider's own where it is public, else the closest
    one available offline (Claude 3+ and Gemini publish none; calibration corrects the level)."""
    name = model.lower().rsplit("/", 1)[-1]
    if "deepseek" in name:
        return "deepseek"
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")):
        return "o200k_base"
    if name.startswith(("computer-use", "codex", "gpt-oss", "gpt-realtime")):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5", "text-embedding")):
        return "cl100k_base"
    if name.startswith("claude"):
        return "anthropic-legacy"
    return "o200k_base"
