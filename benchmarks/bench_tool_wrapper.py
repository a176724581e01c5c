"""Tool-wrapper overhead per call: a ResilientAgent tool in a session against the bare tool.

The wrapped call goes through argument binding, the tool ContextVar, the session bridge's
bookkeeping (tools in flight, start/exit notifications) and the chain's ``wrap_tool_call``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from livekit.agents import function_tool
from livekit.rtc import EventEmitter

from resilient_agent import Middleware, ResilientAgent
from resilient_agent._engine.chain import MiddlewareChain
from resilient_agent._session.runtime import SessionRuntime

CALLS = 20_000


class _Session(EventEmitter[Any]):
    user_state = "listening"
    agent_state = "idle"


class _Passthrough(Middleware):
    pass


@function_tool
async def lookup(city: str, days: int = 1) -> str:
    """Look up the weather.

    Args:
        city: The city.
        days: How many days ahead.
    """
    return city


async def _per_call(tool: Any) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        await tool(city="Paris", days=2)
    return (time.perf_counter() - started) / CALLS * 1e6


async def _measure() -> tuple[float, float]:
    agent = ResilientAgent(instructions="x", tools=[lookup], middleware=[_Passthrough()])
    bridge = SessionRuntime(_Session(), agent)  # type: ignore[arg-type]
    bridge.start()
    await bridge.activate(agent, MiddlewareChain([_Passthrough()]))
    agent.attach_runtime(bridge)  # what a live session does as the agent enters
    (wrapped,) = agent.tools
    bare = await _per_call(lookup)
    through_chain = await _per_call(wrapped)
    await bridge.stop()
    return bare, through_chain


def main() -> None:
    """Print the wrapper's overhead per call."""
    runs = [asyncio.run(_measure()) for _ in range(3)]
    bare = min(r[0] for r in runs)
    wrapped = min(r[1] for r in runs)
    print(f"tool call: bare {bare:.2f} us, wrapped {wrapped:.2f} us")
    print(f"tool wrapper overhead: {wrapped - bare:.2f} us per call")


if __name__ == "__main__":
    main()
