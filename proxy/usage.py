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
* Gemini (native): ``promptTokenCount`` includes ``cachedContentTokenCount``; what a built-in
  tool read (URL context's pages, a search's results, code execution's intermediate input) is
  ``toolUsePromptTokenCount``, apart from it and billed as input too (``Usage.tool_prompt_tokens``).
* Anthropic's server tools (web search, web fetch, code execution) put what they read before
  the model inside ``input_tokens``, with no count of their own: ``server_tool_use`` only says
  how many times each ran (``Usage.tools_read``).
* OpenAI Responses: ``input_tokens`` includes ``input_tokens_details.cached_tokens``.

Usage is a provider's claim, not a fact (docs/security.md, "Untrusted provider usage"): a count
that is not a whole number (a fraction, NaN, an infinity, a string, a boolean) makes the usage
``invalid`` here, and ``usage_fault`` says whether a well-formed one is credible for the request
it answers. An invalid or incredible usage is neither learnt from nor settled to.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pricing.route import Route

__all__ = ["Usage", "normalize_usage", "usage_fault", "usage_limit"]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    #: Why the provider's usage object could not be read as counts ("" when it could).
    invalid: str = ""
    #: Input the provider read beyond the prompt it was sent, billed as input: Gemini's
    #: ``toolUsePromptTokenCount``, what a built-in tool put before the model (a fetched page
    #: can be tens of thousands of tokens). Charged (``billed_prompt``), never learnt from: no
    #: estimate of the prompt contains it. Charged whatever the tool, Search included, which
    #: Google bills per grounded prompt rather than by these tokens: a token quota counts what
    #: the model read (docs/security.md, "Untrusted provider usage").
    tool_prompt_tokens: int = 0
    #: The provider's own tools ran and what they read is inside ``prompt_tokens``, not stated
    #: apart: Anthropic's server tools (``usage.server_tool_use``: a search's results, a fetched
    #: page, counted as input tokens). Charged as stated, never learnt from: the count is of the
    #: prompt and pages routefit never saw, and learnt as the prompt's it made that prompt's
    #: anchor several times its size, so the next turn was priced (and cut, or refused) as if
    #: the results were in it.
    tools_read: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def billed_prompt(self) -> int:
        """The input the team is charged: the prompt and what the provider's tools read."""
        return self.prompt_tokens + self.tool_prompt_tokens


class _NotACount(ValueError):
    pass


def _int(value: Any) -> int:
    """A count as a Python int: absent (None) is 0; anything but a whole number is not a count
    (a float is accepted only when it is integral and finite, as some JSON encoders write 12.0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _NotACount(f"a count of type {type(value).__name__}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise _NotACount(f"a count of {value!r}")
    return int(value)


def _server_tools_ran(stated: Any) -> bool:
    """Whether Anthropic's ``server_tool_use`` says a server tool ran (``web_search_requests``,
    ``web_fetch_requests``, ... above 0): what it read is then in ``input_tokens``. A figure
    that is not a count says nothing either way (it is no count of the prompt: 0)."""
    if not isinstance(stated, Mapping):
        return False
    ran = 0
    for value in stated.values():
        try:
            ran += _int(value)
        except _NotACount:
            continue
    return ran > 0


def usage_limit(route: Route, choices: int, reserved_output: int) -> int:
    """The most any count in a credible usage can be: the route's window plus every completion
    at the most it may produce (the route's output limit, or what the request reserved when
    that is more)."""
    return route.context_window + max(reserved_output, choices * route.max_output_tokens)


def usage_fault(usage: Usage, limit: int) -> str | None:
    """Why ``usage`` cannot be the truth for a request whose counts are at most ``limit`` (the
    route's window plus the output it may produce), or None when it can. Every count must be a
    whole number in [0, limit]; the cached part of the prompt cannot exceed the prompt."""
    if usage.invalid:
        return usage.invalid
    for name, value in (
        ("prompt", usage.prompt_tokens),
        ("completion", usage.completion_tokens),
        ("cached", usage.cached_tokens),
        ("tool prompt", usage.tool_prompt_tokens),
    ):
        if not 0 <= value <= limit:
            return f"{name} tokens {value} outside [0, {limit}]"
    if usage.cached_tokens > usage.prompt_tokens:
        return f"cached tokens {usage.cached_tokens} above prompt tokens {usage.prompt_tokens}"
    return None


def cache_writes(usage: Any) -> int:
    """The prompt tokens a chat usage says were written to the provider's cache, 0 when it
    says none (or not as a count): litellm's and routefit's shape for Anthropic
    (``cache_creation_input_tokens``), OpenAI's and OpenRouter's
    (``prompt_tokens_details.cache_write_tokens``). They are part of ``Usage.prompt_tokens``;
    a translation to a wire with a field for them states them there (Anthropic bills them above
    a plain input token)."""
    if not isinstance(usage, Mapping):
        return 0
    details = usage.get("prompt_tokens_details")
    stated = details.get("cache_write_tokens") if isinstance(details, Mapping) else None
    try:
        return max(_int(usage.get("cache_creation_input_tokens")), _int(stated))
    except _NotACount:
        return 0


def normalize_usage(usage: Any) -> Usage | None:
    """A Usage from any provider's usage object, or None when there is none; an ``invalid``
    one (all counts 0) when a count in it is not a whole number."""
    if not isinstance(usage, Mapping):
        return None
    try:
        return _normalize(usage)
    except _NotACount as exc:
        return Usage(0, 0, 0, invalid=f"usage with {exc}")


def _normalize(usage: Mapping[str, Any]) -> Usage | None:
    if "promptTokenCount" in usage:  # Gemini native
        return Usage(
            _int(usage.get("promptTokenCount")),
            _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount")),
            _int(usage.get("cachedContentTokenCount")),
            tool_prompt_tokens=_int(usage.get("toolUsePromptTokenCount")),
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
            tools_read=_server_tools_ran(usage.get("server_tool_use")),
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
