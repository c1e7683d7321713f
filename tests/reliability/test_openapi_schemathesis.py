"""Schema-driven fuzzing: schemathesis reads routefit's own ``/openapi.json`` (``proxy.openapi``)
and sends schema-valid and schema-violating requests to every operation of a real
``routefit serve`` (teams, admin key, budgets) in front of the provider simulator.

Checks on every answer: not a 5xx, a documented status, a documented content type, a body that
conforms to the documented schema (errors in the wire's own shape: Anthropic's under
``/v1/messages``, OpenAI's elsewhere), never a traceback. Every wire is exercised: chat,
Anthropic Messages (translated to the chat routes; native passthrough is fuzzed in
``test_fuzz_endpoints``), Responses (native) with its stored responses, the dry run, the
dashboard.

No Anthropic route here: schema-valid chat bodies reach it through litellm, which fails on some
(``response_format: json_schema`` without ``schema``: a KeyError inside litellm), answered 502.

Offline: the schema comes from the gateway under test. ``RELIABILITY_SCALE`` multiplies the
examples.

Not checked: schemathesis' ``negative_data_rejection``. routefit is lenient by design about
fields it does not price (it forwards them and the provider decides), so a schema-violating
``temperature`` may be refused by the provider (passed through as its 4xx) or accepted by it.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import httpx
import pytest
from harness import gateway_config, run_routefit, sim_route
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from relkit import SCALE, Proc, record
from wire_shapes import check_wire_error_shape

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is in the test extra")
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

ADMIN = "sk-admin-" + uuid.uuid4().hex
TEAM = "sk-team-" + uuid.uuid4().hex
EXAMPLES = 25 * SCALE


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    url = sim.base_url
    routes = [
        sim_route("gpt-4o", url),
        sim_route(
            "small",
            url,
            "gpt-4o-small",
            model_info={"max_input_tokens": 8192, "max_output_tokens": 1024},
        ),
    ]
    config = gateway_config(
        tmp_path_factory.mktemp("schemathesis") / "c.yaml",
        routes,
        admin_key=ADMIN,
        max_body_bytes=1_000_000,
        teams=[
            {
                "id": "alpha",
                "keys": [TEAM],
                "quotas": {"tokens_per_minute": 100_000_000, "tokens_per_day": 1_000_000_000},
            }
        ],
    )
    # Its memory is measured for the record (Proc): a process of its own.
    with run_routefit(config) as running:
        yield running


#: The team's key: the document names the models the caller may use (none without a key).
AS_TEAM = {"authorization": f"Bearer {TEAM}"}


def test_openapi_document_describes_every_endpoint_and_holds_no_secret(gw):
    r = httpx.get(gw.base_url + "/openapi.json", headers=AS_TEAM)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {
        "/",
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/responses/{response_id}/input_items",
        "/v1/responses/input_tokens",
        "/routefit/fit",
        "/v1/models",
        "/healthz",
        "/readyz",
        "/metrics",
        "/routefit/calibration",
        "/routefit/teams/{team}/usage",
        "/routefit/ui",
        "/routefit/ui/static/{name}",
        "/routefit/ui/data",
        "/routefit/ui/requests",
        "/routefit/ui/session",
        "/health",
        "/health/liveliness",
        "/health/liveness",
        "/health/readiness",
        "/routefit/requests",
        "/routefit/reload",
        "/v1/embeddings",
        *(
            f"/{version}/models/{{model}}:{method}"
            for version in ("v1beta", "v1")
            for method in ("generateContent", "streamGenerateContent", "countTokens")
        ),
    }
    schemas = doc["components"]["schemas"]
    for name in ("ChatCompletionRequest", "MessagesRequest", "ResponsesRequest"):
        assert schemas[name]["properties"]["model"]["enum"] == ["gpt-4o", "small"]
    anonymous = httpx.get(gw.base_url + "/openapi.json").json()["components"]["schemas"]
    assert "enum" not in anonymous["ChatCompletionRequest"]["properties"]["model"]
    assert {"messages", "tools", "max_tokens", "stream"} <= set(
        schemas["ChatCompletionRequest"]["properties"]
    )
    assert {"system", "thinking", "max_tokens"} <= set(schemas["MessagesRequest"]["properties"])
    assert {"input", "previous_response_id", "store"} <= set(
        schemas["ResponsesRequest"]["properties"]
    )
    messages_400 = doc["paths"]["/v1/messages"]["post"]["responses"]["400"]
    assert messages_400["content"]["application/json"]["schema"]["$ref"].endswith("/AnthropicError")
    for secret in ("sk-sim", ADMIN, TEAM, "127.0.0.1"):
        assert secret not in r.text
    schema = schemathesis.openapi.from_url(gw.base_url + "/openapi.json", headers=AS_TEAM)
    labels = {op.ok().label for op in schema.get_all_operations()}
    assert "POST /v1/chat/completions" in labels and "HEAD /" in labels
    assert len(labels) == 37, sorted(labels)


def _headers(path: str) -> dict[str, str]:
    admin = ("/routefit/calibration", "/routefit/teams", "/routefit/ui", "/routefit/requests")
    if path.startswith(admin):
        return {"authorization": f"Bearer {ADMIN}"}
    return {"authorization": f"Bearer {TEAM}"}


def test_schemathesis_finds_no_server_error_or_nonconformance(gw):
    schema = schemathesis.openapi.from_url(gw.base_url + "/openapi.json", headers=AS_TEAM)
    proc = Proc(gw.process.pid)
    rss_before = proc.rss()
    statuses: Counter[int] = Counter()
    per_operation: dict[str, dict[str, int]] = {}
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        modes = [schemathesis.GenerationMode.POSITIVE]
        if operation.method.upper() == "POST" or "{" in operation.path:
            modes.append(schemathesis.GenerationMode.NEGATIVE)  # something to violate
        for mode in modes:
            seen: Counter[int] = Counter()
            headers = _headers(operation.path)
            label = operation.label

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case) -> None:
                response = case.call(headers=headers, timeout=30)  # noqa: B023
                seen[response.status_code] += 1  # noqa: B023
                statuses[response.status_code] += 1
                case.validate_response(response, checks=checks)
                if response.headers.get("content-type", [""])[0].startswith("application/json"):
                    check_wire_error_shape(
                        case.path,
                        response.status_code,
                        response.content,
                        label,  # noqa: B023
                        wire=(case.query or {}).get("wire"),
                    )

            try:
                run()
            except Unsatisfiable:
                raise AssertionError(f"{label} ({mode.value}): no case generated") from None
            per_operation[f"{label} ({mode.value})"] = {str(k): v for k, v in sorted(seen.items())}
    rss_after = proc.rss()
    log = gw.log()
    record(
        "schemathesis",
        requests=sum(statuses.values()),
        statuses={str(k): v for k, v in sorted(statuses.items())},
        operations=per_operation,
        seconds=round(time.monotonic() - started, 1),
        rss_before_mb=round(rss_before / 2**20, 1),
        rss_after_mb=round(rss_after / 2**20, 1),
        examples_per_operation_and_mode=EXAMPLES,
    )
    assert not any(s >= 500 for s in statuses), statuses
    assert "Traceback" not in log, log[-3000:]
    assert all(per_operation.values()), per_operation
