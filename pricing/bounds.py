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
    (special) tokens matched in the text only merge bytes further.
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

The bounds bound the *meter*, not the provider: the provider's own count is the calibration's
business, and the correction (multiplicative factors ≥ 0) is applied to the bound as it is to the
meter's count, so a calibrated bound is never below the calibrated estimate.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pricing.framing import frame_message, tools_tokens
from pricing.messages import Message, TextPart
from pricing.meter import ImagePrice, MessagePressure, Pressure, Sizes, price_image
from pricing.probe import ImageError
from pricing.route import Route
from pricing.tokenizers import parse_tokenizer_spec

__all__ = [
    "BYTE_LEVEL",
    "BYTE_LEVEL_NFKC",
    "bound_pressure",
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
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


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
        return utf8_bytes
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


def bound_pressure(
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, object]],
    route: Route,
    sizes: Sizes | None = None,
) -> Pressure | None:
    """A Pressure whose every part is ≥ the meter's for the same messages (``exact`` False);
    None when the route's tokenizer has no cheap bound.

    Raises ImageError for an image the meter would refuse (the same check, the same message)."""
    bound = text_bound(route.tokenizer)
    if bound is None:
        return None
    tok = _Bounding(route.tokenizer, bound)
    per_message: list[MessagePressure] = []
    details: list[ImagePrice] = []
    prev_role: str | None = None
    for i, message in enumerate(messages):
        text = images = 0
        for j, part in enumerate(message.parts):
            if isinstance(part, TextPart):
                text += bound(part.text) if part.text else 0
                continue
            try:
                price = price_image(part, route, sizes)
            except ImageError as exc:  # named as the meter names it
                where = f"messages[{i}].content[{j}].image_url.url"
                raise ImageError(f"{where}: {exc.message}", where) from None
            if price.placeholder is not None:  # a text-only route sends it as text
                price = _with_tokens(price, bound(price.placeholder))
            details.append(_with_tokens(price, price.tokens, i, j))
            images += price.tokens
        frame = frame_message(message, route.framing, tok, prev_role)
        per_message.append(
            MessagePressure(i, message.role, text + frame.text, frame.framing, images)
        )
        prev_role = message.role
    return Pressure(
        route=route.alias,
        messages=tuple(per_message),
        tools=tools_tokens(tuple(tools), route.framing, tok),
        priming=route.framing.priming,
        image_details=tuple(details),
        exact=False,
    )


def _with_tokens(p: ImagePrice, tokens: int, message: int = -1, part: int = -1) -> ImagePrice:
    return ImagePrice(
        p.message if message < 0 else message,
        p.part if part < 0 else part,
        p.rule,
        p.detail,
        p.width,
        p.height,
        tokens,
        p.sized,
        p.placeholder,
    )
