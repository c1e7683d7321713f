"""Calibration: from the meter's raw estimate to the estimate routefit acts on.

The meter is exact only where the provider publishes its rules; elsewhere (Claude, Gemini, a
tokenizer routefit does not know, undocumented tool rendering) it is a good approximation with a
route-specific bias. Every completed request tells the truth (``usage.prompt_tokens``), and this
module turns those samples into a ``Correction``:

1. **A model of the bias, by feature.** actual ≈ Σ wᵢ·featureᵢ over the text of each content
   class (prose, code, structured, other scripts, numeric — ``pricing.content``), framing,
   messages, tool calls and images, fitted by recency-weighted least squares on the route's
   recent samples with a ridge pull towards the meter's own opinion. A tokenizer that counts
   code 30% above the meter's, CJK 40% below it *and* adds 6 tokens per message is captured
   feature by feature rather than smeared into one ratio that is wrong for every mix. Inside a
   class, tokenizers still disagree on whitespace runs, digit splits, punctuation merges and
   characters outside ASCII: those are counted per part (``pricing.content.profile``) and get a
   weight in tokens per character, pulled towards 0; a per-prompt feature carries the overhead
   every request pays (priming, the tool schema's rendering). The fit minimises *relative*
   errors (a sample weighs 1/actual²), the ones the estimate is judged by.
   Image tokens priced by a default (a URL image of unknown size at the rule's worst case, a
   stand-in rule) are a feature of their own, fitted *after* the others on what they leave
   over: no factor moves because of tokens the meter did not price.
2. **Conservative.** An underestimate means an overflow at the provider; an overestimate only
   means a little unused window. The fitted model is scaled by an upper quantile of
   actual / predicted over the window, so at most ~(1 − quantile) of requests are underestimated
   and by little.
2b. **Surer where the window is thin.** A request unlike the window's samples (a mix of
   scripts, numbers or calls they had little of) is where the fitted weights are least sure:
   its estimate adds ``interval`` standard deviations of its own fitted price (the fit's
   prediction interval, ``Correction.for_request``), so the margin lands where the window has
   not shown the price and costs little where it has (bench/REPORT.md, 4e). Only on a route
   whose meter is not exact.
3. **Never below an exact meter**: on a route whose meter follows the provider's published
   rules, a factor is never below 1 (what the meter does not know can only add tokens).
4. **Cautious until it knows**: fewer than ``min_samples`` samples → factors of 1 on a route
   whose meter is exact, a prior meant to over-estimate on one that is not (text and framing
   ×1.4, 8 tokens a message, 12 a tool call, 16 a request, 0.55 a digit: docs/calibration.md).
5. **Quick to follow a change** (a new model version behind the same alias): when the newest
   samples consistently sit above the older ones by a moderate rise, the older ones are scaled
   to it at once; a fall or a larger rise must hold for a quarter of the window, then the older
   ones are dropped (``_regime``).
6. **Untrusted**: a provider's count is a claim. Samples more than ``outlier_band`` from what the
   others say they should cost are left out while they are at most ``outlier_share`` of the
   window (``_plausible``), so up to 20% lying samples keep every honest request's price
   within [0.99, 1.5]× of the honest fit (property-tested).
7. **Clamped** to a sane range, and **quantised** (0.5% steps, rounded up) so that a factor does
   not jitter between requests: fitting's cut points are computed on calibrated prices, and a
   factor that moved every request would move them too.

Prefix anchors: for the exact prompt that was sent, the provider's count is the truth. A later
request that extends it is estimated as ``anchor.actual + correction(now − anchor)``, so a
multi-turn session carries only the new turns' uncertainty. ``checkpoint_anchors`` also gives
the truth's share of checkpoint prefixes of that prompt, so that after a cut changed the tail,
the unchanged head still starts from the provider's count.

Pure math over plain values; samples and anchors live in the store (``proxy.store``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate, compress
from operator import mul
from typing import NamedTuple

from pricing.content import CLASSES, STATS
from pricing.meter import MessagePressure, Pressure

__all__ = [
    "FEATURES",
    "IMAGE_FEATURES",
    "Anchor",
    "CalibrationPolicy",
    "Correction",
    "Sample",
    "anchor_of",
    "anchored",
    "anchored_estimate",
    "checkpoint_anchors",
    "fit_correction",
    "implausible_count",
    "message_features",
    "pressure_features",
    "sample_of",
]

#: The features of a prompt, in this order: text tokens per content class, framing tokens,
#: messages, tool calls, image tokens priced from the image, image tokens priced by a stand-in
#: rule, the request itself (1: overhead per prompt), counts of the characters tokenizers
#: disagree on (``pricing.content.STATS``), and image tokens of unknown size priced at the
#: rule's worst case (last: samples recorded before it existed lack it).
FEATURES = (
    *CLASSES,
    "framing",
    "messages",
    "calls",
    "images",
    "defaulted",
    "requests",
    *STATS,
    "unsized",
)
_N = len(FEATURES)
_TEXT = range(len(CLASSES))
FRAMING, MESSAGES, CALLS, IMAGES, DEFAULTED, REQUESTS = range(len(CLASSES), len(CLASSES) + 6)
#: Features counted in characters (their weight is tokens per character, neutral 0).
_CHARS = range(REQUESTS + 1, REQUESTS + 1 + len(STATS))
UNSIZED = _N - 1
#: The features a bound (``pricing.bounds``) may carry above the meter's: its text in each class,
#: framing and image tokens (a text-only route's placeholders, bounded); it carries every other
#: (messages, calls, the per-character counts) as the meter has it.
_LOOSE = (*_TEXT, FRAMING, IMAGES, DEFAULTED, UNSIZED)
NUMBERS = FEATURES.index("numbers")
DIGITS = FEATURES.index("digits")
NONASCII = FEATURES.index("nonascii")
NEWLINES, INDENT, TABS = (FEATURES.index(k) for k in ("newlines", "indent", "tabs"))
PUNCT = FEATURES.index("punct")
_SCRIPT_COUNTS = tuple(FEATURES.index(k) for k in ("hangul", "kana", "han", "cyrillic"))
GROUPS = FEATURES.index("groups")
WIDE = FEATURES.index("wide")
#: How many characters' counts came after numbers (``pricing.content.STATS``' last: the scripts'
#: and the groups', since 2026-12-05; the wide bytes', since 2026-12-06).
_BLOCKS = len(STATS) - STATS.index("hangul")
#: The features an image's tokens may fall in (an offloaded image leaves all of them).
IMAGE_FEATURES = (IMAGES, DEFAULTED, UNSIZED)
#: Features that count things (their weight is tokens per thing, neutral 0), not tokens.
_THINGS = (MESSAGES, CALLS, REQUESTS)
_COUNTS = frozenset((*_THINGS, *_CHARS))
#: Which features a neutral correction prices (tokens), in order: not the counted things.
_PRICED = tuple(j not in _COUNTS for j in range(_N))
#: The neutral correction's weights as numbers (1 for what it prices, 0 for counts).
_PRICED_WEIGHTS = tuple(float(priced) for priced in _PRICED)
#: Features of samples recorded before the request and character features existed.
_OLD_N = REQUESTS
_NO_STATS = (0,) * len(STATS)
Vector = tuple[float, ...]


def _legacy(text: float, framing: float, images: float, messages: float = 0.0) -> Vector:
    return (*(text for _ in _TEXT), framing, messages, 0.0, images, images, 0.0, *_NO_STATS, images)


#: The weights of no correction (every token priced as the meter counted it).
_NEUTRAL = _legacy(1.0, 1.0, 1.0)


def message_features(mp: MessagePressure) -> tuple[int, ...]:
    """One message's features (see ``FEATURES``), kept on it (``MessagePressure.features_memo``)."""
    kept = mp.features_memo
    if kept is not None:
        return kept
    features = _features(mp)
    object.__setattr__(mp, "features_memo", features)
    return features


def _features(mp: MessagePressure) -> tuple[int, ...]:
    stats = mp.stats or _NO_STATS
    return (
        *mp.by_class,
        mp.framing,
        1,
        mp.calls,
        mp.images - mp.defaulted,
        mp.defaulted - mp.unsized,
        0,
        *stats,
        mp.unsized,
    )


def pressure_features(p: Pressure, upto: int | None = None) -> tuple[int, ...]:
    """A prompt's features (its first ``upto`` messages when given), tools and priming
    included: they are part of every prefix. Summed column by column (C loops): a long
    session's request asks for them several times, ~0.4 ms each at 400 messages message by
    message: the whole prompt's are kept on it (``Pressure.features_memo``)."""
    whole = upto is None or upto >= len(p.messages)
    if whole and p.features_memo is not None:
        return p.features_memo
    rows = [message_features(mp) for mp in p.messages[:upto]]
    total = list(map(sum, zip(*rows, strict=True))) if rows else [0] * _N
    total[FRAMING] += p.tools + p.priming
    total[REQUESTS] = 1
    features = tuple(total)
    if whole:
        object.__setattr__(p, "features_memo", features)
    return features


@dataclass(frozen=True, slots=True)
class Correction:
    """Weights per feature of the raw estimate. ``text``/``framing``/``images`` are the
    summary (``text``: what one token of the route's text costs, on average over the window);
    ``weights``, when fitted, says it per feature."""

    text: float = 1.0
    framing: float = 1.0
    images: float = 1.0
    #: Samples the factors were fitted on (0 = neutral).
    samples: int = 0
    weights: tuple[float, ...] = ()
    #: The weights are the prior of a route whose meter is not exact and which has not learnt
    #: yet: meant to err high, they are no grounds for a refusal (``proxy.estimate.Job.fit``).
    provisional: bool = False
    #: The fitted price's doubt: rows R with Σⱼ (Rⱼ·x)² = k² xᵀCx for a request's features x
    #: (k: ``CalibrationPolicy.interval``; C: the weights' covariance, ``_interval``). Empty:
    #: none (an exact meter, a prior, the meter's own weights).
    interval: tuple[tuple[float, ...], ...] = ()
    #: Per-character counts no sample of a learnt route had (a script, tabs, digits it never
    #: saw), priced at the prior's weights: a guess meant to err high (a script at its
    #: tokenizer's worst case), no grounds for a refusal (``surer``).
    unseen: tuple[int, ...] = ()
    #: The weight per feature, and whether they are the meter's own: asked for every message
    #: priced, so worked out once (``__post_init__``).
    vector: Vector = field(init=False, repr=False, compare=False)
    neutral: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        w = (
            self.weights
            if len(self.weights) == _N
            else _legacy(self.text, self.framing, self.images)
        )
        object.__setattr__(self, "vector", w)
        object.__setattr__(self, "neutral", w == _NEUTRAL)

    def apply(self, text: int, framing: int = 0, images: int = 0) -> int:
        """Price of plain parts: text of unknown content at the summary weight ``text`` (the
        window's average; a bound, which must not be under, is priced by
        ``strategies.fit._bound_estimate``)."""
        if self.neutral:
            return text + framing + images
        return math.ceil(text * self.text + framing * self.framing + images * self.images)

    @property
    def least_text(self) -> float:
        """The least a token of text is priced at, in any class: what a bound's text costs at
        the least (``strategies.fit._bound_estimate`` reads a negative weight as 0)."""
        if self.neutral:
            return 1.0
        return min(max(0.0, self.vector[i]) for i in _TEXT)

    def price(self, features: Sequence[float]) -> int:
        """Price of a feature vector (``message_features`` / ``pressure_features``)."""
        w = self.vector
        if self.neutral:
            return int(sum(compress(features, _PRICED)))
        if len(w) != len(features):
            raise ValueError(f"{len(features)} features priced by {len(w)} weights")
        total: float = sum(map(mul, w, features))
        return math.ceil(total - 1e-9)

    def running_prices(self, head: Sequence[int], messages: Sequence[MessagePressure]) -> list[int]:
        """``price`` of ``head`` plus each prefix of ``messages``' features. The price is linear
        in the features, so each message is priced once and the prices summed, rather than a
        vector summed and priced per prefix (a 400-message prompt's checkpoints cost ~3× less);
        and a message's price is kept on it for these weights (``MessagePressure.price_memo``):
        a session's earlier messages come back every turn."""
        w = _PRICED_WEIGHTS if self.neutral else self.vector
        if len(w) != len(head):
            raise ValueError(f"{len(head)} features priced by {len(w)} weights")

        def priced(mp: MessagePressure) -> float:
            kept = mp.price_memo
            if kept is not None and kept[0] is w:
                return kept[1]
            price: float = sum(map(mul, w, message_features(mp)))
            object.__setattr__(mp, "price_memo", (w, price))
            return price

        totals = accumulate(map(priced, messages), initial=sum(map(mul, w, head)))
        next(totals)  # ``head`` alone
        if self.neutral:
            return [int(t) for t in totals]
        return [math.ceil(t - 1e-9) for t in totals]

    def price_pressure(self, p: Pressure) -> int:
        """The weights' price of ``p``, without the interval: what ``price_request`` adds to
        it is the request's own."""
        return self.price(pressure_features(p))

    def price_request(self, p: Pressure) -> int:
        """The estimate of a whole request: its price with its interval (``for_request``)."""
        features = pressure_features(p)
        return self.for_request(features).price(features)

    def margin(self, features: Sequence[float]) -> float:
        """The interval's tokens for a request of these features (0 without one)."""
        if not self.interval:
            return 0.0
        return math.sqrt(sum(sum(map(mul, row, features)) ** 2 for row in self.interval))

    def for_request(self, features: Sequence[float]) -> Correction:
        """The weights one request is priced by, its parts and every cut of it: this
        correction's, scaled so that the whole request's price carries its interval.

        One factor per request, not a margin per part: a fit adds and compares the prices of
        its parts (units, cut points, anchors), which a factor keeps linear and consistent;
        a part's own interval, summed over parts, would over-price every cut."""
        if not self.interval:
            return self
        price = sum(map(mul, self.vector, features))
        if price <= 0:  # nothing to scale (and scaling a price below nothing would lower it)
            return self
        return self._times(1.0 + self.margin(features) / max(1.0, price), ())

    def interval_bound(self, features: Sequence[float]) -> float:
        """At least ``margin(x)`` for every request x a bound of these features stands for
        (``strategies.fit._bound_estimate``): x is the bound but where a bound may be above the
        meter (``_LOOSE``: its text in each class, framing, image tokens), anywhere from 0 to
        the bound there. The margin is a norm, convex: its most over that box is at a corner,
        each loose feature at 0 or at its bound (a Gray code: one column changes per corner).
        The rows keep their signs: samples of one shape of prompt leave a correction sure
        along it and unsure across it, rows of large entries that cancel along it; taken at
        their sizes, they doubted a 120k-token JSON prompt by 174k tokens on a Claude route
        that had learnt from JSON prompts like it (bench/REPORT.md 1t)."""
        if not self.interval:
            return 0.0
        v = [_dot(row, features) for row in self.interval]
        loose = [j for j in _LOOSE if features[j]]
        cols = [[row[j] * features[j] for row in self.interval] for j in loose]
        at_zero = [False] * len(loose)
        worst = sum(a * a for a in v)
        for corner in range(1, 1 << len(loose)):
            k = (corner & -corner).bit_length() - 1  # the one feature this corner moves
            sign = 1.0 if at_zero[k] else -1.0
            at_zero[k] = not at_zero[k]
            v = [a + sign * b for a, b in zip(v, cols[k], strict=True)]
            worst = max(worst, sum(a * a for a in v))
        return math.sqrt(worst)

    def surer(self) -> Correction | None:
        """What to fit and judge on when this correction leaves nothing that fits, because it
        errs high on purpose: the meter's own count for a prior (``provisional``); for a learnt
        route the weights without the interval, then without the prior's price of what no
        sample had (``unseen``: those counts at the meter's own, none); None when it is all
        that is known (``proxy.estimate.Job.fit``: a refusal needs knowing the request cannot
        fit). A Claude route that had learnt from prose refused a CJK prompt of 122k tokens
        (its count; the window 200k) as 218,559: the prior prices a character of a script no
        sample had at its tokenizer's worst case."""
        if self.provisional:
            return Correction()
        if self.interval:
            return replace(self, interval=())
        if self.unseen:
            w = [0.0 if j in self.unseen else x for j, x in enumerate(self.vector)]
            return replace(self, weights=tuple(w), unseen=())
        return None

    def scaled(self, s: float) -> Correction:
        """Every weight times ``s`` (a correction found too low by an anchor); the interval
        with them."""
        return self._times(s, tuple(tuple(r * s for r in row) for row in self.interval))

    def _times(self, s: float, interval: tuple[tuple[float, ...], ...]) -> Correction:
        return Correction(
            self.text * s,
            self.framing * s,
            self.images * s,
            self.samples,
            tuple(w * s for w in self.vector) if self.weights else (),
            interval=interval,
            unseen=self.unseen,  # scaled, still the prior's guess (``surer``)
        )


def _vector(values: Sequence[int] | Sequence[float]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@dataclass(frozen=True, slots=True)
class Sample:
    """One completed request: what routefit estimated and what the provider counted."""

    route: str
    time: float  # unix seconds
    text: int  # raw estimate parts of the prompt as sent
    framing: int
    images: int
    image_count: int
    message_count: int
    estimate: int  # the estimate routefit acted on (calibrated / anchored)
    anchored: bool
    actual: int  # provider's prompt tokens, normalised
    cached: int = 0
    #: The prompt's features (``FEATURES``); empty in samples recorded before they existed.
    features: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.features, tuple):  # decoded from JSON as a list
            object.__setattr__(self, "features", _vector(self.features))

    @property
    def raw(self) -> int:
        return self.text + self.framing + self.images

    @property
    def vector(self) -> tuple[int, ...]:
        n = len(self.features)
        if n == _N:
            return self.features
        # Numbers, then the scripts, the groups and the wide bytes were added last among
        # the characters' counts (unsized images after them): a sample from before any of them
        # lacks a tail of those counts, read as none.
        missing = _N - n
        if missing in (1, 2, _BLOCKS, _BLOCKS + 1):  # before wide, groups, the scripts, numbers
            return (*self.features[:-1], *(0,) * missing, self.features[-1])
        blocks = (0,) * _BLOCKS
        if n == _N - _BLOCKS - 2:  # before unsized images were a feature of their own
            return (*self.features, 0, *blocks, 0)
        if n == _OLD_N:  # before requests and characters were features
            return (*self.features, 1, *_NO_STATS, 0)
        old = (self.text, 0, 0, 0, 0, self.framing, self.message_count, 0, self.images, 0)
        return (*old, 1, *_NO_STATS, 0)


@dataclass(frozen=True, slots=True)
class Anchor:
    """The provider's count for one exact prompt (message list + tools) routefit sent."""

    text: int  # the meter's raw parts for that prompt
    framing: int
    images: int
    actual: int  # provider's prompt tokens for it
    features: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.features, tuple):
            object.__setattr__(self, "features", _vector(self.features))


def sample_of(
    route: str,
    time: float,
    pressure: Pressure,
    estimate: int,
    anchored: bool,
    actual: int,
    cached: int = 0,
    features: tuple[int, ...] | None = None,
) -> Sample:
    """The sample of a prompt as sent (the proxy's one way to build one); ``features``: the
    prompt's ``pressure_features``, when the caller has them already."""
    return Sample(
        route=route,
        time=time,
        text=pressure.text,
        framing=pressure.framing,
        images=pressure.images,
        image_count=len(pressure.image_details),
        message_count=len(pressure.messages),
        estimate=estimate,
        anchored=anchored,
        actual=actual,
        cached=cached,
        features=pressure_features(pressure) if features is None else features,
    )


def anchor_of(pressure: Pressure, actual: int, features: tuple[int, ...] | None = None) -> Anchor:
    if features is None:
        features = pressure_features(pressure)
    return Anchor(pressure.text, pressure.framing, pressure.images, actual, features)


def checkpoint_anchors(
    pressure: Pressure,
    actual: int,
    correction: Correction,
    quantum: int = 512,
    most: int = 16,
    features: tuple[int, ...] | None = None,
) -> list[tuple[int, Anchor]]:
    """(message count, anchor) for checkpoint prefixes of a prompt the provider counted.

    Checkpoints are the message boundaries where the prompt's corrected price crosses a
    multiple of max(``quantum``, total / ``most``), the first at one step (never 0: a head the
    weights price below nothing is no reason to anchor a first message). A prefix gets the
    provider's count in proportion to its corrected share (none when that rounds to 0): exact
    when the bias is uniform, and without the conservative scale-up's direction flipping
    (subtracting an over-estimated tail would under-estimate the head). After a cut changed
    the tail, the head is anchored here.
    A prompt with parts priced by a default (``MessagePressure.defaulted``: an image of unknown
    size at its rule's worst case, a stand-in rule's price, a PDF's page pictures, audio) gets
    none: how the count splits between them and the rest is unknown (an image priced 1,445 may
    count 85), and a share of the whole price anchored a 612-token system prompt before such an
    image at 259 tokens, a new session priced from them; the prompt's own anchor is exact.
    ``features``: the prompt's ``pressure_features``, when the caller has them already.
    """
    n = len(pressure.messages)
    feats = pressure_features(pressure) if features is None else features
    if n < 2 or _dirty(feats):
        return []
    full = correction.price(feats)
    if full <= 0:
        return []
    step = max(quantum, full // most)
    out: list[tuple[int, Anchor]] = []
    running = [0] * _N
    running[FRAMING] = pressure.tools + pressure.priming
    running[REQUESTS] = 1
    priced = pressure.messages[:-1]
    rows = [message_features(mp) for mp in priced]
    # from 0: a head priced under nothing (a fitted weight per request may be negative) made
    # the first message a checkpoint however little it cost, its share of the count 0 or a few
    mark = max(0, correction.price(running) // step)
    summed = 0  # rows[:summed] are in ``running``: a prefix's vector only where it anchors
    for i, price in enumerate(correction.running_prices(running, priced)):
        if price // step > mark:
            mark = price // step
            share = math.floor(actual * price / full)
            if share <= 0:  # a count of a few tokens for all (``full`` ≥ 16×): no count of this
                continue
            running = list(map(sum, zip(running, *rows[summed : i + 1], strict=True)))
            summed = i + 1
            feats = _vector(running)
            text = sum(feats[j] for j in _TEXT)
            out.append(
                (
                    i + 1,
                    Anchor(
                        text, feats[FRAMING], sum(feats[j] for j in IMAGE_FEATURES), share, feats
                    ),
                )
            )
    return out


_MODELS = ("features", "groups", "scripts", "numbers", "digits", "classes", "one-factor")


def _project(v: Sequence[int], model: str) -> tuple[int, ...]:
    """A sample's features as an older model of the bias saw them (``CalibrationPolicy.model``)."""
    if model == "groups":
        return (*v[:WIDE], 0, *v[WIDE + 1 :])
    if model == "scripts":
        return (*v[:GROUPS], 0, 0, *v[WIDE + 1 :])
    if model == "numbers":
        return (*v[: NUMBERS + 1], *(0,) * _BLOCKS, *v[NUMBERS + 1 + _BLOCKS :])
    if model == "digits":
        return (*v[:NUMBERS], 0, *v[NUMBERS + 1 :])
    if model == "classes":
        return (*v[:REQUESTS], 0, *_NO_STATS, v[UNSIZED])
    if model == "one-factor":
        text = sum(v[j] for j in _TEXT)
        images = v[IMAGES] + v[DEFAULTED] + v[UNSIZED]
        old = (text, 0, 0, 0, 0, v[FRAMING], v[MESSAGES], 0, images, 0)
        return (*old, 0, *_NO_STATS, 0)
    return tuple(v)


@dataclass(frozen=True, slots=True)
class CalibrationPolicy:
    min_samples: int = 8
    window: int = 200
    #: Upper quantile of actual / fitted over the window, the conservative scale-up.
    quantile: float = 0.98
    #: Standard deviations of a request's fitted price added to its estimate on a route whose
    #: meter is not exact (``Correction.interval``; 0: none). Chosen on the tuning sets (the
    #: stated family's worst under-estimate is inside 1% from 1.5; 2 leaves it at 0 with p95
    #: 2.1%, the real tokenizers' p95 2.3%) and checked on held-out ones (bench/REPORT.md, 4e).
    interval: float = 2.0
    #: The scale-up's quantile where the interval is added: the interval covers what the window
    #: has not shown, the scale-up only the noise of what it has.
    interval_quantile: float = 0.9
    ridge: float = 0.001
    #: The pull of the per-character weights towards 0: they are second-order corrections to
    #: the per-class token weights, and should move only for what those leave unexplained.
    ridge_chars: float = 0.001
    low: float = 0.5
    high: float = 3.0
    step: float = 0.005
    #: Before a route whose meter is not exact has ``min_samples`` samples, it is priced by a prior
    #: meant to over-estimate every tokenizer of the family docs/calibration.md states: text and
    #: framing scaled by ``prior_inexact``, plus scaffolding per message, per tool call and per
    #: request (erring high costs a little window for a few requests, erring low an overflow).
    prior_inexact: float = 1.4
    prior_messages: float = 8.0
    prior_calls: float = 12.0
    prior_requests: float = 16.0
    #: ... and per digit, on top of the text's own tokens: a tokenizer may split numbers digit
    #: by digit where the meter's (o200k, cl100k) take up to three at a time (a 9-digit id: 9
    #: tokens there, 3 here), and 1.4·⌈d/3⌉ + 0.55·d ≥ d for every length d.
    prior_digits: float = 0.55
    #: ... and per character outside ASCII: a tokenizer with few pieces for a script spends up
    #: to a token per UTF-8 byte of its characters (byte-level BPE; SentencePiece's byte
    #: fallback) where the meter's o200k has a piece for most. Chosen on four real tokenizers
    #: (DeepSeek's, Claude's legacy one, Mistral's Tekken and v3 SentencePiece) in ten scripts:
    #: the dearest, Thai on Claude's legacy tokenizer, costs 1.13 a character more than the
    #: prior's 1.4x of o200k (bench/REPORT.md, 4d, with the held-out check).
    prior_nonascii: float = 1.2
    #: ... and per UTF-8 byte of a character beyond its second, on top of that
    #: (``pricing.content``'s ``wide``): a tokenizer with no piece for a character spends a token
    #: on each of its bytes, three on a CJK, Hangul, Devanagari or Thai one and four on an emoji
    #: where a Cyrillic one costs two. The least weight, per meter, that puts GPT-3's p50k (the
    #: dearest tokenizer measured) under the prior in every script; checked on six real
    #: tokenizers never tuned on (bench/REPORT.md, 4f).
    prior_wide: float = 0.9
    #: ... and per newline, per tab and per pair of spaces: a tokenizer with no piece for a run
    #: of whitespace spends a token on each of its characters where o200k reads the run in one
    #: (byte-level BPEs without merges of newlines, tabs; SentencePiece's byte fallback for
    #: them; Jurassic-2's unigram a token a space). The least weights, in tenths, that put the
    #: tokenizers ``prior_wide`` was chosen on at or under 0.95 of the prior's price on runs of
    #: tabs and of blank lines, and Jurassic-2 on runs of spaces (bench/REPORT.md, 4g).
    prior_newlines: float = 0.7
    prior_tabs: float = 0.5
    prior_indent: float = 0.4
    #: A sample's weight halves every ``half_life`` newer samples (recency weighting).
    half_life: float = 60.0
    #: Image tokens priced by a stand-in rule may be far from the truth either way: their weight
    #: ranges wide.
    defaulted_low: float = 0.05
    defaulted_high: float = 50.0
    #: Image tokens of unknown size, priced at the rule's worst case, are never priced below it:
    #: the next unknown image may be the largest, whatever the last ones were.
    unsized_low: float = 1.0
    #: A sample whose actual / fitted is more than this factor from the median of the others is
    #: an outlier, left out of the fit (``_plausible``): honest samples of a fitted route are
    #: within a few percent of it.
    outlier_band: float = 1.15
    #: The most a run of newest samples may rise before it is taken for a new model at once
    #: (``_regime``); a larger rise, or a fall, must hold for ``outlier_share`` of the window.
    regime_band: float = 1.5
    #: Outliers are left out only while they are at most this share of the samples: up to it,
    #: lying answers cannot move the correction beyond the band (docs/calibration.md).
    outlier_share: float = 0.25
    #: Which model of the bias is fitted: ``features`` (this module's); for comparison only
    #: (bench/accuracy.py's before/after), ``scripts`` (the same without the digits' groups:
    #: before 2026-12-05, evening), ``numbers`` (without the scripts' counts and the groups:
    #: before 2026-12-05), ``digits`` (the same without the count of numbers: before issue 31),
    #: ``classes`` (per-class token weights, framing,
    #: messages, calls and images, no request or per-character features, absolute errors) and
    #: ``one-factor`` (one text factor, framing, messages, and images with the tokens priced by a
    #: default among them: the calibration before issue 18).
    model: str = "features"

    def __post_init__(self) -> None:
        if self.min_samples < 1 or self.window < self.min_samples:
            raise ValueError("calibration needs min_samples >= 1 and window >= min_samples")
        if not 0.5 <= self.quantile <= 1.0:
            raise ValueError("calibration quantile must be between 0.5 and 1")
        if not self.interval >= 0:
            raise ValueError("calibration interval must be 0 or more")
        if not 0.5 <= self.interval_quantile <= 1.0:
            raise ValueError("calibration interval_quantile must be between 0.5 and 1")
        if not 0 < self.low <= 1.0 <= self.high:
            raise ValueError("calibration needs 0 < low <= 1 <= high")
        if self.half_life <= 0:
            raise ValueError("calibration half_life must be positive")
        if not self.step > 0:
            raise ValueError("calibration step must be positive")
        if self.model not in _MODELS:
            raise ValueError(f"calibration model must be one of {', '.join(_MODELS)}")


def anchored(anchor: Anchor, text: int, framing: int, images: int, correction: Correction) -> int:
    """Estimate of a prompt that extends ``anchor``'s: its truth plus the corrected increment."""
    delta = correction.apply(
        max(0, text - anchor.text), max(0, framing - anchor.framing), max(0, images - anchor.images)
    )
    return anchor.actual + delta


def anchored_estimate(anchor: Anchor, pressure: Pressure, correction: Correction) -> int:
    """``anchored`` by feature: the increment is priced per content class, message and call, as
    a request of its features is — with the interval they carry (``Correction.for_request``).
    By the weights alone, a session's turn of two tool outputs was priced 1.54% under its
    count, the anchored rest of the prompt exact (bench/REPORT.md 4i)."""
    if len(anchor.features) != _N:
        p = pressure
        return anchored(anchor, p.text, p.framing, p.images, correction)
    now = pressure_features(pressure)
    delta = [max(0, x - a) for x, a in zip(now, anchor.features, strict=True)]
    return anchor.actual + correction.for_request(delta).price(delta)


#: A provider count below the meter's own count divided by this is no tokenizer's: the meters'
#: bases disagree by at most ×4 on one script (cl100k reads Hindi in 4.05 times o200k's tokens),
#: and the stated family by ×0.75 on top (docs/calibration.md, "Implausible counts").
BELOW_METER = 8
#: ... nor one above this many times the route's prior price (itself meant to cover every
#: tokenizer of the family, a token per byte included), plus ``HIDDEN`` tokens a provider may add
#: unseen (Anthropic's tool-use system prompt: ~350).
ABOVE_PRIOR = 3
HIDDEN = 512


def implausible_count(
    features: Sequence[int], actual: int, prior: Correction, policy: CalibrationPolicy
) -> str | None:
    """Why ``actual`` cannot be any tokenizer's count of a prompt of these features, or None
    when it can. A count within the usage's own bounds (``proxy.usage.usage_fault``) can still
    be absurd for its prompt, and one such count is the prompt's anchor: the next turn is priced
    from it, far under (an overflow at the provider) or far over (cut or refused); and past
    ``outlier_share`` of the window ``_plausible`` would fit such samples too. ``prior``: the
    route's prior (``fit_correction`` without samples). Image tokens priced by a default are
    no measure of the truth (a URL image of unknown size at its rule's worst case may cost a
    hundredth of it): they are left out below and allowed their widest weight above."""
    raw = Correction().price(features)
    guessed = features[DEFAULTED] + features[UNSIZED]
    known = raw - guessed
    if actual * BELOW_METER < known:
        return f"{actual} tokens for a prompt the meter counts {raw}"
    most = ABOVE_PRIOR * max(raw, prior.price(features)) + HIDDEN
    most += math.ceil(policy.defaulted_high * guessed)
    if actual > most:
        return f"{actual} tokens for a prompt the meter counts {raw} (at most {most})"
    return None


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting for a small dense system."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _regime(samples: Sequence[Sample], policy: CalibrationPolicy) -> Sequence[Sample]:
    """Follow a change of model behind the alias: the newest samples consistently disagree with
    the older ones.

    A moderate rise (at most ``regime_band``), seen in the newest ``min_samples``, is followed at
    once by scaling the older samples' counts to the new level: the side where waiting means
    overflows, and the shape of the bias is still learnt from the whole window — a few lying
    answers in a row can raise prices by ``regime_band`` at most. A fall, or a larger rise, must
    hold for more than ``outlier_share`` of the samples; then the older ones are dropped."""
    n = len(samples)
    slow = max(policy.min_samples, math.floor(policy.outlier_share * n) + 1)
    for k in (policy.min_samples, slow):
        if n < 2 * k:
            return samples
        recent, older = samples[-k:], samples[:-k]
        old_ratio = _median([s.actual / s.raw for s in older])
        ratios = [s.actual / s.raw for s in recent]
        rise = _median(ratios) / old_ratio
        if all(r > old_ratio * 1.03 for r in ratios) and rise <= policy.regime_band:
            return [*(replace(s, actual=math.ceil(s.actual * rise)) for s in older), *recent]
        if k == slow and (
            all(r > old_ratio * 1.03 for r in ratios) or all(r < old_ratio * 0.97 for r in ratios)
        ):
            return recent
    return samples


def _plausible(
    usable: Sequence[Sample], policy: CalibrationPolicy, exact: bool, prior: Sequence[float]
) -> list[Sample]:
    """The samples that are not outliers: a provider's usage is a claim, and a few lying ones
    (up to ``outlier_share`` of the window) must not move the correction far.

    Each sample is compared with what the others say it should cost: a first fit on the samples
    within a wide band of the median actual/raw ratio, then each sample's actual / fitted around
    the median of those. A sample more than ``outlier_band`` away is left out — unless more than
    ``outlier_share`` of the samples would be: that is not a few liars, and the fit takes all."""
    clean = [s for s in usable if not _dirty(s.vector)]
    if len(clean) < policy.min_samples:
        return list(usable)
    wide = policy.regime_band**2
    middle = _median([s.actual / s.raw for s in clean])
    kept = [s for s in clean if middle / wide <= s.actual / s.raw <= middle * wide]
    for _ in range(2):  # the second fit, on the first's inliers, sees the liars more clearly
        quick = replace(policy, quantile=0.5, interval=0.0)
        w, _, _ = _base(kept, quick, exact, list(prior), held=False)
        kept = _inliers(usable, w, policy.outlier_band)
    return kept if len(usable) - len(kept) <= policy.outlier_share * len(usable) else list(usable)


def _inliers(usable: Sequence[Sample], w: Sequence[float], band: float) -> list[Sample]:
    """The samples within ``band`` of what ``w`` prices them at, relative to the median sample
    (a sample with defaulted image tokens: between its price without them and with them)."""
    fitted = [_dot(w, s.vector) for s in usable]
    residual = [
        s.actual / f for s, f in zip(usable, fitted, strict=True) if f > 0 and not _dirty(s.vector)
    ]
    centre = _median(residual) if residual else 1.0
    out = []
    for s, f in zip(usable, fitted, strict=True):
        actual = s.actual / centre
        if _dirty(s.vector):
            bare = f - w[DEFAULTED] * s.vector[DEFAULTED] - w[UNSIZED] * s.vector[UNSIZED]
            if bare / band <= actual <= f * band:
                out.append(s)
        elif f > 0 and f / band <= actual <= f * band:
            out.append(s)
    return out


def _dirty(v: Sequence[int]) -> bool:
    """Whether a sample has image tokens priced by a default (fitted apart, afterwards)."""
    return bool(v[DEFAULTED] or v[UNSIZED])


def _dot(w: Sequence[float], v: Sequence[float]) -> float:
    return float(sum(map(mul, w, v)))


def _quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """Weighted quantile (the smallest value whose cumulative weight reaches ``q``)."""
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs)
    running = 0.0
    for value, weight in pairs:
        running += weight
        if running >= q * total - 1e-12:
            return value
    return pairs[-1][0]


def _round_up(value: float, step: float) -> float:
    """``value`` up to the next multiple of ``step``, its float noise rounded off at 12 places
    (at 6, a step finer than a millionth rounded some weights down)."""
    return round(math.ceil(value / step - 1e-9) * step, 12)


#: A meter that itself spends more on other scripts than o200k leaves the prior less to cover per
#: character outside ASCII and per byte beyond a character's second: the least weights, in
#: tenths, that put every tokenizer they were chosen on (4d's four and GPT-3's p50k) at or under
#: 0.95 of the prior's price in every script (bench/REPORT.md, 4d and 4f; bench/prior_scripts.py).
#: A meter not measured gets the policy's weights, the most any meter adds.
_SCRIPT_WEIGHT = {"cl100k_base": 0.5, "anthropic-legacy": 0.4}
_WIDE_WEIGHT = {"o200k_base": 0.8, "anthropic-legacy": 0.8}


def _prior(policy: CalibrationPolicy, exact: bool, meter: str = "o200k_base") -> list[float]:
    if exact:
        return list(_legacy(1.0, 1.0, 1.0))
    p = policy.prior_inexact
    out = list(_legacy(p, p, 1.0))
    out[MESSAGES], out[CALLS] = policy.prior_messages, policy.prior_calls
    out[REQUESTS] = policy.prior_requests
    out[DIGITS] = policy.prior_digits
    out[NEWLINES], out[TABS] = policy.prior_newlines, policy.prior_tabs
    out[INDENT] = policy.prior_indent
    out[NONASCII] = min(policy.prior_nonascii, _SCRIPT_WEIGHT.get(meter, policy.prior_nonascii))
    if policy.model == "features":  # the older models (for comparison) had no such count
        out[WIDE] = min(policy.prior_wide, _WIDE_WEIGHT.get(meter, policy.prior_wide))
    if meter.startswith("heuristic:"):
        for j, worst in _BYTE_WORST.items():
            out[j] = max(out[j], worst)
    return out


#: A meter that counts characters, not tokens (``heuristic:CHARS_PER_TOKEN``), knows nothing of
#: what a script or a run of whitespace costs (its count of a Hangul syllable or a tab is its
#: count of a letter): the prior prices them at the worst a tokenizer spends, a token a UTF-8
#: byte — two for a character outside ASCII, one more per byte beyond the second, one for a
#: newline, a tab, a space (two a pair) — and the meter's own count on top.
_BYTE_WORST = {NONASCII: 2.0, WIDE: 1.0, NEWLINES: 1.0, TABS: 1.0, INDENT: 2.0}


class _Fit(NamedTuple):
    """A least-squares fit and its normal equations, over the features seen (``cols``): what
    the weights held at their bounds are refitted from (``_held_at_bounds``) and what the
    interval is computed on (``_interval``), so neither goes over the samples again."""

    #: The weights (``_N``: the prior's where no column).
    weights: list[float]
    cols: list[int]
    #: Each seen feature's values, one per sample.
    columns: list[list[float]]
    #: The samples' weighted Gram matrix over ``cols``, without the ridge.
    gram: list[list[float]]
    #: The ridge added to each diagonal entry, and the right-hand side (towards the prior).
    ridge: list[float]
    rhs: list[float]


def _least_squares(
    rows: Sequence[Sequence[float]],
    actual: Sequence[float],
    weights: Sequence[float],
    prior: Sequence[float],
    ridge: Sequence[float],
) -> _Fit:
    """Recency-weighted ridge regression towards ``prior``, over the features seen.

    Column by column with ``map`` (C loops): a refit runs on the event loop, in the
    calibration writer, so a full window of 17 features must stay a few milliseconds."""
    cols = [j for j in range(len(prior)) if any(r[j] for r in rows)]
    wsum = sum(weights)
    x = [[r[j] for r in rows] for j in cols]
    wx = [list(map(mul, weights, col)) for col in x]
    lam = [ridge[j] * (sum(map(mul, wx[a], x[a])) + wsum) for a, j in enumerate(cols)]
    k = len(cols)
    gram = [[0.0] * k for _ in range(k)]
    for a in range(k):
        for b in range(a, k):
            gram[a][b] = gram[b][a] = sum(map(mul, wx[a], x[b]))
    atb = [sum(map(mul, wx[a], actual)) + lam[a] * prior[j] for a, j in enumerate(cols)]
    fit = _Fit(list(prior), cols, x, gram, lam, atb)
    solved = _solved(fit, {}) if cols else None
    if solved is not None:
        for j, value in zip(cols, solved, strict=True):
            fit.weights[j] = value
    return fit


def _solved(fit: _Fit, held: Mapping[int, float]) -> list[float] | None:
    """The weights of ``fit``'s columns not ``held`` (positions in ``cols`` → their values),
    from its normal equations with the held ones moved to the right-hand side (None: singular).
    In the order of the columns, the held ones left out."""
    free = [a for a in range(len(fit.cols)) if a not in held]
    system = [[fit.gram[a][b] + (fit.ridge[a] if a == b else 0.0) for b in free] for a in free]
    rhs = [fit.rhs[a] - sum(fit.gram[a][h] * v for h, v in held.items()) for a in free]
    return _solve(system, rhs) if free else []


#: How far, before any sample, a weight may be from the meter's: the stated family's spread
#: (docs/calibration.md) — a quarter of a token per token (its rates are 0.75-1.25 of the
#: meter's), a token per character (byte fallback spends up to three a character where o200k
#: spends one), 4 tokens a message or call, 16 a request. The interval's prior: a direction the
#: window has not pinned down keeps this much doubt, however well the samples fit.
_SPREAD = tuple(
    1.0 if j in _CHARS else 4.0 if j in (MESSAGES, CALLS) else 16.0 if j == REQUESTS else 0.25
    for j in range(_N)
)


def _interval(
    rows: Sequence[Sequence[float]],
    actual: Sequence[float],
    weights: Sequence[float],
    fit: _Fit,
    k: float,
) -> tuple[tuple[float, ...], ...]:
    """``Correction.interval`` of a least-squares fit: rows R with ‖Rx‖ = k·√(xᵀCx), k standard
    deviations of the price of features x, C the weights' covariance.

    The prior's precision (1 / ``_SPREAD``² per weight) is added to the samples', so that a
    direction the samples do not pin down (two scripts that always came together, a count no
    sample had much of) keeps the prior's doubt however well they fit. The samples' part is the
    sandwich (heteroscedasticity-consistent) form: C = A⁻¹BA⁻¹, A = Gram + σ²·prior, B = Σ
    wᵢ²eᵢ²xᵢxᵢᵀ·n/(n−p) + σ⁴·prior, each sample's own squared residual eᵢ² where the plain form
    put σ², the weighted squared relative residual per degree of freedom, for every one. With
    residuals all alike the two are equal (σ²A⁻¹: the samples' Gram / σ² plus the prior's);
    where the samples that carry a direction miss by more than the rest (small requests,
    scripts whose characters cost unlike each other), that direction is as doubtful as they
    are, and one the samples fit closely is as sure as they are."""
    w, cols, gram = fit.weights, fit.cols, fit.gram
    p = len(cols)
    if not k or not p:
        return ()
    n = len(rows)
    errors = [a - _dot(w, r) for a, r in zip(actual, rows, strict=True)]
    residual = sum(wt * e * e for wt, e in zip(weights, errors, strict=True))
    variance = max(residual / max(1, n - p), 1e-12)
    prior = [variance / _SPREAD[c] ** 2 for c in cols]
    bread = _cholesky_inverse(
        [
            [g + (prior[a] if a == b else 0.0) for b, g in enumerate(row)]
            for a, row in enumerate(gram)
        ]
    )
    if bread is None:
        return ()
    across = [[row[a] for row in bread] for a in range(p)]  # L⁻¹ by columns
    inverse = [  # A⁻¹ = L⁻ᵀL⁻¹ (symmetric: its columns are its rows)
        [sum(map(mul, across[a][max(a, b) :], across[b][max(a, b) :])) for b in range(p)]
        for a in range(p)
    ]
    dof = n / max(1, n - p)
    each = [wt * wt * e * e * dof for wt, e in zip(weights, errors, strict=True)]
    x = fit.columns
    fx = [list(map(mul, each, col)) for col in x]
    meat = [[0.0] * p for _ in range(p)]
    for a in range(p):
        for b in range(a, p):
            meat[a][b] = meat[b][a] = sum(map(mul, fx[a], x[b])) + (
                variance * prior[a] if a == b else 0.0
            )
    low = _cholesky(meat)
    if low is None:
        return ()
    out = []
    for a in range(p):  # R = Lᵀ A⁻¹ for LLᵀ = B: RᵀR = A⁻¹BA⁻¹
        down = [row[a] for row in low[a:]]  # L's column a, from its diagonal
        full = [0.0] * _N
        for b, c in enumerate(cols):
            full[c] = k * sum(map(mul, down, inverse[b][a:]))
        out.append(tuple(full))
    return tuple(out)


def _cholesky(a: Sequence[Sequence[float]]) -> list[list[float]] | None:
    """The lower Cholesky factor of a small symmetric positive-definite matrix (None when it is
    not one)."""
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            s = a[i][j] - sum(low[i][c] * low[j][c] for c in range(j))
            if i == j:
                if s <= 0:
                    return None
                low[i][i] = math.sqrt(s)
            else:
                low[i][j] = s / low[j][j]
    return low


def _cholesky_inverse(a: Sequence[Sequence[float]]) -> list[list[float]] | None:
    """L⁻¹ for the Cholesky factor L of a small symmetric positive-definite matrix (None when
    it is not one): rows of a lower-triangular matrix."""
    low = _cholesky(a)
    if low is None:
        return None
    n = len(a)
    inv = [[0.0] * n for _ in range(n)]
    for i in range(n):
        inv[i][i] = 1.0 / low[i][i]
        for j in range(i):
            inv[i][j] = -sum(low[i][c] * inv[c][j] for c in range(j, i)) / low[i][i]
    return inv


#: Range of the weights of counted features on a route whose meter is not exact (on an exact
#: one they are never negative: what the meter does not know can only add tokens).
_COUNT_RANGE = {MESSAGES: (-4.0, 50.0), CALLS: (-4.0, 50.0), REQUESTS: (-64.0, 1024.0)}
_CHAR_RANGE = (-2.0, 4.0)


def _bounded(
    w: list[float],
    seen: Sequence[bool],
    policy: CalibrationPolicy,
    exact: bool,
    prior: Sequence[float],
) -> None:
    """Clamp in place: tokens within [low, high] (never below 1 on an exact meter), counts
    within a few tokens per thing or character (never negative on an exact meter). A count no
    sample had is priced as the prior prices it: the route has not shown what it costs (a route
    whose samples were all English meets its first Hangul or digits at the prior's price)."""
    low = max(policy.low, 1.0) if exact else policy.low
    for j in range(_N):
        if j in (DEFAULTED, UNSIZED):
            continue
        if j in _COUNTS:
            least, most = _COUNT_RANGE.get(j, _CHAR_RANGE)
            w[j] = min(most, max(0.0 if exact else least, w[j])) if seen[j] else prior[j]
        else:
            w[j] = min(policy.high, max(low, w[j]))


def _held_at_bounds(
    fit: _Fit,
    seen: Sequence[bool],
    policy: CalibrationPolicy,
    exact: bool,
    prior: Sequence[float],
) -> list[float]:
    """The least-squares weights within their ranges (``_bounded``): a weight the ranges clamp
    is held at its bound and the others are fitted again with it, until none is clamped (an
    active set). Clamping one weight alone leaves the others where they were fitted beside its
    unclamped value: weights that trade places (a tool call's weight against its message's and
    its framing's) then price requests by a trade the samples did not make, and the scale-up
    spreads that over every request (bench/REPORT.md 4e, issue 31 item 5). Refitted from the
    fit's own normal equations (``_solved``), without the samples again."""
    out, cols = list(fit.weights), fit.cols
    held: dict[int, float] = {}  # position in cols -> the bound it is held at
    for _ in range(len(cols)):  # each pass holds at least one more weight
        clamped = list(out)
        _bounded(clamped, seen, policy, exact, prior)
        new = {
            a: clamped[j]
            for a, j in enumerate(cols)
            if a not in held and j not in (DEFAULTED, UNSIZED) and clamped[j] != out[j]
        }
        if not new:
            break
        held.update(new)
        solved = _solved(fit, held)
        if solved is None:
            break
        free = (a for a in range(len(cols)) if a not in held)
        for a, value in zip(free, solved, strict=True):
            out[cols[a]] = value
        for a, value in held.items():
            out[cols[a]] = value
    _bounded(out, seen, policy, exact, prior)
    return out


def _base(
    usable: Sequence[Sample],
    policy: CalibrationPolicy,
    exact: bool,
    prior: list[float],
    held: bool = True,
) -> tuple[list[float], list[bool], tuple[tuple[float, ...], ...]]:
    """Weights of everything the meter priced itself, from samples without defaulted parts,
    and their interval (none on an exact meter). ``held``: the weights the ranges clamp are
    held at their bounds and the others refitted (``_held_at_bounds``); False, only clamped —
    enough for the outlier passes (``_plausible``), which only rank the samples (a tenth of a
    refit's cost saved; the same figures on every set of bench/REPORT.md 4h)."""
    clean = [s for s in usable if not _dirty(s.vector)]
    if len(clean) < policy.min_samples:
        return prior, [False] * _N, ()
    rows = [[float(x) for x in s.vector] for s in clean]
    n = len(clean)
    recency = [0.5 ** ((n - 1 - i) / policy.half_life) for i in range(n)]
    seen = [any(r[j] for r in rows) for j in range(_N)]
    # The wide bytes' count is the prior's alone (a route none of whose samples had one keeps
    # the prior's weight, ``_bounded``; one whose samples had some prices them through the count
    # outside ASCII and the scripts'): fitted beside those, it only widened the interval
    # (bench/REPORT.md, 4f).
    for r in rows:
        r[WIDE] = 0.0
    ridge = [policy.ridge_chars if j in _CHARS else policy.ridge for j in range(_N)]
    # Relative errors are what matter (a 40-token miss is nothing on 8,000, a lot on 200):
    # each sample weighs 1 / actual², so small prompts are fitted as well as large ones.
    # The older models (``policy.model``, for comparison) fitted absolute errors.
    weights = (
        [r / s.actual**2 for r, s in zip(recency, clean, strict=True)]
        if policy.model in ("features", "groups", "scripts", "numbers", "digits")
        else recency
    )
    actual = [float(s.actual) for s in clean]
    fit = _least_squares(rows, actual, weights, _prior(policy, True), ridge)
    if held:
        w = _held_at_bounds(fit, seen, policy, exact, prior)
    else:
        w = list(fit.weights)
        _bounded(w, seen, policy, exact, prior)
    predicted = [_dot(w, r) for r in rows]
    if any(p <= 0 for p in predicted):
        # The ranges clamped the solution into one that prices its own samples at nothing or
        # less (e.g. counts that fall by more per digit than a character's weight may): that is
        # no fit, and scaling it cannot mend it. The prior prices them, as before enough samples.
        return prior, [False] * _N, ()
    interval = () if exact else _interval(rows, actual, weights, fit, policy.interval)
    ratios = [s.actual / p for s, p in zip(clean, predicted, strict=True)]
    quantile = policy.interval_quantile if interval else policy.quantile
    scale = _quantile(ratios, recency, quantile)
    w = [x * scale for x in w]
    _bounded(w, seen, policy, exact, prior)
    if any(_dot(w, r) <= 0 for r in rows):  # the ranges undid the scale-up: as above
        return prior, [False] * _N, ()
    return w, seen, interval


def fit_correction(
    samples: Sequence[Sample],
    policy: CalibrationPolicy | None = None,
    exact: bool = True,
    meter: str = "o200k_base",
) -> Correction:
    """The route's correction from its samples (oldest first).

    ``exact``: whether the route's meter follows the provider's published rules; an inexact
    route without enough samples gets the policy's conservative prior instead of neutral.
    ``meter``: the route's tokenizer, which says what the prior adds for other scripts.
    """
    policy = policy or CalibrationPolicy()
    recent = list(samples)[-policy.window :]
    if policy.model != "features":
        recent = [replace(s, features=_project(s.vector, policy.model)) for s in recent]
    usable = list(_regime([s for s in recent if s.raw > 0 and s.actual > 0], policy))
    prior = _prior(policy, exact, meter)
    usable = _plausible(usable, policy, exact, prior)
    w, seen, interval = _base(usable, policy, exact, list(prior))
    text_seen = [w[j] for j in _TEXT if seen[j]]
    for j in _TEXT:  # a class no sample had: the most any seen class costs (or the prior)
        if not seen[j] and text_seen:
            w[j] = max(text_seen)
    if policy.model == "one-factor":
        w[DEFAULTED] = w[UNSIZED] = w[IMAGES]
    else:
        w[DEFAULTED] = _leftover_weight(usable, w, policy, DEFAULTED, policy.defaulted_low)
        w[UNSIZED] = _leftover_weight(usable, w, policy, UNSIZED, policy.unsized_low)
    # Rounded up (towards more tokens, negative weights too): per thing in 0.05 steps, per token
    # and per character in the policy's step.
    w = [_round_up(x, 0.05 if j in _THINGS else policy.step) for j, x in enumerate(w)]
    fitted = sum(seen) > 0 or w[DEFAULTED] != 1.0 or w[UNSIZED] != 1.0
    if not fitted:
        legacy = list(_legacy(w[0], w[FRAMING], w[IMAGES]))
        if w == legacy:
            return Correction(w[0], w[FRAMING], w[IMAGES], 0)
    return Correction(
        text=_text_ratio(usable, w),
        framing=w[FRAMING],
        images=w[IMAGES],
        samples=len(usable),
        weights=tuple(w),
        provisional=not exact and not any(seen),
        interval=interval,
        unseen=tuple(j for j in _CHARS if not seen[j] and w[j]) if any(seen) else (),
    )


def _text_ratio(usable: Sequence[Sample], w: Sequence[float]) -> float:
    """The summary text factor: what the fitted weights make of one token of the route's text,
    per-character corrections included (class weights alone no longer say it), over the
    window; the highest class weight when no sample has text features."""
    dearest = max(w[j] for j in _TEXT)
    rows = [s.vector for s in usable if not _dirty(s.vector)]
    tokens = sum(r[j] for r in rows for j in _TEXT)
    if not tokens:
        return dearest
    priced = sum(w[j] * r[j] for r in rows for j in (*_TEXT, *_CHARS))
    return _round_up(max(0.0, priced / tokens), 0.005)


def _leftover_weight(
    usable: Sequence[Sample], w: Sequence[float], policy: CalibrationPolicy, j: int, low: float
) -> float:
    """What a token of feature ``j`` (image tokens priced by a default) really costs: an upper
    quantile of what the samples with such tokens leave over once everything else is priced by
    ``w`` (stand-in tokens are fitted first, on samples without unsized images), at least
    ``low``."""
    dirty = [s for s in usable if s.vector[j] > 0 and (j == UNSIZED or not s.vector[UNSIZED])]
    if len(dirty) < max(2, policy.min_samples // 2):
        return max(low, 1.0)  # the meter's own default (a worst case, or the stand-in price)
    n = len(dirty)
    recency = [0.5 ** ((n - 1 - i) / policy.half_life) for i in range(n)]
    per = []
    for s in dirty:
        v = s.vector
        rest = sum(a * b for k, (a, b) in enumerate(zip(w, v, strict=True)) if k != j)
        per.append((s.actual - rest) / v[j])
    # A few lying answers cannot raise it beyond the band over the median (or the default).
    ceiling = max(1.0, _median(per)) * policy.regime_band
    if sum(v > ceiling for v in per) <= policy.outlier_share * n:
        kept = [(v, r) for v, r in zip(per, recency, strict=True) if v <= ceiling]
        per, recency = [v for v, _ in kept], [r for _, r in kept]
    value = _quantile(per, recency, policy.quantile)
    return min(policy.defaulted_high, max(low, value))
