"""A provider's context-length refusal, read for the one figure routefit can learn from: how
many prompt tokens the provider counted.

routefit never forwards a request it knows overflows, so a provider that still refuses one for
context length has shown that routefit under-estimated — and most providers say by how much.
That count is an exact sample for the prompt that was sent: the gateway records it, refits with
the corrected estimate and tries once more, instead of handing the client the provider's 400.

Only texts that state the count are read; a refusal without one is passed through unchanged.
"""

from __future__ import annotations

import re

from proxy.errors import ProxyError

__all__ = ["is_overflow", "provider_count"]


def _int(text: str) -> int:
    return int(text.replace(",", ""))


_N = r"(\d[\d,]*)"
#: OpenAI (and compatible servers, and litellm's ContextWindowExceededError, which wraps their
#: text): "... However, your messages resulted in N tokens ..."
_RESULTED = re.compile(rf"messages resulted in {_N} tokens", re.IGNORECASE)
#: OpenAI with a completion limit: "you requested T tokens (M in the messages, F in the
#: functions, C in the completion)" — the prompt is M + F.
_REQUESTED = re.compile(
    rf"requested {_N} tokens \({_N} in the messages,(?: {_N} in the functions,)? {_N} in the "
    r"completion\)",
    re.IGNORECASE,
)
#: Anthropic: "prompt is too long: N tokens > M maximum".
_TOO_LONG = re.compile(rf"prompt is too long: {_N} tokens > {_N} maximum", re.IGNORECASE)
#: Anthropic, prompt plus max_tokens: "input length and `max_tokens` exceed context limit:
#: N + C > W".
_WITH_OUTPUT = re.compile(
    rf"input length and `?max_tokens`? exceed context limit: {_N} \+ {_N} > {_N}", re.IGNORECASE
)
#: Google (Gemini): "The input token count (N) exceeds the maximum number of tokens allowed (M)."
_INPUT_COUNT = re.compile(
    rf"input token count \({_N}\) exceeds the maximum number of tokens allowed", re.IGNORECASE
)
_MARKERS = ("context", "too long", "exceeds the maximum number of tokens")


def _looks_like_overflow(err: ProxyError) -> bool:
    if err.code == "context_length_exceeded":
        return True
    message = err.message.lower()
    return any(marker in message for marker in _MARKERS)


def is_overflow(err: ProxyError) -> bool:
    """Whether ``err`` is the provider's refusal for context length (stating its count or not)."""
    if err.origin != "upstream" or err.status not in (400, 413) or not err.message:
        return False
    return _looks_like_overflow(err)


def provider_count(err: ProxyError) -> int | None:
    """The prompt tokens the provider says it counted, when ``err`` is the provider's refusal
    for context length and states them; else None (any other error, or no figure given)."""
    if not is_overflow(err):
        return None
    text = err.message
    if m := _REQUESTED.search(text):
        return _int(m.group(2)) + (_int(m.group(3)) if m.group(3) else 0)
    if m := _RESULTED.search(text):
        return _int(m.group(1))
    if m := _TOO_LONG.search(text):
        return _int(m.group(1))
    if m := _WITH_OUTPUT.search(text):
        return _int(m.group(1))
    if m := _INPUT_COUNT.search(text):
        return _int(m.group(1))
    return None
