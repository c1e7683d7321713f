"""Edges of the calibrator that mutation testing found unpinned (docs/mutation.md)."""

from __future__ import annotations

from proxy.calibrator import prefix_keys


def test_a_message_with_its_keys_in_another_order_keeps_its_prefix_key() -> None:
    # Clients serialise the same message with its keys in any order (a JSON object is
    # unordered): the prefix key is of the value, so the next turn still finds its anchor.
    ordered = [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {}}]}]
    shuffled = [{"content": [{"cache_control": {}, "text": "a", "type": "text"}], "role": "user"}]
    tools = [{"name": "t", "input_schema": {"type": "object", "properties": {}}}]
    tools_shuffled = [{"input_schema": {"properties": {}, "type": "object"}, "name": "t"}]
    assert prefix_keys("r", "m", tools, ordered) == prefix_keys("r", "m", tools_shuffled, shuffled)
    assert prefix_keys("r", "m", tools, ordered, "team") != prefix_keys("r", "m", tools, ordered)
