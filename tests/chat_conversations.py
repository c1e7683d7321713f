"""Generated chat conversations, for the properties of whatever reads one message by message
(the message memo, the parse memo)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict]:
    """Roles in any order (framing depends on the role before a message), names, tool calls
    and their outputs, several text parts."""
    out: list[dict] = []
    for i in range(draw(st.integers(1, 12))):
        role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
        if role == "tool":
            out.append({"role": "tool", "tool_call_id": f"c{i}", "content": draw(words)})
        elif role == "assistant" and draw(st.booleans()):
            args = json.dumps({"q": draw(words)})
            call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": args}}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            parts = [{"type": "text", "text": draw(words)} for _ in range(draw(st.integers(1, 3)))]
            message: dict = {"role": role, "content": parts}
            if draw(st.booleans()):
                message["name"] = draw(st.sampled_from(["ana", "bo"]))
            out.append(message)
    return out
