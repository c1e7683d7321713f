"""The strategy protocol: one way of making a request smaller, as the fit runs it.

``strategies.fit`` takes the policy's strategies in its order and, after each, asks whether the
request fits yet: each strategy is a pure function from the fit's state (the messages as they
stand, priced) and its context (route, budget, policy) to a new state. There are two kinds,
because two kinds exist:

* a ``Rewrite`` changes messages on its own, once, when the policy reaches it (capping): its
  output is every later strategy's input, and it says what it did (an ``Action``);
* a ``Move`` of the cache-stable planner (``strategies.elide``: offloading images, masking tool
  outputs, eliding units) has no function of its own. Providers cache exact prefixes, so where
  each move cuts is chosen together with the others, by replaying the conversation's growth
  (checkpoints, a pinned head that may shrink, ``Fit.settled_mask``); the planner reads extra
  inputs no rewrite needs (per-unit costs under every combination of moves, the schedule's
  knobs). Applying a move allows it; what it did is tallied when the plan is built. A new move
  is a change to the planner, not a module beside it.

A new rewrite is one module exposing its ``Rewrite`` and one line in ``strategies.registry``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from pricing.messages import Message
from pricing.meter import Pressure
from pricing.route import Route
from strategies.actions import Action, Label

__all__ = ["FitContext", "FitState", "Knobs", "Move", "Rewrite", "Strategy"]


class Knobs(Protocol):
    """The policy's knobs a strategy reads (``strategies.policy.FitPolicy`` has them all; the
    policy names the registered strategies, so they cannot name it). A strategy with a knob of
    its own adds the knob to ``FitPolicy`` and here."""

    @property
    def message_cap_tokens(self) -> int | None: ...

    @property
    def cap_fraction(self) -> float: ...

    @property
    def cap_roles(self) -> frozenset[str]: ...


@dataclass(frozen=True, slots=True)
class FitContext:
    """What every strategy may read besides the conversation; the same for a whole fit."""

    route: Route
    policy: Knobs
    #: The prompt budget the fit aims at.
    budget: int
    #: The fit's meter (memoised per request: a message is priced once however often asked).
    measure: Callable[[Sequence[Message]], Pressure]


@dataclass(frozen=True, slots=True)
class FitState:
    """Where a fit stands between two strategies."""

    messages: tuple[Message, ...]
    #: The meter's price of ``messages``.
    pressure: Pressure
    #: The planner's moves allowed so far (``Move.name``), in the order they were applied.
    moves: tuple[str, ...] = ()
    #: What the rewrites did so far.
    done: tuple[Action, ...] = ()


class Strategy(Protocol):
    @property
    def name(self) -> str:
        """What ``FitPolicy.strategies`` calls it."""
        ...

    @property
    def label(self) -> Label:
        """How reports name what it did."""
        ...

    def apply(self, state: FitState, context: FitContext) -> FitState: ...


#: A rewrite's function: the state and context in, the messages out and what changed.
RewriteFn = Callable[[FitState, FitContext], tuple[tuple[Message, ...], Action]]


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A strategy that rewrites messages by itself; a state it did not change is returned as
    is (the same messages, not re-priced)."""

    name: str
    label: Label
    rewrite: RewriteFn

    def apply(self, state: FitState, context: FitContext) -> FitState:
        messages, action = self.rewrite(state, context)
        if not action.count:
            return state
        pressure = context.measure(messages)
        return replace(state, messages=messages, pressure=pressure, done=(*state.done, action))


@dataclass(frozen=True, slots=True)
class Move:
    """A move of the cache-stable planner; applying it allows the planner to make it, on routes
    where ``allowed`` (None: every route)."""

    name: str
    label: Label
    allowed: Callable[[Route], bool] | None = None

    def apply(self, state: FitState, context: FitContext) -> FitState:
        if self.allowed is not None and not self.allowed(context.route):
            return state
        return replace(state, moves=(*state.moves, self.name))
