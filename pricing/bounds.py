"""Cheap upper bounds on what the meter would count: a proof that a request fits, without
tokenizing it.

Tokenizing a big new prompt is the one per-request cost that grows with its size (about a
millisecond per 20 KB of prose). Most requests are far under their budget, and to forward them
unchanged routefit only needs to know *that* they fit, not by how much. A bound that is cheap to
compute (one pass over the UTF-8 length) and never below the meter's count settles that: when the
bound is under the budget, the exact count can only be lower, so the exact fit would leave the
request untouched. When the bound is over the budget nothing is proved, and the exact path runs.

What holds, per tokenizer kind routefit ships:

``byte-level BPE`` (tiktoken ``o200k_base`` / ``cl100k_base``; the DeepSeek Hugging Face file:
    byte-level pre-tokenizer, no normalizer, no prefix space): every token is a non-empty byte
    string and the tokens of a text concatenate to its UTF-8 bytes, so tokens ≤ bytes. Added
    (special) tokens matched in the text only merge bytes further. One byte less for every space
    followed by an ASCII letter (``byte_level_bound``): each of these pre-tokenizers starts a
    piece at such a space and keeps the letter in it (the optional leading character of their
    letter alternatives; no alternative ends on a space before a non-space), and each merges
    that pair (``" x"`` is a token, or a merge, of all three for all 52 letters). BPE stops only
    when no two neighbouring tokens merge, so the two bytes are not both one-byte tokens: the
    space's token continues into the letter, or the letter's token continues to the right. Either
    way a gap between two bytes is not a token boundary, and the gaps of two such pairs are
    different (a pair's gaps are the two after its space), so tokens ≤ bytes − pairs. No added
    token of the DeepSeek file starts with a letter or ends with a space.
``byte-level BPE after NFKC`` (the legacy Anthropic file): NFKC can lengthen text ("½" is 2 bytes,
    its NFKC "1⁄2" five), so the bound is the UTF-8 length of the text's NFKD: decomposition is
    character by character, and composition and reordering never lengthen, so however the
    tokenizer splits the text around added tokens, each piece's NFKC is no longer than its NFKD.
``heuristic:CHARS``: its own formula, ``ceil(chars / CHARS)``, is already cheap; the bound is the
    count.
``hf:PATH``: an operator's file may normalise or pre-tokenize in any way (NFKC turns one 3-byte
    character into twelve bytes): no bound is claimed, the exact path runs.

Framing and tool schemas are priced by the same functions as the meter with every text count
replaced by its bound; their token counts enter with positive weights, so the result bounds the
meter's framing. Images are priced by their rule exactly as the meter prices them (from the header
of a data URL, the fetched size, or the rule's worst case): that is already cheap, and it keeps
the meter's checks on image data (a bad image is still a 400).

A bound over the budget is not the end: ``Proof`` tightens it by counting the biggest texts
exactly, a piece at a time. ``split_for_count`` cuts a text where the counts of the pieces add up
to the count of the whole (for every tokenizer that has a bound here), so a text counted up to a
cut is bounded by that exact head plus the bound of its tail. Prose has four or five bytes a
token: a new prompt whose bytes exceed the budget by a quarter is proved by counting about a
third of it, not all of it, and the rest is counted after it was forwarded (``Proof.complete``,
which memoises the whole count so the exact fit that follows reuses it). A long text is cut
into its content-defined chunks instead (``pricing.chunks``): a chunk the team's earlier text
shared enters at its memoised count, so a text that is mostly one counted before (a document
behind a new question) is proved without counting, and each chunk counted is memoised. Fixed
pieces of a short text are not: cut by their offsets, no other text shares them. A new text
too long for its bound to prove the request whatever the bound reads (its UTF-8 over twice what
the budget lets text cost: ``Proof.past``) is not read for its bound at all: its length stands
for it, and a sample prices its pieces against their length (bench/REPORT.md 1zb).

The bounds bound the *meter*, not the provider: the provider's own count is the calibration's
business. A learnt correction weighs more than tokens — tool calls, messages, characters of the
kinds tokenizers disagree on, image tokens priced by a default — so a bound carries each of those as
the meter would, or above it: the calls, the image tokens, its texts' content classes and
per-character counts (``pricing.content.classify`` and ``profile``: a few byte scans of each text,
of a sample of a long one, a hundredth of counting it) as they are; only its tokens of text and
framing above the meter's. Until 2026-12-07 every per-character count was taken at its most (each
character a digit, a newline, a tab... at once, priced at the dearest kind): on a route whose prior
had never seen a tab, the interval's doubt about that weight times every character put an 8k-token
prompt of prose at 227k tokens, and a Claude route's big prompt was never proved or sampled, only
counted before forwarding (bench/REPORT.md 1t). A message the meter already measured
(``pricing.meter.MessageCache``: an earlier turn of the conversation) enters with its exact
pressure, the tightest bound there is. ``strategies.fit`` prices a bound with no weight below 0 and
the interval at the worst of what the meter may count less, so a calibrated bound is never below the
calibrated estimate (tests/pricing/test_bounds.py, under learnt corrections too).
"""

from __future__ import annotations

import math
import random
import re
import string
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from hashlib import blake2b
from itertools import pairwise
from typing import Protocol

from pricing.chunks import content_chunks
from pricing.content import CLASSES, PROSE, STATS, STRUCTURED, classify
from pricing.framing import frame_message, tools_tokens
from pricing.messages import Message, TextPart
from pricing.meter import (
    ImagePrice,
    Memo,
    MessageCache,
    MessagePressure,
    Pressure,
    Sizes,
    audio_reference_price,
    defaulted_tokens,
    price_image,
    recall,
    text_stats,
)
from pricing.probe import ImageError
from pricing.route import Route
from pricing.tokenizers import (
    CHUNK_ABOVE,
    Tokenizer,
    count_each,
    get_tokenizer,
    memoised,
    parse_tokenizer_spec,
    recall_each,
    remember,
    remember_each,
    split_for_count,
)
from pricing.utf8 import utf8

__all__ = [
    "BYTE_LEVEL",
    "BYTE_LEVEL_NFKC",
    "Proof",
    "Sampled",
    "TextBounds",
    "bound_pressure",
    "byte_level_bound",
    "nfkd_bytes",
    "text_bound",
    "utf8_bytes",
]

#: Tokenizers whose tokens are non-empty byte strings that concatenate to the text's UTF-8 bytes.
BYTE_LEVEL = frozenset({"o200k_base", "cl100k_base", "deepseek"})
#: Byte-level tokenizers that normalise text with NFKC first.
BYTE_LEVEL_NFKC = frozenset({"anthropic-legacy"})


def utf8_bytes(text: str) -> int:
    """UTF-8 length of ``text`` (lone surrogates as the 3 bytes a tokenizer replaces them by)."""
    return len(text) if text.isascii() else len(utf8(text))


#: ASCII letters → ``a``: a space before a letter is then ``b" a"``, counted at C speed.
_LETTERS = bytes.maketrans(string.ascii_letters.encode(), b"a" * len(string.ascii_letters))
#: A space before a letter, found where spaces are few (``byte_level_bound``).
_SPACE_LETTER = re.compile(rb" (?=[A-Za-z])")
#: Spaces are few when one in this many bytes or fewer is one, read from ``_PROBES`` slices of
#: ``_PROBE`` bytes spread over the text (a guess only decides which of two exact ways counts).
_SPARSE = 32
_PROBES = 8
_PROBE = 512


def byte_level_bound(text: str) -> int:
    """UTF-8 length of ``text`` less one per space followed by an ASCII letter (see the module
    doc: such a pair never ends up as two tokens of a byte-level BPE routefit ships).

    Counted by mapping every letter to one and counting the pair (each byte read twice), or,
    where spaces are few (CJK, base64), by the regex, which jumps from space to space: for a
    129k-character CJK text 0.16 ms against 0.43."""
    data = utf8(text)
    if _sparse(data):
        return len(data) - len(_SPACE_LETTER.findall(data))
    return len(data) - data.translate(_LETTERS).count(b" a")


def _sparse(data: bytes) -> bool:
    """Whether spaces are few in ``data`` (a long one: a short text is read either way)."""
    if len(data) < _PROBE * _PROBES:
        return False
    step = len(data) // _PROBES
    spaces = sum(data.count(b" ", i, i + _PROBE) for i in range(0, step * _PROBES, step))
    return spaces * _SPARSE < _PROBE * _PROBES


def nfkd_bytes(text: str) -> int:
    """UTF-8 length of the text's compatibility decomposition (ASCII is its own)."""
    if text.isascii():
        return len(text)
    return len(unicodedata.normalize("NFKD", text).encode("utf-8", "surrogatepass"))


def text_bound(spec: str) -> Callable[[str], int] | None:
    """A function that bounds the token count of any text from above, for a tokenizer spec;
    None when routefit knows no cheap bound for it (the exact count is then the only proof)."""
    spec = parse_tokenizer_spec(spec)
    if spec in BYTE_LEVEL:
        return byte_level_bound
    if spec in BYTE_LEVEL_NFKC:
        return nfkd_bytes
    if spec.startswith("heuristic:"):
        chars = float(spec.split(":", 1)[1])
        return lambda text: math.ceil(len(text) / chars) if text else 0
    return None


@dataclass(slots=True)
class _Bounding:
    """A stand-in tokenizer whose count is the bound: the meter's framing functions, fed this,
    price framing from above."""

    name: str
    bound: Callable[[str], int]

    def count(self, text: str) -> int:
        return self.bound(text) if text else 0

    def prefetch(self, texts: Sequence[str]) -> None:
        return None

    def boundaries(self, text: str) -> list[int]:
        raise NotImplementedError("a bound cannot cut text")


#: Texts are counted for a proof in pieces of about this many characters (a piece of prose
#: takes a tenth of a millisecond to count; finer pieces would count less beyond the need but
#: pay more per piece).
_PIECE = 4096
#: What a proof expects a byte of bound to save when counted, before it has counted any (prose
#: saves about 0.8; a guess too high costs one more round, one too low counts pieces for nothing).
_SAVING = 0.75
#: At most this many pieces are counted before the saving they show says whether the proof can
#: succeed (a prompt far over its budget is not counted twice, once in vain).
_FIRST_BATCH = 8
#: A batch of at least this many pieces is counted on every counting thread.
_SIDE_BY_SIDE = 4
#: Texts shorter than this are left at their bound (counting them saves next to nothing).
_SHORTEST = 256
#: A sample (``Proof.sampled``) counts one 4 KB piece in this many of a text's uncounted ones,
#: and at least ``_SAMPLES`` (all of them when there are fewer): 7 of a 120k-token prompt's 120
#: pieces, 2-3 ms before forwarding. Measured, not kept: a sample of whole content chunks
#: (memoised, so the count that follows would not count them again) took 5-8 ms, on the path
#: the answer waits for, to save 1-2 ms of the count that overlaps the provider.
_SAMPLE_EVERY = 16
_SAMPLES = 6
#: A sample's ratio of tokens to bound is read this much higher (4 KB pieces of one kind of
#: text differ by a few per cent; a guess a little high costs nothing but the guess).
_SAMPLE_SLACK = 1.02
#: How many standard errors of its pieces' ratio a sample's doubt is (``Proof.doubt``):
#: Student's t at 99%, one-sided, for the fewest pieces a sample reads (``_SAMPLES``, five
#: degrees of freedom: 3.365). More pieces would earn a smaller one; a guess is let go on the
#: most it could need.
_DOUBT_T = 3.4
#: A close call's sample is read again wider (``Proof.widened``) before its answer is held for
#: the whole count: a new draw of this many times the pieces, its doubt at Student's t for the
#: fewest pieces it reads (18, seventeen degrees of freedom at 99%: 2.567). One piece of prose
#: among six of CJK doubts the whole text by a tenth; among eighteen the doubt says how much
#: there is (bench/REPORT.md 1zb).
_WIDER = 3
_WIDE_T = 2.6


class TextBounds(Protocol):
    """What the bounded fit reads a request's texts through: a ``Proof`` (bounds, tightened by
    counting), or a ``Sampled`` guess."""

    def __call__(self, text: str) -> int: ...

    def tighten(self, texts: Sequence[str], need: int) -> bool: ...


@dataclass(slots=True)
class _Counted:
    """One text being counted for a proof: its pieces, how many are counted, their count.

    The bounds here are additive at the cuts (a cut is before a space that follows a printable
    character: no UTF-8 sequence, decomposition or space-before-letter pair spans it), so the
    uncounted tail is bounded by the whole text's bound less the counted pieces' bounds, and
    the text is read once for its bound, not once more piece by piece."""

    text: str
    pieces: list[str]
    #: The bound of the pieces (of the whole text, but the chunks whose count was memoised).
    total: int
    #: What a piece is bounded by: the route's text bound, or the piece's UTF-8 length for a
    #: text too long for its bound to prove anything (``Proof.past``).
    measure: Callable[[str], int]
    counted: int = 0
    #: Tokens of the counted pieces, and their bounds (the memoised chunks' count, no bound).
    head: int = 0
    spent: int = 0
    #: The text's content chunks still to count, and the number of pieces up to each one's end
    #: (the pieces are the chunks' own, cut finer): a chunk counted to its end is memoised.
    chunks: list[str] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    #: Chunks memoised so far, and the tokens counted of the next one.
    filed: int = 0
    partial: int = 0

    @property
    def tail(self) -> int:
        return self.total - self.spent

    @property
    def bound(self) -> int:
        return self.head + self.tail

    def stretches(self, n: int) -> list[tuple[str, int]]:
        """The next ``n`` pieces not counted yet, joined into one stretch per chunk they fall
        in (one for a text without chunks), each with its number of pieces: a tokenizer call
        per stretch, not per piece."""
        stop = self.counted + n
        cuts = [e for e in self.ends[self.filed :] if e < stop]
        out, start = [], self.counted
        for end in (*cuts, stop):
            out.append(("".join(self.pieces[start:end]), end - start))
            start = end
        return out

    def add(self, counts: list[tuple[int, int]]) -> list[tuple[str, int]]:
        """Count in the next stretches, (tokens, pieces) each; the chunks it completes, with
        their counts."""
        done = []
        for tokens, pieces in counts:
            self.head += tokens
            self.counted += pieces
            self.partial += tokens
            if self.filed < len(self.ends) and self.counted == self.ends[self.filed]:
                done.append((self.chunks[self.filed], self.partial))
                self.filed += 1
                self.partial = 0
        return done


class Proof:
    """The text bounds of one request, tightened on demand by counting texts exactly.

    Not thread-safe: one request's proof is used by one thread at a time (tightened before the
    request is forwarded, completed after)."""

    def __init__(self, route: Route, sample_key: bytes = b"", past: int | None = None) -> None:
        spec = parse_tokenizer_spec(route.tokenizer)
        #: Where in each share of a text a sample reads (``_spread``): a secret of the process
        #: that builds the proof (``proxy.estimate``), so that no client can write a text whose
        #: sampled pieces are cheap and whose others are dense; the same key, the same picks.
        self.sample_key = sample_key
        self.bound = text_bound(spec)
        #: UTF-8 bytes past which a text new to the team is bounded by its length alone: the
        #: byte-level bound is at least half a text's bytes (a pair it takes off is two of
        #: them), so past twice what the request's budget lets its text cost (``strategies.fit.
        #: past_proving``) that bound proves nothing, and reading the text for it (translating
        #: and counting its every byte, ~1 ms for 480 KB of prose) only delays its sample's
        #: guess. A sample reads the text's pieces against the same measure.
        self.past = past if spec in BYTE_LEVEL else None
        #: The tokenizer a text may be counted in pieces with (None: the bound cannot tighten).
        self.tok: Tokenizer | None = None
        if spec in BYTE_LEVEL or spec in BYTE_LEVEL_NFKC:
            self.tok = get_tokenizer(spec, route.scope)
        self._texts: dict[int, _Counted] = {}
        #: Bounds of the long texts, computed once however often the request is bounded: (the
        #: text, its bound, whether that is its memoised count, whether its UTF-8 length).
        self._bounds: dict[int, tuple[str, int, bool, bool]] = {}
        #: False: ``tighten`` only takes what the team's memo already holds (the chunks of a
        #: text counted before), counting nothing — a first pass where counting must not run
        #: (the event loop); set back to True, the same proof counts on from there.
        self.may_count = True
        #: How far the last sample's guess (``sampled``) may be under the count, as a share of
        #: it: Student's t (``_DOUBT_T``, ``_WIDE_T`` for a wider look) standard errors of each
        #: sampled text's ratio of tokens to measure, as its pieces differ among themselves (0
        #: when every text was counted). Pieces of one
        #: kind of text differ by a few per cent; a text that mixes kinds shows it in them.
        self.doubt = 0.0
        #: The last sample: each text it read, the pieces it counted and their counts; and the
        #: Student's t its doubt is read at (``_DOUBT_T``, ``_WIDE_T``).
        self._picked: list[tuple[_Counted, list[str], list[int]]] = []
        self._t = _DOUBT_T

    def __call__(self, text: str) -> int:
        """The text's bound as tightened so far (≥ its count)."""
        found = self._texts.get(id(text))
        if found is not None and found.text is text:
            return found.bound
        if self.bound is None or not text:
            return 0
        if len(text) < _SHORTEST:
            return self.bound(text)
        return self._bound(text)[1]

    def _bound(self, text: str) -> tuple[str, int, bool, bool]:
        """(a long text, its bound, whether that is its memoised count, whether its UTF-8
        length: ``past``), computed once."""
        assert self.bound is not None
        known = self._bounds.get(id(text))
        if known is None or known[0] is not text:
            # a text counted before (a retry, a document sent again) is its own bound
            counted = None if self.tok is None else memoised(self.tok, text)
            if counted is not None:
                known = (text, counted, True, False)
            elif (length := self._length_past(text)) is not None:
                known = (text, length, False, True)
            else:
                known = (text, self.bound(text), False, False)
            self._bounds[id(text)] = known
        return known

    def _length_past(self, text: str) -> int | None:
        """``text``'s UTF-8 length when it is over ``past``, else None (read only when it might
        be: a character is at most four bytes)."""
        if self.past is None or len(text) * 4 <= self.past:
            return None
        length = utf8_bytes(text)
        return length if length > self.past else None

    def tighten(self, texts: Sequence[str], need: int) -> bool:
        """Count pieces of the biggest of ``texts`` until their bounds fell by ``need`` tokens
        (about: the caller checks again); False when that cannot happen (nothing left to count,
        or what counting saved so far says the rest will not save enough)."""
        if self.tok is None or self.bound is None:
            return False
        long = {id(t): t for t in texts if len(t) >= _SHORTEST}
        was = sum(map(self, long.values()))
        todo = [self._counted(t) for t in long.values()]
        todo.sort(key=lambda c: c.tail, reverse=True)
        # a long text's chunks the team counted before enter at their counts (``_chunked``)
        saved, bounded = was - sum(c.bound for c in todo), 0
        if not self.may_count:
            return saved > 0  # what the memo held; the caller checks again
        while saved < need:
            ratio = saved / bounded if bounded else _SAVING
            left = sum(c.tail for c in todo)
            if not left or (bounded and saved + ratio * left < need):
                return False  # hopeless: the exact path counts it all anyway
            batch = _batch(todo, ratio, need - saved)
            if not batch:
                return False
            # a thread's wake-up costs about as much as counting a piece: worth it for several
            side = sum(n for _, n, _ in batch) >= _SIDE_BY_SIDE
            for (c, _, before), tokens in zip(
                batch, self._count([(c, n) for c, n, _ in batch], side), strict=True
            ):
                c.spent += before
                saved += before - tokens
                bounded += before
        return True

    def _count(self, batch: Sequence[tuple[_Counted, int]], side_by_side: bool) -> list[int]:
        """Count the next ``n`` pieces of each text in, as stretches (``_Counted.stretches``);
        memoise the chunks that completes. The tokens counted of each text."""
        assert self.tok is not None
        spans = [c.stretches(n) for c, n in batch]
        counts = iter(count_each(self.tok, [t for ss in spans for t, _ in ss], side_by_side))
        out = []
        for (c, _), ss in zip(batch, spans, strict=True):
            each = [(next(counts), pieces) for _, pieces in ss]
            done = c.add(each)
            if done:
                remember_each(self.tok, [t for t, _ in done], [n for _, n in done])
            out.append(sum(n for n, _ in each))
        return out

    def sampled(self, texts: Sequence[str]) -> Sampled:
        """The long ``texts`` priced from a sample: what is counted or memoised of each as it
        is, the rest at the ratio of tokens to bound of a few of its pieces, one in each share of
        it (``_spread``; to length, for a text past proving: ``reread``). A guess, not a bound: a
        prompt that no cheap bound proves is let go on it, and when the guess raised by its
        doubt (``doubt``, set here) is over the budget (``proxy.estimate.CLOSE_CALL``) counted
        exactly meanwhile, its answer released only once that count proves it fits. The pieces
        counted are not kept (the exact count counts them again, a few per cent of it); nothing
        is counted when the proof cannot count.

        A text a sample would read all of (``_SAMPLES`` pieces or fewer: up to ~24 KB) is
        counted as the proof counts, and kept: its exact count is what the proof and the exact
        fit that may follow read. Sampled, an agent's newest 20 KB tool output was counted whole
        by the sample, then again by the proof, then by the fit."""
        self._picked = []
        if self.tok is None or self.bound is None:
            return Sampled(self, {})
        long = {id(t): t for t in texts if len(t) >= _SHORTEST}
        todo = [c for c in map(self._counted, long.values()) if c.counted < len(c.pieces)]
        spread = [(c, _spread(c, self.sample_key)) for c in todo]
        whole = [c for c, sample in spread if sample is None]
        self._count_whole(whole, sum(len(c.pieces) - c.counted for c in whole) >= _SIDE_BY_SIDE)
        return self._read([(c, sample) for c, sample in spread if sample is not None], _DOUBT_T)

    def widened(self) -> Sampled:
        """The last sample's texts guessed again from a wider sample of each (``_WIDER`` times
        the pieces, drawn anew with the same key): a close call for the first look, whose few
        pieces doubt a text of two kinds by whatever one odd piece shows, costs counting a few
        more pieces rather than the whole text before the answer. Each text is read as the
        last look read it (its bound, or its length)."""
        spread = [(c, _spread(c, self.sample_key, _WIDER)) for c, _, _ in self._picked]
        return self._read([(c, s if s is not None else _units(c)) for c, s in spread], _WIDE_T)

    def _read(self, picks: Sequence[tuple[_Counted, list[str]]], t: float) -> Sampled:
        """Count the pieces picked of each text, and guess from them at Student's ``t``."""
        assert self.tok is not None
        pieces = [p for _, sample in picks for p in sample]
        counts = iter(count_each(self.tok, pieces, len(pieces) >= _SIDE_BY_SIDE))
        self._picked = [(c, sample, [next(counts) for _ in sample]) for c, sample in picks]
        self._t = t
        return self._guess()

    def _guess(self) -> Sampled:
        """The last sample's guess of each text it read: what is counted of it, the rest at the
        ratio of tokens to measure its pieces show (``_SAMPLE_SLACK`` higher); sets ``doubt``."""
        guesses: dict[int, tuple[str, int]] = {}
        guessed = above = 0
        for c, sample, counts in self._picked:
            ratio, error = _ratio([(n, c.measure(p)) for n, p in zip(counts, sample, strict=True)])
            guess = c.head + math.ceil(min(1.0, _SAMPLE_SLACK * ratio) * c.tail)
            most = c.head + math.ceil(min(1.0, _SAMPLE_SLACK * ratio + self._t * error) * c.tail)
            guesses[id(c.text)] = (c.text, guess)
            guessed, above = guessed + guess, above + most - guess
        self.doubt = above / max(guessed, 1)
        return Sampled(self, guesses)

    @property
    def rereadable(self) -> bool:
        """Whether the last sample read a text past proving by its length (``reread``)."""
        return any(c.measure is not self.bound for c, _, _ in self._picked)

    def reread(self) -> Sampled:
        """The last sample's guess again, its texts past proving read for their byte-level
        bound after all, their pieces' counts the same: tokens follow the bound more closely
        than the length across kinds of text (it takes a token off for a space before a word),
        and a text of several kinds, priced by its length, doubted itself up to half as much
        again (bench/REPORT.md 1zb). Read when its length leaves the guess a close call: the
        bound is a read of the whole text, ~1 ms for 480 KB of prose."""
        assert self.bound is not None
        for c, _, _ in self._picked:
            if c.measure is not self.bound:
                bounds = [self.bound(p) for p in c.pieces]
                c.total, c.spent, c.measure = sum(bounds), sum(bounds[: c.counted]), self.bound
        return self._guess()

    def complete(self, side_by_side: bool = True) -> None:
        """Count what the proof left uncounted and memoise each text's whole count, so that the
        exact fit which follows finds it. ``side_by_side``: on every counting thread (a request
        waiting for it), else in this thread only (a request whose provider is working: the
        count has time, and the other cores are the provider's and the other requests')."""
        if self.tok is None:
            return
        self._count_whole(list(self._texts.values()), side_by_side)

    def _count_whole(self, texts: Sequence[_Counted], side_by_side: bool) -> None:
        """Count what is left of ``texts`` and memoise each one's whole count."""
        assert self.tok is not None
        left = [(c, len(c.pieces) - c.counted) for c in texts]
        self._count([(c, n) for c, n in left if n], side_by_side)
        for c, _ in left:
            c.spent = c.total
            remember(self.tok, c.text, c.head)

    def _counted(self, text: str) -> _Counted:
        found = self._texts.get(id(text))
        if found is None or found.text is not text:
            _, bound, exact, loose = self._bound(text)
            assert self.bound is not None
            measure = utf8_bytes if loose else self.bound
            if exact:  # nothing left to count
                found = _Counted(text, [], bound, measure, head=bound, spent=bound)
            elif self.tok is not None and len(text) >= CHUNK_ABOVE:
                found = self._chunked(text, self.tok, bound, measure, self.bound)
            else:
                pieces = split_for_count(text, -(-len(text) // _PIECE))
                found = _Counted(text, pieces, bound, measure)
            self._texts[id(text)] = found
        return found

    @staticmethod
    def _chunked(
        text: str,
        tok: Tokenizer,
        bound: int,
        measure: Callable[[str], int],
        bound_of: Callable[[str], int],
    ) -> _Counted:
        """A long text to count as its content chunks (``pricing.chunks``): those whose count
        the team has memoised (the same stretch in a text counted before: a document behind a
        new question, a file read again) enter at that count, the others are the pieces to
        count, at their bounds (bounds and counts add up at the chunks' cuts). ``bound``: the
        text's, by ``measure`` (its UTF-8 length past proving, ``Proof.past``); once a chunk
        is known the rest is bounded as tightly as ``bound_of`` can: the memoised counts may
        leave a proof within reach."""
        chunks = content_chunks(text)
        found = recall_each(tok, chunks)
        new = [chunk for chunk, n in zip(chunks, found, strict=True) if n is None]
        old = [chunk for chunk, n in zip(chunks, found, strict=True) if n is not None]
        head = sum(n for n in found if n is not None)
        # the new chunks' bound: the text's (read once already) less the old ones', or their
        # own, whichever reads less again (bounds add up at the cuts)
        if old and measure is not bound_of:
            measure = bound_of
            bound = sum(map(bound_of, new))
        elif sum(map(len, old)) < sum(map(len, new)):
            bound -= sum(map(measure, old))
        else:
            bound = sum(map(measure, new))
        pieces: list[str] = []
        ends: list[int] = []
        for chunk in new:  # in pieces of a proof's size, each chunk's count their sum
            pieces += split_for_count(chunk, -(-len(chunk) // _PIECE))
            ends.append(len(pieces))
        return _Counted(text, pieces, bound, measure, head=head, chunks=new, ends=ends)


@dataclass(frozen=True, slots=True)
class Sampled:
    """A request's long texts as a sample prices them (``Proof.sampled``), the others at their
    proof's bounds: read by the bounded fit in place of the proof, it can only guess, never
    tighten."""

    proof: Proof
    guesses: Mapping[int, tuple[str, int]]

    def __call__(self, text: str) -> int:
        found = self.guesses.get(id(text))
        if found is not None and found[0] is text:
            return found[1]
        return self.proof(text)

    def tighten(self, texts: Sequence[str], need: int) -> bool:
        return False


def _spread(c: _Counted, key: bytes = b"", wider: int = 1) -> list[str] | None:
    """What a sample counts of a text: of its uncounted pieces, one in each of ``k`` equal
    shares, where in its share drawn from ``key`` and the text's size (the same ones for the
    same text and key; a client that does not know the key cannot tell which: a text dense
    only where an even spread does not read was guessed at a fraction of its count); None
    when that would be every one of them (the text is then counted whole, and kept). A piece
    far longer than a proof's (a text with nowhere to cut where counts add up: CJK has no
    spaces) is sampled in slices of a proof's size, cut anywhere: a guess needs their ratio of
    tokens to bound, not counts that add up. ``wider``: that many times the shares, drawn
    apart from the first look's."""
    units = _units(c)
    n = len(units)
    k = min(n, max(_SAMPLES, n // _SAMPLE_EVERY) * wider)
    if k == n:
        return None
    size = f"{n}:{len(c.text)}" if wider == 1 else f"{n}:{len(c.text)}:{wider}"
    seed = blake2b(size.encode(), key=key[:64], digest_size=8).digest()
    draw = random.Random(int.from_bytes(seed, "big"))
    starts = [i * n // k for i in range(k + 1)]
    return [units[a + draw.randrange(b - a)] for a, b in pairwise(starts)]


def _units(c: _Counted) -> list[str]:
    """What a sample draws from: the text's uncounted pieces, sliced (``_slices``)."""
    return [u for piece in c.pieces[c.counted :] for u in _slices(piece)]


def _ratio(each: Sequence[tuple[int, int]]) -> tuple[float, float]:
    """The ratio of tokens to bound of a sample's pieces, (tokens, bound) each, and its standard
    error (a ratio estimator's, as if the pieces were drawn at random from the whole text: one
    drawn in each share of it errs less, so this errs high). A ratio of 1, no error, when the
    pieces bound nothing."""
    bounded = sum(b for _, b in each)
    if not bounded:
        return 1.0, 0.0
    k = len(each)
    ratio = sum(t for t, _ in each) / bounded
    if k < 2:
        return ratio, 1.0
    spread = sum((t - ratio * b) ** 2 for t, b in each) / (k - 1)
    return ratio, math.sqrt(spread / k) / (bounded / k)


def _slices(piece: str) -> list[str]:
    """``piece``, or slices of it of about a proof's piece in UTF-8 (``_PIECE`` bytes): what a
    sample counts grows with the bytes, not the characters — a slice of 4,096 CJK characters
    is 12 KB and ~4,000 tokens, and six of them were a fifth of a 120k-token text, counted
    before it was forwarded (4.9 ms against prose's 2.3)."""
    size = _PIECE if piece.isascii() else max(1, _PIECE * len(piece) // utf8_bytes(piece))
    if len(piece) <= 2 * size:
        return [piece]
    return [piece[i : i + size] for i in range(0, len(piece), size)]


def _batch(todo: Sequence[_Counted], ratio: float, need: float) -> list[tuple[_Counted, int, int]]:
    """The next pieces to count, biggest texts first, as many as ``ratio`` says will save
    ``need``: as (text, pieces, their bound)."""
    batch: list[tuple[_Counted, int, int]] = []
    want = 0.0
    first = all(c.counted == 0 for c in todo)  # the ratio is a guess: a first look only
    pieces = 0
    for c in todo:
        if first or ratio * c.tail >= 2 * (need - want):
            most = _FIRST_BATCH - pieces if first else len(c.pieces)
            take, before = _prefix(c, ratio, need - want, most)
        else:
            take, before = _prefix_from_end(c, (need - want) / ratio)
        want += ratio * before
        pieces += take - c.counted
        if take > c.counted:
            batch.append((c, take - c.counted, before))
        if want >= need or (first and pieces >= _FIRST_BATCH):
            break
    return batch


def _prefix(c: _Counted, ratio: float, need: float, most: int) -> tuple[int, int]:
    """(end, bound) of the fewest next pieces of ``c`` that ``ratio`` says save ``need``: read
    from the first uncounted piece on, at most ``most`` of them (a first look)."""
    take, before = c.counted, 0
    while take < len(c.pieces) and ratio * before < need and take - c.counted < most:
        before += c.measure(c.pieces[take])
        take += 1
    return take, before


def _prefix_from_end(c: _Counted, target: float) -> tuple[int, int]:
    """(end, bound) of the fewest next pieces of ``c`` whose bound reaches ``target``, found by
    bounding the pieces left behind, from the last one back: a proof near the window counts
    most of a text, and bounds add up at the cuts (``_Counted``), so what it takes is bounded
    as the text's rest less what it leaves — a few pieces read instead of every one."""
    end, left = len(c.pieces), 0
    while end > c.counted:
        b = c.measure(c.pieces[end - 1])
        if c.tail - (left + b) < target:
            break
        left += b
        end -= 1
    return end, c.tail - left


def bound_pressure(
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, object]],
    route: Route,
    sizes: Sizes | None = None,
    proof: TextBounds | None = None,
    described: bool = True,
    *,
    memo: Memo | None = None,
) -> Pressure | None:
    """A Pressure whose every part is ≥ the meter's for the same messages (``exact`` False);
    None when the route's tokenizer has no cheap bound. ``proof``: the texts' bounds as a proof
    has tightened them (else their cheap bounds). ``described``: with the texts' content
    classes and per-character counts; without (all prose, no counts), for the meter's own
    weights, which price every class alike and no count (a few byte scans of each text saved,
    a Python loop over a sample of each text outside ASCII). ``memo``: the request's, where the
    messages the message memo had (at their exact price) are left for the exact fit that
    follows a proof, which then finds them by object (a long session's 400 messages were
    digested and looked up twice a request).

    Raises ImageError for an image the meter would refuse (the same check, the same message)."""
    bound = text_bound(route.tokenizer)
    if bound is None:
        return None
    tok = _Bounding(route.tokenizer, bound)
    text_of = bound if proof is None else proof
    per_message: list[MessagePressure] = []
    details: list[ImagePrice] = []
    prefix = MessageCache.prefix(route)
    prev_role: str | None = None
    for i, message in enumerate(messages):
        known = memo.get(message, i, prev_role) if memo is not None else None
        if known is not None:  # the meter's own price (and its images'), exact
            measured: MessagePressure | None = known[0]
            details += known[1]
        else:
            measured = recall(MessageCache.key(message, prev_role, prefix), i)
            if measured is not None and memo is not None:
                memo.put(message, prev_role, measured, ())
        if measured is None:
            measured = _bound_message(
                message, i, route, sizes, tok, text_of, prev_role, details, described
            )
        per_message.append(measured)
        prev_role = message.role
    return Pressure(
        route=route.alias,
        messages=tuple(per_message),
        tools=tools_tokens(tuple(tools), route.framing, tok),
        priming=route.framing.priming,
        image_details=tuple(details),
        exact=False,
    )


def _bound_message(
    message: Message,
    i: int,
    route: Route,
    sizes: Sizes | None,
    tok: _Bounding,
    text_of: Callable[[str], int],
    prev_role: str | None,
    details: list[ImagePrice],
    described: bool = True,
) -> MessagePressure:
    """One message's bound (its images appended to ``details``): text and framing bounded, in
    the content classes the meter puts them in (``content.classify``, a sample of each text);
    calls, default-priced image tokens and the per-character counts as the meter has them
    (``meter.text_stats``)."""
    text = images = defaulted = unsized = 0
    classes = [0] * len(CLASSES)
    stats = text_stats(message) if described else [0] * len(STATS)
    for j, part in enumerate(message.parts):
        if isinstance(part, TextPart):
            n = text_of(part.text) if part.text else 0
            text += n
            classes[classify(part.text) if described else PROSE] += n
            continue
        try:
            price = price_image(part, route, sizes)
        except ImageError as exc:  # named as the meter names it
            where = f"messages[{i}].content[{j}].image_url.url"
            raise ImageError(f"{where}: {exc.message}", where) from None
        if price.placeholder is not None:  # a text-only route sends it as text
            price = _with_tokens(price, tok.bound(price.placeholder))
        details.append(_with_tokens(price, price.tokens, i, j))
        images += price.tokens
        text += price.text  # a PDF's text, counted when it was read
        classes[price.text_class] += price.text
        if price.text_stats:
            stats = [a + b for a, b in zip(stats, price.text_stats, strict=True)]
        by_default, of_unknown_size = defaulted_tokens(price)
        defaulted += by_default
        unsized += of_unknown_size
    reference = audio_reference_price(message, route, i)  # as the meter has it
    if reference is not None:
        details.append(reference)
        images += reference.tokens
        defaulted, unsized = defaulted + reference.tokens, unsized + reference.tokens
    frame = frame_message(message, route.framing, tok, prev_role, translated=route.translated)
    classes[STRUCTURED] += frame.text  # tool-call names and JSON arguments, as the meter has them
    return MessagePressure(
        i,
        message.role,
        text + frame.text,
        frame.framing,
        images,
        tuple(classes),
        calls=len(message.tool_calls),
        defaulted=defaulted,
        stats=tuple(stats),
        unsized=unsized,
    )


def _with_tokens(p: ImagePrice, tokens: int, message: int = -1, part: int = -1) -> ImagePrice:
    return replace(
        p,
        message=p.message if message < 0 else message,
        part=p.part if part < 0 else part,
        tokens=tokens,
    )
