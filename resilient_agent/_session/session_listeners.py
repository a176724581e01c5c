"""The session's livekit events, as the library hears them.

livekit calls event listeners synchronously inside its own tasks. Each listener here updates the
conversation state right there (so a decide hook asked in the same step reads it current),
answers ``decide_speech`` for a speech being created, and queues the notify hooks for the active
chain (:mod:`.active_chain`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from livekit.agents import AgentSession
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.speech_handle import SpeechHandle

from .._engine.fanout import FanOut
from .._engine.log import get_logger
from .._engine.pending_words import Fragment
from .._engine.requests import SpeechDecision, SpeechInfo
from .._engine.state import ConversationState
from .active_chain import ActiveChain
from .cut_in import cutting_in, mark_cut_in_lines
from .speech_record import SpeechRecord
from .tools import current_tool

__all__ = ["SESSION_EVENTS", "ListenerHost", "SessionListeners"]

logger = get_logger("runtime")

SESSION_EVENTS: tuple[lk_events.EventTypes, ...] = (
    "user_state_changed",
    "agent_state_changed",
    "user_input_transcribed",
    "conversation_item_added",
    "speech_created",
    "agent_false_interruption",
    "close",
)


class ListenerHost(Protocol):
    """What the listeners update and tell: the session's runtime."""

    session: AgentSession[Any]
    state: ConversationState
    speeches: SpeechRecord
    active: ActiveChain

    def agent_switched(self) -> None:
        """Livekit switched activities: its new agent starts next."""

    def session_closed(self) -> None:
        """Livekit closed the session."""


class SessionListeners:
    """Subscribed to the session's events from the runtime's start to its stop."""

    def __init__(self, host: ListenerHost, fanout: FanOut) -> None:
        self._host = host
        # registered through the session's fan-out: a middleware's listener added right after
        # one of these on the same event shares its registration with livekit's emitter
        self._fanout = fanout
        handlers: dict[lk_events.EventTypes, Callable[[Any], None]] = {
            "user_state_changed": self._on_user_state,
            "agent_state_changed": self._on_agent_state,
            "user_input_transcribed": self._on_transcript,
            "conversation_item_added": self._on_item,
            "speech_created": self._on_speech_created,
            "agent_false_interruption": self._on_false_interruption,
            "close": self._on_close,
        }
        self._listeners = handlers

    def subscribe(self) -> None:
        """Follow the session's events."""
        for event in SESSION_EVENTS:
            self._fanout.on(self._host.session, event, self._listeners[event])

    def unsubscribe(self) -> None:
        """Stop following them."""
        for event in SESSION_EVENTS:
            with contextlib.suppress(Exception):
                self._fanout.off(self._host.session, event, self._listeners[event])

    def _on_user_state(self, ev: lk_events.UserStateChangedEvent) -> None:
        state = self._host.state
        state.user_state = ev.new_state
        if ev.new_state == "speaking":
            state.user_speech_starts.append(time.time())
        self._host.active.submit("on_user_state", ev, urgent=ev.new_state == "speaking")

    def _on_agent_state(self, ev: lk_events.AgentStateChangedEvent) -> None:
        self._host.state.agent_state = ev.new_state
        self._host.active.submit("on_agent_state", ev)

    def _on_transcript(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        text = ev.transcript.strip()
        if ev.is_final and text:
            current = self._host.session.current_speech
            # said over an interruptible agent speech: fewer words than livekit's min_words
            # are a backchannel it keeps for the caller's next turn
            over = (
                current is not None
                and current.allow_interruptions
                and not current.interrupted
                and not current.done()
            )
            heard_at = asyncio.get_running_loop().time()
            self._host.state.pending_words.add(Fragment(text, heard_at, over_agent_speech=over))
        self._host.active.submit("on_user_transcript", ev)

    def _on_item(self, ev: lk_events.ConversationItemAddedEvent) -> None:
        item = ev.item
        if item.type == "message" and item.role == "user":
            self._host.state.pending_words.deliver_said(item.text_content or "")
        elif item.type == "agent_handoff":
            self._host.agent_switched()
        self._host.active.submit("on_conversation_item", ev)

    def _on_speech_created(self, ev: lk_events.SpeechCreatedEvent) -> None:
        host = self._host
        info = SpeechInfo(
            handle=ev.speech_handle,
            source=ev.source,
            user_initiated=ev.user_initiated,
            tool=current_tool(),
            created_at=time.time(),
            cut_in=cutting_in(),
        )
        host.speeches.created(info)
        run = host.active.run
        if run is not None and run.handles("decide_speech"):
            decision = run.decide("decide_speech", info)
            if isinstance(decision, SpeechDecision):
                _apply_speech_decision(info.handle, decision)
        host.state.speeches[info.id] = info

        def _done(_: SpeechHandle) -> None:
            if info.cut_in:
                mark_cut_in_lines(info.handle)
            host.state.speeches.pop(info.id, None)
            host.speeches.finished(info)
            host.active.submit("on_speech_done", info)

        info.handle.add_done_callback(_done)
        host.active.submit("on_speech_created", info)
        if run is not None and run.shutdown_gate is not None:
            run.shutdown_gate.speech_created(info)

    def _on_false_interruption(self, ev: lk_events.AgentFalseInterruptionEvent) -> None:
        self._host.active.submit("on_false_interruption", ev)

    def _on_close(self, ev: lk_events.CloseEvent) -> None:
        self._host.active.submit("on_session_end", ev)
        self._host.session_closed()


def _apply_speech_decision(handle: SpeechHandle, decision: SpeechDecision) -> None:
    if handle.allow_interruptions == decision.allow_interruptions:
        return
    try:
        handle.allow_interruptions = decision.allow_interruptions
    except RuntimeError:
        # livekit refuses to protect a speech that was already interrupted; nothing to protect
        logger.info(
            "speech_decision_not_applied",
            speech_id=handle.id,
            reason=decision.reason,
            why="livekit refuses to protect a speech that was already interrupted",
        )
