"""The meter: what a request costs on a route, message by message.

``measure`` is pure and deterministic: same request, same route, same image sizes → same
Pressure. It is also cheap on the second call: a message without images is memoised whole, per
content digest (``MessageCache``), text counts per content digest and image sizes per image
digest, so re-measuring a conversation that grew by one turn costs about the new turn. Every
memo is keyed by ``route.scope`` too (the tenant whose prompt it is): one tenant's counts never
make another's request faster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import xxhash

from pricing.content import CLASSES, PROSE, STATS, STRUCTURED, classify, profile
from pricing.digest import text_key
from pricing.documents import document_facts, is_document, page_tokens
from pricing.framing import frame_message, tools_tokens
from pricing.images.kinds import GOOGLE_KINDS
from pricing.lru import LRU
from pricing.messages import ChatRequest, ImagePart, Message, TextPart
from pricing.probe import GOOGLE_ONLY, ImageError, Size, placeholder, probe
from pricing.recordings import (
    audio_reference_tokens,
    is_recording,
    recording_kind,
    recording_tokens,
    user_audio_tokens,
)
from pricing.route import Route
from pricing.tokenizers import get_tokenizer

__all__ = [
    "ImagePrice",
    "Memo",
    "MessageCache",
    "MessagePressure",
    "Pressure",
    "audio_reference_price",
    "defaulted_tokens",
    "measure",
    "measure_kept",
    "measure_message",
    "measure_messages",
    "recall",
    "sent_as_audio",
]

#: Image sizes learnt outside pricing (e.g. fetched URL headers), by URL.
Sizes = Mapping[str, Size]


@dataclass(frozen=True, slots=True)
class ImagePrice:
    """One image occurrence as the route will count it."""

    message: int
    part: int
    rule: str
    detail: str
    width: int | None
    height: int | None
    tokens: int
    #: True when priced from the image's real size; False when priced at the rule's worst case.
    sized: bool
    #: The text that replaces the image on the wire (text-only routes), priced as text.
    placeholder: str | None = None
    #: Tokens of text the part carries besides its pictures (a PDF's extracted text): priced
    #: as the message's text, so calibration scales it as it scales text; with that text's
    #: content class and ``content.profile``, the features calibration reads of any text.
    text: int = 0
    text_class: int = PROSE
    text_stats: tuple[int, ...] = ()


#: The rule name a PDF's price reports (``pricing.documents``); a recording's reports
#: ``audio`` or ``video`` (``pricing.recordings``).
DOCUMENT = "document"

#: Image rule kinds whose price is a stand-in rather than the provider's rule (the ``flat``
#: price of a vision route routefit has no rule for).
_STAND_IN_RULES = frozenset({"flat"})


@dataclass(frozen=True, slots=True)
class MessagePressure:
    index: int
    role: str
    text: int
    framing: int
    images: int
    #: ``text`` split by content class (``pricing.content.CLASSES``); empty = all prose.
    classes: tuple[int, ...] = ()
    #: Assistant tool calls in the message (each has scaffolding a tokenizer may price apart).
    calls: int = 0
    #: Of ``images``, the tokens priced by a default rather than from the image: a URL image of
    #: unknown size at the rule's worst case, or an image on a route with a stand-in rule.
    #: Calibration keeps them apart so they never move the factors of what was priced.
    defaulted: int = 0
    #: Characters tokenizers disagree on, summed over the message's text (``content.STATS``).
    stats: tuple[int, ...] = ()
    #: Of ``defaulted``, the tokens of images of unknown size, priced at the rule's worst case
    #: (the rest is a stand-in rule's price of images whose size is known). Calibration never
    #: prices these below that worst case: the next unknown image may be the largest.
    unsized: int = 0
    #: ``pricing.calibration.message_features`` of it, and its price under the last weights
    #: that priced it (``Correction.running_prices``), kept by their first calls: a memoised
    #: message (``MessageCache``) comes back every turn of a session, and its anchors priced
    #: its 400 messages anew (~0.6 ms a request). Memos, not data: never compared or copied.
    features_memo: tuple[int, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    price_memo: tuple[tuple[float, ...], float] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def total(self) -> int:
        return self.text + self.framing + self.images

    @property
    def by_class(self) -> tuple[int, ...]:
        if self.classes:
            return self.classes
        return (self.text, *([0] * (len(CLASSES) - 1)))


@dataclass(frozen=True, slots=True)
class Pressure:
    route: str
    messages: tuple[MessagePressure, ...]
    tools: int
    priming: int
    image_details: tuple[ImagePrice, ...]
    #: Whether every part was priced by a published rule (otherwise calibration matters more).
    exact: bool
    #: ``pricing.calibration.pressure_features`` of the whole prompt, kept by its first call:
    #: a request asks for them four times (its estimate, the bounded fit, its anchor, its
    #: sample), ~0.2 ms each at 400 messages. A memo, not data: never compared or copied.
    features_memo: tuple[int, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def text(self) -> int:
        return sum(m.text for m in self.messages)

    @property
    def framing(self) -> int:
        return sum(m.framing for m in self.messages) + self.tools + self.priming

    @property
    def images(self) -> int:
        return sum(m.images for m in self.messages)

    @property
    def defaulted(self) -> int:
        """Image tokens priced by a default, not from the image (reported apart)."""
        return sum(m.defaulted for m in self.messages)

    @property
    def total(self) -> int:
        return self.text + self.framing + self.images


def price_image(part: ImagePart, route: Route, sizes: Sizes | None) -> ImagePrice:
    """The route's price for one image; message/part indices are filled in by the caller."""
    rule = route.image_rule
    if is_document(part.url) and route.supports_vision and rule.visual:
        return _price_document(part, route)
    if is_recording(part.url):
        return _price_recording(part, route)
    info = probe(part.url, route.image_limits, route.scope)
    visual = route.supports_vision and rule.visual
    if info is not None and info.format in GOOGLE_ONLY and visual and rule.kind not in GOOGLE_KINDS:
        raise ImageError(  # its provider would refuse it: say so before anything is sent
            f"this route's provider does not take {info.format.upper()} images (only "
            "Google's models do): send it as PNG, JPEG, GIF or WebP"
        )
    width: int | None
    height: int | None
    transposed = False  # its EXIF orientation may turn it: priced both ways
    if info is not None:
        width, height, transposed = info.width, info.height, info.transposed
    elif sizes is not None and part.url in sizes:
        width, height, *turned = sizes[part.url]
        transposed = any(turned)
    else:
        width = height = None
    if not visual:
        text = placeholder(info, part.url)
        tokens = get_tokenizer(route.tokenizer, route.scope).count(text)
        # Sent as text whatever the configured rule says, so report it as text.
        return ImagePrice(0, 0, "text-only", part.detail, width, height, tokens, True, text)
    if width is not None and height is not None:
        return ImagePrice(
            0,
            0,
            rule.kind,
            part.detail,
            width,
            height,
            rule.tokens(width, height, part.detail, transposed=transposed),
            True,
        )
    worst = rule.worst_case(part.detail)
    tokens = route.image_limits.max_image_tokens if worst is None else worst
    return ImagePrice(0, 0, rule.kind, part.detail, None, None, tokens, False)


def _price_document(part: ImagePart, route: Route) -> ImagePrice:
    """A PDF: its text, and each page as an image of unknown size (``pricing.documents``)."""
    text = route.image_rule.kind not in GOOGLE_KINDS  # Google counts pages as pictures only
    facts = document_facts(part.url, route.tokenizer, route.scope, text=text)
    if facts is None:  # unreadable: its base64, as text (an over-estimate)
        tokens = get_tokenizer(route.tokenizer, route.scope).count(part.url)
        return ImagePrice(0, 0, DOCUMENT, part.detail, None, None, 0, True, None, tokens)
    page = page_tokens(route.image_rule, part.detail, route.image_limits.max_image_tokens)
    pictures = ImagePrice(0, 0, DOCUMENT, part.detail, None, None, facts.pages * page, False, None)
    if not text:
        return pictures
    return replace(pictures, text=facts.tokens, text_class=facts.text_class, text_stats=facts.stats)


def sent_as_audio(part: ImagePart, route: Route) -> bool:
    """Whether a chat ``input_audio`` part goes to this route as audio: to every route but
    Anthropic's, which takes none (its note goes instead: ``proxy.transports.chat_to_messages``),
    whatever the route says of images (an audio model may see no pictures)."""
    return part.input_audio and route.provider != "anthropic"


def _price_recording(part: ImagePart, route: Route) -> ImagePrice:
    """Audio or video: its seconds at the provider's rate where the route's provider takes it
    (never lowered by calibration: ``sized`` False), else the note it is sent as
    (``pricing.recordings``)."""
    rule = route.image_rule
    if route.supports_vision and rule.visual and rule.kind in GOOGLE_KINDS:
        tokens = recording_tokens(part.url, route.scope)
        return ImagePrice(
            0, 0, recording_kind(part.url) or "", part.detail, None, None, tokens, False
        )
    if sent_as_audio(part, route):
        tokens = user_audio_tokens(part.url, route.scope)
        return ImagePrice(0, 0, "audio", part.detail, None, None, tokens, False)
    text = placeholder(None, part.url)
    tokens = get_tokenizer(route.tokenizer, route.scope).count(text)
    return ImagePrice(0, 0, "text-only", part.detail, None, None, tokens, True, text)


#: The rule an assistant's audio reference reports (``audio_reference_price``).
AUDIO_REFERENCE = "audio-reference"


def audio_reference_price(message: Message, route: Route, index: int) -> ImagePrice | None:
    """An assistant's ``audio: {"id": ...}`` as the route counts it: at its worst case, of
    unknown size (calibration never prices it lower), reported apart with no content part of its
    own (part -1). None when the message carries none."""
    if message.audio is None:
        return None
    tokens = audio_reference_tokens(route.provider, route.max_output_tokens)
    return ImagePrice(index, -1, AUDIO_REFERENCE, "auto", None, None, tokens, False)


def defaulted_tokens(price: ImagePrice) -> tuple[int, int]:
    """(tokens priced by a default, of which of an image of unknown size): what calibration
    keeps apart from the tokens priced from the image (``MessagePressure.defaulted``)."""
    by_default = price.tokens if not price.sized or price.rule in _STAND_IN_RULES else 0
    return by_default, 0 if price.sized else price.tokens


def text_stats(message: Message) -> list[int]:
    """The per-character counts (``content.profile``) of a message's texts and its calls'
    names and arguments: the meter's, and a bound's (``pricing.bounds``), which carries them as
    they are (a few byte scans of each text, of a sample of a long one)."""
    texts = [p.text for p in message.parts if isinstance(p, TextPart)]
    texts += [s for c in message.tool_calls for s in (c.name, c.arguments)]
    return [sum(counts) for counts in zip(*map(profile, texts), strict=True)] or [0] * len(STATS)


def measure_message(
    message: Message,
    route: Route,
    index: int = 0,
    sizes: Sizes | None = None,
    prev_role: str | None = None,
) -> tuple[MessagePressure, tuple[ImagePrice, ...]]:
    tok = get_tokenizer(route.tokenizer, route.scope)
    text = 0
    image_tokens = 0
    defaulted = unsized = 0
    classes = [0] * len(CLASSES)
    stats = text_stats(message)
    images: list[ImagePrice] = []
    for j, part in enumerate(message.parts):
        if isinstance(part, TextPart):
            n = tok.count(part.text)
            text += n
            classes[classify(part.text)] += n
        else:
            try:
                price = price_image(part, route, sizes)
            except ImageError as exc:  # name the offending part for the client's 400
                where = f"messages[{index}].content[{j}].image_url.url"
                raise ImageError(f"{where}: {exc.message}", where) from None
            price = replace(price, message=index, part=j)
            images.append(price)
            text += price.text
            classes[price.text_class] += price.text
            if price.text_stats:
                stats = [a + b for a, b in zip(stats, price.text_stats, strict=True)]
            image_tokens += price.tokens
            by_default, of_unknown_size = defaulted_tokens(price)
            defaulted += by_default
            unsized += of_unknown_size
    reference = audio_reference_price(message, route, index)
    if reference is not None:
        images.append(reference)
        image_tokens += reference.tokens
        defaulted, unsized = defaulted + reference.tokens, unsized + reference.tokens
    frame = frame_message(message, route.framing, tok, prev_role, translated=route.translated)
    classes[STRUCTURED] += frame.text  # tool-call names and JSON arguments
    pressure = MessagePressure(
        index,
        message.role,
        text + frame.text,
        frame.framing,
        image_tokens,
        tuple(classes),
        len(message.tool_calls),
        defaulted,
        tuple(stats),
        unsized,
    )
    return pressure, tuple(images)


def measure(request: ChatRequest, route: Route, sizes: Sizes | None = None) -> Pressure:
    return measure_messages(request.messages, request.tools, route, sizes)


class Memo:
    """Prices of message objects already measured (with the role before them), for callers
    that measure several arrangements of the same messages — fitting measures its candidates
    this way, so each message is priced once per request however many plans are tried."""

    def __init__(self) -> None:
        self._prices: dict[
            tuple[int, str | None], tuple[Message, MessagePressure, tuple[ImagePrice, ...]]
        ] = {}

    def get(
        self, message: Message, index: int, prev_role: str | None
    ) -> tuple[MessagePressure, tuple[ImagePrice, ...]] | None:
        found = self._prices.get((id(message), prev_role))
        if found is None or found[0] is not message:
            return None
        _, pressure, images = found
        if pressure.index != index:
            pressure = replace(pressure, index=index)
            images = tuple(replace(image, message=index) for image in images)
        return pressure, images

    def put(
        self,
        message: Message,
        prev_role: str | None,
        pressure: MessagePressure,
        images: tuple[ImagePrice, ...],
    ) -> None:
        self._prices[(id(message), prev_role)] = (message, pressure, images)


class MessageCache(LRU["MessagePressure"]):
    """A bounded, thread-safe LRU of message pressures by what decides them: the message's
    content (role, name, tool-call id, lead, each text part, each tool call), the role before
    it, the route's tokenizer, framing and leg (``Route.translated``), and the scope (the
    tenant whose prompt it is).

    A conversation comes back every turn as new objects, so ``Memo`` (by object) serves one
    request only; re-measuring its earlier messages cost ~25 µs each — content profile, class,
    framing and a count-cache lookup per text — 25 ms a request at 1,000 messages. A hit here
    costs one serialisation and digest of the message, ~1.5 µs. Messages with images are not
    kept (their price depends on the image sizes known at the time). Scoped like
    ``CountCache``: an entry serves only its own tenant, so no one can time a request to learn
    what another tenant sent. Bounded by entries, one per message kept: ~450 bytes each, ~7 MiB
    full (none at idle)."""

    def __init__(self, maxsize: int = 16384) -> None:
        super().__init__(maxsize)

    @staticmethod
    def prefix(route: Route) -> bytes:
        """What a route contributes to a key: its tokenizer, its framing and whether its leg is
        translated (a message's lead is priced there only: ``Route.translated``), as a
        fixed-length digest, then its scope, last, so the key stays unambiguous."""
        facts = repr((route.tokenizer, route.framing, route.translated)).encode()
        return xxhash.xxh3_64_digest(facts) + route.scope

    @staticmethod
    def key(message: Message, prev_role: str | None, prefix: bytes) -> bytes | None:
        """The message's key under ``prefix`` (None: it has images or an audio reference, and is
        not kept): a digest
        of its fields serialised as JSON (a long text or call's arguments as its own digest,
        ``pricing.digest.text_key``), which no two different messages share but by a
        collision of the 128-bit digest (a text with a lone surrogate, which JSON cannot hold,
        as its ``repr``: a tuple's, never a JSON array's)."""
        if message.images or message.audio is not None:
            return None
        texts: list[Any]
        calls: list[Any]
        if message.long:  # a long text is not written out again (``pricing.digest``)
            texts = [text_key(p.text) for p in message.parts if isinstance(p, TextPart)]
            calls = [(c.id, c.name, text_key(c.arguments)) for c in message.tool_calls]
        else:
            texts = [p.text for p in message.parts if isinstance(p, TextPart)]
            calls = [(c.id, c.name, c.arguments) for c in message.tool_calls]
        fields = (
            message.role,
            message.name,
            message.tool_call_id,
            message.lead,
            prev_role,
            texts,
            calls,
        )
        try:
            data = orjson.dumps(fields)
        except TypeError:
            data = repr(fields).encode("utf-8", "surrogatepass")
        return xxhash.xxh3_128_digest(data) + prefix

    def get(self, key: bytes) -> MessagePressure | None:
        found = super().get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found


#: The process's message memo (every route and tenant; keys say whose).
MEASURED = MessageCache()


#: The tools' prices by what decides them: their JSON, the route's tokenizer and framing, the
#: scope (``MessageCache.prefix``). An agent sends the same tools every turn, and pricing them
#: afresh cost ~45 µs a Pydantic-written tool (20 tools: ~0.9 ms a request, before the fit
#: prices the request again); a hit costs their serialisation and digest (~20 µs for 20).
TOOLS_PRICED: LRU[int] = LRU(1024)


def tools_price(tools: Sequence[Mapping[str, object]], route: Route) -> int:
    """``tools_tokens`` on the route's own tokenizer, through ``TOOLS_PRICED``."""
    if not tools:
        return 0
    tok = get_tokenizer(route.tokenizer, route.scope)
    try:
        data = orjson.dumps(tools)
    except TypeError:  # not plain JSON (a lone surrogate): priced, not kept
        return tools_tokens(tuple(tools), route.framing, tok)
    key = xxhash.xxh3_128_digest(data) + MessageCache.prefix(route)
    return TOOLS_PRICED.memo(key, lambda: tools_tokens(tuple(tools), route.framing, tok))


def recall(key: bytes | None, index: int) -> MessagePressure | None:
    """The memoised pressure under ``key`` (None: not kept, or not to be), at ``index``."""
    kept = MEASURED.get(key) if key is not None else None
    if kept is None or kept.index == index:
        return kept
    return replace(kept, index=index)


def measure_kept(
    message: Message,
    route: Route,
    index: int = 0,
    sizes: Sizes | None = None,
    prev_role: str | None = None,
) -> MessagePressure:
    """``measure_message``'s pressure through the message memo: for a message the fit derives
    the same way every turn (a masked output), not for one-off candidates (a capper's cuts),
    which would only push the conversation's own messages out."""
    key = MessageCache.key(message, prev_role, MessageCache.prefix(route))
    kept = recall(key, index)
    if kept is not None:
        return kept
    pressure, _ = measure_message(message, route, index, sizes, prev_role)
    if key is not None:
        MEASURED.put(key, pressure)
    return pressure


def measure_messages(
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, object]],
    route: Route,
    sizes: Sizes | None = None,
    memo: Memo | None = None,
) -> Pressure:
    found: list[tuple[MessagePressure, tuple[ImagePrice, ...]] | None] = []
    keys: list[bytes | None] = []
    prefix = MessageCache.prefix(route)
    prev_role: str | None = None
    for i, message in enumerate(messages):
        known = memo.get(message, i, prev_role) if memo is not None else None
        key = None
        if known is None:
            key = MessageCache.key(message, prev_role, prefix)
            kept = recall(key, i)
            if kept is not None:
                known = kept, ()
                if memo is not None:
                    memo.put(message, prev_role, *known)
        found.append(known)
        keys.append(key)
        prev_role = message.role
    tok = get_tokenizer(route.tokenizer, route.scope)
    todo = [i for i, known in enumerate(found) if known is None]
    tok.prefetch([p.text for i in todo for p in messages[i].parts if isinstance(p, TextPart)])
    for i in todo:
        prev = messages[i - 1].role if i else None
        pressure, images = measure_message(messages[i], route, i, sizes, prev)
        if memo is not None:
            memo.put(messages[i], prev, pressure, images)
        key = keys[i]
        if key is not None:
            MEASURED.put(key, pressure)
        found[i] = (pressure, images)
    per_message = [known[0] for known in found if known is not None]
    details = [image for known in found if known is not None for image in known[1]]
    exact = route.exact_text and all(d.sized for d in details)
    return Pressure(
        route=route.alias,
        messages=tuple(per_message),
        tools=tools_price(tools, route),
        priming=route.framing.priming,
        image_details=tuple(details),
        exact=exact,
    )
