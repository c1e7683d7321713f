"""Reading the provider's count out of its context-length refusal (``proxy.overflow``)."""

from __future__ import annotations

import pytest

from proxy.errors import ProxyError
from proxy.overflow import provider_count


def upstream(message: str, status: int = 400, code: str | None = None) -> ProxyError:
    err = ProxyError(status, message, code=code)
    err.origin = "upstream"
    return err


@pytest.mark.parametrize(
    ("message", "code", "count"),
    [
        (
            "This model's maximum context length is 8192 tokens. However, your messages resulted "
            "in 9321 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
            9321,
        ),
        (
            "This model's maximum context length is 8192 tokens. However, your messages resulted "
            "in 9,321 tokens (including 120 in the functions). Please reduce the length.",
            "context_length_exceeded",
            9321,
        ),
        (
            "This model's maximum context length is 8192 tokens. However, you requested 9350 "
            "tokens (9000 in the messages, 150 in the functions, 200 in the completion). Please "
            "reduce the length of the messages or completion.",
            "context_length_exceeded",
            9150,
        ),
        (
            "This model's maximum context length is 8192 tokens. However, you requested 9400 "
            "tokens (9200 in the messages, 200 in the completion).",
            None,
            9200,
        ),
        ("prompt is too long: 210345 tokens > 200000 maximum", None, 210345),
        (  # Google (Gemini), as the simulator's Gemini wire words it too
            "The input token count (1048999) exceeds the maximum number of tokens allowed "
            "(1048576).",
            None,
            1048999,
        ),
        (
            "input length and `max_tokens` exceed context limit: 7990 + 400 > 8192, decrease "
            "input length or `max_tokens` and try again",
            None,
            7990,
        ),
        (
            "litellm.ContextWindowExceededError: litellm.BadRequestError: OpenAIException - This "
            "model's maximum context length is 8192 tokens. However, your messages resulted in "
            "8500 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
            8500,
        ),
    ],
)
def test_the_providers_stated_count_is_read(message: str, code: str | None, count: int) -> None:
    assert provider_count(upstream(message, code=code)) == count


def test_nothing_is_read_where_nothing_is_stated_or_it_is_not_an_overflow() -> None:
    assert (
        provider_count(upstream("context length exceeded", code="context_length_exceeded")) is None
    )
    assert provider_count(upstream("your messages resulted in 9000 tokens", 429)) is None
    assert provider_count(upstream("invalid value for temperature: resulted in 12 tokens")) is None
    own = ProxyError(400, "prompt is too long: 9000 tokens > 8192 maximum")
    assert provider_count(own) is None  # routefit's own refusal is not a provider's count


def test_the_code_alone_says_overflow_and_the_status_is_a_refusals() -> None:
    # (mutation testing: docs/mutation.md) the code is enough without the words; a 413 is a
    # refusal too; a 5xx with the same text, or a text that states a count but neither says
    # nor is coded an overflow, is not read
    stated = "Your messages resulted in 9321 tokens."
    assert provider_count(upstream(stated, code="context_length_exceeded")) == 9321
    overflow = "maximum context length is 8192 tokens. However, your messages resulted in 9321"
    assert provider_count(upstream(overflow + " tokens.", 413)) == 9321
    assert provider_count(upstream(overflow + " tokens.", 500)) is None
    requested = "you requested 9400 tokens (9200 in the messages, 200 in the completion)"
    assert provider_count(upstream(requested)) is None
