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
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import AgentSession, get_job_context
from livekit.agents.llm import ToolError
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.io import AudioInput
from livekit.agents.voice.speech_handle import SpeechHandle

from .audio_observer import AudioObserver, FrameCallback
from .boundary import Budget, HookTimeoutError, budget_of
from .chain import NOBODY_SETTING_UP, MiddlewareChain
from .dispatch import NotifyQueue
from .errors import MiddlewareNotUsed
from .events import ResilientEvent
from .handoff_gates import HandoffGates
from .hooks import HOOKS, Middleware
from .interception import Interceptor
from .listeners import event_listener
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
# How long into a close a tool body may go on after livekit interrupted its speech: livekit has
# already waited 5 s for it and cancelled the speech arbitrarily.
_INTERRUPTED_TOOL_GRACE_S = 1.0
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
            stop_observing_audio=self._stop_observing_audio,
            hold_input_through_handoff=self._hold_input_through_handoff,
        )
        self._audio_observer: AudioObserver | None = None
        self.chain = chain
        self._session = session
        self._queues: list[NotifyQueue] = []
        self._listening: dict[str, tuple[NotifyQueue, ...]] = {}
        self._tool_tasks: dict[int, tuple[ToolCall, asyncio.Task[Any]]] = {}
        handlers: dict[lk_events.EventTypes, Callable[[Any], None]] = {
            "user_state_changed": self._on_user_state,
            "agent_state_changed": self._on_agent_state,
            "user_input_transcribed": self._on_transcript,
            "conversation_item_added": self._on_item,
            "speech_created": self._on_speech_created,
            "agent_false_interruption": self._on_false_interruption,
            "close": self._on_close,
        }
        self._listeners = {event: event_listener(on) for event, on in handlers.items()}
        self._closed = False
        self._stopping: asyncio.Task[None] | None = None
        self._stopped = False
        # made when someone first waits for the stop (at the close), not held through the call
        self._stopped_event: asyncio.Event | None = None
        # the session's close waits for the stop through this one (restored when it is over)
        self._close_hold = Interceptor()
        self._tool_seq = 0
        self._last_speech_by_tool: dict[str, SpeechInfo] = {}
        self._speech_done_at: dict[str, float] = {}
        self.shutdown_gate: ShutdownGate | None = None
        self._interceptor = Interceptor()
        self._close_fallback: asyncio.Task[None] | None = None
        self.on_stopped: Callable[[SessionBridge], None] | None = None
        """Called once the bridge stopped (after ``close``, or at the agent's exit)."""
        self.tool_close_bound_s: float = getattr(agent, "tool_close_bound_s", 10.0)
        """How long into a close a tool body may still run before it is cancelled."""
        self.ready = False
        """Whether the bridge follows the session (from the start of ``start()``)."""

    async def start(self) -> None:
        """Set the middleware up, subscribe, and tell the chain the session started.

        The session's events are followed (and queued for each middleware) from the start, while
        the middleware set up concurrently, so a slow ``setup`` misses nothing. A middleware
        whose ``setup`` raises or runs past its budget sits this session out (reported by
        name); the others, and the app, carry on.
        """
        self._start_queues()
        self.submit("on_session_start")
        for event in _SESSION_EVENTS:
            self._session.on(event, self._listeners[event])
        self.ready = True
        # first, so that the shutdown gate's own aclose shadow sits on top of it (LIFO)
        self._hold_close_until_stopped()
        middleware = self.chain.middleware
        # each middleware joins in as soon as its own setup is over
        setting_up = {id(mw) for mw in middleware}
        self.chain.setting_up = setting_up
        outcomes = await asyncio.gather(
            *(self._set_up(mw, setting_up) for mw in middleware), return_exceptions=True
        )
        if not setting_up and self.chain.setting_up is setting_up:
            self.chain.setting_up = NOBODY_SETTING_UP
        left_out: list[Middleware] = []
        for mw, outcome in zip(middleware, outcomes, strict=True):
            if isinstance(outcome, MiddlewareNotUsed):
                left_out.append(mw)
            elif isinstance(outcome, Exception):
                left_out.append(mw)
                self.chain.report_error(mw, "setup", outcome, "disabled_for_session")
            elif isinstance(outcome, BaseException):
                raise outcome
        if left_out:
            self.chain = self.chain.without(left_out)
            for queue in [q for q in self._queues if q.mw in left_out]:
                queue.cancel()
                self._queues.remove(queue)
            self._listening = self._listeners_by_hook()
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

    def _start_queues(self) -> None:
        self._queues = [
            NotifyQueue(mw, self.ctx, self.chain.report_error)
            for mw in self.chain.middleware
            if _has_notify_hooks(self.chain, mw)
        ]
        self._listening = self._listeners_by_hook()

    def _listeners_by_hook(self) -> dict[str, tuple[NotifyQueue, ...]]:
        by_middleware = {id(queue.mw): queue for queue in self._queues}
        return {
            hook: tuple(by_middleware[id(mw)] for mw in self.chain.listeners(hook))
            for hook, spec in HOOKS.items()
            if spec.kind == "notify" and self.chain.handles(hook)
        }

    async def _set_up(self, mw: Middleware, setting_up: set[int]) -> None:
        await self._lifecycle(mw, "setup")
        setting_up.discard(id(mw))
        for queue in self._queues:
            if queue.mw is mw:
                queue.open()

    async def _lifecycle(self, mw: Middleware, step: str) -> None:
        """Run ``setup`` or ``aclose`` under the middleware's time budget."""
        budget = Budget(budget_of(mw))
        try:
            with budget:
                await (mw.setup(self.ctx) if step == "setup" else mw.aclose())
        except asyncio.CancelledError:
            if not budget.expired:
                raise
            budget.absorb()
            raise HookTimeoutError(f"{step} ran past {budget.seconds} s") from None

    def stop_after_close(self, bound_s: float = _CLOSE_EVENT_BOUND_S) -> None:
        """The session is closing: keep going until livekit's ``close``, then stop.

        ``on_session_end`` runs with livekit's own ``CloseEvent``; a close event that does not
        come within ``bound_s`` (livekit's teardown failed) stops the bridge anyway.
        """
        if self._closed or self._close_fallback is not None:
            return

        async def stop_without_close_event() -> None:
            # a tool whose speech livekit already interrupted (and gave up on) is past saving
            await asyncio.sleep(_INTERRUPTED_TOOL_GRACE_S)
            self._cancel_hung_tools(interrupted_only=True)
            await asyncio.sleep(max(0.0, self.tool_close_bound_s - _INTERRUPTED_TOOL_GRACE_S))
            self._cancel_hung_tools(interrupted_only=False)
            await asyncio.sleep(max(0.0, bound_s - self.tool_close_bound_s))
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
        try:
            await self._stop()
        finally:
            self._stopped = True
            if self._stopped_event is not None:
                self._stopped_event.set()
            self._close_hold.restore_all()

    async def _stop(self) -> None:
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
        interrupted = False
        try:
            await self._drain_queues()
        except asyncio.CancelledError:
            # whoever awaited the close gave up waiting: the middleware are still closed
            interrupted = True
            for queue in self._queues:
                queue.cancel()
        for mw in reversed(self.chain.middleware):
            try:
                await self._lifecycle(mw, "aclose")
            except Exception as exc:
                self.chain.report_error(mw, "aclose", exc)
        if self.on_stopped is not None:
            self.on_stopped(self)
        if interrupted:
            raise asyncio.CancelledError

    def _hold_close_until_stopped(self) -> None:
        """Make ``session.aclose()`` and the job's shutdown return only after this bridge's stop.

        livekit emits ``close`` synchronously and awaits none of its listeners, so the stop it
        starts (``on_session_end``, every ``aclose``, the call summary) runs in a task of its
        own. A caller that ends its loop right after the close (``asyncio.run`` returning after
        ``await session.aclose()``, a job process after its shutdown callbacks) cancelled it or
        never ran it; since Python 3.12 ``asyncio.wait_for(session.aclose(), t)`` runs the close
        inline, without the task hop that used to give the stop a few more loop turns. The wait
        is as long as the stop, which the hook and ``aclose`` budgets bound.
        """

        def shadow_aclose(original: Callable[[], Awaitable[None]]) -> Callable[[], Any]:
            async def aclose() -> None:
                await original()
                if self._closed or self._stopping is not None:
                    await self.until_stopped()

            return aclose

        if callable(getattr(self._session, "aclose", None)):  # a stand-in session may have none
            self._close_hold.install("AgentSession.aclose", self._session, shadow_aclose)
        try:
            job = get_job_context()
        except RuntimeError:
            return
        # livekit gathers the shutdown callbacks, the session's own close among them; weak, so a
        # long job keeps no stopped bridge (and its middleware) alive
        bridge = weakref.ref(self)

        async def wait_for_middleware_stop() -> None:
            alive = bridge()
            if alive is not None:
                await alive.until_stopped()

        job.add_shutdown_callback(wait_for_middleware_stop)

    async def until_stopped(self) -> None:
        """Wait until the stop is over; at once from a task the stop itself waits for."""
        current = asyncio.current_task()
        waited_on_by_stop = (self._stopping, self._close_fallback)
        if current in waited_on_by_stop or any(q.task is current for q in self._queues):
            return
        if self._stopped:
            return
        if self._stopped_event is None:
            self._stopped_event = asyncio.Event()
        await self._stopped_event.wait()

    def _hold_input_through_handoff(self, keep: Callable[[str], None]) -> Callable[[], None]:
        return HandoffGates(self._session, keep).install()

    def _observe_audio(self, callback: FrameCallback) -> bool:
        if self._audio_observer is None:
            source = self._session.input.audio
            if source is None:
                return False
            self._audio_observer = AudioObserver(source, on_swapped=self._follow_audio_swap)
            self._session.input.audio = self._audio_observer
        self._audio_observer.callbacks.append(callback)
        return True

    def _stop_observing_audio(self, callback: FrameCallback) -> None:
        observer = self._audio_observer
        if observer is not None and callback in observer.callbacks:
            # a new list: the observer may be going through the old one right now
            observer.callbacks = [c for c in observer.callbacks if c != callback]

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

    async def _drain_queues(self) -> None:
        """Let queued notify hooks run; a middleware still busy past the bound is cancelled."""
        for queue in self._queues:
            queue.close()
        tasks = {queue.task: queue for queue in self._queues if queue.task is not None}
        if not tasks:
            return
        _done, pending = await asyncio.wait(set(tasks), timeout=_STOP_BOUND_S)
        for task in pending:
            queue = tasks[task]
            queue.cancel()
            hung = HookTimeoutError(f"still running {_STOP_BOUND_S} s into the close")
            self.chain.report_error(queue.mw, queue.running or "notify", hung, "cancelled_at_close")

    def _cancel_hung_tools(self, *, interrupted_only: bool) -> None:
        """Cancel tool bodies still running this long into the close, each named."""
        for call, task in list(self._tool_tasks.values()):
            if task.done():
                continue
            if interrupted_only and not self._gave_up_on(call):
                continue
            task.cancel()
            hung = HookTimeoutError("tool body still running into the session's close")
            self.chain.report_error(
                "ResilientAgent", f"tool:{call.name}", hung, "cancelled_at_close"
            )

    def _gave_up_on(self, call: ToolCall) -> bool:
        """Whether livekit interrupted the speech this tool belongs to (a close without drain).

        A tool without a ``RunContext`` does not say which speech it belongs to: the session's
        current speech tells (livekit force-interrupts it when closing without drain).
        """
        if call.run_context is not None:
            return call.run_context.speech_handle.interrupted
        current = self._session.current_speech
        return current is None or current.interrupted

    # -- queue ---------------------------------------------------------------------------------
    def submit(self, hook: str, *args: Any, urgent: bool = False) -> None:
        """Queue ``hook`` for every middleware that listens to it."""
        if self._closed:
            return
        for queue in self._listening.get(hook, ()):
            queue.put(hook, args, urgent=urgent)

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
        if self.ready and self.chain.handles("decide_speech"):
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
        if self.shutdown_gate is not None:
            self.shutdown_gate.speech_created(info)

    def _on_false_interruption(self, ev: lk_events.AgentFalseInterruptionEvent) -> None:
        self.submit("on_false_interruption", ev)

    def _on_close(self, ev: lk_events.CloseEvent) -> None:
        self.submit("on_session_end", ev)
        self._stopping = asyncio.get_running_loop().create_task(self.stop())
        if self.shutdown_gate is not None:
            self.shutdown_gate.session_closed()

    # -- tools ---------------------------------------------------------------------------------
    async def run_tool(self, call: ToolCall, run_body: Callable[[ToolCall], Awaitable[Any]]) -> Any:
        """Run one tool call through ``wrap_tool_call`` and report its start and exit."""
        self._tool_seq += 1
        key = self._tool_seq
        self.state.tools_in_flight[key] = call
        task = asyncio.current_task()
        if task is not None:
            self._tool_tasks[key] = (call, task)
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
            self._tool_tasks.pop(key, None)
            outcome = ToolOutcome(result, error, time.perf_counter() - started)
            self.submit("on_tool_exit", call, outcome)


def _has_notify_hooks(chain: MiddlewareChain, mw: Middleware) -> bool:
    return any(
        spec.kind == "notify" and mw in chain.listeners(hook) for hook, spec in HOOKS.items()
    )


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
