"""A shop's voice agent, written like LiveKit's starter: the lab races its own tools.

``PlainShop`` is the app on livekit's plain ``Agent``; ``Shop`` is the same app on
``ResilientAgent``. From this directory::

    resilient-agent lab --agent shop:PlainShop --mock mocks.py --only app_tool
    resilient-agent lab --agent shop:Shop --mock mocks.py
"""

from __future__ import annotations

import asyncio

from livekit.agents import Agent, RunContext, function_tool
from livekit.agents.beta.tools import EndCallTool

from resilient_agent import ResilientAgent

INSTRUCTIONS = "You are the voice assistant of a small shop."


async def lookup_order(order_id: str) -> str:
    """The shop's order system: a network call the lab must not make."""
    raise ConnectionError(f"orders.example.com is unreachable (looking up {order_id})")


class _ShopTools:
    @function_tool
    async def hold_parcel(self, context: RunContext, parcel_id: str) -> str:
        """Put a parcel on hold at the depot.

        Args:
            parcel_id: The parcel's number.
        """
        await context.session.say(
            "One moment while I put that parcel on hold.", allow_interruptions=False
        )
        await asyncio.sleep(2.0)  # the depot's system is slow
        return f"Parcel {parcel_id} is on hold."

    @function_tool
    async def check_order_status(self, context: RunContext, order_id: str) -> str:
        """Look up an order.

        Args:
            order_id: The order number.
        """
        return await lookup_order(order_id)


class PlainShop(_ShopTools, Agent):
    """The shop on livekit's plain Agent."""

    def __init__(self) -> None:
        super().__init__(instructions=INSTRUCTIONS, tools=[EndCallTool()])


class Shop(_ShopTools, ResilientAgent):
    """The same shop on ResilientAgent."""

    def __init__(self) -> None:
        super().__init__(instructions=INSTRUCTIONS, tools=[EndCallTool()])
