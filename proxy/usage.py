"""What the provider says the prompt cost, normalised across wire formats.

"Prompt tokens" is not the same field everywhere, and a calibration that learnt from the wrong
one would learn that prompts are tiny and overflow:

* OpenAI: ``prompt_tokens`` includes ``prompt_tokens_details.cached_tokens``.
* DeepSeek: ``prompt_tokens`` = ``prompt_cache_hit_tokens`` + ``prompt_cache_miss_tokens``.
* Anthropic (native): ``input_tokens`` counts only what follows the last cache breakpoint; the
  prompt is ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``.
* litellm's OpenAI-shaped usage for Anthropic already adds the cache fields into
  ``prompt_tokens`` in current versions; older ones did not. We check rather than trust: a
  ``prompt_tokens`` smaller than the cache fields it should contain gets them added.
* Gemini (native): ``promptTokenCount`` includes ``cachedContentTokenCount``.
* OpenAI Responses: ``input_tokens`` includes ``input_tokens_details.cached_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Usage", "normalize_usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def normalize_usage(usage: Any) -> Usage | None:
    """A Usage from any provider's usage object, or None when there is none."""
    if not isinstance(usage, Mapping):
        return None
    if "promptTokenCount" in usage:  # Gemini native
        return Usage(
            _int(usage.get("promptTokenCount")),
            _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount")),
            _int(usage.get("cachedContentTokenCount")),
        )
    responses = usage.get("input_tokens_details")
    if isinstance(responses, Mapping) and "prompt_tokens" not in usage:  # OpenAI Responses
        return Usage(
            _int(usage.get("input_tokens")),
            _int(usage.get("output_tokens")),
            _int(responses.get("cached_tokens")),
        )
    cache_read = _int(usage.get("cache_read_input_tokens"))
    cache_write = _int(usage.get("cache_creation_input_tokens"))
    if "input_tokens" in usage and "prompt_tokens" not in usage:  # Anthropic native
        return Usage(
            _int(usage.get("input_tokens")) + cache_read + cache_write,
            _int(usage.get("output_tokens")),
            cache_read,
        )
    if "prompt_tokens" not in usage:
        return None
    prompt = _int(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    hit = usage.get("prompt_cache_hit_tokens")
    if hit is not None:  # DeepSeek
        cached = _int(hit)
        prompt = max(prompt, cached + _int(usage.get("prompt_cache_miss_tokens")))
    if cache_read or cache_write:  # litellm's shape for Anthropic
        cached = max(cached, cache_read)
        if prompt < cache_read + cache_write:
            prompt += cache_read + cache_write
    return Usage(prompt, _int(usage.get("completion_tokens")), cached)
