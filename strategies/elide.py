"""Cache-stable planning of image offload and unit elision.

Providers cache exact prompt prefixes, so a cut that moves every turn makes every turn a cache
miss. routefit's cuts are therefore a function of the append-only conversation that moves rarely:

* **Checkpoints.** Elision cut points are unit boundaries where the cumulative price of the
  conversation crosses a multiple of ``checkpoint_quantum × budget``; offload points are unit
  boundaries after every ``image_offload_step``-th image. Both depend only on the prefix before
  them, so they do not move as the conversation grows.
* **Hysteresis without state.** A gateway replica keeps no per-session state, yet a cut must
  stay put until the budget forces it to move, then leave headroom (the low-water mark). The
  planner gets both by *replaying* the conversation's growth: it walks the prefixes of the unit
  list in order, as if each were a turn, and applies the stateful rule (keep the cut while the
  prefix fits; when it does not, advance to the first checkpoint that brings it under the
  low-water mark). Two consecutive requests share their prefixes, so their replays agree up to the
  older one's end: the later request keeps the earlier one's cut unless its new turns force a jump.
* **Cut late.** Every jump re-sends, uncached, everything after the cut, so the head of the
  conversation (up to ``pin_fraction × budget``) stays pinned and units are elided from the middle.
  A jump costs the tail it keeps after the head, once per headroom of growth: misses per turn
  ≈ new tokens × (1 + tail / headroom), window use ≈ budget − headroom / 2 (docs/fitting.md,
  "Choosing the schedule"), so the head takes all but a quantum of tail and a quantum of headroom.
* **Shrink the head, do not drop it.** When a new turn is too big for the room the pinned head
  leaves, the head is cut back to the longest prefix of itself that fits: a prefix of the pinned
  head is still the provider's cached prefix, where the protected head alone would re-send it.
* **Offload after a head too.** An offload step changes the prompt at its oldest image still
  sent: from the start of the conversation, each step would re-send nearly the whole prompt.
  Images in the image head (``Schedule.image_head`` of the budget) stay until nothing after it
  is left to offload, then go at once, as masking's verbatim head does (bench/REPORT.md 5b.6).

Everything here works on per-unit prices (already calibrated) and returns cut indices; building
the messages is ``strategies.fit``'s job.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from strategies.actions import Label
from strategies.strategy import Move

__all__ = [
    "ELIDE",
    "Plan",
    "Schedule",
    "UnitCosts",
    "elision_marker",
    "masked_by",
    "plan",
    "plan_max",
    "verbatim_head",
]

#: Unprotected units past the pinned head are elided at the planner's cut points (one marker
#: per elided run); with it in the policy, the fit's last resort may drop all but the core.
ELIDE = Move("elide", Label("elided_messages", "messages", "elided", "message(s)"))


@dataclass(frozen=True, slots=True)
class UnitCosts:
    """What the planner knows about one unit."""

    full: int  # price as the unit stands (after capping)
    offloaded: int  # price with its images replaced by placeholders
    images: int  # number of images in the unit
    fixed: bool  # protected whatever the prefix: system/developer, the first user message
    user: bool  # a user message (the last one of a prefix is protected)
    #: The end of a tail right after a tool round (a user message, or a note or several user
    #: messages: ``strategies.units.answered_rounds``): as a prefix's newest unit it keeps that
    #: round whole, ``tail`` units before it.
    answers: bool = False
    #: Price with its tool outputs masked, and with both images offloaded and outputs masked
    #: (None: the unit has no tool output, masking leaves it as it is).
    masked: int | None = None
    masked_offloaded: int | None = None
    #: Units of the tail before this one, between it and the round (``answers``): 0 when it is
    #: the tail alone.
    tail: int = 0


#: Where images are offloaded: before a point, or before it but for an image head's units
#: (point, the head's end, its start).
Offload = int | tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Plan:
    """Pinned head ``[0, head)``; images of unprotected units before ``offload`` become
    placeholders; tool outputs of unprotected units before ``mask`` are masked; unprotected
    units in ``[head, cut)`` are elided."""

    head: int
    offload: int
    cut: int
    estimate: int
    mask: int = 0
    #: Units in ``[vstart, verbatim)`` are never masked by the replayed plan: the verbatim head
    #: (``vstart`` 0 until the first head is masked; then each later head starts where the
    #: masked conversation ends, so outputs before it stay masked).
    verbatim: int = 0
    #: ``mask``, ``verbatim`` and ``vstart`` of the session's previous request (the replay at
    #: ``plan``'s ``previous`` units): the prefix both share ends where their masking differs.
    settled: tuple[int, int, int] = (0, 0, 0)
    vstart: int = 0
    #: Units in ``[ostart, ohead)`` keep their images whatever ``offload`` says: the image head
    #: (``Schedule.image_head``), as ``[vstart, verbatim)`` is masking's.
    ohead: int = 0
    ostart: int = 0

    def masks(self, u: int) -> bool:
        """Whether unit ``u``'s outputs are in the masked range (protection aside)."""
        return masked_by(u, self.mask, self.verbatim, self.vstart)

    def offloads(self, u: int) -> bool:
        """Whether unit ``u``'s images are in the offloaded range (protection aside)."""
        return masked_by(u, self.offload, self.ohead, self.ostart)


def masked_by(u: int, mask: int, verbatim: int, vstart: int) -> bool:
    """Whether unit ``u`` is before the mask point and outside the verbatim head."""
    return u < mask and not vstart <= u < verbatim


def elision_marker(messages: int, tokens: int) -> str:
    """The one message that stands in for an elided run (deterministic: counts only)."""
    noun = "message" if messages == 1 else "messages"
    return (
        f"[routefit: {messages:,} earlier {noun} ({tokens:,} tokens) elided to fit the "
        f"context budget]"
    )


def _variants(u: UnitCosts) -> tuple[int, int, int, int]:
    """(full, images offloaded, outputs masked, both)."""
    masked = u.full if u.masked is None else u.masked
    both = u.offloaded if u.masked_offloaded is None else u.masked_offloaded
    return u.full, u.offloaded, masked, both


class _Sums:
    """Prefix sums that make the price of any (prefix, offload, mask, cut) an O(1) question."""

    def __init__(self, units: Sequence[UnitCosts], overhead: int, marker: int) -> None:
        self.units = units
        self.overhead = overhead
        self.marker = marker
        self.fixed_full = [0, *accumulate(u.full if u.fixed else 0 for u in units)]
        free = [(0, 0, 0, 0) if u.fixed else _variants(u) for u in units]
        self.free_v = [[0, *accumulate(f[k] for f in free)] for k in range(4)]
        self.fixed_count = [0, *accumulate(int(u.fixed) for u in units)]
        last_user: list[int | None] = []
        current: int | None = None
        # the first user message of the tail a unit ends, when that tail answers a round
        tail_user: list[int | None] = []
        for i, u in enumerate(units):
            if u.user:
                current = i
            last_user.append(current)
            same = i > 0 and u.answers and units[i - 1].answers and units[i - 1].tail == u.tail - 1
            earlier = tail_user[i - 1] if same else None
            tail_user.append(
                earlier if earlier is not None else (i if u.answers and u.user else None)
            )
        self.last_user = last_user
        self.tail_user = tail_user

    def free(self, x: int, offload: Offload, mask: int, verbatim: int = 0, vstart: int = 0) -> int:
        """Σ over unprotected units below x of their price, images before ``offload`` offloaded
        and outputs in ``[0, vstart)`` and ``[verbatim, mask)`` masked (``vstart ≤ verbatim``);
        ``offload`` as (point, image head's end, its start): images in the head are kept."""
        if isinstance(offload, tuple):
            point, ohead, ostart = offload
            if ohead > ostart and point > ostart:  # the head exempts units offloaded here
                a, b = min(x, ostart, point), min(x, ohead, point)
                masking = (mask, verbatim, vstart)
                inside = self.free(b, point, *masking) - self.free(a, point, *masking)
                kept = self.free(b, 0, *masking) - self.free(a, 0, *masking)
                return self.free(x, point, *masking) - inside + kept
            offload = point
        if verbatim:
            a, b = min(x, vstart, mask), min(x, verbatim, mask)
            inside = self.free(b, offload, mask) - self.free(a, offload, mask)
            unmasked = self.free(b, offload, 0) - self.free(a, offload, 0)
            return self.free(x, offload, mask) - inside + unmasked
        a = min(offload, mask, x)
        b = min(max(offload, mask), x)
        both, off, masked, full = self.free_v[3], self.free_v[1], self.free_v[2], self.free_v[0]
        middle = off if offload > mask else masked
        return both[a] + middle[b] - middle[a] + full[x] - full[b]

    def cost(self, u: int, offload: Offload, mask: int, verbatim: int = 0, vstart: int = 0) -> int:
        masked = masked_by(u, mask, verbatim, vstart)
        point, ohead, ostart = offload if isinstance(offload, tuple) else (offload, 0, 0)
        off = masked_by(u, point, ohead, ostart)
        return _variants(self.units[u])[int(off) + 2 * int(masked)]

    def newest_turn(self, e: int) -> int:
        """The first unit of prefix ``[0, e)``'s newest turn: its latest user message, or the
        first user message of the tail that answers a round (``UnitCosts.answers``: several
        user messages after it are all the user's answer, elided only into the turn)."""
        lu = self.last_user[e - 1]
        first = self.tail_user[e - 1]
        return e - 1 if lu is None else lu if first is None else min(lu, first)

    def estimate(
        self,
        e: int,
        head: int,
        offload: Offload,
        cut: int,
        mask: int = 0,
        verbatim: int = 0,
        vstart: int = 0,
    ) -> int:
        """Price of prefix ``[0, e)`` under a plan (``e`` units, the newest one protected)."""
        masking = (mask, verbatim, vstart)
        dynamic = self._dynamic(e)
        elided, splits = self._elided(e, head, min(cut, e), offload, masking, dynamic)
        kept = self._unelided(e, offload, masking, dynamic)
        if elided:
            kept += self.marker * (1 + splits) - elided
        return self.overhead + kept

    def least(
        self,
        e: int,
        heads: tuple[int, int],
        offload: Offload,
        cut: int,
        masking: tuple[int, int, int],
    ) -> int:
        """A floor under ``estimate`` for every head in ``heads`` (both ends included), in O(1):
        a shorter head elides no less (at most what the shortest does) and leaves no fewer
        splits for markers (at least what the longest does). Lets a search over heads stop
        before it starts when none can fit, which a request whose tools alone overflow makes
        happen once per user turn."""
        lo, hi = heads
        dynamic = self._dynamic(e)
        stop = min(cut, e)
        most, _ = self._elided(e, lo, stop, offload, masking, dynamic)
        _, fewest = self._elided(e, hi, stop, offload, masking, dynamic)
        unelided = self.overhead + self._unelided(e, offload, masking, dynamic)
        return min(unelided, unelided + self.marker * (1 + fewest) - most)

    def _dynamic(self, e: int) -> set[int]:
        """The newest unit, the round its tail answers and the latest user message: they go as
        they are whatever the plan."""
        newest = {e - 1}
        last = self.units[e - 1]
        if last.answers:
            newest.add(e - 2 - last.tail)
        lu = self.last_user[e - 1]
        return {d for d in (*newest, lu) if d is not None and not self.units[d].fixed}

    def _unelided(
        self, e: int, offload: Offload, masking: tuple[int, int, int], dynamic: set[int]
    ) -> int:
        kept = self.fixed_full[e] + self.free(e, offload, *masking)
        return kept + sum(self.units[d].full - self.cost(d, offload, *masking) for d in dynamic)

    def _elided(
        self,
        e: int,
        head: int,
        stop: int,
        offload: Offload,
        masking: tuple[int, int, int],
        dynamic: set[int],
    ) -> tuple[int, int]:
        """(tokens elided from ``[head, stop)``, splits a marker stands in for beside the first)."""
        if stop <= head:
            return 0, 0
        elided = self.free(stop, offload, *masking) - self.free(head, offload, *masking)
        inside = [d for d in dynamic if head <= d < stop]
        elided -= sum(self.cost(d, offload, *masking) for d in inside)
        return elided, len(inside) + self.fixed_count[stop] - self.fixed_count[head]


def _elision_checkpoints(units: Sequence[UnitCosts], quantum: int) -> list[int]:
    """Unit boundaries where the cumulative price crosses a multiple of ``quantum``."""
    points = []
    total = 0
    for i, u in enumerate(units):
        before = total // quantum
        total += u.full
        if total // quantum > before:
            points.append(i + 1)
    return points


def _offload_checkpoints(units: Sequence[UnitCosts], step: int) -> list[int]:
    """Unit boundaries after every ``step``-th image, oldest first."""
    points = []
    seen = 0
    for i, u in enumerate(units):
        if u.images and (seen + u.images) // step > seen // step:
            points.append(i + 1)
        seen += u.images
    return points


def pinned_head(
    units: Sequence[UnitCosts], budget: int, pin_fraction: float, masked: bool = False
) -> int:
    """Units kept verbatim at the start: the protected head, extended to ``pin_fraction``.

    ``masked``: masking runs before elision, so the head is measured as it will be sent, with
    its outputs masked; measured at full price it would pin a head that, once masked, is a
    small fraction of the budget, and every later jump would re-send the masked middle."""
    head = 0
    # The protected head: everything up to and including the first user message.
    for i, u in enumerate(units):
        if u.user:
            head = i + 1
            break
    limit = pin_fraction * budget
    total = 0
    for i, u in enumerate(units):
        total += _variants(u)[2] if masked else u.full
        if total > limit:
            break
        head = max(head, i + 1)
    return min(head, max(len(units) - 1, 0))


def _protected(units: Sequence[UnitCosts]) -> int:
    """The protected head: everything up to and including the first user message."""
    return next((i + 1 for i, u in enumerate(units) if u.user), 0)


@dataclass(frozen=True, slots=True)
class Schedule:
    """The policy's schedule knobs and which strategies the replay may use, in order."""

    order: tuple[str, ...]  # of "offload_images", "mask", "elide"
    low_water: float
    quantum: float
    step: int
    pin_fraction: float
    mask_water: float = 0.0
    verbatim: float = 0.0
    #: Offloading offloads down to this fraction of the budget (None: ``low_water``).
    offload_water: float | None = None
    #: The image head, a fraction of the budget whose images offloading keeps until nothing
    #: after it is left (``image_head``); 0: none, the oldest images go first.
    image_head: float = 0.0


#: Which of ``_variants`` a unit before a head costs: its outputs masked (the verbatim head),
#: its images offloaded (the image head).
MASKED, OFFLOADED = 2, 1


def verbatim_head(
    units: Sequence[UnitCosts], budget: int, fraction: float, start: int = 0, gone: int = MASKED
) -> int:
    """The end of the head that starts at unit ``start`` (everything before it masked, or its
    images offloaded: ``gone``): the longest run of whole units that, with the conversation
    before it as ``gone`` leaves it, is priced at most ``fraction × budget`` (never the newest
    unit). It depends only on the prefix, so every request agrees on it."""
    limit = fraction * budget
    total = sum(_variants(u)[gone] for u in units[:start])
    for i in range(start, len(units) - 1):
        total += units[i].full
        if total > limit:
            return i
    return max(len(units) - 1, start)


def plan(
    units: Sequence[UnitCosts],
    *,
    overhead: int,
    budget: int,
    marker: int,
    schedule: Schedule,
    previous: int | None = None,
) -> Plan:
    """Replay the conversation's growth and return the plan for its full length, and in
    ``Plan.settled`` the masking of its first ``previous`` units (the session's previous request:
    by default all but the newest unit).

    At each prefix that overflows, the strategies move their cut points in the policy's order,
    each only while the prefix is above its mark: offload and elision to the low-water mark,
    masking to ``mask_water``. Elision first stops at the newest turn (everything since the
    latest user message); only when the prefix still overflows does it cut into that turn.
    The returned plan's estimate may still exceed the budget: the caller then tries harder
    (``plan_max``) or reports the overflow.
    """
    replay = _Replay(units, overhead, budget, marker, schedule)
    state = replay.state
    settled = (0, 0, 0)
    previous = len(units) - 1 if previous is None else previous
    for e in range(1, len(units) + 1):
        replay.grow(e)
        if e == previous:
            settled = (state["mask"], state["verbatim"], state["vstart"])
    n = len(units)
    estimate = replay.price(n) if n else overhead
    return Plan(
        state["head"],
        state["offload_images"],
        state["elide"],
        estimate,
        state["mask"],
        state["verbatim"],
        settled,
        state["vstart"],
        state["ohead"],
        state["ostart"],
    )


class _Replay:
    """The replay's cut points as the prefix grows (``plan``): each prefix starts from where the
    one before left them, as consecutive requests of a session would."""

    def __init__(
        self,
        units: Sequence[UnitCosts],
        overhead: int,
        budget: int,
        marker: int,
        schedule: Schedule,
    ) -> None:
        n = len(units)
        self.units = units
        self.budget = budget
        self.schedule = schedule
        self.sums = sums = _Sums(units, overhead, marker)
        order = self.order = schedule.order
        self.masked_head = masked_head = "mask" in order and (
            "elide" not in order or order.index("mask") < order.index("elide")
        )
        head = pinned_head(units, budget, schedule.pin_fraction, masked_head)
        if n and masked_head:
            # The head never reaches into the newest turn: that turn is kept whole before it.
            head = max(min(head, sums.newest_turn(n)), min(_protected(units), n - 1))
        self.head = head
        q = max(1, math.floor(schedule.quantum * budget))
        checkpoints = _elision_checkpoints(units, q)
        self.cuts = [c for c in checkpoints if c > head] if "elide" in order else []
        self.masks = checkpoints if "mask" in order else []
        self.offs = _offload_checkpoints(units, schedule.step) if "offload_images" in order else []
        verbatim = verbatim_head(units, budget, schedule.verbatim) if "mask" in order else 0
        offloading = self.offs and schedule.image_head > 0  # images to offload, a head
        self.state = {
            "offload_images": 0,
            "mask": 0,
            "elide": head,
            "head": head,
            "verbatim": verbatim,
            "vstart": 0,
            "ohead": verbatim_head(units, budget, schedule.image_head, 0, OFFLOADED)
            if offloading
            else 0,
            "ostart": 0,
        }
        self.floor = _protected(units)
        self.low = schedule.low_water * budget
        water = schedule.low_water if schedule.offload_water is None else schedule.offload_water
        self.offload_low = water * budget

    def offloading(self) -> Offload:
        state = self.state
        return state["offload_images"], state["ohead"], state["ostart"]

    def price(self, e: int) -> int:
        state = self.state
        return self.sums.estimate(
            e,
            state["head"],
            self.offloading(),
            state["elide"],
            state["mask"],
            state["verbatim"],
            state["vstart"],
        )

    def _least(self, e: int, shortest: int) -> int:
        """A floor under ``price(e)`` for every head from ``shortest`` to today's."""
        state = self.state
        masking = (state["mask"], state["verbatim"], state["vstart"])
        heads = (shortest, state["head"])
        return self.sums.least(e, heads, self.offloading(), state["elide"], masking)

    def advance(self, name: str, points: list[int], e: int, target: float, limit: int) -> None:
        i = bisect.bisect_right(points, self.state[name])
        while self.price(e) > target and i < len(points) and points[i] <= limit:
            self.state[name] = points[i]
            i += 1

    def grow(self, e: int) -> None:
        """Prefix ``[0, e)`` is the request: move the cut points only if it overflows."""
        state, budget, low = self.state, self.budget, self.low
        if self.masked_head and self.units[e - 1].user and state["head"] < self.head:
            state["head"] = self.head  # a new turn: the head that gave way to the last returns
        if self.price(e) <= budget:
            return
        limit = e - 1  # the newest unit is never offloaded, masked or elided
        for name in self.order:
            if name == "offload_images":
                self.advance(name, self.offs, e, self.offload_low, limit)
                self.unpin_images(e)
            elif name == "mask":
                self.advance(name, self.masks, e, self.schedule.mask_water * budget, limit)
                self.unpin(e)
            elif name == "elide":
                self.advance(name, self.cuts, e, low, min(limit, self.sums.newest_turn(e)))
        if "elide" in self.order:
            self.give_way(e)

    def unpin(self, e: int) -> None:
        """Everything after the verbatim head is masked and the prompt still overflows: the
        head's outputs are masked too, all at once and for good. One step, like a mask step at
        ``mask_water`` 0: a prompt is re-sent from the head's first output once per head, not
        from a moving head end every few rounds (on Messages, where reads land only at
        breakpoints, each such move would miss the whole head); an output once masked stays
        masked, as the same bytes, on every later request.

        The next head starts where the masked conversation ends: the outputs that follow stay
        verbatim until the masked conversation and they reach ``verbatim × budget``, so after
        each step the prompt falls to about that mark, not to what the masked conversation
        weighs, for the whole session and not only until the first head is masked."""
        self._next_head(e, ("mask", "verbatim", "vstart"), self.schedule.verbatim, MASKED)

    def unpin_images(self, e: int) -> None:
        """Every image after the image head is offloaded and the prompt still overflows: the
        head's images are offloaded too, all at once and for good (``unpin``'s rule for
        outputs), and the next image head starts where the offloaded conversation ends."""
        keys = ("offload_images", "ohead", "ostart")
        self._next_head(e, keys, self.schedule.image_head, OFFLOADED)

    def _next_head(self, e: int, keys: tuple[str, str, str], fraction: float, gone: int) -> None:
        """``unpin``'s step for either head (``keys``: its point, its end, its start)."""
        state = self.state
        point, end, start = keys
        if state[end] > state[start] and self.price(e) > self.budget:
            at = state[point]
            state[start] = at
            state[end] = verbatim_head(self.units, self.budget, fraction, at, gone)

    def give_way(self, e: int) -> None:
        """The newest turn does not fit beside the head: the head gives way first, to a prefix
        of itself (still cached), down to the protected head; the turn's calls last.

        It gives way to the low-water mark, not just under the budget: a shrink re-sends the
        whole turn after it, so it must buy headroom (one shrink per (1 − low_water) × budget
        of the turn's growth, not one per round)."""
        state, budget = self.state, self.budget
        if self.masked_head and self.price(e) > budget:
            target = min(self.floor, e - 1)
            if state["head"] > target and self._least(e, target) > self.low:
                state["head"] = target  # no head in between can reach the mark
            while self.price(e) > self.low and state["head"] > target:
                state["head"] -= 1
        if self.price(e) > budget and "mask" not in self.order:
            # Without masking, a turn over the budget loses its oldest calls here, and the
            # cut stays. With masking, the newest unit is masked once it is no longer
            # newest, so a cut made for it would outlive the need: the plans after the
            # replay (``plan_max``, the last resort) handle such a turn for one request.
            self.advance("elide", self.cuts, e, self.low, limit=e - 1)


def plan_max(
    units: Sequence[UnitCosts],
    *,
    overhead: int,
    marker: int,
    offload: bool,
    elide: bool,
    head: int,
    floor: int | None = None,
    budget: int | None = None,
    mask: bool = False,
    into_turn: bool = False,
    verbatim: int = 0,
    vstart: int = 0,
) -> Plan:
    """The most the policy allows: every unprotected image offloaded, every unprotected output
    masked, every unprotected unit after the head elided — up to the newest turn, or into it
    when ``into_turn``. Used when the replayed plan still overflows (a huge new turn).

    The head is ``head`` when that fits ``budget``; otherwise the longest head in
    ``[floor, head]`` that does (``floor`` when none does). A shorter head is a prefix of the
    pinned one, so it is still the provider's cached prefix: shrinking it re-sends only what
    follows it, where falling back to the protected head would re-send the whole pinned head."""
    n = len(units)
    if not n:
        return Plan(head, 0, head, overhead)
    sums = _Sums(units, overhead, marker)
    off = n - 1 if offload else 0
    mc = n - 1 if mask else 0
    end = n - 1 if into_turn else sums.newest_turn(n)

    def at(h: int) -> Plan:
        cut = max(end if elide else h, h)
        price = sums.estimate(n, h, off, cut, mc, verbatim, vstart)
        return Plan(h, off, cut, price, mc, verbatim, vstart=vstart)

    best = at(head)
    if floor is None or budget is None:
        return best
    for h in range(head - 1, min(floor, head) - 1, -1):
        if best.estimate <= budget:
            break
        best = at(h)
    return best
