"""The steps every simulated provider endpoint takes before its wire's own work: read the body
(kept, not raised, when it is not JSON: providers report it after auth and faults), log the
request before anything can refuse it, plan the faults it asked for, read its chunk delay.
Shared by the app's endpoints (``proxy.sim.app``) and the Gemini wire's (``wire_gemini``)."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request

from proxy.sim.errors import SimError
from proxy.sim.faults import FaultPlan, parse_faults, plan_faults
from proxy.sim.state import SimState

__all__ = ["chunk_delay", "decode_body", "log_request", "plan_request_faults"]


def decode_body(raw: bytes) -> tuple[Any, str | None]:
    """(the JSON body, why it could not be parsed): a bad body is reported only after auth and
    faults, as the providers do, so it is kept rather than raised here."""
    try:
        return (json.loads(raw), None) if raw else (None, "empty body")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, str(exc)


def log_request(
    state: SimState, request: Request, number: int, raw: bytes, body: Any, parse_error: str | None
) -> dict[str, Any]:
    """Record the request before anything can refuse it, so tests see refused requests too."""
    model = body.get("model") if isinstance(body, dict) else None
    entry: dict[str, Any] = {
        "id": number,
        "time": time.time(),
        "method": request.method,
        "path": request.url.path,
        "headers": dict(request.headers),
        "body": body,
        "raw": raw.decode("utf-8", "replace") if parse_error else None,
        "model": model if isinstance(model, str) else None,
        "faults": [],
        "status": None,
    }
    request.scope["sim.entry"] = entry
    state.record(entry)
    with state.lock:
        state.stats.by_path[request.url.path] += 1
        if entry["model"]:
            state.stats.by_model[entry["model"]] += 1
    return entry


def plan_request_faults(state: SimState, request: Request, entry: dict[str, Any]) -> FaultPlan:
    """The faults this request asked for (``x-sim-fault``) plus those queued for it."""
    try:
        faults = parse_faults(request.headers.get("x-sim-fault"))
    except ValueError as exc:
        raise SimError(400, f"x-sim-fault: {exc}", code="sim_bad_fault") from None
    faults += state.faults.take(entry["model"], request.url.path)
    plan = plan_faults(faults)
    entry["faults"] = list(plan.names)
    if plan.any:
        with state.lock:
            for name in plan.names:
                state.stats.faults[name.split(":")[0]] += 1
    return plan


def chunk_delay(state: SimState, request: Request) -> float:
    if "x-sim-chunk-delay" not in request.headers:
        return state.config.chunk_delay
    try:
        return float(request.headers["x-sim-chunk-delay"])
    except ValueError:
        raise SimError(400, "x-sim-chunk-delay must be a number of seconds") from None
