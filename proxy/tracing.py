"""OTLP traces of the request log's records: one server span per request, with the GenAI semantic
conventions and routefit's own attributes, and a child span per phase (the fit, the budget, the
provider).

Off unless configured the way every OpenTelemetry service is: an ``OTEL_EXPORTER_OTLP_ENDPOINT``
(or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) in the environment, and the ``otel`` extra
installed; ``OTEL_SDK_DISABLED=true`` turns it off again. The exporter (OTLP over HTTP) reads
the rest of the standard variables itself (headers, timeout, compression, protocol); the
resource reads ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (``routefit`` when no
service name is set).

The spans are drawn from the finished ``RequestRecord`` (``proxy.records``) after the response
has gone, with the times the record measured: the request path carries no tracing code, and
the trace says exactly what the log line says. A client's W3C ``traceparent`` makes the
server span its child.

The provider is told the trace too: each attempt carries a ``traceparent`` naming the span
that will stand for it (``provider_traceparent``, chosen before the request is sent), and the
span drawn later takes that id (``_Chosen``), so the provider's own trace hangs under routefit's
provider span. Without traces configured, routefit is a hop that records nothing: the client's
``traceparent`` goes to the provider as it came.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from proxy.records import Phase, RequestRecord, Sink

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator

__all__ = ["Traces", "attributes", "configured", "provider_traceparent", "traces_from_env"]

log = logging.getLogger("routefit")

#: ``gen_ai.operation.name`` per record kind: a count endpoint and a dry run call no model.
_OPERATION = {"serve": "chat", "count": "count_tokens", "fit": "fit"}
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def configured(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, the SDK not disabled)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name) for name in _ENDPOINTS)


def _parsed(traceparent: str | None) -> tuple[str, str, str] | None:
    """(trace id, parent span id, flags) of a valid version-00 ``traceparent``; else None."""
    if not traceparent:
        return None
    parts = traceparent.strip().lower().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    trace_id, span_id, flags = parts[1], parts[2], parts[3]
    hexes = all(c in "0123456789abcdef" for c in trace_id + span_id + flags)
    sizes = len(trace_id) == 32 and len(span_id) == 16 and len(flags) == 2
    if not (hexes and sizes) or set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return trace_id, span_id, flags


def provider_traceparent(client: str | None, traced: bool, before: str | None = None) -> str | None:
    """The ``traceparent`` an attempt sends to the provider. Traced: the client's trace (else
    the one an earlier attempt of the request began, ``before``, else a new one) with a new span
    id, the one the attempt's span is drawn with later. Not traced: the client's own header,
    passed on (None when it sent none or an invalid one)."""
    found = _parsed(client)
    if not traced:
        return client.strip() if found is not None and client is not None else None
    found = found or _parsed(before)
    trace_id, flags = (found[0], found[2]) if found else (secrets.token_hex(16), "01")
    return f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"


def attributes(record: RequestRecord, provider: str | None) -> dict[str, Any]:
    """The server span's attributes: the GenAI conventions, then routefit's own."""
    out: dict[str, Any] = {
        "gen_ai.operation.name": _OPERATION.get(record.kind, record.kind),
        "http.response.status_code": record.status,
        "routefit.kind": record.kind,
        "routefit.wire": record.wire,
        "routefit.stream": record.stream,
    }
    if provider:
        out["gen_ai.provider.name"] = provider
        out["gen_ai.system"] = provider  # the name before semconv 1.37, still read by many
    optional: dict[str, Any] = {
        "gen_ai.request.model": record.route,
        "gen_ai.response.model": record.model,
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": record.cached_tokens,
        "error.type": record.error_code or (str(record.status) if record.status >= 400 else None),
        "routefit.request_id": record.id,
        "routefit.route": record.route,
        "routefit.deployment": record.deployment,
        "routefit.team": record.team,
        "routefit.key_id": record.key_id,
        "routefit.estimate": record.prompt_estimate,
        "routefit.budget": record.budget,
        "routefit.cost_usd": record.cost_usd,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    for name, count, tokens in record.actions:
        out[f"routefit.fit.{name}"] = count
        out[f"routefit.fit.{name}.tokens_removed"] = tokens
    return out


class Traces:
    """The request log's trace sink: a record in, its spans out (batched, exported off the
    event loop by the SDK's own thread)."""

    def __init__(
        self, provider: TracerProvider, providers: Mapping[str, str], ids: _Chosen
    ) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._ids = ids
        self._provider = provider
        self._tracer = provider.get_tracer("routefit")
        self._propagator = TraceContextTextMapPropagator()
        #: route alias → its provider (``gen_ai.provider.name``).
        self._providers = dict(providers)

    async def __call__(self, record: RequestRecord) -> None:
        self.draw(record)

    def draw(self, record: RequestRecord) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        carrier = {"traceparent": record.traceparent} if record.traceparent else {}
        parent = self._propagator.extract(carrier)
        told = next((_parsed(p.traceparent) for p in record.phases if p.traceparent), None)
        if told is not None and not carrier:
            # the trace the provider was told of, begun for this request (a client's trace
            # comes with its parent)
            self._ids.trace_id = int(told[0], 16)
        start = int(record.time * 1e9)
        operation = _OPERATION.get(record.kind, record.kind)
        name = f"{operation} {record.route}" if record.route else operation
        provider = self._providers.get(record.route or "")
        span = self._tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes(record, provider),
            start_time=start,
        )
        self._ids.trace_id = None
        if record.status >= 500 or (record.status >= 400 and record.error_code):
            span.set_status(Status(StatusCode.ERROR, record.error_code or str(record.status)))
        inside = trace.set_span_in_context(span)
        for phase in record.phases:
            child_start = start + int(phase.start_ms * 1e6)
            kind = SpanKind.CLIENT if phase.name == "provider" else SpanKind.INTERNAL
            sent = _parsed(phase.traceparent)
            if sent is not None:
                self._ids.span_id = int(sent[1], 16)  # the span the provider was told of
            child = self._tracer.start_span(
                f"routefit.{phase.name}",
                context=inside,
                kind=kind,
                attributes=_phase_attributes(record, phase, provider),
                start_time=child_start,
            )
            self._ids.span_id = None
            if phase.error is not None:
                child.set_status(Status(StatusCode.ERROR, phase.error))
            child.end(end_time=child_start + int(phase.duration_ms * 1e6))
        span.end(end_time=start + int(record.latency_ms * 1e6))

    def close(self) -> None:
        """Export what is batched, then stop (the lifespan's end)."""
        self._provider.shutdown()


def _phase_attributes(record: RequestRecord, p: Phase, provider: str | None) -> dict[str, Any]:
    phase = p.name
    if phase == "fit":
        fit = {"routefit.estimate": record.prompt_estimate, "routefit.budget": record.budget}
        for name, count, _tokens in record.actions:
            fit[f"routefit.fit.{name}"] = count
        return {k: v for k, v in fit.items() if v is not None}
    if phase == "budget":
        return {"routefit.team": record.team} if record.team else {}
    if phase == "provider":
        out: dict[str, Any] = {"gen_ai.operation.name": "chat"}
        if provider:
            out["gen_ai.provider.name"] = provider
        if record.model:
            out["gen_ai.request.model"] = record.model
        if p.deployment is not None:
            out["routefit.deployment"] = p.deployment
        if p.error is not None:
            out["error.type"] = p.error
        return out
    return {}


def traces_from_env(
    providers: Mapping[str, str], environ: Mapping[str, str] = os.environ
) -> tuple[Sink, Callable[[], None]] | None:
    """(sink, close) when the environment configures traces and the SDK is installed; None
    otherwise (a configured endpoint without the ``otel`` extra is logged, not fatal)."""
    if not configured(environ):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "an OTLP endpoint is configured but the OpenTelemetry SDK is not installed "
            "(pip install 'routefit[otel]'): no traces"
        )
        return None
    service = environ.get("OTEL_SERVICE_NAME") or "routefit"
    ids = _Chosen()
    resource = Resource.create({SERVICE_NAME: service})
    provider = TracerProvider(resource=resource, id_generator=cast("IdGenerator", ids))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    traces = Traces(provider, providers, ids)
    log.info("traces: OTLP/HTTP export as service %r", service)
    return traces, traces.close


class _Chosen:
    """The SDK's id generator, but an id set beforehand is handed out once: the spans are drawn
    after the request, with the ids the provider was already told of (``Traces.draw`` sets them
    just before the span that takes them, on the one event loop that draws)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        self._random = RandomIdGenerator()
        self.trace_id: int | None = None
        self.span_id: int | None = None

    def generate_trace_id(self) -> int:
        chosen, self.trace_id = self.trace_id, None
        return chosen if chosen is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        chosen, self.span_id = self.span_id, None
        return chosen if chosen is not None else self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        """Whether trace ids are random (W3C trace context level 2): a client's need not be."""
        return False
