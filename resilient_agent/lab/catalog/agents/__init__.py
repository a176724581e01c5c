"""App agents written the way developers write them today, on any ``Agent`` base class.

Each factory takes the base class under test (a plain ``livekit.agents.Agent`` or
``ResilientAgent``) and returns an agent whose code is identical in both cases: the lab measures
what the base class does with the same app code.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from livekit.agents import Agent, RunContext, function_tool, get_job_context
from livekit.agents.beta.tools import EndCallTool
from livekit.agents.llm import ChatContext, ChatMessage, ToolFlag

from ....testing.scenario import AgentFactory

__all__ = [
    "ToolStyle",
    "availability_agent",
    "booking_agent",
    "closing_tool_agent",
    "end_call_agent",
    "farewell_callback_agent",
    "filler_tool_agent",
    "filler_agent",
    "greeting_agent",
    "handoff_agent",
    "livekit_end_call_agent",
    "livekit_end_call_agent_speaking",
    "late_protecting_agent",
    "plain_agent",
    "protected_handoff_agent",
]

ToolStyle = Literal["plain", "disallow", "protected_say", "disallow_and_say"]
ShutdownStyle = Literal["job", "session"]

INSTRUCTIONS = "You are a helpful restaurant assistant. Keep answers short."
FAREWELL = "Thank you for calling, goodbye and have a great evening!"
HOLD_MESSAGE = "One moment while I book that table for you."
FILLER = "Let me think about that for a second."
TRANSFER_MESSAGE = (
    "Please hold on while I transfer you to our manager, who will be with you in just a moment."
)


def plain_agent(base: type[Agent]) -> Agent:
    """An agent with no tools."""
    return base(instructions=INSTRUCTIONS)


def booking_agent(style: ToolStyle, work_seconds: float) -> AgentFactory:
    """A factory for an agent whose ``book_table`` tool protects itself as ``style`` says."""

    def build(base: type[Agent]) -> Agent:
        class BookingAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def book_table(self, ctx: RunContext[None], time: str) -> str:
                """Book a table.

                Args:
                    time: When the table is wanted.
                """
                if style in ("disallow", "disallow_and_say"):
                    ctx.disallow_interruptions()
                if style in ("protected_say", "disallow_and_say"):
                    await ctx.session.say(HOLD_MESSAGE, allow_interruptions=False)
                await asyncio.sleep(work_seconds)  # the booking system
                return f"Table booked for {time}."

        return BookingAgent()

    return build


def late_protecting_agent(*, before_s: float, after_s: float) -> AgentFactory:
    """A ``book_table`` tool that works a while, then calls ``ctx.disallow_interruptions()``.

    The protection comes ``before_s`` into the body, while the LLM's interruptible preamble may
    still be playing (or paused by a caller who speaks over it); ``after_s`` more work follows.
    """

    def build(base: type[Agent]) -> Agent:
        class LateProtectingAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def book_table(self, ctx: RunContext[None], time: str) -> str:
                """Book a table.

                Args:
                    time: When the table is wanted.
                """
                await asyncio.sleep(before_s)  # looking the caller up
                ctx.disallow_interruptions()  # the booking itself must not be cut short
                await asyncio.sleep(after_s)  # the booking system
                return f"Table booked for {time}."

        return LateProtectingAgent()

    return build


def availability_agent(*, work_seconds: float) -> AgentFactory:
    """A slow ``check_availability`` tool flagged ``ToolFlag.CANCELLABLE``; it records its end."""

    def build(base: type[Agent]) -> Agent:
        class AvailabilityAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)
                self.tool_finished = False

            @function_tool(flags=ToolFlag.CANCELLABLE)
            async def check_availability(self, ctx: RunContext[None]) -> str:
                """Check which tables are free tonight."""
                await asyncio.sleep(work_seconds)  # the reservation system
                self.tool_finished = True
                return "Tables are free at eight."

        return AvailabilityAgent()

    return build


def filler_tool_agent(*, work_seconds: float, filler_every_s: float) -> AgentFactory:
    """A slow ``book_table`` tool that says a filler every few seconds while it works."""

    def build(base: type[Agent]) -> Agent:
        class FillerToolAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def book_table(self, ctx: RunContext[None], time: str) -> str:
                """Book a table.

                Args:
                    time: When the table is wanted.
                """
                waited = 0.0
                while waited < work_seconds:
                    step = min(filler_every_s, work_seconds - waited)
                    await asyncio.sleep(step)
                    waited += step
                    if waited < work_seconds:
                        ctx.session.say("Still working on it, thanks for waiting.")
                return f"Table booked for {time}."

        return FillerToolAgent()

    return build


def end_call_agent(
    *, farewell_protected: bool, shutdown: ShutdownStyle, sleep_seconds: float | None = None
) -> AgentFactory:
    """The production end_call: say the farewell, sleep, shut down in ``finally``."""
    pause = sleep_seconds if sleep_seconds is not None else len(FAREWELL) / 15 + 1.5

    def build(base: type[Agent]) -> Agent:
        class EndCallAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def end_call(self, ctx: RunContext[None]) -> None:
                """End the call when the caller says goodbye."""
                try:
                    await ctx.session.say(FAREWELL, allow_interruptions=not farewell_protected)
                    await asyncio.sleep(pause)  # let the farewell reach the phone line
                finally:
                    if shutdown == "job":
                        get_job_context().shutdown(reason="end_call")
                    else:
                        ctx.session.shutdown()

        return EndCallAgent()

    return build


def handoff_agent(*, exit_work_seconds: float) -> AgentFactory:
    """A front desk that hands the call to a manager and saves the caller's file on exit."""

    def build(base: type[Agent]) -> Agent:
        class Manager(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="You are the manager. " + INSTRUCTIONS)

        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            async def on_exit(self) -> None:
                await asyncio.sleep(exit_work_seconds)  # saving the caller's file

            @function_tool
            async def transfer_to_manager(self, ctx: RunContext[None]) -> None:
                """Hand the call to the manager."""
                ctx.session.update_agent(Manager())

        return FrontDesk()

    return build


def closing_tool_agent(base: type[Agent]) -> Agent:
    """A tool that closes the session by awaiting ``session.aclose()`` from inside itself."""

    class ClosingAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def hang_up(self, ctx: RunContext[None]) -> None:
            """Hang up the call."""
            await ctx.session.say(FAREWELL)
            await ctx.session.aclose()

    return ClosingAgent()


def greeting_agent(*, protected: bool, text: str) -> AgentFactory:
    """An agent that greets from ``on_enter``, optionally uninterruptible."""

    def build(base: type[Agent]) -> Agent:
        class GreetingAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            async def on_enter(self) -> None:
                self.session.say(text, allow_interruptions=not protected)

        return GreetingAgent()

    return build


def filler_agent(base: type[Agent]) -> Agent:
    """An agent that says a protected filler from ``on_user_turn_completed``."""

    class FillerAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        async def on_user_turn_completed(
            self, turn_ctx: ChatContext, new_message: ChatMessage
        ) -> None:
            self.session.say(FILLER, allow_interruptions=False)

    return FillerAgent()


def protected_handoff_agent(*, delay_s: float) -> AgentFactory:
    """A front desk whose transfer tool hands the call over during a protected message.

    The tool says a long protected message and hands the call to the manager ``delay_s`` into
    it, while the message still plays.
    """

    def build(base: type[Agent]) -> Agent:
        class Manager(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions="You are the manager. " + INSTRUCTIONS)

        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def transfer_to_manager(self, ctx: RunContext[None]) -> None:
                """Hand the call to the manager."""
                ctx.session.say(TRANSFER_MESSAGE, allow_interruptions=False)
                await asyncio.sleep(delay_s)  # opening the manager's line
                ctx.session.update_agent(Manager())

        return FrontDesk()

    return build


def livekit_end_call_agent(base: type[Agent]) -> Agent:
    """An agent ending calls with livekit's own ``EndCallTool`` (the goodbye is its tool reply)."""
    return base(instructions=INSTRUCTIONS, tools=[EndCallTool()])


def farewell_callback_agent(base: type[Agent]) -> Agent:
    """An ``end_call`` tool that says the farewell and hangs up from the speech's done callback."""

    class FarewellCallbackAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def end_call(self, ctx: RunContext[None]) -> None:
            """End the call when the caller says goodbye."""
            session = ctx.session
            farewell = session.say(FAREWELL)
            farewell.add_done_callback(lambda _handle: session.shutdown())

    return FarewellCallbackAgent()


def livekit_end_call_agent_speaking(base: type[Agent]) -> Agent:
    """Livekit's ``EndCallTool`` asking for no tool reply: the goodbye is spoken with the call."""
    return base(instructions=INSTRUCTIONS, tools=[EndCallTool(end_instructions=None)])
