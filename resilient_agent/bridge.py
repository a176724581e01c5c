"""Connects one session's events and tool calls to the chain.

livekit calls event listeners synchronously inside its own tasks. The bridge updates the
:class:`ConversationState` and runs decide hooks right there (they must answer before livekit
goes on), and queues notify hooks for one dispatcher task per session, which keeps their order
and lets urgent events (the caller starts speaking) overtake bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import AgentSession, StopResponse
from livekit.agents.llm import ToolError
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.io import AudioInput
from livekit.agents.voice.speech_handle import SpeechHandle

from .audio_observer import AudioObserver, FrameCallback
from .chain import MiddlewareChain
from .errors import MiddlewareNotUsed
from .events import ResilientEvent
from .hooks import Middleware
from .interception import Interceptor
from .log import get_logger
from .requests import SpeechDecision, SpeechInfo, ToolCall, ToolOutcome
from .shutdown import ShutdownGate
from .speech_gates import install_interrupt_gate, install_protection_gate
from .state import ConversationState, MiddlewareContext
from .tools import current_tool

__all__ = ["SessionBridge"]

logger = get_logger("bridge")

# How long the session's close waits for queued notify hooks.
_STOP_BOUND_S = 5.0
# How long a closing session may take from the agent's exit to livekit's close event (a protected
# speech still plays out, the last user turn is committed) before the bridge stops without it.
_CLOSE_EVENT_BOUND_S = 60.0
# How many finished speeches' end times are kept (the shutdown gate looks at recent farewells).
_KEEP_DONE_TIMES = 64

_SESSION_EVENTS: tuple[lk_events.EventTypes, ...] = (
    "user_state_changed",
    "agent_state_changed",
    "user_input_transcribed",
    "conversation_item_added",
    "speech_created",
    "agent_false_interruption",
    "close",
)


class SessionBridge:
    """The chain's presence in one session, from the agent's ``on_enter`` to its exit."""

    def __init__(
        self,
        chain: MiddlewareChain,
        session: AgentSession[Any],
        agent: Any,
        emit: Callable[[ResilientEvent], None],
    ) -> None:
        self.state = ConversationState(
            user_state=session.user_state, agent_state=session.agent_state
        )
        self.ctx = MiddlewareContext(
            session=session,
            agent=agent,
            state=self.state,
            emit=emit,
            observe_audio=self._observe_audio,
        )
        self._audio_observer: AudioObserver | None = None
        self.chain = chain
        self._session = session
        self._urgent: deque[tuple[str, tuple[Any, ...]]] = deque()
        self._normal: deque[tuple[str, tuple[Any, ...]]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listeners: dict[lk_events.EventTypes, Callable[[Any], None]] = {
            "user_state_changed": self._on_user_state,
            "agent_state_changed": self._on_agent_state,
            "user_input_transcribed": self._on_transcript,
            "conversation_item_added": self._on_item,
            "speech_created": self._on_speech_created,
            "agent_false_interruption": self._on_false_interruption,
            "close": self._on_close,
        }
        self._closed = False
        self._stopping: asyncio.Task[None] | None = None
        self._tool_seq = 0
        self._last_speech_by_tool: dict[str, SpeechInfo] = {}
        self._speech_done_at: dict[str, float] = {}
        self.shutdown_gate: ShutdownGate | None = None
        self._interceptor = Interceptor()
        self._close_fallback: asyncio.Task[None] | None = None
        self.on_stopped: Callable[[SessionBridge], None] | None = None
        """Called once the bridge stopped (after ``close``, or at the agent's exit)."""

    async def start(self) -> None:
        """Set the middleware up, subscribe, and tell the chain the session started.

        A middleware whose ``setup`` raises sits this session out (reported by name); the
        others, and the app, carry on.
        """
        left_out: list[Middleware] = []
        for mw in self.chain.middleware:
            try:
                await mw.setup(self.ctx)
            except MiddlewareNotUsed:
                left_out.append(mw)
            except Exception as exc:
                left_out.append(mw)
                self.chain.report_error(mw, "setup", exc, "disabled_for_session")
        if left_out:
            self.chain = self.chain.without(left_out)
        for event in _SESSION_EVENTS:
            self._session.on(event, self._listeners[event])
        if self.chain.handles("decide_shutdown"):
            gate = ShutdownGate(
                self.chain, self.ctx, self.farewell_of, speech_done_at=self._speech_done_at.get
            )
            try:
                gate.install(self._interceptor)
                self.shutdown_gate = gate
            except Exception as exc:
                gate.uninstall()
                self._interceptor.restore_all()
                self.chain.report_error("ShutdownGate", "install", exc, "left_out")
        if self.chain.handles("decide_interrupt"):
            install_interrupt_gate(self._interceptor, self.chain, self.ctx)
        self._task = asyncio.create_task(self._dispatch(), name="resilient_agent.dispatch")
        self.submit("on_session_start")

    def stop_after_close(self, bound_s: float = _CLOSE_EVENT_BOUND_S) -> None:
        """The session is closing: keep going until livekit's ``close``, then stop.

        ``on_session_end`` runs with livekit's own ``CloseEvent``; a close event that does not
        come within ``bound_s`` (livekit's teardown failed) stops the bridge anyway.
        """
        if self._closed or self._close_fallback is not None:
            return

        async def stop_without_close_event() -> None:
            await asyncio.sleep(bound_s)
            logger.warning("session_close_not_seen", after_s=bound_s, action="stopped_anyway")
            await self.stop()

        self._close_fallback = asyncio.get_running_loop().create_task(
            stop_without_close_event(), name="resilient_agent.close_fallback"
        )

    async def stop(self) -> None:
        """Unsubscribe, let queued hooks run, and close the middleware in reverse order."""
        if self._closed:
            return
        self._closed = True
        fallback = self._close_fallback
        if fallback is not None and fallback is not asyncio.current_task():
            fallback.cancel()
        if self.shutdown_gate is not None:
            self.shutdown_gate.uninstall()
        self._interceptor.restore_all()
        observer = self._audio_observer
        if observer is not None and self._session.input.audio is observer:
            self._session.input.audio = observer.source
        for event in _SESSION_EVENTS:
            with contextlib.suppress(Exception):
                self._session.off(event, self._listeners[event])
        self._wake.set()
        if self._task is not None:
            # a notify hook that never returns must not hold up the session's close
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=_STOP_BOUND_S)
            except asyncio.TimeoutError:
                logger.error("middleware_hooks_not_done", action="cancelled", after_s=_STOP_BOUND_S)
                self._task.cancel()
        for mw in reversed(self.chain.middleware):
            try:
                await mw.aclose()
            except Exception as exc:
                self.chain.report_error(mw, "aclose", exc)
        if self.on_stopped is not None:
            self.on_stopped(self)

    def _observe_audio(self, callback: FrameCallback) -> bool:
        if self._audio_observer is None:
            source = self._session.input.audio
            if source is None:
                return False
            self._audio_observer = AudioObserver(source, on_swapped=self._follow_audio_swap)
            self._session.input.audio = self._audio_observer
        self._audio_observer.callbacks.append(callback)
        return True

    def _follow_audio_swap(self) -> None:
        """The app (or livekit) replaced our observer: observe the new input the same way."""
        observer = self._audio_observer
        current = self._session.input.audio
        if self._closed or observer is None or current is None or current is observer:
            return
        if _chain_holds(current, observer) or isinstance(current, AudioObserver):
            return  # the new input reads through the observer: it still sees every frame
        follower = AudioObserver(current, on_swapped=self._follow_audio_swap)
        follower.callbacks = observer.callbacks
        self._audio_observer = follower
        self._session.input.audio = follower

    def farewell_of(self, tool: str | None) -> SpeechInfo | None:
        """The last speech ``tool`` created in this session, if any."""
        return self._last_speech_by_tool.get(tool) if tool is not None else None

    # -- queue ---------------------------------------------------------------------------------
    def submit(self, hook: str, *args: Any, urgent: bool = False) -> None:
        """Queue ``hook`` for the dispatcher, if any middleware listens to it."""
        if self._closed or not self.chain.handles(hook):
            return
        (self._urgent if urgent else self._normal).append((hook, args))
        self._wake.set()

    async def _dispatch(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._urgent or self._normal:
                hook, args = (self._urgent or self._normal).popleft()
                await self.chain.notify(hook, self.ctx, *args)
            if self._closed:
                return

    # -- livekit events (synchronous, inside livekit's tasks) ---------------------------------
    def _on_user_state(self, ev: lk_events.UserStateChangedEvent) -> None:
        self.state.user_state = ev.new_state
        if ev.new_state == "speaking":
            self.state.user_speech_starts.append(time.time())
        self.submit("on_user_state", ev, urgent=ev.new_state == "speaking")

    def _on_agent_state(self, ev: lk_events.AgentStateChangedEvent) -> None:
        self.state.agent_state = ev.new_state
        self.submit("on_agent_state", ev)

    def _on_transcript(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        if ev.is_final and ev.transcript.strip():
            self.state.pending_user_fragments.append(ev.transcript)
        self.submit("on_user_transcript", ev)

    def _on_item(self, ev: lk_events.ConversationItemAddedEvent) -> None:
        item = ev.item
        if item.type == "message" and item.role == "user":
            self.state.pending_user_fragments.clear()
        self.submit("on_conversation_item", ev)

    def _on_speech_created(self, ev: lk_events.SpeechCreatedEvent) -> None:
        info = SpeechInfo(
            handle=ev.speech_handle,
            source=ev.source,
            user_initiated=ev.user_initiated,
            tool=current_tool(),
            created_at=time.time(),
        )
        if info.tool is not None:
            self._last_speech_by_tool[info.tool] = info
        if self.chain.handles("decide_speech"):
            decision = self.chain.decide("decide_speech", self.ctx, info)
            if isinstance(decision, SpeechDecision):
                _apply_speech_decision(info.handle, decision)
        self.state.speeches[info.id] = info

        def _done(_: SpeechHandle) -> None:
            self.state.speeches.pop(info.id, None)
            self._speech_done_at[info.id] = time.time()
            if len(self._speech_done_at) > _KEEP_DONE_TIMES:
                self._speech_done_at.pop(next(iter(self._speech_done_at)))
            self.submit("on_speech_done", info)

        info.handle.add_done_callback(_done)
        self.submit("on_speech_created", info)

    def _on_false_interruption(self, ev: lk_events.AgentFalseInterruptionEvent) -> None:
        self.submit("on_false_interruption", ev)

    def _on_close(self, ev: lk_events.CloseEvent) -> None:
        self.submit("on_session_end", ev)
        self._stopping = asyncio.get_running_loop().create_task(self.stop())

    # -- tools ---------------------------------------------------------------------------------
    async def run_tool(self, call: ToolCall, run_body: Callable[[ToolCall], Awaitable[Any]]) -> Any:
        """Run one tool call through ``wrap_tool_call`` and report its start and exit."""
        self._tool_seq += 1
        key = self._tool_seq
        self.state.tools_in_flight[key] = call
        self.submit("on_tool_start", call)
        started = time.perf_counter()
        result: Any = None
        error: BaseException | None = None
        per_call = Interceptor()
        if call.run_context is not None and (
            self.chain.handles("decide_protection") or self.chain.handles("decide_resume")
        ):
            install_protection_gate(per_call, self.chain, self.ctx, call.run_context, call.name)
        try:
            result = await self.chain.wrap_tool_call(self.ctx, call, run_body)
            return result
        except BaseException as exc:
            error = exc
            raise
        finally:
            per_call.restore_all()
            self.state.tools_in_flight.pop(key, None)
            outcome = ToolOutcome(result, error, time.perf_counter() - started)
            self.submit("on_tool_exit", call, outcome)


def _chain_holds(audio: AudioInput, wanted: AudioInput) -> bool:
    """Whether ``wanted`` is ``audio`` or one of its ``source`` s."""
    seen: AudioInput | None = audio
    while seen is not None:
        if seen is wanted:
            return True
        seen = seen.source
    return False


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


def friendly_tool_error(name: str, exc: Exception, message: str) -> ToolError:
    """The app's ``tool_error_message`` for an unexpected tool exception, logged at ERROR."""
    logger.error("tool_failed", tool=name, exc_info=exc)
    return ToolError(message.format(tool=name))


PASS_THROUGH = (ToolError, StopResponse)
"""Exceptions livekit gives meaning to; the boundary lets them through unchanged."""
