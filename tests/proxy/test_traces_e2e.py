"""Traces through ``routefit serve``: configured by the standard ``OTEL_*`` variables, exported
over OTLP/HTTP to a real receiver started here, which decodes what the SDK sent."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from harness import Running, free_port, gateway_config, run_routefit, sim_route
from inprocess import run_inprocess
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KEY = "sk-traced-" + uuid.uuid4().hex
TRACE_ID = uuid.uuid4().hex
PARENT_ID = uuid.uuid4().hex[:16]


class Receiver:
    """An OTLP/HTTP trace receiver: every exported span, decoded, with its resource."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    for resource_spans in request.resource_spans:
                        resource = _values(resource_spans.resource.attributes)
                        for scope in resource_spans.scope_spans:
                            receiver.spans += [(resource, span) for span in scope.spans]
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, count: int, trace_id: str | None = None, **attrs: Any) -> list[Any]:
        """The spans (at least ``count``) whose attributes include ``attrs`` (of one trace)."""
        deadline = time.monotonic() + 20
        while True:
            with self.lock:
                found = [
                    (r, s)
                    for r, s in self.spans
                    if all(_values(s.attributes).get(k) == v for k, v in attrs.items())
                    and trace_id in (None, s.trace_id.hex())
                ]
            if len(found) >= count:
                return found
            assert time.monotonic() < deadline, f"spans with {attrs} never arrived"
            time.sleep(0.05)

    def children(self, span: Any, at_least: int = 0, name: str | None = None) -> list[Any]:
        """``span``'s children (named ``name``), once at least ``at_least`` have arrived (or
        what came within 20 s: the assertion that follows says what is missing)."""
        deadline = time.monotonic() + 20
        while True:
            with self.lock:
                found = [
                    s
                    for _, s in self.spans
                    if s.parent_span_id == span.span_id and name in (None, s.name)
                ]
            if len(found) >= at_least or time.monotonic() > deadline:
                return found
            time.sleep(0.05)


def _values(attributes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in attributes:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which) if which else None
    return out


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(scope="module")
def gw(sim: Any, receiver: Receiver, tmp_path_factory: Any) -> Iterator[Running]:
    routes = [
        sim_route(
            "priced",
            sim.base_url,
            "gpt-4o",
            model_info={"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
        ),
        sim_route("other", sim.base_url, "gpt-4o"),
        # two deployments of one model (each entry one), so that a failure is failed over
        sim_route("flaky", sim.base_url, "gpt-4o"),
        sim_route("flaky", sim.base_url, "gpt-4o"),
    ]
    teams = [{"id": "traced", "keys": [KEY], "routes": ["priced", "flaky"]}]
    path = gateway_config(tmp_path_factory.mktemp("traces") / "c.yaml", routes, teams=teams)
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
        "OTEL_SERVICE_NAME": "routefit-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    with run_routefit(path, env=env) as running:
        yield running


def _told(sim: Any, text: str) -> tuple[str, str, str]:
    """(trace id, parent span id, flags) of the ``traceparent`` the provider received with
    the request whose last message is ``text``."""
    [seen] = [
        r
        for r in sim.requests(path="/v1/chat/completions")
        if r["body"]["messages"][-1]["content"] == text
    ]
    version, trace_id, span_id, flags = seen["headers"]["traceparent"].split("-")
    assert version == "00"
    return trace_id, span_id, flags


def _ask(v1: str, model: str, text: str, headers: dict[str, str]) -> httpx.Response:
    """One chat request whose user message is ``text``."""
    return httpx.post(
        v1 + "/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=30,
    )


def test_a_request_is_one_server_span_with_genai_attributes_and_phase_children(
    gw: Running, receiver: Receiver, sim: Any
) -> None:
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    reply = _ask(
        gw.v1, "priced", "trace me", {"authorization": f"Bearer {KEY}", "traceparent": traceparent}
    )
    assert reply.status_code == 200
    usage = reply.json()["usage"]
    [(resource, span)] = receiver.wait_for(
        1, **{"routefit.team": "traced", "gen_ai.request.model": "priced"}
    )
    assert resource["service.name"] == "routefit-under-test"
    # the client's trace, the client's span as parent
    assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == PARENT_ID
    assert span.kind == span.SPAN_KIND_SERVER and span.name == "chat priced"
    attrs = _values(span.attributes)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai" and attrs["gen_ai.system"] == "openai"
    assert attrs["gen_ai.response.model"] == "openai/gpt-4o"
    assert attrs["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert attrs["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert (
        attrs["routefit.route"] == "priced"
        and attrs["routefit.deployment"] == reply.headers["x-routefit-deployment"]
    )
    assert attrs["routefit.estimate"] == int(reply.headers["x-routefit-prompt-tokens"])
    assert attrs["routefit.budget"] == int(reply.headers["x-routefit-budget"])
    assert attrs["http.response.status_code"] == 200 and "error.type" not in attrs
    names = _child_names(receiver, span)
    assert names == ["routefit.budget", "routefit.fit", "routefit.provider"]
    for child in receiver.children(span):
        assert child.trace_id == span.trace_id
        assert span.start_time_unix_nano <= child.start_time_unix_nano
        assert child.end_time_unix_nano <= span.end_time_unix_nano
        if child.name == "routefit.provider":
            assert child.kind == child.SPAN_KIND_CLIENT
            # the provider was told of the client's trace, its parent routefit's provider span
            assert _told(sim, "trace me") == (TRACE_ID, child.span_id.hex(), "01")


def _child_names(receiver: Receiver, span: Any) -> list[str]:
    return sorted(c.name for c in receiver.children(span, at_least=3))


def test_a_refusal_is_a_span_with_its_error_and_a_new_trace_without_traceparent(
    gw: Running, receiver: Receiver
) -> None:
    reply = _ask(gw.v1, "other", "not mine", {"authorization": f"Bearer {KEY}"})
    assert reply.status_code == 404  # another team's route, answered as one that is not there
    [(_, span)] = receiver.wait_for(1, **{"http.response.status_code": 404})
    attrs = _values(span.attributes)
    assert (
        attrs["routefit.team"] == "traced" and attrs["error.type"] == reply.json()["error"]["code"]
    )
    assert span.status.code == span.status.STATUS_CODE_ERROR
    assert span.trace_id.hex() != TRACE_ID and not span.parent_span_id


def test_a_request_without_traceparent_begins_a_trace_the_provider_joins(
    gw: Running, receiver: Receiver, sim: Any
) -> None:
    reply = _ask(gw.v1, "priced", "untraced client", {"authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200
    trace_id, span_id, flags = _told(sim, "untraced client")
    [(_, span)] = receiver.wait_for(1, trace_id, **{"routefit.kind": "serve"})
    assert not span.parent_span_id  # a new trace, begun by routefit
    assert _child_names(receiver, span)[-1] == "routefit.provider"
    [provider] = [c for c in receiver.children(span) if c.name == "routefit.provider"]
    assert provider.span_id.hex() == span_id and flags == "01"


@pytest.mark.parametrize(
    "sent",
    [f"00-{TRACE_ID}-{PARENT_ID}-01", None, "00-zz-not-hex-01"],
    ids=["valid", "none", "bad"],
)
def test_without_traces_the_client_s_traceparent_goes_to_the_provider_as_it_came(
    sim: Any, tmp_path: Any, sent: str | None
) -> None:
    """No OTLP endpoint: routefit records no trace, so it is no hop of its own in one — a
    valid ``traceparent`` passes through unchanged, none (or an invalid one) stays none."""
    path = gateway_config(tmp_path / "c.yaml", [sim_route("gpt-4o", sim.base_url)])
    text = "pass it on " + uuid.uuid4().hex
    with run_inprocess(path) as running:
        reply = _ask(running.v1, "gpt-4o", text, {"traceparent": sent} if sent else {})
    assert reply.status_code == 200
    [seen] = [
        r
        for r in sim.requests(path="/v1/chat/completions")
        if r["body"]["messages"][-1]["content"] == text
    ]
    expected = sent if sent and "zz" not in sent else None
    assert seen["headers"].get("traceparent") == expected


def test_each_provider_attempt_is_a_span_of_its_own(
    gw: Running, receiver: Receiver, sim: Any
) -> None:
    """A failover: the first attempt's 500 and the answering attempt are two provider spans
    under the request's, each naming its deployment, the failed one with its error, each with
    the span id its own request told the provider."""
    text = "fail over " + uuid.uuid4().hex
    sim.inject("status:500", 1, path="/v1/chat/completions")
    reply = _ask(gw.v1, "flaky", text, {"authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-routefit-attempts"] == "2"
    sent = [
        r["headers"]["traceparent"].split("-")
        for r in sim.requests(path="/v1/chat/completions")
        if r["body"]["messages"][-1]["content"] == text
    ]
    assert len(sent) == 2 and sent[0][1] == sent[1][1]  # one trace, two spans told
    [(_, span)] = receiver.wait_for(1, sent[0][1], **{"routefit.kind": "serve"})
    attempts = receiver.children(span, at_least=2, name="routefit.provider")
    attempts.sort(key=lambda c: c.start_time_unix_nano)
    assert [c.span_id.hex() for c in attempts] == [sent[0][2], sent[1][2]]
    failed, answered = (_values(c.attributes) for c in attempts)
    assert failed["error.type"] and "error.type" not in answered
    assert attempts[0].status.code == attempts[0].status.STATUS_CODE_ERROR
    assert answered["routefit.deployment"] == reply.headers["x-routefit-deployment"]
    # failed over: the other deployment of the model answered
    assert failed["routefit.deployment"] != answered["routefit.deployment"]
