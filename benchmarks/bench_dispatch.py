"""Per-event dispatch cost through the session bridge, with 1, 8 and 32 middlewares.

Each event is emitted the way livekit emits it (a synchronous listener call), queued, and
dispatched to every middleware's ``on_agent_state``; the figure is wall time per hook call.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from livekit.agents.voice.events import AgentStateChangedEvent
from livekit.rtc import EventEmitter

from resilient_agent import Middleware, MiddlewareContext, ResilientAgent
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent._session.runtime import SessionRuntime

EVENTS = 20_000


class _Session(EventEmitter[Any]):
    user_state = "listening"
    agent_state = "idle"


def _middleware(count: int) -> list[Middleware]:
    made: list[Middleware] = []
    for index in range(count):

        class Counting(Middleware):
            name = f"counting_{index}"
            seen = 0

            async def on_agent_state(
                self, ctx: MiddlewareContext, ev: AgentStateChangedEvent
            ) -> None:
                self.seen += 1

        made.append(Counting())
    return made


async def _measure(count: int) -> float:
    session = _Session()
    owner = ResilientAgent(instructions="x", middleware=[])
    bridge = SessionRuntime(session, owner)  # type: ignore[arg-type]
    bridge.start()
    run = await bridge.activate(owner, MiddlewareChain(_middleware(count)))
    event = AgentStateChangedEvent(old_state="idle", new_state="thinking")
    started = time.perf_counter()
    for batch in range(EVENTS // 100):
        for _ in range(100):
            session.emit("agent_state_changed", event)
        await asyncio.sleep(0)
        del batch
    await bridge.stop()
    elapsed = time.perf_counter() - started
    seen = sum(mw.seen for mw in run.middleware)  # type: ignore[attr-defined]
    assert seen == EVENTS * count, seen
    return elapsed / (EVENTS * count) * 1e6


def main() -> None:
    """Print the per-hook-call dispatch cost."""
    # warm-up, not printed: the first run pays for first imports, caches and the allocator
    # growing, which made the first case measured look the slowest
    asyncio.run(_measure(8))
    for count in (1, 8, 32):
        best = min(asyncio.run(_measure(count)) for _ in range(3))
        print(f"dispatch: {count:>2} middleware(s): {best:6.2f} us per hook call")


if __name__ == "__main__":
    main()
