"""What the fit did to a request, per strategy: the report's actions, as one mapping.

Every reader (the ``x-routefit-actions`` header, the metrics, ``routefit fit``, the dashboard,
``/routefit/fit``) iterates over the mapping and names what it shows by the strategy's ``Label``,
so a new strategy shows up everywhere without any reader naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["Action", "Actions", "Label"]


@dataclass(frozen=True, slots=True)
class Label:
    """How readers name what one strategy did."""

    #: The action's name: the header's and the JSON's key, the metrics' ``action`` label.
    action: str
    #: What its count counts: the JSON key beside ``tokens_removed`` (``messages``, ``images``).
    counts: str
    #: For people: "{verb} {count} {noun}" (``masked 5 tool output(s)``).
    verb: str
    noun: str


@dataclass(frozen=True, slots=True)
class Action:
    """What one strategy did to one request: how many it changed, and the tokens that left."""

    label: Label
    count: int = 0
    tokens: int = 0

    @property
    def name(self) -> str:
        return self.label.action

    def describe(self) -> str:
        return f"{self.label.verb} {self.count} {self.label.noun}, {self.tokens:,} tokens removed"


@dataclass(frozen=True, slots=True)
class Actions(Mapping[str, Action]):
    """Action name → Action, one per registered strategy in the registry's order (zeros kept,
    so the JSON lists every action the house knows). Immutable, like the report it rides on."""

    entries: tuple[Action, ...] = ()

    @classmethod
    def tally(cls, labels: Iterable[Label], done: Iterable[Action]) -> Actions:
        """One entry per label, in their order, summing what ``done`` records for each."""
        sums = {label.action: [0, 0] for label in labels}
        for action in done:
            sums[action.name][0] += action.count
            sums[action.name][1] += action.tokens
        return cls(tuple(Action(label, *sums[label.action]) for label in labels))

    def __getitem__(self, name: str) -> Action:
        for action in self.entries:
            if action.name == name:
                return action
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (action.name for action in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def taken(self) -> tuple[Action, ...]:
        """The actions that changed something, in order."""
        return tuple(action for action in self.entries if action.count)

    def header(self) -> str:
        """The ``x-routefit-actions`` header value: ``none`` or ``capped=2,masked=5,...``."""
        return ",".join(f"{a.name}={a.count}" for a in self.taken()) or "none"
