"""Spend in USD per team and per key, over time, from the request log's records.

The records are the store's bounded per-team lists (``proxy.records``: the newest
``request_log.keep`` per team), so the figures cover what those lists still hold — every worker's
and every replica's requests, not only this process's — and the page says from when. A record
without a price (a route with no prices, a request that never reached the provider) counts as a
request and its tokens, never as $0 spent: ``unpriced`` says how many there were.

Pure: records in, one JSON-ready document out; the time bins are of a round width (a minute, five
minutes, an hour ...) so the chart's bars mean the same thing from one poll to the next.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.records import ANONYMOUS, RequestRecord

__all__ = ["BIN_WIDTHS", "MAX_BINS", "MIN_BINS", "bin_width", "spend"]

#: Candidate bar widths in seconds, smallest first.
BIN_WIDTHS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400, 7 * 86400)
#: The most and the fewest bars the chart draws.
MAX_BINS = 36
MIN_BINS = 12


def bin_width(span: float) -> int:
    """The smallest round width that covers ``span`` seconds in at most ``MAX_BINS`` bars."""
    for width in BIN_WIDTHS:
        if span / width < MAX_BINS - 1:
            return width
    return BIN_WIDTHS[-1]


@dataclass(slots=True)
class _Tally:
    """One team's or one key's sums."""

    requests: int = 0
    errors: int = 0
    unpriced: int = 0
    usd: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    last: float = 0.0
    bins: dict[int, float] = field(default_factory=dict)

    def add(self, r: RequestRecord, slot: int) -> None:
        self.requests += 1
        self.errors += r.status >= 400
        self.prompt_tokens += _tokens(r.prompt_tokens)
        self.output_tokens += _tokens(r.output_tokens)
        self.last = max(self.last, r.time)
        if r.cost_usd is None:
            self.unpriced += 1
            return
        self.usd += r.cost_usd
        self.bins[slot] = self.bins.get(slot, 0.0) + r.cost_usd

    def as_dict(self, bins: int) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "unpriced": self.unpriced,
            "usd": round(self.usd, 6),
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "last": round(self.last, 3) if self.last else None,
            "series": [round(self.bins.get(i, 0.0), 6) for i in range(bins)],
        }


def _tokens(value: int | str | None) -> int:
    """A provider's figure as recorded (a lying provider's huge one is kept as digits: not
    summed)."""
    return value if isinstance(value, int) and value >= 0 else 0


def spend(
    records: Iterable[RequestRecord],
    now: float,
    keys: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Sums per team and per key, each with its USD per time bin. ``keys``: team → the
    fingerprints of its configured keys, listed even when they sent nothing (a key that is
    never used is worth seeing too)."""
    found = [r for r in records if r.kind == "serve"]
    start_time = min((r.time for r in found), default=now)
    width = bin_width(max(now - start_time, 1.0))
    # the bars end with the current one; at least MIN_BINS of them, so a burst is a bar
    last = math.floor(now / width) * width
    bins = min(MAX_BINS, max(MIN_BINS, int((last - start_time) // width) + 2))
    start = last - (bins - 1) * width
    teams: dict[str, _Tally] = {}
    by_key: dict[tuple[str, str], _Tally] = {}
    for team, fingerprints in (keys or {}).items():
        for fp in fingerprints:
            by_key.setdefault((team, fp), _Tally())
    for r in found:
        slot = min(bins - 1, max(0, int((r.time - start) // width)))
        team = r.team or ANONYMOUS
        teams.setdefault(team, _Tally()).add(r, slot)
        by_key.setdefault((team, r.key_id or ANONYMOUS), _Tally()).add(r, slot)
    order = sorted(teams.items(), key=lambda kv: (-kv[1].usd, -kv[1].requests, kv[0]))
    key_order = sorted(by_key.items(), key=lambda kv: (-kv[1].usd, -kv[1].requests, kv[0]))
    return {
        "since": round(start_time, 3) if found else None,
        "start": start,
        "now": round(now, 3),
        "bin_seconds": width,
        "bins": bins,
        "records": len(found),
        "usd": round(sum(t.usd for t in teams.values()), 6),
        "teams": [{"team": team, **t.as_dict(bins)} for team, t in order],
        "keys": [{"team": team, "key_id": fp, **t.as_dict(bins)} for (team, fp), t in key_order],
    }
