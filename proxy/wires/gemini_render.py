"""The fitted conversation written back as Gemini ``contents``, for a provider that speaks it.

When the fit changed nothing the client's body goes as it came (the very object: byte-stable).
Otherwise ``contents`` is rebuilt from the fitted messages, reusing every content object the fit
left whole, so the prefix a provider cached on the previous turn is the same bytes on this one:

* a ``model`` content is never rewritten (thought parts and their ``thoughtSignature`` must go
  back exactly as they came); an elision marker in the model's role is a text content;
* ``functionResponse`` parts (tool messages) gather into the ``user`` content they came from:
  when every one of that content's parts is still the client's, it is the client's content
  itself; a capped or masked response keeps its part's ``name`` and ``id`` with the cut text as
  its ``response`` (the JSON object it still is, else ``{"output": text}``);
* a user message the fit changed (a capped text, an offloaded image) keeps every part it did
  not touch; its new text parts are ``{"text": ...}``;
* ``systemInstruction`` is the client's unless the fit changed it.

A ``systemInstruction`` given as a plain string (which parsing takes, as the chat translation
does) goes as Google's ``Content`` (``{"parts": [{"text": ...}]}``), fit or no fit: Google
refuses a string there (400 "Invalid value at 'system_instruction'").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from pricing.messages import ImagePart, Message, TextPart
from proxy.wires.gemini_parse import GeminiRequest

__all__ = ["native_body"]

_RESPONSE = ("functionResponse", "function_response")


def _is_response(part: Any) -> bool:
    return isinstance(part, Mapping) and any(k in part for k in _RESPONSE)


def _inner(part: Mapping[str, Any]) -> Any:
    return next((part[k] for k in _RESPONSE if k in part), None)


def _response_object(text: str) -> Any:
    """What a cut response's text is as ``response``: its JSON object, else the text."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"output": text}
    return value if isinstance(value, dict) else {"output": text}


def _changed_response(message: Message) -> dict[str, Any]:
    """A capped or masked function response: its call's name and id, the text left."""
    wire = message.wire or {}
    fn: Mapping[str, Any] = next(
        (wire[k] for k in _RESPONSE if isinstance(wire.get(k), Mapping)), {}
    )
    kept = {k: v for k, v in fn.items() if k not in ("response", "parts")}
    kept.setdefault("name", "function")
    text = message.parts[0].text if message.parts and isinstance(message.parts[0], TextPart) else ""
    return {"functionResponse": {**kept, "response": _response_object(text)}}


def _carries(part: Any) -> bool:
    """Whether parsing made a message part of it (a thought or an empty text it skips)."""
    if not isinstance(part, Mapping):
        return False
    return not ("text" in part and (part.get("thought") is True or not part["text"]))


def _plain_parts(content: Mapping[str, Any]) -> list[Any]:
    """The parts of a content the user message was parsed from (no responses, no thoughts,
    no empty text), in the order of the message's parts."""
    return [p for p in content.get("parts") or [] if _carries(p) and not _is_response(p)]


def _user_parts(message: Message) -> list[Any]:
    """A changed user message's parts: the client's where the fit left them, else new text."""
    wire = message.wire or {}
    originals = _plain_parts(wire) if isinstance(wire.get("parts"), list) else []
    if len(originals) != len(message.parts):
        originals = [None] * len(message.parts)
    out: list[Any] = []
    for part, original in zip(message.parts, originals, strict=True):
        same = isinstance(part, TextPart) and original and original.get("text") == part.text
        if original is not None and (isinstance(part, ImagePart) or same):
            out.append(original)
        elif isinstance(part, TextPart):
            out.append({"text": part.text})
    return out


class _Contents:
    """The output ``contents`` being built, with the response parts waiting for their user
    content."""

    def __init__(self, request: GeminiRequest) -> None:
        self.out: list[Any] = []
        self.pending: list[Any] = []
        self.originals = {id(m.wire) for m in request.messages if m.wire is not None}
        #: The content each function response came from, by its inner object (which a capped
        #: or masked copy of the part still holds).
        self.owner: dict[int, Mapping[str, Any]] = {
            id(_inner(part)): content
            for content in request.body.get("contents") or []
            if isinstance(content, Mapping)
            for part in content.get("parts") or []
            if _is_response(part)
        }

    def original(self, message: Message) -> bool:
        return message.wire is not None and id(message.wire) in self.originals

    def response(self, message: Message) -> None:
        self.pending.append(message.wire if self.original(message) else _changed_response(message))

    def _from(self, wire: Mapping[str, Any]) -> bool:
        """Whether every waiting response came from the content ``wire`` is (or copies)."""
        parts = wire.get("parts")
        owners = [self.owner.get(id(_inner(p))) for p in self.pending]
        return parts is not None and all(o is not None and o.get("parts") is parts for o in owners)

    def user(self, message: Message) -> None:
        wire = message.wire or {}
        if not self._from(wire):
            self.flush()  # responses of an earlier content: a content of their own
        if self.original(message):
            plain = _plain_parts(wire)
            source: Mapping[str, Any] | None = wire
        else:
            plain = _user_parts(message) if "parts" in wire else [{"text": message.text}]
            source = None
        self.flush(plain, source)

    def model(self, message: Message) -> None:
        self.flush()
        wire = message.wire or {}
        if self.original(message) or isinstance(wire.get("parts"), list):
            self.out.append(wire)
        else:  # an elision marker in the model's role
            self.out.append({"role": "model", "parts": [{"text": message.text}]})

    def flush(self, plain: Sequence[Any] = (), source: Mapping[str, Any] | None = None) -> None:
        """The waiting responses and ``plain`` as one user content: the client's own content
        when that is exactly what it held."""
        parts = [*self.pending, *plain]
        self.pending = []
        if not parts:
            return
        if source is None and not plain:
            source = self.owner.get(id(_inner(parts[0])))
        if source is not None and _same(parts, source.get("parts") or []):
            self.out.append(source)
            return
        base = {k: v for k, v in (source or {}).items() if k not in ("parts", "content")}
        self.out.append({**base, "role": "user", "parts": parts})


def _same(parts: Sequence[Any], original: Sequence[Any]) -> bool:
    """The parts are the original's own objects, all of those that carry content."""
    kept = [p for p in original if _carries(p)]
    return len(parts) == len(kept) and all(a is b for a, b in zip(parts, kept, strict=True))


def _system_key(body: Mapping[str, Any]) -> str:
    return "systemInstruction" if "systemInstruction" in body else "system_instruction"


def _as_content(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """``body`` with a string ``systemInstruction`` as the ``Content`` Google takes; the very
    same object otherwise (byte-stable)."""
    key = _system_key(body)
    text = body.get(key)
    if not isinstance(text, str):
        return body
    return {**body, key: {"parts": [{"text": text}]}}


def native_body(request: GeminiRequest, fitted_body: Any, messages: Sequence[Message]) -> Any:
    """The body to send: the client's when the fit changed nothing, else with ``contents``
    (and a changed ``systemInstruction``) rebuilt from ``messages``; either way in the shapes
    Google takes (``_as_content``)."""
    body = request.body
    if fitted_body is body:
        return _as_content(body)
    contents = _Contents(request)
    system: Message | None = None
    for message in messages:
        if message.role == "system":
            system = message
        elif message.role == "tool":
            contents.response(message)
        elif message.role == "assistant":
            contents.model(message)
        else:
            contents.user(message)
    contents.flush()
    out = {**body, "contents": contents.out}
    if system is not None and not contents.original(system):
        out.pop("system_instruction", None)
        out["systemInstruction"] = {"parts": [{"text": system.text}]}
    elif system is None:
        out.pop(_system_key(body), None)
    return _as_content(out)
