"""A reply still waiting for its first token ends with nothing once the turn's fallback is decided,
and its provider stream is cancelled (virtual time)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from resilient_agent.middleware.llm_fallback import _next_unless

from resilient_agent.testing import run_virtual


def test_a_reply_waiting_for_its_first_token_gives_up_when_told() -> None:
    cancelled: list[float] = []

    async def slow_stream() -> AsyncIterator[str]:
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            cancelled.append(asyncio.get_running_loop().time())
            raise
        yield "too late"

    async def main() -> tuple[tuple[bool, object], float, bool]:
        loop = asyncio.get_running_loop()
        give_up: asyncio.Future[None] = loop.create_future()
        loop.call_later(1.0, give_up.set_result, None)
        got = await _next_unless(aiter(slow_stream()), give_up)
        after = await _next_unless(aiter(slow_stream()), give_up)  # already decided: no wait
        return got, round(loop.time(), 6), after == (False, None)

    got, at, at_once = run_virtual(main())
    assert got == (False, None) and at == 1.0 and at_once
    assert [round(t, 6) for t in cancelled] == [1.0]


def test_chunks_pass_through_until_the_stream_ends() -> None:
    async def stream() -> AsyncIterator[str]:
        for word in ("one", "two"):
            await asyncio.sleep(0.1)
            yield word

    async def main() -> list[tuple[bool, object]]:
        give_up: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        iterator = aiter(stream())
        return [await _next_unless(iterator, give_up) for _ in range(3)]

    assert run_virtual(main()) == [(True, "one"), (True, "two"), (False, None)]
