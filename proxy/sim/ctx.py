"""One provider request as the simulator's wire handlers see it: its own module, so that the
app (which routes to the wire modules) and the wire modules (which take a ``Ctx``) both point
down at it instead of at each other."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.sim.faults import FaultPlan
from proxy.sim.state import SimState

__all__ = ["Ctx", "Handler"]


@dataclass
class Ctx:
    """One provider request being handled."""

    state: SimState
    request: Request
    body: Any
    number: int
    plan: FaultPlan
    chunk_delay: float
    #: The request's entry in the request log (handlers add prompt_tokens, cached_tokens).
    entry: dict[str, Any] = field(default_factory=dict)

    @property
    def request_id(self) -> str:
        return f"req_sim{self.number:06d}"


Handler = Callable[[Ctx], Awaitable[Response]]
