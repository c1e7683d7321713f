"""The chat stream relay's per-event fast paths say exactly what the general rules say: the
``Renamer`` gives each event the bytes ``as_alias`` gives it, whatever the provider names."""

from __future__ import annotations

import itertools

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wires.chat import Renamer, as_alias

MODELS = ["gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini", 'we"ird\\name', ""]
#: Content: what could be mistaken for the model member once escaped, and the characters JSON
#: escapes or a byte search could trip on.
TEXTS = [
    "",
    "hello",
    '"model":"x"',
    '{"model": "gpt-4o"}',
    '"model" : "gpt-4o"',
    "model",
    '\\"model\\":',
    'a "quoted" \\ back\\slash',
    "line\nbreak: {}",
    "é☃ non-ASCII",
    "gpt-4o",
]


def event(model: str | None, text: str, reordered: bool, spaced: bool) -> bytes:
    """One chunk: ``model`` (None: no model key) after the content when ``reordered``, and
    ``"model" :`` spaced out when ``spaced``."""
    chunk: dict[str, object] = {"id": "chatcmpl-1", "object": "chat.completion.chunk"}
    if model is not None:
        chunk["model"] = model
    chunk["choices"] = [{"index": 0, "delta": {"content": text}}]
    if reordered:
        chunk = {k: chunk[k] for k in sorted(chunk, reverse=True)}
    data = orjson.dumps(chunk)
    if spaced:
        data = data.replace(b'"model":', b'"model" : ')
    return b"data: " + data + b"\n\n"


#: Every event the four choices make (6 × 11 × 2 × 2), built once: an event is then one draw.
#: Drawing its four parts per event, or a text a character at a time, cost ~2 ms of CPU an
#: example and failed Hypothesis's too-slow health check on a loaded 2-core machine.
EVENTS = [
    event(model, text, reordered, spaced)
    for model, text, reordered, spaced in itertools.product(
        [None, *MODELS], TEXTS, (False, True), (False, True)
    )
]
events = st.sampled_from(EVENTS)


@settings(deadline=None)
@given(alias=st.sampled_from(MODELS), stream=st.lists(events, max_size=8))
def test_renamer_matches_as_alias_on_every_event(alias: str, stream: list[bytes]) -> None:
    rename = Renamer(alias)
    assert [rename(e) for e in stream] == [as_alias(e, alias) for e in stream]
