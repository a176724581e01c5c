"""Lab agents that switch on one livekit 1.8 feature each, for the drop-in differential tests.

Each factory takes the base class under test (a plain ``livekit.agents.Agent`` or
``ResilientAgent``) so the same app code runs on both; see ``tests/test_drop_in_features.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from dataclasses import dataclass
from typing import Any, Literal

from livekit import rtc
from livekit.agents import Agent, ModelSettings, RunContext, function_tool, llm
from livekit.agents.llm import ChatContext, ChatMessage
from livekit.agents.voice.background_audio import BackgroundAudioPlayer

from resilient_agent.testing.room import OfflineRoom, TracedSound
from resilient_agent.testing.scenario import AgentFactory

from . import INSTRUCTIONS

__all__ = [
    "FILLER_LINE",
    "FOREGROUND_LINE",
    "QUIET_WELCOME",
    "UPDATE_LINE",
    "BackgroundAudioCall",
    "background_audio_agent",
    "context_updating_agent",
    "filler_runtime_agent",
    "forced_interrupt_agent",
    "foreground_agent",
    "node_override_agent",
    "quiet_welcome_agent",
    "update_agent",
]

FILLER_LINE = "Still checking the diary."
FOREGROUND_LINE = "Let me read that back to you."
UPDATE_LINE = "Searching the tables now."
QUIET_WELCOME = "Welcome to the restaurant line."
# A greeting long enough to still be playing when the app force-interrupts it.
_LONG_GREETING = (
    "Welcome to the restaurant line, tonight we have a very long list of specials to go through."
)


def filler_runtime_agent(*, work_seconds: float) -> AgentFactory:
    """A ``check_diary`` tool that blocks under ``RunContext.with_filler()``."""

    def build(base: type[Agent]) -> Agent:
        class FillerRuntimeAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def check_diary(self, ctx: RunContext[None]) -> str:
                """Check the booking diary."""
                async with ctx.with_filler(FILLER_LINE, delay=0.5):
                    await asyncio.sleep(work_seconds)  # the booking system
                return "Free at eight."

        return FillerRuntimeAgent()

    return build


def foreground_agent(base: type[Agent]) -> Agent:
    """A ``read_back`` tool that speaks itself while holding the floor with ``foreground()``."""

    class ForegroundAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        @function_tool
        async def read_back(self, ctx: RunContext[None]) -> str:
            """Read the booking back to the caller."""
            async with ctx.foreground():
                await ctx.session.say(FOREGROUND_LINE)
            return "Read back."

    return ForegroundAgent()


def update_agent(*, work_seconds: float) -> AgentFactory:
    """A ``search_tables`` tool that hands control back with ``RunContext.update()``."""

    def build(base: type[Agent]) -> Agent:
        class UpdateAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def search_tables(self, ctx: RunContext[None]) -> str:
                """Search the free tables."""
                await ctx.update(UPDATE_LINE)
                await asyncio.sleep(work_seconds)  # the booking system
                return "A table at eight."

        return UpdateAgent()

    return build


@function_tool
async def search_fares(ctx: RunContext[None]) -> str:
    """Search the fares (a session-scoped tool for an ``AsyncToolset``)."""
    await ctx.update(UPDATE_LINE)
    await asyncio.sleep(1.0)  # the fares service
    return "Fares found."


def forced_interrupt_agent(*, after_s: float) -> AgentFactory:
    """Greets with an uninterruptible line, then cuts it with ``session.interrupt(force=True)``."""

    def build(base: type[Agent]) -> Agent:
        class ForcedInterruptAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            async def on_enter(self) -> None:
                self.session.say(_LONG_GREETING, allow_interruptions=False)
                await asyncio.sleep(after_s)  # the app decides to stop it (an operator, say)
                await self.session.interrupt(force=True)

        return ForcedInterruptAgent()

    return build


def quiet_welcome_agent(base: type[Agent]) -> Agent:
    """Greets with ``say(..., add_to_chat_ctx=False)``: heard, never in the chat context."""

    class QuietWelcomeAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        async def on_enter(self) -> None:
            self.session.say(QUIET_WELCOME, add_to_chat_ctx=False)

    return QuietWelcomeAgent()


def context_updating_agent(base: type[Agent]) -> Agent:
    """Changes its instructions, tools and chat context on entering and after each turn."""

    @function_tool
    async def opening_hours() -> str:
        """The restaurant's opening hours."""
        return "Noon to eleven."

    class ContextUpdatingAgent(base):  # type: ignore[valid-type,misc]
        def __init__(self) -> None:
            super().__init__(instructions=INSTRUCTIONS)

        async def on_enter(self) -> None:
            await self.update_instructions(INSTRUCTIONS + " Mention the terrace.")
            await self.update_tools([opening_hours])
            chat_ctx = self.chat_ctx.copy()
            chat_ctx.add_message(role="assistant", content="The terrace is open tonight.")
            await self.update_chat_ctx(chat_ctx)

        async def on_user_turn_completed(
            self, turn_ctx: ChatContext, new_message: ChatMessage
        ) -> None:
            await self.update_instructions(INSTRUCTIONS)

    return ContextUpdatingAgent()


def node_override_agent(calls: list[str], *, hand_off: bool) -> AgentFactory:
    """An app that overrides all four nodes, recording each call into ``calls``.

    Args:
        calls: Receives the node names in call order (the test's evidence they ran).
        hand_off: The entry agent (on the base under test) hands off to a plain ``Agent``
            carrying the overrides, so the overrides run on the agent handed off to.
    """

    def overriding(base: type[Agent]) -> type[Agent]:
        class NodeOverrideAgent(base):  # type: ignore[valid-type,misc]
            async def stt_node(
                self, audio: AsyncIterable[rtc.AudioFrame], model_settings: ModelSettings
            ) -> Any:
                calls.append("stt_node")
                return Agent.default.stt_node(self, audio, model_settings)

            async def llm_node(
                self,
                chat_ctx: llm.ChatContext,
                tools: list[llm.Tool],
                model_settings: ModelSettings,
            ) -> Any:
                calls.append("llm_node")
                async for chunk in Agent.default.llm_node(self, chat_ctx, tools, model_settings):
                    yield chunk

            async def tts_node(
                self, text: AsyncIterable[str], model_settings: ModelSettings
            ) -> Any:
                calls.append("tts_node")
                async for frame in Agent.default.tts_node(self, text, model_settings):
                    yield frame

            async def transcription_node(
                self, text: AsyncIterable[str | Any], model_settings: ModelSettings
            ) -> Any:
                calls.append("transcription_node")
                async for delta in Agent.default.transcription_node(self, text, model_settings):
                    yield delta

        return NodeOverrideAgent

    def build(base: type[Agent]) -> Agent:
        if not hand_off:
            return overriding(base)(instructions=INSTRUCTIONS)
        specialist = overriding(Agent)

        class FrontDesk(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            @function_tool
            async def transfer_to_specialist(self, ctx: RunContext[None]) -> Agent:
                """Transfer the caller to the specialist."""
                return specialist(instructions=INSTRUCTIONS)

        return FrontDesk()

    return build


@dataclass(frozen=True)
class BackgroundAudioCall:
    """One call's ``BackgroundAudioPlayer``: the room it published to and the sound it played.

    Attributes:
        room: The offline room the player's track was published to.
        player: The player.
        sound: Its thinking or ambient sound; ``sound.pulled_at`` says when it played.
    """

    room: OfflineRoom
    player: BackgroundAudioPlayer
    sound: TracedSound


def background_audio_agent(
    calls: list[BackgroundAudioCall], *, sound: Literal["thinking", "ambient"]
) -> AgentFactory:
    """Starts a ``BackgroundAudioPlayer`` on its session on entering, closes it on exit.

    Args:
        calls: Receives each call's player, room and sound (the test's evidence it played).
        sound: Whether the player's sound is its thinking sound (played while the agent is
            ``thinking``) or its ambient sound (played throughout).
    """

    def build(base: type[Agent]) -> Agent:
        # the agent is built when the call starts: its clock starts here
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        traced = TracedSound(clock=lambda: loop.time() - t0)
        player = (
            BackgroundAudioPlayer(thinking_sound=traced)
            if sound == "thinking"
            else BackgroundAudioPlayer(ambient_sound=traced)
        )
        room = OfflineRoom()
        calls.append(BackgroundAudioCall(room, player, traced))

        class BackgroundAudioAgent(base):  # type: ignore[valid-type,misc]
            def __init__(self) -> None:
                super().__init__(instructions=INSTRUCTIONS)

            async def on_enter(self) -> None:
                await player.start(room=room, agent_session=self.session)

            async def on_exit(self) -> None:
                await player.aclose()

        return BackgroundAudioAgent()

    return build
