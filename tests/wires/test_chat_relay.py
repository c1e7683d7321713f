"""The chat stream relay's per-event fast paths say exactly what the general rules say: the
``Renamer`` gives each event the bytes ``as_alias`` gives it, whatever the provider names."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.wires.chat import Renamer, as_alias

models = st.sampled_from(["gpt-4o", "gpt-4o-2024-08-06", "gpt-4o-mini", 'we"ird\\name', ""])
texts = st.text(max_size=30) | st.sampled_from(['"model":"x"', '{"model": "gpt-4o"}', "model"])


@st.composite
def events(draw: st.DrawFn) -> bytes:
    chunk: dict[str, object] = {"id": "chatcmpl-1", "object": "chat.completion.chunk"}
    if draw(st.booleans()):
        chunk["model"] = draw(models)
    chunk["choices"] = [{"index": 0, "delta": {"content": draw(texts)}}]
    if draw(st.booleans()):  # the model key after the content, or spaced out
        chunk = {k: chunk[k] for k in sorted(chunk, reverse=True)}
    data = orjson.dumps(chunk)
    if draw(st.booleans()):
        data = data.replace(b'"model":', b'"model" : ')
    return b"data: " + data + b"\n\n"


# Generating up to 8 JSON events an example is slow by Hypothesis's clock on a busy 2-core
# machine (its health check failed there); the budget is the same, only the check is off.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alias=models, stream=st.lists(events(), max_size=8))
def test_renamer_matches_as_alias_on_every_event(alias: str, stream: list[bytes]) -> None:
    rename = Renamer(alias)
    assert [rename(e) for e in stream] == [as_alias(e, alias) for e in stream]
