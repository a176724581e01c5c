"""What a leaving agent's :class:`~.turn_keeper.TurnKeeper` hands the next one in its session.

On ``session.update_agent(...)`` livekit drains the old activity (a protected speech plays to its
end, withholding the caller's words from the STT) before the next agent starts, and no agent's
middleware observes the session meanwhile. The leaving keeper leaves a :class:`Handover`: its
undelivered words, its audio tap (kept fed by an observer of its own), and the caller's speech
windows and final transcripts, followed through livekit's public ``user_state_changed`` and
``user_input_transcribed`` until the next keeper takes them and recovers what was withheld.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from livekit import rtc
from livekit.agents import Agent, AgentSession, llm
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.io import AudioInput
from typing_extensions import override

from resilient_agent import MiddlewareContext, get_logger

from .withheld_audio import WithheldAudioTap

__all__ = [
    "FrameTap",
    "Fragment",
    "Handover",
    "SpeechWindow",
    "TapFeed",
    "feed_tap",
    "leave",
    "take",
]

logger = get_logger("middleware.handover")


class FrameTap(Protocol):
    """Shown each frame of the caller's audio, with the loop time it passed at."""

    def on_frame(self, frame: rtc.AudioFrame, now: float) -> None:
        """Look at one frame (synchronously: it is on the audio path)."""


class TapFeed(AudioInput):
    """Passes the caller's audio on unchanged, showing each frame to one tap (if any).

    It stays in the session's audio chain once put there (livekit's ``AudioInput(source=)``
    chaining); the next keeper keeps using it for the same tap.
    """

    def __init__(
        self,
        source: AudioInput,
        tap: FrameTap | None,
        *,
        label: str = "ResilientAgentHandoverFeed",
    ) -> None:
        super().__init__(label=label, source=source)
        self.tap = tap
        self._next_frame = source.__anext__

    @override
    async def __anext__(self) -> rtc.AudioFrame:
        frame = await self._next_frame()
        tap = self.tap
        if tap is not None:
            tap.on_frame(frame, asyncio.get_running_loop().time())
        return frame


@dataclass
class Fragment:
    """Words the caller said, kept until they reach the LLM.

    Attributes:
        text: The words.
        heard_at: Loop time when they were final (recovered: when their window closed).
        delivered: They reached the LLM.
        superseded: Replaced by a recovery, or dropped (and logged).
        recovered: Recovered from the audio of one whole speech window, never a partial
            transcript of another.
    """

    text: str
    heard_at: float
    delivered: bool = False
    superseded: bool = False
    recovered: bool = False


@dataclass
class SpeechWindow:
    """The caller speaking, as livekit's ``user_state`` reported it (loop times)."""

    start: float
    end: float | None = None


class Handover:
    """Words, audio and speech windows left for the next agent's keeper."""

    def __init__(
        self,
        session: AgentSession[Any],
        fragments: list[Fragment],
        tap: WithheldAudioTap | None,
        feed: TapFeed | None,
        open_window_start: float | None,
    ) -> None:
        self.fragments = fragments
        self.tap = tap
        self.feed = feed
        self.windows: list[SpeechWindow] = []
        if open_window_start is not None:
            self.windows.append(SpeechWindow(open_window_start))
        self._session = session
        self._release_input: Callable[[], None] | None = None
        self._leaving_agent: Agent | None = None
        self.last_heard_at: float | None = None
        self._claimed_window: SpeechWindow | None = None
        """When the last final transcript came while no keeper followed the session."""
        session.on("user_state_changed", self._on_user_state)
        session.on("user_input_transcribed", self._on_transcript)
        session.on("close", self._on_session_close)

    def _on_transcript(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        # a turn ending while the leaving activity drains is skipped by livekit ("skipping
        # user input, speech scheduling is paused"): its words are the next keeper's to answer
        text = ev.transcript.strip()
        if ev.is_final and text:
            self.last_heard_at = asyncio.get_running_loop().time()
            self.fragments.append(Fragment(text, self.last_heard_at))

    def hold_input(self, ctx: MiddlewareContext) -> None:
        """Keep the caller's input through the handoff, as words for the next keeper.

        Text livekit refuses to answer while it hands the session over (RoomIO's text input
        meets a draining protected speech and paused scheduling) joins :attr:`fragments`, and
        so do the caller's messages the leaving agent took in but never answered (see
        :meth:`carry_unanswered`).
        """
        self._leaving_agent = ctx.agent
        self._release_input = ctx.hold_input_through_handoff(self._keep_refused_input)

    def carry_unanswered(self, next_context: llm.ChatContext | None) -> None:
        """Carry the caller's last messages that no reply of the leaving agent followed.

        livekit plays the leaving agent's queued replies before the next agent starts; one the
        caller talked over (its turn skipped while the activity drains) leaves the message it
        answers in the leaving agent's context only, and a next agent with a context of its own
        never answers it. Messages the next agent's context already holds stay there.
        """
        agent = self._leaving_agent
        if agent is None:
            return
        unanswered: list[llm.ChatMessage] = []
        for item in agent.chat_ctx.items:
            if item.type == "function_call" or (
                item.type == "message" and item.role == "assistant" and not item.interrupted
            ):
                unanswered.clear()  # the agent acted on what came before
            elif item.type == "message" and item.role == "user":
                unanswered.append(item)
        held = {i.id for i in next_context.items} if next_context is not None else set()
        carried = {f.text for f in self.fragments}
        now = asyncio.get_running_loop().time()
        earlier = [
            Fragment(text, now)
            for message in unanswered
            if message.id not in held
            and (text := (message.text_content or "").strip())
            and text not in carried
        ]
        if earlier:
            logger.info("unanswered_user_messages_carried_over", messages=len(earlier))
            self.fragments[:0] = earlier  # said before the words still pending

    def _keep_refused_input(self, text: str) -> None:
        self.fragments.append(Fragment(text, asyncio.get_running_loop().time()))
        if self.windows and self.windows[-1].end is None:
            self._claimed_window = self.windows[-1]

    def _on_session_close(self, _ev: lk_events.CloseEvent) -> None:
        # no next keeper took the words (the session ended first, or the next agent has none)
        self.close()
        lost = [f for f in self.fragments if not f.delivered and not f.superseded]
        if lost:
            logger.warning(
                "user_words_lost",
                fragments=len(lost),
                words=sum(len(f.text.split()) for f in lost),
                why="no next agent's TurnKeeper took them before the session ended",
            )

    def _on_user_state(self, ev: lk_events.UserStateChangedEvent) -> None:
        now = asyncio.get_running_loop().time()
        last = self.windows[-1] if self.windows and self.windows[-1].end is None else None
        if ev.new_state == "speaking":
            if last is not None:
                last.end = now
            self.windows.append(SpeechWindow(now))
        elif ev.old_state == "speaking" and last is not None:
            if last is self._claimed_window:
                # RoomIO's text callback ended its claim on the turn: "listening" then says
                # nothing of the caller, whose voice the VAD may still hear
                self._claimed_window = None
                return
            last.end = now

    def close(self) -> None:
        """Stop following the caller's speech windows and input (once)."""
        self._session.off("user_state_changed", self._on_user_state)
        self._session.off("user_input_transcribed", self._on_transcript)
        self._session.off("close", self._on_session_close)
        release, self._release_input = self._release_input, None
        if release is not None:
            release()


_LEFT: weakref.WeakKeyDictionary[Any, Handover] = weakref.WeakKeyDictionary()


def leave(session: AgentSession[Any], handover: Handover) -> None:
    """Leave ``handover`` for the next keeper of ``session``."""
    previous = _LEFT.pop(session, None)
    if previous is not None:
        previous.close()
    _LEFT[session] = handover


def take(session: AgentSession[Any]) -> Handover | None:
    """What the previous keeper of ``session`` left, if anything (once)."""
    handover = _LEFT.pop(session, None)
    if handover is not None:
        handover.close()
        handover.carry_unanswered(session.current_agent.chat_ctx)
    return handover


def feed_tap(
    session: AgentSession[Any], tap: WithheldAudioTap, feed: TapFeed | None
) -> TapFeed | None:
    """An observer of the caller's audio for ``tap`` alone, kept while agents hand over.

    ``feed`` is the one an earlier handoff put in the session's audio chain: it still feeds the
    tap, and is reused.
    """
    if feed is not None:
        return feed
    source = session.input.audio
    if source is None:
        return None
    feed = TapFeed(source, tap)
    session.input.audio = feed
    return feed
