"""``proxy.generation.Live``'s bookkeeping, as a property: whatever the order of requests arriving,
ending and reloads, a generation is handed back for closing exactly once, never while a request
holds it, never while it is current, and every retired one once nothing holds it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from proxy.generation import Generation, Live

# an event: "arrive" (a request pins the current generation), ("end", i) (the i-th request still
# in flight ends, modulo their number), "reload" (a new generation is swapped in)
EVENTS = st.lists(
    st.one_of(st.just("arrive"), st.just("reload"), st.tuples(st.just("end"), st.integers(0, 50))),
    max_size=80,
)


def _generation(number: int) -> Generation:
    return cast(Generation, SimpleNamespace(number=number))


@given(EVENTS)
def test_each_generation_is_closed_once_when_nothing_holds_it(events: list[object]) -> None:
    live = Live(_generation(1))
    made = 1
    held: list[Generation] = []
    closed: list[int] = []

    def close(g: Generation | None) -> None:
        if g is None:
            return
        assert g is not live.current
        assert all(h is not g for h in held), "closed while a request holds it"
        closed.append(g.number)

    for event in events:
        if event == "arrive":
            held.append(live.pin())
        elif event == "reload":
            made += 1
            close(live.swap(_generation(made)))
        elif held:
            assert isinstance(event, tuple)
            close(live.unpin(held.pop(event[1] % len(held))))
    assert sorted(closed) == sorted(set(closed)), "a generation closed twice"
    while held:
        close(live.unpin(held.pop()))
    assert sorted(closed) == list(range(1, made)), "every retired generation closed, once"
    assert [g.number for g in live.every()] == [made]
