"""A tool's schema is priced whole on OpenAI routes, not only where the cookbook's rule looks.

The cookbook prices a function's name and description and, per top-level property, its name,
type, description and enum. Schemas say more: Pydantic writes every optional field as a union
with null (``anyOf``) and every nested model as a definition a ``$ref`` points at (``$defs``),
with titles and defaults throughout. All of it reaches the model in some rendering, so all of
it is priced (as its compact JSON where the rule is silent). These properties hold for any
rendering that shows the schema's text: they do not restate routefit's rule."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_tools import read_file_schema

from pricing.framing import default_framing, tools_tokens
from pricing.tokenizers import get_tokenizer

FRAMING = default_framing("gpt-4o", "o200k_base")
TOK = get_tokenizer("o200k_base")
WORDS = "the file path to read relative to repository root line range inclusive encoding".split()


def _function(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"name": "read_file", "description": "Read a file.", "parameters": parameters}


def _price(parameters: dict[str, Any]) -> int:
    return tools_tokens((_function(parameters),), FRAMING, TOK)


def _descriptions(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and isinstance(value, str):
                yield value
            else:
                yield from _descriptions(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _descriptions(item)


def test_a_pydantic_schema_is_priced_above_every_description_it_holds() -> None:
    """The nested model's descriptions live in ``$defs``, the optional fields' types in
    ``anyOf``: a price that looked only at top-level properties missed both."""
    schema = read_file_schema()
    assert "$defs" in schema and any("anyOf" in p for p in schema["properties"].values())
    texts = sum(TOK.count(text) for text in _descriptions(schema))
    assert _price(schema) >= texts + len(schema["properties"]) * FRAMING.prop_key
    # the definitions alone are priced: without them the same tool is cheaper by at least
    # their descriptions
    bare = {k: v for k, v in schema.items() if k != "$defs"}
    defs = sum(TOK.count(text) for text in _descriptions(schema["$defs"]))
    assert _price(schema) - _price(bare) >= defs


def test_what_the_cookbook_prices_is_priced_as_before() -> None:
    """A schema of only what the rule covers costs what the cookbook says (its published
    weather tool: 101 tokens with its one-message prompt; tests/pricing/test_framing.py)."""
    plain = {"type": "object", "properties": {"city": {"type": "string", "description": "x"}}}
    with_required = {**plain, "required": ["city"]}
    assert _price(with_required) == _price(plain)


_TEXT = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
_LEAF = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "boolean"])}, optional={"description": _TEXT}
)


def _wrap(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda s: {"type": "array", "items": s}, inner),
        st.builds(lambda s, d: {"anyOf": [s, {"type": "null"}], "description": d}, inner, _TEXT),
        st.builds(
            lambda props: {"type": "object", "properties": props},
            st.dictionaries(st.sampled_from(WORDS), inner, min_size=1, max_size=3),
        ),
    )


_SCHEMA = st.recursive(_LEAF, _wrap, max_leaves=8)


@st.composite
def _parameters(draw: st.DrawFn) -> dict[str, Any]:
    properties = draw(st.dictionaries(st.sampled_from(WORDS), _SCHEMA, min_size=1, max_size=3))
    defs = draw(st.dictionaries(st.sampled_from(WORDS).map(str.title), _SCHEMA, max_size=2))
    params: dict[str, Any] = {"type": "object", "properties": properties}
    for name in defs:
        properties[f"ref_{name}"] = {"$ref": f"#/$defs/{name}"}
    if defs:
        params["$defs"] = defs
    return params


def _description_paths(schema: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "description" and isinstance(value, str):
                yield (*path, key)
            else:
                yield from _description_paths(value, (*path, key))
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            yield from _description_paths(item, (*path, i))


@given(_parameters())
@settings(max_examples=60, deadline=None)
def test_every_description_anywhere_in_a_schema_is_priced(params: dict[str, Any]) -> None:
    """Lengthen any one description, at any depth (a nested object's property, an array's
    items, a union's member, a definition): the tools cost more."""
    before = _price(params)
    for path in _description_paths(params):
        longer = copy.deepcopy(params)
        node = longer
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] += " reading every encoded line of the repository's files"
        assert _price(longer) > before, path
