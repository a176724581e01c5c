"""The watchdog's watch on the caller's turn while livekit hands the session to the next agent.

On ``session.update_agent(...)`` livekit drains the leaving agent's activity before the next agent
starts: its queued speeches play (a protected one to its end) and no agent's middleware runs. An
interruptible reply queued there (to text the caller typed) waits for the caller's silence, and
the drain waits for that reply: a VAD that dies or sticks in the caller's turn meanwhile holds the
handoff forever, and the next agent, whose Watchdog would recover the turn, never starts.

So the leaving Watchdog leaves a :class:`DrainWatch` in the session (:func:`leave`). It follows the
caller's turn through livekit's public ``user_state_changed`` and ``user_input_transcribed`` and the
caller's audio (a feed of its own on the session's input), judges a stuck turn on the same
evidence as the Watchdog, and has the leaving Watchdog recover it (the VAD restarted on the
leaving agent, whose activity is the one draining). It watches until livekit adds the handoff to
the chat context: the leaving activity is closed (which ends a caller turn still open in it), and
the next agent, with its own Watchdog, starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import AgentSession
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.io import AudioInput

from resilient_agent import ConversationState, MiddlewareContext, get_logger

from .handover import TapFeed
from .stall_evidence import Stall, StallEvidence

__all__ = ["DrainWatch", "leave", "take"]

logger = get_logger("middleware.drain_watch")

Recover = Callable[[MiddlewareContext, Stall], Awaitable[None]]
"""Recovers a stall found in the drain, with a context whose state follows the session."""


class DrainWatch:
    """Watches for a stuck caller turn while a leaving agent's activity drains.

    Args:
        ctx: The leaving agent's context (its agent is the one whose activity drains).
        evidence: The leaving Watchdog's evidence, which goes on being fed.
        recover: Recovers a stuck turn (the leaving Watchdog's own steps).
        check_every_s: How often to look while the caller shows as speaking.
    """

    def __init__(
        self,
        ctx: MiddlewareContext,
        evidence: StallEvidence,
        recover: Recover,
        check_every_s: float,
    ) -> None:
        session = ctx.session
        self.evidence = evidence
        # the leaving chain's snapshot is no longer fed: this one follows the session itself
        self.ctx = dataclasses.replace(
            ctx,
            state=ConversationState(user_state=session.user_state, agent_state=session.agent_state),
        )
        self._session = session
        self._recover = recover
        self._check_every_s = check_every_s
        self._speaking = asyncio.Event()
        self._feed: TapFeed | None = None
        self._task: asyncio.Task[None] | None = None
        self._recovering = False
        self._stopped = False
        self._listeners: dict[lk_events.EventTypes, Callable[[Any], None]] = {
            "user_state_changed": self._on_user_state,
            "user_input_transcribed": self._on_transcript,
            "conversation_item_added": self._on_item,
            "close": self._on_close,
        }

    def start(self) -> None:
        """Follow the session and watch (from the leaving agent's exit)."""
        for event, listener in self._listeners.items():
            self._session.on(event, listener)
        meter = self.evidence.meter
        if meter is not None:
            self._feed = _feed_for(self._session)
            if self._feed is not None:
                self._feed.tap = meter
        if self.ctx.state.user_state == "speaking":
            self._speaking.set()
        self._task = asyncio.get_running_loop().create_task(
            self._watch(), name="resilient_agent.drain_watch"
        )

    def stop(self) -> None:
        """Stop watching and following the session.

        A recovery under way finishes first (it is bounded, and judges its steps by the caller's
        state, which must go on being followed), is reported, and then the watch ends.
        """
        self._stopped = True
        if not self._recovering:
            self._end()

    def _end(self) -> None:
        for event, listener in self._listeners.items():
            with contextlib.suppress(Exception):
                self._session.off(event, listener)
        self._listeners = {}
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        feed, self._feed = self._feed, None
        if feed is not None:
            feed.tap = None
            if self._session.input.audio is feed and feed.source is not None:
                self._session.input.audio = feed.source
            # else something chained on top of it: it stays, a plain pass-through that the
            # session's next drain watch uses again

    def _on_user_state(self, ev: lk_events.UserStateChangedEvent) -> None:
        speaking = ev.new_state == "speaking"
        self.ctx.state.user_state = ev.new_state
        self.evidence.user_state_changed(speaking, _now())
        if speaking:
            self._speaking.set()
        else:
            self._speaking.clear()

    def _on_transcript(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        self.evidence.transcript(_now(), final=ev.is_final)

    def _on_item(self, ev: lk_events.ConversationItemAddedEvent) -> None:
        if ev.item.type == "agent_handoff":
            # the leaving activity is closed: the next agent's own Watchdog watches from here
            self.stop()

    def _on_close(self, _ev: lk_events.CloseEvent) -> None:
        self.stop()

    async def _watch(self) -> None:
        wait = self._check_every_s
        while True:
            await self._speaking.wait()
            await asyncio.sleep(wait)
            wait = self._check_every_s
            leave_untranscribed = self._session.options.transcription_timeout is not None
            due = self.evidence.user_turn_stuck_due(
                self.ctx.state, leave_untranscribed=leave_untranscribed
            )
            if due is None:
                continue
            now = _now()
            if now < due[0]:
                # evidence is building up: look again exactly when it will be enough
                wait = min(wait, due[0] - now)
                continue
            logger.info("stuck_turn_in_handoff_drain", quiet_for_s=round(now - due[1], 2))
            self._recovering = True
            try:
                await self._recover(self.ctx, Stall("user_turn_stuck", now - due[1]))
            finally:
                self._recovering = False
                if self._stopped:
                    self._end()
            if self._stopped:
                return


_LEFT: weakref.WeakKeyDictionary[AgentSession[Any], DrainWatch] = weakref.WeakKeyDictionary()
# The feed a drain watch put in each session's audio chain (it may stay there).
_FEEDS: weakref.WeakKeyDictionary[AgentSession[Any], TapFeed] = weakref.WeakKeyDictionary()


def _feed_for(session: AgentSession[Any]) -> TapFeed | None:
    """A feed of the caller's audio in ``session``'s input chain; None without audio input.

    One an earlier handoff left in the chain is used again: each handoff does not add a hop.
    """
    top = session.input.audio
    if top is None:
        return None
    kept = _FEEDS.get(session)
    seen: AudioInput | None = top
    while seen is not None and seen is not kept:
        seen = seen.source
    if kept is not None and seen is kept:
        return kept
    feed = TapFeed(top, None, label="ResilientAgentDrainWatchFeed")
    session.input.audio = feed
    _FEEDS[session] = feed
    return feed


def leave(session: AgentSession[Any], watch: DrainWatch) -> None:
    """Start ``watch`` for the handoff under way in ``session``, for the next Watchdog to take."""
    previous = _LEFT.pop(session, None)
    if previous is not None:
        previous.stop()
    _LEFT[session] = watch
    watch.start()


def take(session: AgentSession[Any]) -> DrainWatch | None:
    """The watch a leaving Watchdog left in ``session``, stopped (once); None if there is none."""
    try:
        watch = _LEFT.pop(session, None)
    except TypeError:  # a stand-in session no weak reference can be made to: nothing was left
        return None
    if watch is not None:
        watch.stop()
    return watch


def _now() -> float:
    # loop time: the clock the feed stamps frames with
    return asyncio.get_running_loop().time()
