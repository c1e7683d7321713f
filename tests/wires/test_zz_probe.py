import json
from typing import Any
import httpx
from test_translation_hunt2 import gw, provider, fresh  # noqa
from test_translation_hunt import Answer, Provider, PNG
from media_files import text_pdf, document_block
from proxy.sim.wire_openai import validate_chat

def test_probe(gw: Any, fresh: Provider) -> None:
    pdf = document_block(text_pdf(1, 50))
    body = {"model": "chat", "max_tokens": 50, "tools": [{"name": "now", "input_schema": {"type": "object"}}], "messages": [
        {"role": "user", "content": [pdf, {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain doc"}}, {"type": "text", "text": "read"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "now", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True, "content": [{"type": "text", "text": "boom"}, pdf]}, {"type": "text", "text": "go"}]},
    ]}
    r = httpx.post(gw.base_url + "/v1/messages", json=body, timeout=30)
    print(r.status_code, r.text[:300])
    sent = fresh.requests[-1][1]
    print(json.dumps(sent, indent=0)[:3000])
    validate_chat(sent)
