"""proxy.disconnect.until_disconnect runs the call in the caller's task and cancels it from one
watch: a client that leaves gets 499, the drain's cut 503, and a cancellation from outside (the
drain deadline) stays a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from proxy.disconnect import CLIENT_CLOSED, until_disconnect
from proxy.drain import cut_event
from proxy.errors import ProxyError


class Client:
    """An ASGI ``receive`` after the body was read: nothing until the client leaves."""

    def __init__(self) -> None:
        self.left = asyncio.Event()

    async def receive(self) -> dict[str, str]:
        await self.left.wait()
        return {"type": "http.disconnect"}


class Call:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.cancelled = False

    async def __call__(self) -> str:
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "answer"


def test_the_answer_comes_back_and_nothing_is_left_pending():
    async def main() -> None:
        client = Client()
        assert await until_disconnect(client.receive, Call(0.01)()) == "answer"
        await asyncio.sleep(0.01)  # no cancellation left over for the caller's next await
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0

    asyncio.run(main())


def test_a_client_that_leaves_cancels_the_call_with_499():
    async def main() -> None:
        client = Client()
        call = Call(10)
        asyncio.get_running_loop().call_later(0.02, client.left.set)
        with pytest.raises(ProxyError) as caught:
            await until_disconnect(client.receive, call())
        assert caught.value.status == CLIENT_CLOSED
        assert call.cancelled
        await asyncio.sleep(0.01)  # the caller goes on: its task is not cancelled
        current = asyncio.current_task()
        assert current is not None and current.cancelling() == 0

    asyncio.run(main())


def test_the_drain_cut_ends_the_wait_with_503():
    async def main() -> None:
        call = Call(10)
        asyncio.get_running_loop().call_later(0.02, cut_event().set)
        with pytest.raises(ProxyError) as caught:
            await until_disconnect(Client().receive, call())
        assert caught.value.status == 503 and caught.value.code == "shutting_down"
        assert call.cancelled
        # after the cut, a call does not even start
        late = Call(10)
        coro = late()
        with pytest.raises(ProxyError):
            await until_disconnect(Client().receive, coro)
        assert coro.cr_frame is None  # closed, never awaited

    asyncio.run(main())


def test_a_cancellation_from_outside_stays_a_cancellation():
    async def main() -> None:
        call = Call(10)
        task = asyncio.ensure_future(until_disconnect(Client().receive, call()))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert call.cancelled

    asyncio.run(main())
