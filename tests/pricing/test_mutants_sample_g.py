"""What the seventh fresh sample of pricing/'s mutants (80 mutants at 359cb66, docs/mutation.md)
let through: a proof of a prompt far over its budget giving up after its first look, a nested
object without properties priced as a plain property, refused image constants and a model spec
that is not a name refused saying so, a long string deep in a JSON envelope cut as finely as at
the top, a tool call without an id, the cut search's kept sizes inside their range, and a
tokenizer file's batch counts equal to its one-by-one counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from test_mutants_sample_c import bos_tokenizer_file
from tokenizers import Tokenizer as HFTokenizer

from pricing.bounds import Proof
from pricing.capped import cut_text
from pricing.framing import Framing, tools_tokens
from pricing.images.spec import parse_image_rule
from pricing.messages import parse_message
from pricing.route import Route
from pricing.textcut import search
from pricing.tokenizers import count_each, get_tokenizer

# -- pricing/bounds.py (Proof.tighten mutmut_22) -----------------------------------------------


def test_a_proof_of_a_prompt_far_over_its_budget_gives_up_after_its_first_look() -> None:
    """``pricing.bounds``: a proof counts a first batch of pieces, and when the saving they show
    says the rest cannot save what is needed it stops: "a prompt far over its budget is not
    counted twice, once in vain" (the exact path counts it all anyway). Here the window is half
    the prompt's count, so no counting can prove it fits; most of the text stays uncounted."""
    tok = get_tokenizer("o200k_base")
    # a text of its own: a memoised count would be its own bound, with nothing left to count
    text = " ".join(
        f"a proof gives up on line {i} of a prompt far over its window" for i in range(5000)
    )
    count = count_each(tok, [text])[0]  # counted afresh, never memoised
    proof = Proof(Route(alias="far-over", model="gpt-4o", tokenizer="o200k_base"))
    bound = proof(text)
    assert bound > count
    assert not proof.tighten([text], bound - count // 2)
    assert count <= proof(text)
    # more than half of what counting could save is still unclaimed: it was not all counted
    assert proof(text) - count > (bound - count) / 2


# -- pricing/framing.py (_openai_properties mutmut_50) -----------------------------------------


def _weather_tool(location: dict[str, object]) -> dict[str, object]:
    return {
        "name": "get_weather",
        "description": "Get the weather.",
        "parameters": {"type": "object", "properties": {"location": location}},
    }


@pytest.mark.parametrize(
    "properties",
    [{}, ["city", "country"], "city", {"city": {"type": "string", "description": "The city."}}],
)
def test_what_a_property_nests_is_priced_as_its_compact_json(properties: object) -> None:
    """docs/pricing.md: the cookbook prices a function's top-level properties; what a property
    nests (``properties``, ``items``) is priced as its compact JSON, whatever it holds (a
    client's schema is priced, not validated): above any rendering of it, never below."""
    tok = get_tokenizer("o200k_base")
    f = Framing()
    plain = tools_tokens((_weather_tool({"type": "object"}),), f, tok)
    odd = {"type": "object", "properties": properties}
    nested = json.dumps({"properties": properties}, ensure_ascii=False, separators=(",", ":"))
    assert tools_tokens((_weather_tool(odd),), f, tok) == plain + tok.count(nested)


# -- pricing/images (Anthropic.__post_init__ mutmut_5, OpenAITile.__post_init__ mutmut_10,
# -- parse_image_rule mutmut_24) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"kind": "anthropic", "token_limit": 0},
            "image rule 'anthropic': anthropic constants must be positive",
        ),
        (
            {"kind": "openai-tile", "tile_size": 0},
            "image rule 'openai-tile': "
            "openai-tile max_dim, short_side and tile_size must be positive",
        ),
    ],
    ids=["anthropic-token-limit", "openai-tile"],
)
def test_a_zero_constant_is_refused_naming_its_kind(spec: dict[str, object], message: str) -> None:
    """A config error reads as one (pricing/images/constants.py): the message says which kind
    refused what. A token limit of 0 would price every image at a token over its own limit."""
    with pytest.raises(ValueError) as refused:
        parse_image_rule(spec)
    assert str(refused.value) == message


@pytest.mark.parametrize("model", ["", 4, ["gpt-4o"]])
def test_an_image_rule_model_that_is_not_a_name_is_refused_saying_so(model: object) -> None:
    """``{model: ...}`` starts from a model family's rule (docs/images.md § Rules are data); the
    operator's error says the model must be a model name."""
    with pytest.raises(ValueError) as refused:
        parse_image_rule({"model": model})
    assert str(refused.value) == "image rule model must be a model name"


# -- pricing/jsoncut.py (_Planner._container mutmut_132) ----------------------------------------


@pytest.mark.parametrize("indent", [None, 2])
def test_a_long_string_deep_in_a_json_envelope_is_cut_as_finely_as_at_the_top(
    indent: int | None,
) -> None:
    """docs/capping.md: a string alone too big is cut inside the JSON (a log in
    ``{"stdout": ...}``) and the search "stops as soon as a candidate fits within 2% under the
    budget". When the log is the whole document, wrapped in a few single-key objects (an API
    response's envelope), nothing else is dropped: no container needs a marker of its own, and
    the cut of the string lands within those 2% at every cap below the document's size."""
    tok = get_tokenizer("o200k_base")
    log = "\n".join(f"step {i}: compiled module number {i} without warnings" for i in range(90))
    doc: object = log
    for key in ("stdout", "result", "output", "response"):
        doc = {key: doc}
    text = json.dumps(doc, indent=indent)
    tokens = tok.count(text)
    assert tokens > 1024  # SMALL_JSON_CAP: the documented tight range
    for cap in range(tokens - 1, int(tokens * 0.8), -3):
        cut = cut_text(text, cap, tok)
        assert cut is not None and cut.kind == "json"
        assert cap - cap // 50 <= cut.tokens <= cap, cap


# -- pricing/messages.py (_tool_calls mutmut_40) -----------------------------------------------


def test_a_tool_call_without_an_id_is_read_as_one_with_an_empty_id() -> None:
    """Validation is strict about types and lenient otherwise (pricing/messages.py): a tool
    call's ``id``, like its ``arguments``, may be left out (not every client sends one back),
    and it is then read as empty, not refused."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    without = parse_message({"role": "assistant", "tool_calls": [call]}, 0)
    with_empty = parse_message({"role": "assistant", "tool_calls": [{**call, "id": ""}]}, 0)
    assert without.tool_calls == with_empty.tool_calls
    assert without.tool_calls[0].id == ""


# -- pricing/textcut.py (search mutmut_24, mutmut_109) -----------------------------------------


@given(
    k0=st.integers(-10, 300),
    k_max=st.integers(0, 300),
    budget=st.integers(1, 400),
)
@example(k0=0, k_max=0, budget=100)  # nothing can be kept but the bare form
@example(k0=1, k_max=50, budget=100)  # everything fits: the first step aims past the range
def test_the_search_keeps_a_size_inside_its_range_and_the_largest_that_fits(
    k0: int, k_max: int, budget: int
) -> None:
    """``search``: "the largest kept size ``k`` in ``[0, k_max]`` whose rendered cut fits", or
    one within 2% under the budget. ``render`` is asked only for sizes in that range (a size
    past ``k_max`` has no cut: the capper's renders are defined on it alone), whatever the
    start ``k0`` and however far a proportional step aims. One token a character here."""
    tok = get_tokenizer("heuristic:1")
    asked: list[int] = []

    def render(k: int) -> tuple[str, int]:
        asked.append(k)
        return "x" * k, 0

    found, _ = search(render, k0, k_max, budget, tok)
    assert asked and all(0 <= k <= k_max for k in asked)
    assert found is not None  # k = 0 costs nothing
    assert found.kept <= k_max and found.tokens == found.kept <= budget
    assert found.kept >= min(k_max, budget - max(1, budget // 50))


# -- pricing/tokenizers.py (_HuggingFace.prefetch mutmut_13) -----------------------------------


def test_a_batch_of_texts_prefetched_is_counted_as_each_text_alone(tmp_path: Path) -> None:
    """``prefetch`` only counts ahead, in one batch, what ``count`` would count text by text: a
    text's count is of its own tokens, also with an ``hf:`` file whose post-processor adds a
    BOS token (as Llama's do). Counted in another scope (the cache files counts by tenant), the
    same texts are counted one by one: the counts agree."""
    path = bos_tokenizer_file(tmp_path)
    source = HFTokenizer.from_file(str(path))
    spec = f"hf:{path}"
    # enough text for a batch to be worth its threads (64 KiB)
    texts = [
        " ".join(f"prefetched text {t}, line {i} of a long tool output" for i in range(1200))
        for t in range(2)
    ]
    assert sum(map(len, texts)) >= 64 * 1024
    batched = get_tokenizer(spec, b"tenant-a")
    batched.prefetch(texts)
    alone = get_tokenizer(spec, b"tenant-b")
    for text in texts:
        assert batched.count(text) == alone.count(text)
        assert alone.count(text) == len(source.encode(text, add_special_tokens=False).ids)
