"""The catalogue: which rule, and which published preset, a model name gets by default.

Model names are matched by family and generation; every judgement call for names the providers'
docs do not list (and the conservative guess each makes) is in docs/images.md § Defaults by
model name, each pinned by a test. Config may override any of it per route.
"""

from __future__ import annotations

import re

from pricing.images.kinds import Scalar
from pricing.images.rule import ImageRule, text_only

__all__ = ["default_image_rule"]


def _model_name(model: str) -> tuple[str, str]:
    """(the whole lowercased name, its last path segment without fine-tune decorations)."""
    full = model.strip().lower()
    name = full.rsplit("/", 1)[-1]
    if name.startswith("ft:"):  # ft:gpt-4o-mini-2024-07-18:org::id
        name = name[3:].split(":", 1)[0]
    return full, name


def _rule(kind: str, variant: str | None = None, **overrides: Scalar) -> ImageRule:
    params: tuple[tuple[str, Scalar], ...] = (("variant", variant),) if variant else ()
    return ImageRule(kind, (*params, *overrides.items()))


#: gpt-5.x mini/nano models the docs do not list take the earlier docs' (conservative) pattern.
_MINI_NANO_MULTIPLIER = {"mini": 1.62, "nano": 2.46}

_GPT5 = re.compile(r"^gpt-5(?:\.(\d+))?(?![\d.])(.*)$")
#: A generation after 5 (gpt-6, gpt-6.1-mini, gpt-10): newer than the catalogue.
_GPT_LATER = re.compile(r"^gpt-(?:[6-9]|[1-9]\d+)(?:\.\d+)?(?![\d.])(.*)$")
#: A Gemini generation after 3 (gemini-4-pro, gemini-5.0-flash), or one of Google's moving
#: aliases to the newest one (gemini-flash-latest, gemini-pro-latest, gemini-flash-lite-latest).
_GEMINI_LATER = re.compile(r"gemini-(?:(?:[4-9]|[1-9]\d+)(?![\d])|(?:[a-z]+-)*latest$)")
_CLAUDE = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:[-.](\d{1,2}))?(?!\d)")


def _openai_rule(name: str) -> ImageRule | None:
    if name.startswith("computer-use-preview"):
        return _rule("openai-tile", "computer-use-preview")
    if name.startswith("gpt-4o-mini"):
        return _rule("openai-tile", "gpt-4o-mini")
    for model in ("gpt-4.1-mini", "gpt-4.1-nano", "o4-mini"):
        if name.startswith(model):
            return _rule("openai-patch", model)
    if re.match(r"^(chatgpt-4o|gpt-4o|gpt-4\.1|gpt-4\.5|gpt-4-turbo|gpt-4-vision)", name):
        return _rule("openai-tile", "gpt-4o")
    if re.match(r"^o[13](-|$)", name):
        return _rule("openai-tile", "o1")
    match, later = _GPT5.match(name), _GPT_LATER.match(name)
    if later is not None:  # after 5.6: 5.6's table (the newest, unbounded at auto)
        minor, rest = 6, later.group(1)
    elif match is not None:
        minor, rest = int(match.group(1) or 0), match.group(2)
    else:
        return None
    size = next((s for s in ("mini", "nano") if re.search(rf"-{s}(-|$)", rest)), None)
    if minor <= 1:
        return _rule("openai-patch", f"gpt-5-{size}") if size else _rule("openai-tile", "gpt-5")
    if minor == 4:
        return _rule("openai-patch", f"gpt-5.4-{size}" if size else "gpt-5.4")
    table = "gpt-5.2" if minor < 4 else "gpt-5.5" if minor == 5 else "gpt-5.6"
    if size:
        return _rule("openai-patch", table, multiplier=_MINI_NANO_MULTIPLIER[size])
    return _rule("openai-patch", table)


def _claude_rule(full: str) -> ImageRule:
    match = _CLAUDE.search(full)
    if match is not None:
        family, major, minor = match.group(1), int(match.group(2)), int(match.group(3) or 0)
        # Opus 4.7 has the larger limits; later generations are assumed to keep them (the
        # conservative guess: larger limits price higher).
        if major >= 5 or (family == "opus" and (major, minor) >= (4, 7)):
            return _rule("anthropic", "claude-opus-4-7")
    return _rule("anthropic", "claude")


def _family_rule(full: str, name: str) -> ImageRule | None:
    if "claude" in full:
        return _claude_rule(full)
    if "gemini-3" in name:
        return _rule("gemini-fixed", "gemini-3")
    if re.search(r"gemini-(2|1\.5)", name):
        return _rule("gemini-tile", "gemini-2")
    if _GEMINI_LATER.search(name):
        # Gemini 3's levels (a Google kind: HEIC, PDF pages, audio and video as Google counts
        # them); the level a newer model defaults to is unknown, so the dearest published one,
        # as for a media_resolution name this version does not know (above flat's price).
        return _rule("gemini-fixed", "gemini-3", default_level="ultra_high")
    if "deepseek" in full and "vl" not in name and "janus" not in name:
        return _rule("deepseek-v4", "exp" if "vision-exp" in name else "v4.1")
    # QVQ, Qwen's visual reasoning model, is served without "qwen" in its id (``qvq-max``).
    if ("qwen" in full and "vl" in name) or "qvq" in name:
        return _rule("qwen-vl", "qwen3" if "qwen3" in name else "qwen2.5")
    if "pixtral" in name:
        return _rule("pixtral", "pixtral-12b")
    if "mistral-small" in name:
        return _rule("pixtral", "mistral-small-3")
    if "llama-4" in name or "llama4" in name:
        return _rule("llama4")
    return None


def default_image_rule(model: str, supports_vision: bool) -> ImageRule:
    """The rule a model name implies (a litellm provider prefix is ignored); config may override.

    A route without vision is ``text-only``; a vision model routefit has no rule for gets
    ``flat`` at ``UNKNOWN_VISION_TOKENS``.
    """
    if not supports_vision:
        return text_only()
    full, name = _model_name(model)
    return _openai_rule(name) or _family_rule(full, name) or ImageRule("flat")
