"""What the seventh mutation sample of strategies/ let through (docs/mutation.md, 40 mutants at
c599708): a bound tightened by a proof still prices images at their known sizes; a policy
without elision never masks the round the latest user message answers; an image offloaded from
a message whose wire is not chat's is rendered one wire part per part."""

from __future__ import annotations

import pytest
from gpt4o_route import gpt4o_route
from test_mutants_strategies_5 import answered_rounds, request

from pricing.bounds import Proof
from pricing.messages import ImagePart, Message, TextPart, parse_message
from strategies.fit import FitError, fit, fit_bounded
from strategies.offload import offload_images
from strategies.policy import FitPolicy

# -- fit.fit_bounded (mutmut_50): the tightened bound keeps the images' known sizes -------------


def test_a_tightened_bound_prices_an_image_of_known_size_at_that_size() -> None:
    """``fit_bounded``: a bound over the budget is tightened by counting texts (``proof``) and
    the pressure re-bounded; the images stay priced at their known sizes (``sizes``), as in the
    first bound. An image whose size is known (512×512: 255 tokens on gpt-4o's rule) priced at
    its rule's worst case instead (1,445) would leave a request that fits unproved."""
    url = "https://images.example.com/seventh-round/cat.png"  # never fetched: sized by ``sizes``
    # a text of this test's own, so that no count of it is memoised (it would be its own bound)
    text = " ".join(f"seventh{i % 71} priced beside a picture" for i in range(3_000))
    image = {"type": "image_url", "image_url": {"url": url}}
    req = request([{"role": "user", "content": [{"type": "text", "text": text}, image]}])
    r = gpt4o_route(128_000)
    sizes = {url: (512, 512)}
    # What a proof that counted the whole text bounds, the image sized and unsized; the proof is
    # not completed, so nothing is memoised for the fresh proof below.
    counted = Proof(r)
    while counted.tighten([text], 1):
        pass
    sized = fit_bounded(req, r, FitPolicy(), sizes=sizes, proof=counted)
    unsized = fit_bounded(req, r, FitPolicy(), proof=counted)
    assert sized is not None and unsized is not None
    (price,) = sized.pressure.image_details
    assert price.sized and price.tokens == 255
    gap = unsized.estimate - sized.estimate
    assert gap >= 1_000  # the worst case is dearer than the known size
    budget = sized.estimate + gap // 2
    policy = FitPolicy(max_prompt_tokens=budget)
    assert fit_bounded(req, r, policy, sizes=sizes) is None  # the cheap bound is over budget
    bounded = fit_bounded(req, r, policy, sizes=sizes, proof=Proof(r))
    assert bounded is not None
    assert bounded.report.transparent and bounded.body == req.body
    (price,) = bounded.pressure.image_details
    assert price.sized and price.tokens == 255
    exact = fit(req, r, policy, sizes=sizes)
    assert exact.estimate <= bounded.estimate <= budget


# -- moves._plan_states (mutmut_8): the round the latest user message answers is not masked ------


def test_without_elision_the_round_the_user_answers_is_never_masked() -> None:
    """docs/fitting.md: the newest unit is protected and, when it is a user message right after
    a tool round, so is that round; the newest turn's outputs are masked only before a call of
    it is dropped, which only a policy that elides does. A mask-only policy masks the older
    round's output when that is enough, and is refused (FitError) when only masking the
    answered round's output too would fit — never sent with that output masked."""
    messages = answered_rounds(600, "Now summarise the second one.")
    req = request(messages)
    r = gpt4o_route(128_000)
    whole = fit(req, r, FitPolicy(strategies=("mask",)))
    assert whole.report.transparent
    # the older output masked is enough: the answered round goes whole
    older = fit(req, r, FitPolicy(max_prompt_tokens=whole.estimate - 1, strategies=("mask",)))
    sent = older.body["messages"]
    assert sent[3]["content"].startswith("[routefit:")
    assert sent[6] == messages[6]
    # masking the older output is not enough: refused, not the answered output masked
    with pytest.raises(FitError):
        fit(req, r, FitPolicy(max_prompt_tokens=older.estimate - 1, strategies=("mask",)))


# -- offload.offload_images (mutmut_46): one wire part per part when the wire is not chat's -----


def test_an_image_offloaded_from_a_wire_without_chat_content_keeps_one_part_per_part() -> None:
    """``offload_images`` replaces each image by its placeholder text. When the message's wire
    has no chat content list to patch (a Gemini content: ``parts``, no ``content``), the content
    is rendered from the parts one wire part per part (``render_content``'s ``keep_list``), so
    re-parsing what is sent gives back the message's parts — and its price, parts being priced
    one by one — not the texts run together into one."""
    url = "https://images.example.com/seventh-round/dog.png"
    wire = {"role": "user", "parts": [{"text": "Look at this:"}, {"file_data": {"file_uri": url}}]}
    message = Message(role="user", parts=(TextPart("Look at this:"), ImagePart(url)), wire=wire)
    out = offload_images(message, gpt4o_route(128_000))
    assert not out.images and out.parts[0] == TextPart("Look at this:")
    content = out.wire["content"]
    assert isinstance(content, list) and len(content) == 2
    assert parse_message({"role": "user", "content": content}, 0).parts == out.parts
    assert out.wire["parts"] == wire["parts"]  # the client's own keys left as they were
