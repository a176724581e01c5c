"""The lab's apps on a realtime model: what a speech-to-speech app protects, and how."""

from __future__ import annotations

import asyncio

from livekit.agents import Agent, RunContext, function_tool

from ....testing.scenario import AgentFactory
from . import INSTRUCTIONS

__all__ = ["GREETING", "protected_greeting_agent", "protected_transfer_agent"]

GREETING = "Welcome to the parcel service, I can track, redirect or hold a parcel for you."


def protected_greeting_agent(base: type[Agent]) -> Agent:
    """Greets on entering with a line it protects, the way a realtime app can.

    Under server turn detection livekit drops ``allow_interruptions=False`` (with a warning),
    so the app protects the handle itself.
    """

    class ProtectedGreeter(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        async def on_enter(self) -> None:
            greeting = self.session.generate_reply(instructions=f'Say "{GREETING}"')
            greeting.allow_interruptions = False

    return ProtectedGreeter()


def protected_transfer_agent(*, delay_s: float) -> AgentFactory:
    """A front desk whose transfer tool protects the model's preamble and hands over in it.

    The tool protects the speech that called it (``ctx.disallow_interruptions()``), opens the
    manager's line for ``delay_s`` and hands the call to the manager, who runs on the same
    realtime model.
    """

    def build(base: type[Agent]) -> Agent:
        class Manager(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="You are the manager. " + INSTRUCTIONS)

        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def transfer_to_manager(self, ctx: RunContext[None]) -> Agent:
                """Hand the call to the manager."""
                ctx.disallow_interruptions()
                await asyncio.sleep(delay_s)  # opening the manager's line
                return Manager()

        return FrontDesk()

    return build
