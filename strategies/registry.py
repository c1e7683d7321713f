"""The fit strategies, in the order a default policy applies them.

``FitPolicy.strategies`` names a selection of these, in an order of its own; the report lists
every one of them (``strategies.actions``). A new strategy: one module exposing its object,
one line here.
"""

from __future__ import annotations

from strategies.cap import CAP
from strategies.elide import ELIDE
from strategies.mask import MASK
from strategies.offload import OFFLOAD
from strategies.strategy import Strategy

__all__ = ["NAMES", "STRATEGIES", "by_name"]

#: Masking old tool outputs comes before eliding whole turns (bench/REPORT.md, section 5b,
#: measures the orders).
STRATEGIES: tuple[Strategy, ...] = (
    CAP,
    OFFLOAD,
    MASK,
    ELIDE,
)

#: What a policy may name, in the default order.
NAMES = tuple(s.name for s in STRATEGIES)

_BY_NAME = {s.name: s for s in STRATEGIES}


def by_name(name: str) -> Strategy:
    return _BY_NAME[name]
