"""The fitted conversation written back as Anthropic messages, with its cache breakpoints.

Unchanged messages are the very objects the client sent (an Anthropic message whose every
fragment survived untouched is reused whole), so a prefix the provider cached on the previous
turn is byte-identical on this one. What the fit changed is rendered from its parts:

* a capped or offloaded ``tool_result`` keeps its block's other fields (``is_error``,
  ``cache_control``) with new content; a user fragment keeps every block the fit did not touch;
* assistant turns are never rewritten: ``thinking`` blocks carry signatures and ``tool_use``
  blocks must match their results, so an assistant fragment is always sent as it came (the
  default policy never alters one; a policy that caps assistant messages does not reach them);
* an elision marker becomes a text message in the role the fit gave it; consecutive fragments
  of one role are merged into one message, as Anthropic requires alternation. A marker the fit
  gave the assistant's role that follows an assistant turn is the user's instead, merged at the
  head of the user message after it (which, its tool calls never being split from their
  results, starts with no ``tool_result``): merging it into that assistant turn would rewrite it.

**Breakpoints** (``cache_control``, at most 4 per request): client breakpoints in what is kept
stay where they are (those in elided messages go with them). routefit adds up to three. The
first: when the fit elided, on the last block before the first marker (the end of its pinned head,
which its cut points keep stable from turn to turn); when it masked without eliding, on the last
output masked before the first place where the previous request's masking differs
(``Fit.settled_mask``: after a mask step or a masked head, the prefix both requests share ends
there; elsewhere it is the last masked output). The second, on the block before the newest
assistant message: where the previous request ended, hence where the client's last-block
breakpoint wrote, so the whole previous request is read back whenever the fit changed nothing
in it (docs/fitting.md, "Messages: where reads land"). The third, on the last masked output, for
the next request to read. None is added when the request already carries 4, counting every
``cache_control`` Anthropic counts: on tools, on ``system`` blocks, on message blocks, on the
blocks inside a ``tool_result`` and the request's own (automatic caching). A chosen block in
an assistant turn moves to the last block of the latest user message before it (assistant
turns are never rewritten).

**Lifetimes.** Anthropic refuses (400) a request whose breakpoints mix lifetimes out of order:
every 1-hour one (``"ttl": "1h"``) must come before any 5-minute one (no ``ttl``, or ``"5m"``),
reading tools, system, then messages (a ``tool_result``'s inner blocks before the block's own
mark; the request's own mark last). A breakpoint routefit adds lives as long as the longest
the client set after it: an hour when one after it does (so it never precedes a longer one),
else Anthropic's default (``{"type": "ephemeral"}``, as before). The client's own marks are
never changed: a client that misorders them itself gets the provider's 400, relayed, and
routefit adds no misordered pair of its own (an hour's mark reads the same prefix a 5-minute
one would, so the lifetime costs only the dearer write of what the client already keeps an
hour).

**Image labels.** A base64 image goes out labelled as its bytes say
(``pricing.probe.media_type_of``: the format the probe priced it as), not as the client
labelled it (``true_labels``): Anthropic refuses a label the bytes contradict (400 "Image does
not match the provided media type"), and routefit has already read the real format. Decided
where the docs were silent: the rule is the same on every leg that renders an image for
Anthropic (this one and ``proxy.transports.chat_to_messages``); a body whose labels are right
is the very same object (byte-stable), and a corrected one is corrected the same way every turn
(a cached prefix stays byte-identical).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pricing.messages import ImagePart, Message, Part, TextPart
from pricing.probe import media_type_of
from proxy.wires.anthropic_parse import (
    SYSTEM,
    TOOL,
    WHOLE,
    AnthropicRequest,
    Fragment,
    fallback_text,
)
from strategies.mask import MASK_PREFIX

__all__ = ["MAX_BREAKPOINTS", "breakpoints", "mark_head", "render_messages", "true_labels"]

MAX_BREAKPOINTS = 4
_EPHEMERAL = {"type": "ephemeral"}
_HOUR = {"type": "ephemeral", "ttl": "1h"}
_MARKER = "[routefit: "

#: One piece of the output: (anthropic role, blocks or a whole original message, is_marker).
_Piece = tuple[str, "Mapping[str, Any] | list[Mapping[str, Any]]", bool]


def _is_marker(message: Message) -> bool:
    wire = message.wire
    return (
        wire is not None
        and isinstance(wire.get("content"), str)
        and str(wire["content"]).startswith(_MARKER)
        and message.role in ("user", "assistant")
    )


def _part_block(part: Part, original: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A block for a part; the original block when the part still is what it was."""
    if original is not None:
        kind = original.get("type")
        if isinstance(part, ImagePart) and kind in ("image", "document"):
            return original
        if isinstance(part, TextPart) and kind == "text" and original.get("text") == part.text:
            return original
        if (
            isinstance(part, TextPart)
            and kind not in ("text", "image")
            and part.text == fallback_text(original)
        ):
            return original  # a fallback-priced block the fit left as it was
    if isinstance(part, TextPart):
        block: dict[str, Any] = {"type": "text", "text": part.text}
        if original is not None and original.get("cache_control"):
            block["cache_control"] = original["cache_control"]
        return block
    raise AssertionError("images are never created by the fit")


def _blocks_for(parts: Sequence[Part], originals: Sequence[Mapping[str, Any]]) -> list[Any]:
    if len(parts) == len(originals):
        return [_part_block(p, o) for p, o in zip(parts, originals, strict=True)]
    return [_part_block(p, None) for p in parts]


def _tool_block(message: Message, original: Mapping[str, Any]) -> Mapping[str, Any]:
    content = original.get("content")
    inner: list[Mapping[str, Any]]
    if isinstance(content, list):
        inner = [b for b in content if isinstance(b, Mapping)]
    elif isinstance(content, str) and content:
        inner = [{"type": "text", "text": content}]
    else:
        inner = []
    block = dict(original)
    block["content"] = _blocks_for(message.parts, inner)
    return block


def _changed(message: Message, frag: Fragment) -> list[Mapping[str, Any]] | Mapping[str, Any]:
    """The blocks of a fragment the fit changed (capped, images offloaded)."""
    if frag.kind == TOOL:
        return [_tool_block(message, frag.blocks[0])]
    if frag.role in ("assistant", "system") and frag.kind == WHOLE:
        return list(frag.blocks)  # never rewritten (see the module docstring)
    return _blocks_for(message.parts, frag.blocks)


def _pieces(request: AnthropicRequest, fitted: Sequence[Message]) -> list[_Piece]:
    """Fitted messages as pieces, the system message left out (it is the ``system`` field).

    Consecutive unchanged fragments that make up a whole Anthropic message collapse back into
    that message's original object."""
    pieces: list[_Piece] = []
    frags = request.fragments
    raw = request.body["messages"]
    next_original = 0
    run: tuple[int, int] | None = None  # (anthropic index, first piece) of unchanged fragments
    for message in fitted:
        pos = request.position(message)
        if pos is None and _is_marker(message):
            pieces.append((message.role, [{"type": "text", "text": message.text}], True))
            run = None
            continue
        if pos is None:  # a changed copy (capped, offloaded) of a later original
            pos = _original_of(request, message, next_original)
            next_original = pos + 1
            frag = frags[pos]
            if frag.kind != SYSTEM:
                pieces.append((frag.role, _changed(message, frag), False))
            run = None
            continue
        next_original = pos + 1
        frag = frags[pos]
        if frag.kind == SYSTEM:
            continue
        if frag.kind == WHOLE:
            pieces.append((frag.role, raw[frag.index], False))
            run = None
            continue
        if run is None or run[0] != frag.index:
            run = (frag.index, len(pieces))
        pieces.append((frag.role, list(frag.blocks), False))
        if len(pieces) - run[1] == request.counts[frag.index]:
            del pieces[run[1] :]
            pieces.append((frag.role, raw[frag.index], False))
            run = None
    return pieces


def _original_of(request: AnthropicRequest, message: Message, start: int) -> int:
    """The position of the original a changed message stands for: the same tool result, else
    the first later message of its role whose parts line up (offloading keeps their number)."""
    candidates = [
        i
        for i in range(start, len(request.messages))
        if request.messages[i].role == message.role
        and request.messages[i].tool_call_id == message.tool_call_id
    ]
    for i in candidates:
        original = request.messages[i]
        if len(original.parts) == len(message.parts) and all(
            a == b or isinstance(a, ImagePart)
            for a, b in zip(original.parts, message.parts, strict=True)
        ):
            return i
    if not candidates:
        raise ValueError(f"no original for a changed {message.role} message")
    return candidates[0]


def render_messages(
    request: AnthropicRequest, fitted: Sequence[Message], settled: str | None = None
) -> tuple[list[Any], tuple[int, int] | None]:
    """The Anthropic ``messages`` list for a fitted conversation (pieces of one role merged),
    and the (message, block) of the last block before the first elision marker, else of the
    masked tool result answering ``settled`` (the last output the previous request had masked
    too: after a mask step the prefix both share ends there), else of the last masked one."""
    out: list[Any] = []
    role: str | None = None
    blocks: list[Any] | None = None
    head: tuple[int, int] | None = None
    for piece_role, content, marker in _pieces(request, fitted):
        if marker and head is None and out:
            head = (len(out) - 1, len(_as_blocks(out[-1]["content"])) - 1)
        if marker and piece_role == role == "assistant":
            piece_role = "user"  # never merged into an assistant turn: opens the next user one
        if piece_role == role and piece_role != "system":
            if blocks is None:  # merge into a copy of the previous whole message
                prev = out[-1]
                blocks = _as_blocks(prev["content"])
                out[-1] = {**prev, "content": blocks}
            blocks.extend(_content_blocks(content))
            continue
        role = piece_role
        if isinstance(content, Mapping):
            out.append(content)
            blocks = None
        else:
            blocks = list(content)
            out.append({"role": piece_role, "content": blocks})
    if head is None:
        head = _last_masked(out, settled)
    return out, head


def _last_masked(messages: Sequence[Any], call: str | None = None) -> tuple[int, int] | None:
    """The last tool result the fit masked: the masked outputs move only at the fit's cut points,
    so the prefix up to there is what the next turn's cache read lands on."""
    for i in range(len(messages) - 1, -1, -1):
        for j, block in reversed(list(enumerate(_blocks_of(messages[i])))):
            inner = block.get("content")
            first = inner[0] if isinstance(inner, list) and inner else None
            text = first.get("text") if isinstance(first, Mapping) else inner
            masked = block.get("type") == "tool_result" and str(text).startswith(MASK_PREFIX)
            if masked and (call is None or block.get("tool_use_id") == call):
                return i, j
    return None if call is None else _last_masked(messages)


def _content_blocks(content: Mapping[str, Any] | list[Mapping[str, Any]]) -> list[Any]:
    return _as_blocks(content["content"]) if isinstance(content, Mapping) else list(content)


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def breakpoints(body: Mapping[str, Any], messages: Sequence[Any]) -> int:
    """Breakpoints in a request with these messages: blocks with ``cache_control``, and the
    request's own ``cache_control`` (automatic caching: Anthropic puts it on the last block,
    and it is one of the 4; a fifth is refused with 400)."""
    found = int(bool(body.get("cache_control")))
    for tool in body.get("tools") or []:
        found += bool(isinstance(tool, Mapping) and tool.get("cache_control"))
    system = body.get("system")
    for block in system if isinstance(system, list) else []:
        found += bool(isinstance(block, Mapping) and block.get("cache_control"))
    for message in messages:
        for block in _blocks_of(message):
            found += bool(block.get("cache_control"))
            inner = block.get("content")
            if block.get("type") == "tool_result" and isinstance(inner, list):
                found += sum(bool(isinstance(b, Mapping) and b.get("cache_control")) for b in inner)
    return found


def _blocks_of(message: Any) -> list[Mapping[str, Any]]:
    content = message.get("content") if isinstance(message, Mapping) else None
    return [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []


def mark_head(body: Mapping[str, Any], messages: list[Any], at: tuple[int, int]) -> bool:
    """Put a breakpoint on block ``at`` = (message, block) (the message and block become
    copies), then one where the previous request of the session ended, each unless the request
    already has the most it may; whether the first was placed.

    The previous request ended on the block before the newest assistant message (the session
    is append-only), and clients mark their last block, so that is where the last cache write
    landed: a breakpoint there reads it back whenever the fit changed nothing before it, however
    many blocks the new round added (Anthropic looks back only ~20 blocks from a breakpoint).
    ``at`` (the pinned head, or the masked outputs' end) comes first: it survives the fit's jumps.
    Last, when there is room, one on the last masked output: after a mask step ``at`` is where
    the previous request's masking ended, and the next request, its masking unchanged, reads
    back at this one's last masked output only if something wrote there.
    A mark is always a user message's block: assistant turns are never rewritten (a thinking
    block's signature and a tool call's pairing are the client's), so one that falls on an
    assistant turn goes on the last block of the latest user message before it.
    """
    placed = _mark(body, messages, at)
    end = _previous_end(messages)
    if end is not None and end != at:
        _mark(body, messages, end)
    latest = _last_masked(messages)
    if latest is not None and latest > at and latest != end:
        _mark(body, messages, latest)
    return placed


def _previous_end(messages: Sequence[Any]) -> tuple[int, int] | None:
    """The last block before the newest assistant message, if there is one."""
    for i in range(len(messages) - 1, 0, -1):
        if isinstance(messages[i], Mapping) and messages[i].get("role") == "assistant":
            blocks = _as_blocks(messages[i - 1].get("content") or [])
            return (i - 1, len(blocks) - 1) if blocks else None
    return None


def _mark(body: Mapping[str, Any], messages: list[Any], at: tuple[int, int]) -> bool:
    if breakpoints(body, messages) >= MAX_BREAKPOINTS:
        return False
    place = _user_block(messages, at)
    if place is None:
        return False
    i, j = place
    content = _as_blocks(messages[i]["content"])
    block = content[j]
    if block.get("cache_control"):
        return False  # already one there
    mark = _HOUR if _hour_after(body, messages, place) else _EPHEMERAL
    content[j] = {**block, "cache_control": mark}
    messages[i] = {**messages[i], "content": content}
    return True


def _hour_after(body: Mapping[str, Any], messages: Sequence[Any], at: tuple[int, int]) -> bool:
    """Whether a breakpoint after block ``at`` lives an hour (``"ttl": "1h"``): one on a later
    block, on a block inside a later ``tool_result``, or the request's own (automatic caching
    marks the last block). Tools and system come before every message."""
    i, j = at
    if _is_hour(body.get("cache_control")):
        return True
    for n in range(i, len(messages)):
        blocks = _blocks_of(messages[n])
        for block in blocks[j + 1 :] if n == i else blocks:
            inner = block.get("content")
            if _is_hour(block.get("cache_control")) or (
                block.get("type") == "tool_result"
                and isinstance(inner, list)
                and any(isinstance(b, Mapping) and _is_hour(b.get("cache_control")) for b in inner)
            ):
                return True
    return False


def _is_hour(mark: Any) -> bool:
    return isinstance(mark, Mapping) and mark.get("ttl") == "1h"


def _user_block(messages: Sequence[Any], at: tuple[int, int]) -> tuple[int, int] | None:
    """Block ``at`` if its message is the user's, else the last block of the latest user
    message before it (None when there is none, or it has no block)."""
    i, j = at
    while i >= 0 and messages[i].get("role") != "user":
        i, j = i - 1, -1
    if i < 0:
        return None
    count = len(_as_blocks(messages[i]["content"]))
    if not count:
        return None
    return i, (j if j >= 0 else count - 1)


def true_labels(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """``body`` with each base64 image block (a ``tool_result``'s too) labelled as its bytes
    say (module docstring, "Image labels"); the very same object when every label is right."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    fixed: list[Any] | None = None
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        blocks = _labelled(content)
        if blocks is not content:
            fixed = fixed if fixed is not None else list(messages)
            fixed[i] = {**message, "content": blocks}
    return body if fixed is None else {**body, "messages": fixed}


def _labelled(blocks: list[Any]) -> list[Any]:
    out: list[Any] | None = None
    for j, block in enumerate(blocks):
        new = _labelled_block(block)
        if new is not block:
            out = out if out is not None else list(blocks)
            out[j] = new
    return blocks if out is None else out


def _labelled_block(block: Any) -> Any:
    if not isinstance(block, Mapping):
        return block
    kind = block.get("type")
    if kind == "tool_result":
        content = block.get("content")
        if not isinstance(content, list):
            return block
        inner = _labelled(content)
        return block if inner is content else {**block, "content": inner}
    source = block.get("source") if kind == "image" else None
    if not isinstance(source, Mapping) or source.get("type") != "base64":
        return block
    data = source.get("data")
    found = media_type_of(data) if isinstance(data, str) else None
    if found is None or found == source.get("media_type"):
        return block
    return {**block, "source": {**source, "media_type": found}}
