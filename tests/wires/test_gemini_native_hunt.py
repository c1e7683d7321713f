"""A bug hunt on the Gemini wire as its clients speak it natively to a Gemini route: routefit in
process, the provider the simulator's own Gemini wire (which refuses what Google refuses), the
``google-genai`` SDK where a client's shape is the point.

Found: a ``systemInstruction`` sent as a plain string (which routefit takes, and which reaches
a chat route) went to Google as it came, a 400 "Invalid value at 'system_instruction'"; a model
named with a ``/`` (an alias ``team/gem``, the SDK's ``tunedModels/NAME``, a percent-encoded
``models%2FNAME``) was an OpenAI-shaped 404 ``unknown path`` under Google's own paths."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient
from test_gemini_native import (
    HEADERS,
    KEY,
    PROVIDER_KEY,
    SMALL_WINDOW,
    Native,
    _long_session,
    _route,
)

from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import asgi_transport

genai = pytest.importorskip("google.genai")
from google.genai import errors, types  # noqa: E402

SLASHED = "team/gem"  # an alias with a slash, as operators name routes after providers
TUNED = "tunedModels/my-tune"  # the SDK's path for a tuned model, mapped by an alias


@pytest.fixture(scope="module")
def native() -> Iterator[Native]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    transport = asgi_transport(create_sim(sim))
    data = {
        "model_list": [
            _route("gem", "gemini-sim", 1_048_576),
            _route("gem-small", "gemini-sim-small", SMALL_WINDOW),
            _route(SLASHED, "gemini-sim", 1_048_576),
            _route(TUNED, "gemini-sim", 1_048_576),
        ],
        "routefit_settings": {
            "store_path": ":memory:",
            "teams": [{"id": "gemini-team", "keys": [KEY]}],
        },
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=transport)) as client:
        yield Native(client, sim, transport)


@pytest.fixture
def sdk(native: Native) -> Any:
    options = types.HttpOptions(base_url="http://testserver", httpx_client=native.client)
    return genai.Client(api_key=KEY, http_options=options)


# -- systemInstruction as a string -------------------------------------------------------------


def test_a_string_system_instruction_reaches_google_as_a_content(native: Native):
    body = {
        "systemInstruction": "Be brief.",
        "contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
    }
    reply = native.client.post("/v1beta/models/gem:generateContent", headers=HEADERS, json=body)
    assert reply.status_code == 200, reply.text
    assert native.seen()["status"] == 200
    sent = json.loads(native.sent().content)
    assert sent["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert sent["contents"] == body["contents"]


def test_a_string_system_instruction_survives_a_fitted_request(native: Native):
    """The same when the fit cut and ``contents`` was rebuilt (the other path out)."""
    body = {**_long_session(12, 120), "system_instruction": "You read files."}
    reply = native.client.post(
        "/v1beta/models/gem-small:generateContent", headers=HEADERS, json=body
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-routefit-actions"] != "none"
    assert native.seen()["status"] == 200
    sent = json.loads(native.sent().content)
    assert sent["system_instruction"] == {"parts": [{"text": "You read files."}]}
    assert "systemInstruction" not in sent


# -- model names with a slash ------------------------------------------------------------------


def test_the_sdk_reaches_an_alias_with_a_slash(sdk: Any, native: Native):
    """The SDK writes ``models/team/gem`` into the path as it is."""
    reply = sdk.models.generate_content(model=SLASHED, contents="hello")
    assert reply.text
    assert native.sent().url.path == "/v1beta/models/gemini-sim:generateContent"
    count = sdk.models.count_tokens(model=SLASHED, contents="hello")
    assert count.total_tokens and count.total_tokens > 0
    chunks = list(sdk.models.generate_content_stream(model=SLASHED, contents="hello"))
    assert "".join(c.text or "" for c in chunks) == reply.text  # the simulator is deterministic


def test_the_sdk_reaches_a_tuned_model_by_its_alias(sdk: Any, native: Native):
    reply = sdk.models.generate_content(model=TUNED, contents="hello")
    assert reply.text
    assert native.sent().url.path == "/v1beta/models/gemini-sim:generateContent"


def test_an_unknown_tuned_model_is_googles_not_found(sdk: Any):
    with pytest.raises(errors.ClientError) as raised:
        sdk.models.generate_content(model="tunedModels/nobody", contents="hello")
    assert raised.value.code == 404
    assert raised.value.status == "NOT_FOUND"
    assert "tunedModels/nobody" in (raised.value.message or "")


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1beta/models/models%2Fgem:generateContent", "gem"),
        ("/v1/models/team%2Fgem:generateContent", SLASHED),
        ("/v1beta/models/team/gem:streamGenerateContent", SLASHED),
    ],
)
def test_percent_encoded_and_slashed_names_route(native: Native, path: str, route: str):
    body = {"contents": [{"parts": [{"text": "hello"}]}]}
    reply = native.client.post(path, headers=HEADERS, json=body)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-routefit-route"] == route


def test_an_unknown_method_on_a_slashed_name_is_googles_not_found(native: Native):
    reply = native.client.post("/v1beta/models/team/gem:embedContent", headers=HEADERS, json={})
    assert reply.status_code == 404
    assert reply.json()["error"]["status"] == "NOT_FOUND"


# -- an empty role -----------------------------------------------------------------------------


def test_an_empty_role_is_the_users_as_google_reads_it(native: Native):
    body = {"contents": [{"role": "", "parts": [{"text": "hello there"}]}]}
    reply = native.client.post("/v1beta/models/gem:generateContent", headers=HEADERS, json=body)
    assert reply.status_code == 200, reply.text
    assert native.seen()["status"] == 200
    assert json.loads(native.sent().content) == body


# -- the client's own Google key on an open gateway ------------------------------------------


def test_an_open_gateway_forwards_the_sdks_own_google_key():
    """A ``forward_client_key`` route on an open gateway forwards the key the client presents;
    the SDK's (and Gemini CLI's) only place for it is ``x-goog-api-key``."""
    own = "sk-google-users-own"
    sim = SimState(config=SimConfig(api_keys=frozenset({own})))
    transport = asgi_transport(create_sim(sim))
    route = _route("gem", "gemini-sim", 1_048_576)
    del route["litellm_params"]["api_key"]
    route["routefit"]["forward_client_key"] = True
    data = {"model_list": [route], "routefit_settings": {"store_path": ":memory:"}}
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=transport)) as client:
        options = types.HttpOptions(base_url="http://testserver", httpx_client=client)
        reply = genai.Client(api_key=own, http_options=options).models.generate_content(
            model="gem", contents="hello"
        )
    assert reply.text
    assert transport.sent[-1].headers["x-goog-api-key"] == own


def test_a_key_in_the_query_never_leaves_routefit_nor_comes_back(native: Native):
    """The team key in ``?key=`` authenticates and goes no further; a wrong one is not echoed."""
    body = {"contents": [{"parts": [{"text": "hello"}]}]}
    path = "/v1beta/models/gem:streamGenerateContent"
    reply = native.client.post(path, params={"key": KEY, "alt": "sse"}, json=body)
    assert reply.status_code == 200, reply.text
    sent = native.sent()
    assert sent.url.query == b"alt=sse"
    assert (
        KEY not in str(sent.url)
        and KEY not in str(sent.headers)
        and KEY.encode() not in sent.content
    )
    wrong = "not-the-team-key-0123456789"
    refused = native.client.post(path, params={"key": wrong, "alt": "sse"}, json=body)
    assert refused.status_code == 401
    assert refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert wrong not in refused.text and wrong[-12:] not in refused.text


# -- snake_case function calls and responses ---------------------------------------------------


def _snake_session(turns: int, size: int) -> list[dict[str, Any]]:
    """``_long_session``'s rounds with the parts spelled as Google's proto names them
    (``function_call`` / ``function_response``), which its JSON parser takes as well."""
    contents: list[dict[str, Any]] = []
    for i in range(turns):
        contents += [
            {"role": "user", "parts": [{"text": f"step {i}: read the next file"}]},
            {"role": "model", "parts": [{"function_call": {"name": "read_file", "args": {}}}]},
            {
                "role": "user",
                "parts": [
                    {
                        "function_response": {
                            "name": "read_file",
                            "response": {"output": f"line {i} of a long file\n" * size},
                        }
                    }
                ],
            },
        ]
    return [*contents, {"role": "user", "parts": [{"text": "now summarise what you read"}]}]


def _calls(content: dict[str, Any]) -> int:
    return sum("functionCall" in p or "function_call" in p for p in content["parts"])


def _responses(content: dict[str, Any]) -> int:
    return sum("functionResponse" in p or "function_response" in p for p in content["parts"])


def test_snake_case_calls_keep_their_responses_when_the_fit_cuts(native: Native):
    """``function_call`` / ``function_response`` parts are a call and its response, as their
    camel-case spelling is: the fit keeps or removes them together. They were read as text, so
    the fit elided a round's call and kept its response (Google's 400: a function response
    turn must come right after a function call turn), or rewrote the response as text."""
    body = {"contents": _snake_session(12, 300)}
    reply = native.client.post(
        "/v1beta/models/gem-small:generateContent", headers=HEADERS, json=body
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-routefit-actions"] != "none"
    contents = json.loads(native.sent().content)["contents"]
    for i, content in enumerate(contents):
        if _responses(content):
            assert i and _calls(contents[i - 1]) == _responses(content), contents[i - 1 : i + 1]
        if _calls(content):
            assert i + 1 < len(contents) and _responses(contents[i + 1]) == _calls(content)
    assert contents[-1]["parts"] == body["contents"][-1]["parts"]
