"""What the sampled mutation run of pricing/ let through (docs/mutation.md, 2026-12-04): a
message priced once and met again at another place in the list, and an explicit detail on a
Gemini rule whose default level is another."""

from __future__ import annotations

from gpt4o_route import gpt4o_route

from pricing.images import parse_image_rule
from pricing.messages import parse_request
from pricing.meter import Memo, measure_messages
from pricing.route import Route


def route() -> Route:
    return gpt4o_route(128_000, 1024, alias="memo")


def test_a_memoised_message_met_at_another_index_is_priced_at_that_index() -> None:
    """Fitting measures several arrangements of the same message objects through one Memo; a
    message found there at a new place must say that place, as measuring afresh does."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "first question " * 5},
            {"role": "assistant", "content": "first answer " * 5},
            {"role": "user", "content": "second question " * 5},
            {"role": "assistant", "content": "second answer " * 5},
        ],
    }
    messages = parse_request(body).messages
    r, memo = route(), Memo()
    whole = measure_messages(messages, (), r, memo=memo)
    assert [m.index for m in whole.messages] == [0, 1, 2, 3]
    later = messages[2:]  # the older turn elided: the last answer moves from 3 to 1
    memoised = measure_messages(later, (), r, memo=memo)
    assert memoised == measure_messages(later, (), r)
    assert [m.index for m in memoised.messages] == [0, 1]


def test_an_explicit_detail_wins_over_a_gemini_rules_default_level() -> None:
    """docs/images.md § Gemini: ``detail: low`` / ``high`` select those levels (Gemini 3: 280
    and 1120 tokens); any other detail takes the rule's default level (here medium, 560)."""
    medium = parse_image_rule({"kind": "gemini-fixed", "default_level": "medium"})
    assert medium.tokens(10, 10, "high") == 1120
    assert medium.tokens(10, 10, "low") == 280
    assert medium.tokens(10, 10, "auto") == 560
