"""Every memo of prompt-derived facts in pricing serves only the scope that filled it
(``Route.scope``: the tenant whose prompt it is), and the scope changes no price.

docs/security.md, "Isolation of prompt-derived facts"; tests/proxy/test_isolation_e2e.py runs
the same through ``routefit serve`` with two teams.
"""

from __future__ import annotations

import base64
import io
import random
import uuid
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from pricing.bounds import Proof
from pricing.capped import cap_message
from pricing.chunks import content_chunks
from pricing.images import parse_image_rule
from pricing.messages import ChatRequest, ImagePart, parse_request
from pricing.meter import MEASURED, TOOLS_PRICED, measure
from pricing.probe import CACHE, probe
from pricing.route import Route
from pricing.tokenizers import count_cache_lookups, get_tokenizer, memoised
from strategies.offload import placeholder_for

ROUTE = Route("gpt", "gpt-4o", tokenizer="o200k_base")
VISION = replace(ROUTE, supports_vision=True, image_rule=parse_image_rule("openai-tile"))
TEXT_ONLY = ROUTE  # images become placeholders, priced as text


def scoped(route: Route, team: str) -> Route:
    return replace(route, scope=team.encode())


def png_url(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (1, 2, 3)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def unique_text(repeat: int = 200) -> str:
    return f"{uuid.uuid4()} " + "a long document only one team has sent so far. " * repeat


def request(*parts: object) -> ChatRequest:
    return parse_request({"model": "gpt", "messages": [{"role": "user", "content": list(parts)}]})


@settings(max_examples=30, deadline=None)
@given(words=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=40))
def test_a_scope_changes_no_price_and_repeats_within_a_scope_only(words):
    text = f"{uuid.uuid4()} " + " ".join(words) + " " * 64  # long: digest-keyed
    body = request({"type": "text", "text": text})
    hits, misses = count_cache_lookups()
    kept = MEASURED.hits
    a = measure(body, scoped(ROUTE, "team-a"))
    assert count_cache_lookups()[1] == misses + 1
    assert measure(body, scoped(ROUTE, "team-a")) == a
    # team A's repeat: its message memo answers, nothing is counted or looked up again
    assert MEASURED.hits == kept + 1
    assert count_cache_lookups() == (hits, misses + 1)
    assert measure(body, scoped(ROUTE, "team-b")) == a  # the same price ...
    assert count_cache_lookups()[1] == misses + 2  # ... counted afresh for team B
    assert measure(body, ROUTE) == a  # the open tenant is a scope of its own
    assert count_cache_lookups()[1] == misses + 3
    assert MEASURED.hits == kept + 1  # neither found team A's message


def varied_text(words: int) -> str:
    """Text no chunk of which repeats (``pricing.chunks``): each word drawn afresh."""
    rnd = random.Random(uuid.uuid4().int)
    return " ".join("".join(rnd.choices("etaoinshrdlu", k=rnd.randint(1, 9))) for _ in range(words))


def test_a_cold_conversation_counted_in_one_batch_is_counted_for_its_team_only():
    """Over 64 KB of new text is counted in one parallel batch (``Tokenizer.prefetch``) before
    it is measured: the batch files its counts, and its long texts' chunks', under the team
    too."""
    texts = [varied_text(12_000), varied_text(12_000)]  # ~66 KB each
    body = parse_request(
        {"model": "gpt", "messages": [{"role": "user", "content": t} for t in texts]}
    )
    prices = []
    for route in (scoped(ROUTE, "team-a"), scoped(ROUTE, "team-b"), ROUTE):
        hits, misses = count_cache_lookups()
        prices.append(measure(body, route))
        # both counted afresh, and each of their chunks: nothing found of another team's (the
        # two hits: the texts read back from what the batch counted)
        assert count_cache_lookups()[0] == hits + 2, route.scope
        assert count_cache_lookups()[1] >= misses + 2 + 2 * 2, route.scope
        misses = count_cache_lookups()[1]
        hits, kept = count_cache_lookups()[0], MEASURED.hits
        assert measure(body, route) == prices[0]
        # a repeat: both messages from the team's message memo, no count looked up
        assert (MEASURED.hits, count_cache_lookups()) == (kept + 2, (hits, misses))


def test_a_text_mostly_seen_before_finds_its_chunks_for_its_team_only():
    """A long text is counted a chunk at a time (``pricing.chunks``): the chunks a team's
    earlier text shares are found for that team, never for another, however alike the texts."""
    body = varied_text(40_000)
    a, b = get_tokenizer("o200k_base", b"team-a"), get_tokenizer("o200k_base", b"team-b")
    a.count("Request 1:\n" + body)
    hits = count_cache_lookups()[0]
    counted = b.count("Request 2:\n" + body)
    assert count_cache_lookups()[0] == hits  # team B found nothing of team A's
    assert a.count("Request 2:\n" + body) == counted
    found = count_cache_lookups()[0] - hits
    # team A found its own chunks, all but the head's (how many a random text has varies: it
    # was read as "at least 8", and a text of 8 chunks failed a clean-clone run)
    assert found == len(content_chunks("Request 2:\n" + body)) - 1 > 0
    hits = count_cache_lookups()[0]
    b.count("Request 3:\n" + body)
    assert count_cache_lookups()[0] - hits == found  # and so does team B, of its own


def test_a_proof_finds_only_its_own_teams_count():
    """A bound is exact for a text its team had counted before (a retried prompt): never for
    a text another team counted."""
    text = unique_text()
    count = get_tokenizer("o200k_base", b"team-a").count(text)
    assert Proof(scoped(ROUTE, "team-a"))(text) == count
    assert Proof(scoped(ROUTE, "team-b"))(text) > count  # the byte-level bound, not A's count
    assert Proof(ROUTE)(text) > count


def test_capping_counts_a_message_for_its_team_only():
    text = unique_text()
    message = request({"type": "text", "text": text}).messages[0]
    capped = cap_message(message, 500, scoped(ROUTE, "team-a"))
    assert capped is not None and capped.tokens <= 500
    assert memoised(get_tokenizer("o200k_base", b"team-a"), text) is not None
    assert memoised(get_tokenizer("o200k_base", b"team-b"), text) is None
    assert memoised(get_tokenizer("o200k_base"), text) is None
    assert cap_message(message, 500, scoped(ROUTE, "team-b")) == capped  # same bytes


def test_a_probed_image_is_probed_again_for_another_team():
    CACHE.clear()
    url = png_url(640, 480)
    part = {"type": "image_url", "image_url": {"url": url}}
    a = measure(request(part), scoped(VISION, "team-a"))
    assert (CACHE.misses, CACHE.hits) == (1, 0)
    assert measure(request(part), scoped(VISION, "team-a")) == a
    assert (CACHE.misses, CACHE.hits) == (1, 1)
    assert measure(request(part), scoped(VISION, "team-b")) == a  # same size, same price
    assert (CACHE.misses, CACHE.hits) == (2, 1)
    # the info (and so a placeholder's text) does not depend on the scope
    assert probe(url, VISION.image_limits, b"team-a") == probe(url, VISION.image_limits, b"x")


def test_an_offloaded_images_placeholder_is_probed_and_counted_per_team():
    CACHE.clear()
    part = request({"type": "image_url", "image_url": {"url": png_url(300, 200)}})
    image = part.messages[0].parts[0]
    assert isinstance(image, ImagePart)
    first = placeholder_for(image, scoped(TEXT_ONLY, "team-a"))
    assert placeholder_for(image, scoped(TEXT_ONLY, "team-a")) == first
    assert (CACHE.misses, CACHE.hits) == (1, 1)
    assert placeholder_for(image, scoped(TEXT_ONLY, "team-b")) == first
    assert (CACHE.misses, CACHE.hits) == (2, 1)


def test_a_tools_price_is_kept_per_team_and_per_tool_set():
    """The tools' price memo (an agent's tools come back every turn): a repeat within a team
    is a hit, another team prices them afresh at the same price, and a changed tool (a longer
    description) is never served the old price."""
    TOOLS_PRICED.clear()
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": unique_text(2),
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    body = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}
    a = measure(parse_request(body), scoped(ROUTE, "team-a"))
    assert (TOOLS_PRICED.misses, TOOLS_PRICED.hits) == (1, 0)
    assert measure(parse_request(body), scoped(ROUTE, "team-a")) == a
    assert (TOOLS_PRICED.misses, TOOLS_PRICED.hits) == (1, 1)
    assert measure(parse_request(body), scoped(ROUTE, "team-b")).tools == a.tools
    assert (TOOLS_PRICED.misses, TOOLS_PRICED.hits) == (2, 1)
    tool["function"]["description"] += " And every word of this sentence costs a token more."
    longer = measure(parse_request(body), scoped(ROUTE, "team-a"))
    assert longer.tools > a.tools
    assert (TOOLS_PRICED.misses, TOOLS_PRICED.hits) == (3, 1)
