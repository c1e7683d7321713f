"""The client-wire seam: one module per API format a client speaks.

A wire turns a request (its ``RequestContext``: the JSON body, path parameters, query, headers
and the authenticated team, built once by ``proxy.intake``) into the conversation pricing and
fitting reason about (``pricing.messages`` values that keep a reference to the wire objects they
came from), writes the fitted conversation back as a provider request (its own format when the
route speaks it, chat completions otherwise), and reads the provider's answer back into the
client's format. Of everything else it supplies only shapes: its error body, its stream's error
event, its count answer, where its clients put their key. Reading, authenticating, permission,
the error mapping and how a stream ends are the gateway's (``proxy.gateway``, the same for every
wire): adding a wire is one module here plus one line registering its routes in ``proxy.app``.

**Naming a field in the client's terms** (``Wire.where``): a ``RequestError`` a wire's ``parse``
raises names the field as the client wrote it. One raised *after* the parse — pricing's, for an
image, a PDF or a recording it cannot price (``pricing.meter``, ``pricing.bounds``) — names it in
chat's terms of the parsed conversation: ``messages[i].content[j].image_url.url``, ``i`` the
internal message (``ChatRequest.messages``) and ``j`` its part (``Message.parts``). The gateway
has the wire rename it (``client_terms``: its ``param`` and the path in its message) before the
400 goes out, on every path that answers one (served, dry run, count). Each wire maps internal
messages and parts back through what it already keeps of where they came from (the message's
``wire`` object, Anthropic's fragments), working it out only when asked (an error is rare; a
parse pays nothing for it): chat names the field its client used (``image_url`` given as a
string, a ``file``'s ``file_data``); Anthropic the block's ``source.data`` (``source.url``),
inside its ``tool_result`` when there; Responses the item's ``image_url`` or ``file_data``, the
item counted in the client's own ``input`` (a stored chain before it is ``previous_response_id``);
Gemini the part's ``inlineData.data`` (``fileData.fileUri``), inside its ``functionResponse`` when
there, under ``generateContentRequest`` when a count wraps it. Where the exact part cannot be
known the wire names the closest enclosing field it can name rightly (the client's message or
item, else its list of them), never a precise wrong one; a field not in chat's message terms
passes as it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import orjson

from pricing.messages import ChatRequest, Message, TextPart, media_part
from proxy.errors import ProxyError
from proxy.exchange import Completion, EventStream, Outbound
from proxy.exchange.sse import event_data
from proxy.teams import KeyPlaces, Team
from proxy.usage import Usage, normalize_usage
from strategies.fit import Fit, FitError

__all__ = [
    "CHAT_CAPS",
    "MEDIA",
    "Answer",
    "ChatField",
    "Counting",
    "Outcome",
    "RequestContext",
    "Stored",
    "StreamFailed",
    "StreamedCalls",
    "Wire",
    "call_objects",
    "capped_output",
    "chat_field",
    "client_terms",
    "content_text",
    "delta_fields",
    "renamed_cap",
    "room_capped",
]

#: A JSON string value after its key: its escaped contents (the unrolled form: no alternation
#: per character).
_STRING = rb'\s*:\s*"([^"\\]*(?:\\.[^"\\]*)*)"'


def delta_fields(*keys: str) -> re.Pattern[bytes]:
    """A wire's ``generated`` pattern: the escaped contents of each of ``keys``' string values in
    an event. Only the *delta* fields belong (an event that repeats the whole text, like
    Responses' ``*.done``, must never be counted); a quoted key cannot occur inside a JSON string
    (its quotes would be escaped there)."""
    names = "|".join(re.escape(k) for k in keys)
    return re.compile(b'"(?:' + names.encode() + b')"' + _STRING)


log = logging.getLogger("routefit")

#: What pricing names after a media part's path (``messages[i].content[j]``), whatever the part
#: is (an image, a PDF, a recording): the field its data URL sits in, in chat's terms.
MEDIA = ".image_url.url"

_CHAT_FIELD = re.compile(r"messages\[(\d+)\](?:\.content\[(\d+)\])?(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ChatField:
    """A field named in chat's terms of a parsed request (``Wire.where``): internal message
    ``message``, its part ``part`` (None: the message itself), and what follows (``rest``)."""

    message: int
    part: int | None
    rest: str

    @property
    def media(self) -> bool:
        """The field is a media part's data (pricing's ``MEDIA``)."""
        return self.part is not None and self.rest == MEDIA


def chat_field(param: str | None) -> ChatField | None:
    """``param`` read as a field of the internal messages (None: it names something else)."""
    found = _CHAT_FIELD.fullmatch(param) if param else None
    if found is None:
        return None
    part = found.group(2)
    return ChatField(int(found.group(1)), None if part is None else int(part), found.group(3))


def client_terms(
    wire: Wire, request: ChatRequest, message: str, param: str | None
) -> tuple[str, str | None]:
    """A refusal found after ``wire`` parsed ``request`` (pricing's: named in chat's terms),
    its ``message`` and ``param`` naming the field as the client wrote it (``Wire.where``)."""
    if not param:
        return message, param
    try:
        named = wire.where(request, param)
    except Exception:  # a wrong name must not turn the client's 400 into a 500
        log.exception("%s wire: cannot name %s in its own terms", wire.name, param)
        return message, param
    return (message.replace(param, named), named) if named != param else (message, param)


class Stored(Protocol):
    """A stateful API's stored conversation for one request (Responses' ``previous_response_id``
    and ``store``), kept by the shell (``proxy.responses_store``): the wire reads what came
    before and hands over its finished answers, and never touches the store itself."""

    @property
    def prior(self) -> Sequence[Any] | None:
        """The items the named earlier response stands for (its whole input and its output),
        in order; None when the request names none."""

    @property
    def keeping(self) -> bool:
        """Whether the answer handed over is kept, so that ``previous_response_id`` can name
        it: False when the operator keeps nothing (a per-team bound of 0), and once the answer
        handed over (``keep``, ``save``) was not kept after all. An answer says ``store: true``
        only while this holds."""

    def keep(self, response: dict[str, Any], input: list[Any]) -> None:
        """A whole answer (and the input it answered), stored before its body goes out."""

    async def save(self, response: Mapping[str, Any], input: list[Any]) -> None:
        """A stream's final response, stored before its last event goes out."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request as the gateway read it, once (``proxy.intake``): what a wire parses. A wire
    whose model and stream flag sit in the URL reads them from ``path``."""

    #: The JSON body (decoded, within the size limit).
    body: Any
    #: The route's path parameters (``{model}`` ...).
    path: Mapping[str, str]
    query: Mapping[str, str]
    #: The client's headers (case-insensitive).
    headers: Mapping[str, str]
    #: The authenticated team; None when routefit runs open.
    team: Team | None
    #: The path the client called: a wire serving several (``...:generateContent``,
    #: ``...:streamGenerateContent``) reads which one here.
    url_path: str = ""
    #: The body's decoded size in bytes.
    size: int = 0
    #: The body is a count endpoint's (Anthropic's ``count_tokens``: no output settings).
    counting: bool = False
    #: The stored conversation the request continues, resolved by the shell before the wire
    #: parses (``Stored``); None for a stateless wire.
    stored: Stored | None = None
    #: The size its work is judged by (``proxy.fairness.json_work``): ``size``, or more for a
    #: body of many small objects; 0: ``size`` (``judged``).
    work: int = 0

    @property
    def judged(self) -> int:
        """The size its work is judged by, never less than its size (a stored chain grows
        ``size`` after ``work`` was read off the body)."""
        return max(self.work, self.size)

    @property
    def scope(self) -> bytes:
        """Whose prompt this is, as the memos of prompt-derived facts key it (``Route.scope``:
        the team's id; empty when routefit runs open, one tenant)."""
        return self.team.id.encode() if self.team is not None else b""


class StreamFailed(Exception):
    """The provider's own error inside a stream: the gateway ends the stream with the wire's
    error event carrying this message as it is."""


#: Relayed events kept unread at most (``Outcome.relay``): beyond it they are read at once, so
#: a long stream holds its generated text and no more than this of its events.
UNREAD_BYTES = 256 * 1024


@dataclass(slots=True)
class Outcome:
    """What a relayed stream told the gateway once it is over."""

    #: The provider's usage as far as it was reported (Anthropic states the prompt's count in
    #: ``message_start``; OpenAI's chat and Responses only at the end).
    usage: Usage | None = None
    #: The provider's own end-of-stream marker was seen (anything else is a broken stream).
    completed: bool = False
    #: The provider's own error event was relayed as it came: the stream already ends in the
    #: client's words, the gateway adds nothing.
    failed: bool = False
    #: Events relayed to the client so far (counted by the gateway): the next event's place.
    sent: int = 0
    #: The id the stream announced for its answer (Responses: ``response.created``, the
    #: provider's or one the wire made up): the error event that ends the stream names it.
    answer_id: str | None = None
    #: The generated text relayed to the client so far, as escaped JSON string contents: what an
    #: unfinished stream is charged for beyond its prompt.
    relayed: bytearray = field(default_factory=bytearray)
    #: The wire's generated-text pattern (``Wire.generated``; the gateway's relay sets it):
    #: what ``relayed_text`` reads the relayed events with.
    generated: re.Pattern[bytes] | None = None
    #: Relayed events not read yet, and their size: read in bulk when an unfinished stream is
    #: charged (``relayed_text``), or once they pass ``UNREAD_BYTES``. A stream that finishes
    #: (nearly every one) is never searched event by event (without that pass, stream c1 CPU
    #: 0.914×: bench/REPORT.md 1d).
    unread: list[bytes] = field(default_factory=list)
    unread_bytes: int = 0

    def relay(self, event: bytes) -> None:
        """``event`` goes to the client now: its generated text counts as relayed (billed
        whether or not the client reads it)."""
        self.sent += 1
        self.unread.append(event)
        self.unread_bytes += len(event)
        if self.unread_bytes > UNREAD_BYTES:
            self._read()

    def note(self, text: str) -> None:
        """``text`` is generated output the wire's relay read from an event it is about to
        yield, where no string pattern can find it (a Gemini ``functionCall``'s ``args``, an
        object): it counts as relayed with that event's text, after what went before it."""
        self._read()
        self.relayed += orjson.dumps(text)[1:-1]

    def _read(self) -> None:
        if self.generated is not None:
            for event in self.unread:
                for found in self.generated.finditer(event):
                    self.relayed += found.group(1)
        self.unread.clear()
        self.unread_bytes = 0

    def relayed_text(self) -> str:
        """The generated text relayed so far (escapes never span two pieces, so the joined
        contents are one valid JSON string)."""
        self._read()
        if not self.relayed:
            return ""
        try:
            text = orjson.loads(b'"' + bytes(self.relayed) + b'"')
        except orjson.JSONDecodeError:  # not ours to judge: count the bytes as they came
            return self.relayed.decode("utf-8", "replace")
        return text if isinstance(text, str) else ""


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer in the client's wire, with the usage it reported."""

    body: bytes
    usage: Usage | None


def capped_output(body: Mapping[str, Any], fitted: Fit, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """``body`` with the output cap the fit settled (``FitReport.output``: clamped to the
    route's limit, or shrunk to the room beside the prompt) in each of ``keys`` it carries (the
    first when it carries none). The very same object when the client's cap stands, so an
    untouched passthrough body stays byte-stable."""
    output = fitted.report.output
    if output is None or not output.lowered:
        return body
    present = [k for k in keys if k in body] or [keys[0]]
    return {**body, **dict.fromkeys(present, output.sent)}


#: Where a chat body carries its output cap, the current name first.
CHAT_CAPS = ("max_completion_tokens", "max_tokens")


def call_objects(value: Any) -> list[str]:
    """The arguments of each call in a provider's JSON (a whole answer, a stream event's
    candidates) that carries them as an object, as compact JSON: a Messages ``tool_use``
    block's ``input``, a Gemini ``functionCall``'s ``args``. Chat's and Responses'
    ``arguments`` are strings a wire's ``generated`` pattern reads; these are output the model
    generated all the same, and an answer that only called a function read as no output
    (docs/security.md, "Charging on every exit"). Walked without recursion (a provider's
    nesting is not ours to bound)."""
    stack: list[Any] = [value]
    found: list[str] = []
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
            continue
        if not isinstance(item, dict):
            continue
        if item.get("type") == "tool_use" and isinstance(item.get("input"), dict):
            found.append(orjson.dumps(item["input"]).decode())
            continue
        call = item.get("functionCall", item.get("function_call"))
        if isinstance(call, dict) and isinstance(call.get("args"), dict):
            found.append(orjson.dumps(call["args"]).decode())
            continue
        stack.extend(reversed(list(item.values())))
    return found


def renamed_cap(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """A translated chat ``body`` with its output cap under ``name`` (``Deployment.chat_cap``:
    the field the provider takes it in); the very same object when it is there already, or the
    body has no cap."""
    if name in body or not any(k in body for k in CHAT_CAPS):
        return body
    out = {k: v for k, v in body.items() if k not in CHAT_CAPS}
    out[name] = next(body[k] for k in CHAT_CAPS if k in body)
    return out


def room_capped(body: Mapping[str, Any], fitted: Fit, keys: tuple[str, ...]) -> Mapping[str, Any]:
    """``body`` with an output cap in ``keys[0]`` when it carries none in any of ``keys``: the
    room the fitted prompt leaves (``FitReport.output_room``). A translated leg's provider may
    need a cap (Anthropic's ``max_tokens``), and the translation would otherwise send the
    model's whole output limit, which the fit never set aside: a 150k-token prompt with
    Claude's 64,000 is past a 200k window, a request the provider refuses. Uncapped providers
    write no more than this room anyway. The very same object when the body has its cap."""
    room = fitted.report.output_room
    if room is None or any(body.get(k) is not None for k in keys):
        return body
    return {**body, keys[0]: room}


class Wire(Protocol):
    """One client API format."""

    #: The provider wire name of this format (``proxy.exchange.CHAT`` ...).
    name: str
    #: The paths its clients POST requests to (``proxy.app.wire_routes`` registers them; a
    #: path may hold parameters, ``/v1beta/models/{model}:generateContent``: ``ctx.path``).
    paths: tuple[str, ...]
    #: Its API stores conversations (Responses): the shell's session resolves what a request
    #: continues and keeps its answer (``RequestContext.stored``).
    stored: bool
    #: Where its clients present their key (``proxy.teams.KeyPlaces``).
    keys: KeyPlaces
    #: Where its stream events carry generated text (``delta_fields``): what an unfinished
    #: stream is charged for beyond its prompt.
    generated: re.Pattern[bytes]

    def parse(self, ctx: RequestContext) -> ChatRequest:
        """The conversation; ``pricing.messages.RequestError`` names a bad field."""

    def streams(self, request: ChatRequest) -> bool:
        """Whether the client asked for a stream."""

    def outbound(
        self, request: ChatRequest, fitted: Fit, wire: str, headers: Mapping[str, str]
    ) -> Outbound:
        """The fitted request in provider wire ``wire`` (this wire's, or chat by translation);
        ``headers`` are the client's, for the ones a provider must see."""

    def answer(self, request: ChatRequest, completion: Completion, wire: str) -> Answer:
        """A whole provider answer in provider wire ``wire`` as this wire's answer."""

    def relay(
        self, request: ChatRequest, events: EventStream, wire: str, outcome: Outcome
    ) -> AsyncGenerator[bytes, None]:
        """The provider's events as this wire's events; records usage and completion in
        ``outcome``. A provider's error the wire reads raises ``StreamFailed``; how a stream
        that breaks or stops short ends is the gateway's (with ``stream_error``)."""

    def stream_error(self, request: ChatRequest, outcome: Outcome, message: str) -> bytes:
        """The event that ends a stream that cannot end normally, in this wire's shape."""

    def overflow(self, exc: FitError) -> ProxyError:
        """The refusal of a request that cannot be made to fit, as this wire's clients read it."""

    def where(self, request: ChatRequest, param: str) -> str:
        """``param``, a field named in chat's terms of ``request``'s messages (``chat_field``:
        pricing's), as the client's own body names it; the closest enclosing field when the
        exact one cannot be known; any other ``param`` as it is (see the module docstring)."""

    def error_body(self, err: ProxyError) -> bytes:
        """An error's body in this wire's shape (the gateway adds its status and headers)."""


@runtime_checkable
class Counting(Wire, Protocol):
    """A wire with a count endpoint (Anthropic's ``count_tokens``, Gemini's ``countTokens``)."""

    #: The paths of its count endpoint.
    count_paths: tuple[str, ...]

    def counted(self, tokens: int) -> bytes:
        """The count endpoint's answer for ``tokens`` input tokens."""


def chat_content(message: Message) -> str | list[dict[str, Any]]:
    """A message's content as a chat request carries it (a wire translating to chat): its text,
    or text and image parts in order when it has images."""
    if not message.images:
        return message.text
    out: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
        else:
            out.append(media_part(part))
    return out


def refusal_text(said: Mapping[str, Any]) -> str:
    """A chat message's (or delta's) ``refusal``: the model's words declining to answer, which
    a translation says as the answer's text (Anthropic ending ``refusal``, Gemini ``SAFETY``)."""
    refusal = said.get("refusal")
    return refusal if isinstance(refusal, str) else ""


def content_text(content: Any) -> tuple[str, str]:
    """A chat answer's ``content`` (a message's or a delta's) as its text and its reasoning,
    for a wire translating it: a string is its text; a list of chunks (Mistral's reasoning
    models send one, whole and streamed) gives its ``text`` chunks' text and its ``thinking``
    chunks' (their ``thinking`` a string or a list of text chunks); anything else, nothing."""
    if isinstance(content, str):
        return content, ""
    if not isinstance(content, list):
        return "", ""
    text: list[str] = []
    thinking: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            text.append(part["text"])
        elif kind == "thinking":
            inner = part.get("thinking")
            chunks = inner if isinstance(inner, list) else [{"text": inner}]
            thinking += [
                c["text"]
                for c in chunks
                if isinstance(c, Mapping) and isinstance(c.get("text"), str)
            ]
    return "".join(text), "".join(thinking)


class StreamedCalls:
    """The tool calls of a streamed chat answer, for a wire assembling them (one instance per
    stream, per choice): which call each ``tool_calls`` delta belongs to (``slot``), and, for a
    wire that sends each call whole, the calls gathered (``add``, ``whole``).

    A call is its ``index``, as OpenAI streams it; but OpenAI-compatible providers do not all
    number their calls: Ollama streams every call of a parallel batch at ``index`` 0, others
    leave ``index`` out (Gemini's and Mistral's compatible endpoints). Each of them still gives
    every call its own ``id`` on its first fragment, so a delta naming an ``id`` other than the
    one of the call open at its index starts a new call; a delta without one continues the call
    at its index (OpenAI's fragments after the first, a provider repeating the id on each)."""

    __slots__ = ("at", "calls", "ids")

    def __init__(self) -> None:
        self.ids: list[str | None] = []  # each call's id, in the order the calls began
        self.at: dict[int, tuple[int, int]] = {}  # the provider's index → the call open there
        self.calls: dict[tuple[int, int], dict[str, Any]] = {}  # ``add``'s, by slot

    def slot(self, call: Mapping[str, Any]) -> tuple[int, int]:
        """The call ``call`` belongs to: its provider's index (-1 when it gave none) and the
        order it began in, which sort the calls as the provider numbered them."""
        index = call.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else -1
        named = call.get("id")
        named = named if isinstance(named, str) and named else None
        open_ = self.at.get(index)
        if open_ is not None and (named is None or self.ids[open_[1]] in (None, named)):
            if named is not None:
                self.ids[open_[1]] = named  # an id a provider sent after the call's first fragment
            return open_
        self.at[index] = (index, len(self.ids))
        self.ids.append(named)
        return self.at[index]

    def add(self, call: Mapping[str, Any]) -> None:
        """One delta: its call's id and name (the first given), its arguments' fragment."""
        slot = self.calls.setdefault(self.slot(call), {"id": None, "name": None, "args": []})
        fn = call.get("function") or {}
        slot["id"] = slot["id"] or call.get("id")
        slot["name"] = slot["name"] or fn.get("name")
        if fn.get("arguments"):
            slot["args"].append(fn["arguments"])

    def whole(self) -> list[tuple[Any, Any, str]]:
        """Each call added, in the provider's order: its id, name and arguments."""
        return [(c["id"], c["name"], "".join(c["args"])) for _, c in sorted(self.calls.items())]


async def chat_chunks(
    events: EventStream, outcome: Outcome
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """A chat stream read for a wire that translates it: each chunk parsed, its usage noted in
    ``outcome``, the provider's own error raised as ``StreamFailed``; ``None`` once, at the
    provider's ``[DONE]`` (the wire writes its closing events, then marks the stream complete).
    An event without data (an SSE comment, a ping) keeps the connection open and is skipped; data
    that is not a JSON object is a chunk of the answer routefit cannot read, raised as one of
    ``UNREADABLE`` (the gateway ends the stream with the wire's error event): skipped, the
    client got an answer with a piece missing as if it were whole."""
    async for event in events:
        data = event_data(event)
        if data is None or not data.strip():
            continue
        if data.strip() == b"[DONE]":
            yield None
            return
        obj = orjson.loads(data)  # orjson.JSONDecodeError is a ValueError: UNREADABLE
        if not isinstance(obj, dict):
            raise ValueError("a chat chunk that is not a JSON object")
        if isinstance(obj.get("error"), Mapping):
            raise StreamFailed(str(obj["error"].get("message") or "upstream error"))
        if obj.get("usage") is not None:
            outcome.usage = normalize_usage(obj["usage"]) or outcome.usage
        yield obj
