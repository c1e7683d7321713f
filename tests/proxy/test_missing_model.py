"""A body without ``model`` is "model is required" (param ``model``) on every wire and dry run,
in each wire's own error shape — and in ``routefit price`` / ``fit`` (tests/proxy/test_cli.py),
which said "unknown model alias ''" (issue 32)."""

from __future__ import annotations

import pytest
from harness import gateway_config
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import load_config
from proxy.store.sqlite import SqliteStore

HI = [{"role": "user", "content": "hi"}]
ROUTE = {
    "model_name": "local",
    "litellm_params": {"model": "openai/gpt-4o", "api_base": "sim://local"},
}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory):
    config = gateway_config(tmp_path_factory.mktemp("model") / "routefit.yaml", [ROUTE])
    with TestClient(create_app(load_config(config), store=SqliteStore(":memory:"))) as client:
        yield client


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": HI}),
        ("/v1/chat/completions", {"model": "", "messages": HI}),
        ("/v1/responses", {"input": "hi"}),
        ("/routefit/fit", {"messages": HI}),
        ("/routefit/fit?wire=responses", {"input": "hi"}),
    ],
)
def test_openai_wires_say_model_is_required(client, path, body) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert (error["message"], error["param"], error["code"]) == (
        "model is required",
        "model",
        "missing_model",
    )


@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/messages/count_tokens", "/routefit/fit?wire=messages"]
)
def test_anthropic_wire_says_model_is_required_in_its_shape(client, path) -> None:
    r = client.post(path, json={"max_tokens": 10, "messages": HI})
    assert r.status_code == 400
    assert r.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "model is required"},
    }
