"""Fault injection: per request (``x-sim-fault`` header) or queued globally (``POST /sim/faults``).

Syntax of one fault (several may be joined with commas, e.g. ``delay:2,status:503``):

``status:N``      answer with HTTP N (400-599) in the wire's error shape (429: ``Retry-After: 1``)
``delay:S``       wait S seconds (float) before doing anything else
``reset``         close the connection without sending a response
``malformed``     200 with a body that is not valid JSON (streams: one invalid ``data:`` event)
``cut-stream:N``  streams stop after N events, no ``[DONE]`` / ``message_stop``, connection closed
                  (a non-stream request answers with a truncated JSON body, connection closed)
``no-usage``      omit usage (non-stream ``usage`` key; the stream's usage chunk / fields)
``lie-usage:X``   report X prompt tokens (any finite number: negative, fractional, 1e30) in the
                  usage of a chat completion or a Message, streamed or not — a provider whose
                  usage must not be believed
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Fault", "FaultPlan", "FaultQueue", "FaultRule", "parse_faults", "plan_faults"]

KINDS = ("status", "delay", "reset", "malformed", "cut-stream", "no-usage", "lie-usage")


@dataclass(frozen=True)
class Fault:
    kind: str
    value: float = 0

    def __str__(self) -> str:
        if self.kind in ("status", "cut-stream"):
            return f"{self.kind}:{int(self.value)}"
        if self.kind in ("delay", "lie-usage"):
            return f"{self.kind}:{self.value:g}"
        return self.kind


def parse_fault(text: str) -> Fault:
    kind, _, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise ValueError(f"unknown fault {text!r} (known: {', '.join(KINDS)})")
    if kind in ("reset", "malformed", "no-usage"):
        if arg:
            raise ValueError(f"fault {kind!r} takes no argument")
        return Fault(kind)
    try:
        value = float(arg)
    except ValueError:
        raise ValueError(f"fault {kind!r} needs a number: {text!r}") from None
    if kind == "status" and not (value.is_integer() and 400 <= value <= 599):
        raise ValueError(f"status fault must be an HTTP status 400-599: {text!r}")
    if kind == "cut-stream" and not (value.is_integer() and value >= 0):
        raise ValueError(f"cut-stream needs a whole number of events: {text!r}")
    if kind == "lie-usage" and not math.isfinite(value):
        raise ValueError(f"lie-usage needs a finite number (JSON has no other): {text!r}")
    if kind == "delay" and not 0 <= value <= 3600:
        raise ValueError(f"delay must be 0-3600 seconds: {text!r}")
    return Fault(kind, value)


def parse_faults(text: str | None) -> list[Fault]:
    if not text:
        return []
    return [parse_fault(part) for part in text.split(",") if part.strip()]


@dataclass
class FaultRule:
    """Faults to inject into the next ``count`` matching requests (``count=None``: all of them)."""

    faults: list[Fault]
    count: int | None = 1
    model: str | None = None
    path: str | None = None

    def matches(self, model: str | None, path: str) -> bool:
        if self.count is not None and self.count <= 0:
            return False
        if self.model is not None and self.model != model:
            return False
        return self.path is None or self.path == path

    def as_json(self) -> dict[str, Any]:
        return {
            "fault": ",".join(map(str, self.faults)),
            "count": self.count,
            "model": self.model,
            "path": self.path,
        }

    @classmethod
    def from_json(cls, raw: Any) -> FaultRule:
        if isinstance(raw, str):
            return cls(parse_faults(raw))
        if not isinstance(raw, Mapping) or not isinstance(raw.get("fault"), str):
            raise ValueError('each fault must be a string or {"fault": "...", "count": N}')
        count = raw.get("count", 1)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise ValueError("count must be an integer or null (forever)")
        faults = parse_faults(raw["fault"])
        if not faults:
            raise ValueError("empty fault")
        return cls(faults, count, raw.get("model"), raw.get("path"))


@dataclass
class FaultQueue:
    rules: list[FaultRule] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rules: Iterable[FaultRule]) -> None:
        with self._lock:
            self.rules.extend(rules)

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def take(self, model: str | None, path: str) -> list[Fault]:
        """The faults of the first rule matching this request (consuming one of its count)."""
        with self._lock:
            for rule in self.rules:
                if rule.matches(model, path):
                    if rule.count is not None:
                        rule.count -= 1
                    faults = list(rule.faults)
                    break
            else:
                faults = []
            self.rules = [r for r in self.rules if r.count is None or r.count > 0]
            return faults

    def as_json(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.as_json() for r in self.rules]


@dataclass(frozen=True)
class FaultPlan:
    """The faults of one request, combined."""

    delay: float = 0.0
    status: int | None = None
    reset: bool = False
    malformed: bool = False
    cut_after: int | None = None
    no_usage: bool = False
    names: tuple[str, ...] = ()
    #: The prompt token count the usage reports instead of the truth (``lie-usage``).
    lie: int | float | None = None

    @property
    def any(self) -> bool:
        return bool(self.names)


def plan_faults(faults: Iterable[Fault]) -> FaultPlan:
    delay, status, cut = 0.0, None, None
    reset = malformed = no_usage = False
    lie: int | float | None = None
    names = []
    for f in faults:
        names.append(str(f))
        if f.kind == "delay":
            delay += f.value
        elif f.kind == "status" and status is None:
            status = int(f.value)
        elif f.kind == "reset":
            reset = True
        elif f.kind == "malformed":
            malformed = True
        elif f.kind == "cut-stream":
            cut = int(f.value)
        elif f.kind == "no-usage":
            no_usage = True
        elif f.kind == "lie-usage":
            lie = int(f.value) if f.value.is_integer() else f.value
    return FaultPlan(delay, status, reset, malformed, cut, no_usage, tuple(names), lie)
