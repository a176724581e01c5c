"""One supervisor per session: the chain follows the call into every agent and task.

The first ``ResilientAgent`` to enter a session starts a :class:`SessionRuntime` for the session's
life. It follows every change of activity (a handoff, an awaited ``AgentTask``, a task that
returns) and supervises whichever agent or task is active:

* a ``ResilientAgent`` runs its own chain: when one enters, the chain before it closes with
  ``reason="handoff"`` (its middleware :meth:`~.MiddlewareContext.carry` their state) and its own
  sets up (and :meth:`~.MiddlewareContext.take` it);
* a plain ``Agent`` or ``AgentTask`` (livekit's workflow tasks included) is served by the chain
  that handed control to it (see :mod:`.supervision`), unless :func:`~.supervision.unsupervised`.

The runtime is the session's lifetime: it composes what belongs to the session rather than to an
agent, starts with the first ``ResilientAgent`` and stops once, at livekit's ``close`` (or after a
bound when that never comes), holding ``session.aclose()`` until the stop is over
(:mod:`.close_hold`). Its parts, one concept each:

* :mod:`.active_chain`: which chain runs, and the hand-over at a handoff;
* :mod:`.session_listeners`: livekit's events, updating the state and queueing hooks;
* :mod:`.event_hub`: every event counted, traced, logged and emitted;
* :mod:`.tool_calls` and :mod:`.speech_record`: the tool calls in flight and the speeches;
* :mod:`.typed_input`: typed input kept through a handoff;
* :mod:`.session_audio` and :mod:`.caller_voice`: the caller's audio, observed (the session's
  input stays the app's own object);
* :mod:`.supervision`: plain agents and workflow tasks served by the chain before them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from livekit.agents import Agent, AgentSession
from livekit.agents.llm import ChatContext, ChatMessage

from .._engine.chain import MiddlewareChain
from .._engine.events import ResilientEvent
from .._engine.live import SessionInstances
from .._engine.requests import ToolCall
from .._engine.state import ConversationState, MiddlewareContext, Named
from .._livekit.close_hold import CloseHold
from .._livekit.compat import last_event_listener
from .._livekit.interception import Interceptor
from .._livekit.protected_lines import ProtectedLineGate
from .active_chain import ActiveChain
from .caller_voice import CallerVoice
from .chain_run import ChainRun
from .event_hub import EventHub, EventOwner
from .model_audio import ModelAudio
from .model_input import ModelInput
from .reply_audio import ReplyAudio
from .report import CallReport
from .session_audio import SessionAudio
from .session_listeners import SessionListeners
from .speech_record import SpeechRecord
from .supervision import AgentSupervision, LlmNode, UserTurnHook
from .tool_calls import ToolCalls, worded_tool_errors
from .tracing import record_report
from .typed_input import HandoffInput

__all__ = ["CORE", "ChainOwner", "SessionRuntime"]

# the core's own steps are reported under this name
CORE = "ResilientAgent"
# How long a closing session may take from the agent's exit to livekit's close event (a protected
# speech still plays out, the last user turn is committed) before the runtime stops without it.
_CLOSE_EVENT_BOUND_S = 60.0
# How long into a close a tool body may go on after livekit interrupted its speech: livekit has
# already waited 5 s for it and cancelled the speech arbitrarily.
_INTERRUPTED_TOOL_GRACE_S = 1.0


class ChainOwner(EventOwner, Protocol):
    """A ``ResilientAgent``, as the runtime sees it."""

    tool_close_bound_s: float

    @property
    def tool_error_message(self) -> str | None:
        """What the LLM is told of an unexpected tool exception (None: livekit's wording)."""
        ...

    @property
    def middleware_instances(self) -> SessionInstances:
        """The agent's middleware recipes."""
        ...


def is_closing(agent: Agent) -> bool:
    """Whether the agent exits because its session closes (not because of a handoff).

    livekit makes the next agent current before the old one's ``on_exit`` runs in a handoff; a
    closing session leaves the exiting agent current.
    """
    try:
        return agent.session.current_agent is agent
    except RuntimeError:
        return True


class SessionRuntime:
    """The library's presence in one session, from the first ``ResilientAgent`` to the close.

    Args:
        session: The session.
        owner: The ``ResilientAgent`` that starts it (its chain runs first).
    """

    def __init__(self, session: AgentSession[Any], owner: ChainOwner) -> None:
        self.session = session
        self._owner = owner
        self.hub = EventHub(session, owner)
        self.state = ConversationState(
            user_state=session.user_state, agent_state=session.agent_state
        )
        self._audio = SessionAudio(session)
        self._caller_voice = CallerVoice(self.state, self._audio)
        self._typed_input = HandoffInput(session)
        self.ctx = MiddlewareContext(
            session=session,
            agent=owner,  # type: ignore[arg-type]
            state=self.state,
            emit=self.emit,
            observe_audio=self._audio.observe,
            stop_observing_audio=self._audio.stop_observing,
            hold_input_through_handoff=self._typed_input.hold,
            report_error=self.report_error,
        )
        self.ctx.model_input = ModelInput(lambda: self.ctx.agent)
        self.speeches = SpeechRecord()
        self.tools = ToolCalls(session, self.state)
        self.supervision = AgentSupervision(self)
        self.active = ActiveChain()
        self.ctx.fanout.last_listener = last_event_listener
        self._listeners = SessionListeners(self, self.ctx.fanout)
        # the session-wide gates (the close hold, the protected lines)
        self._gates = Interceptor()
        self._stopping: asyncio.Task[None] | None = None
        self._stop_begun = False
        self._stopped = False
        self._stopped_event: asyncio.Event | None = None
        self._close_fallback: asyncio.Task[None] | None = None

    @property
    def owner(self) -> ChainOwner:
        """The ``ResilientAgent`` whose chain runs (the last one that entered)."""
        return self._owner

    @property
    def run(self) -> ChainRun | None:
        """The active chain's run (None before the first one is set up, and after the stop)."""
        return self.active.run

    # -- the session's start and the chain's handoffs ------------------------------------------
    def start(self) -> None:
        """Follow the session's events and hold its close until the runtime stopped."""
        self.hub.bind_job_fields(CORE)
        self._listeners.subscribe()
        CloseHold(self.session, self).install(self._gates)
        ProtectedLineGate(self.session).install(self._gates)

    async def activate(self, owner: ChainOwner, chain: MiddlewareChain | None = None) -> ChainRun:
        """Make ``owner``'s chain the session's: the active one closes (a handoff) first.

        The new chain's middleware take what the old one carried in their ``setup``; events the
        session emits meanwhile reach the new chain once its middleware are set up.

        Args:
            owner: The ``ResilientAgent`` entering.
            chain: Its chain; by default built from ``owner``'s middleware recipes.
        """
        old_owner = self._owner

        def build() -> ChainRun:
            built = chain or owner.middleware_instances.for_session(self.report_error)
            run = ChainRun(
                built,
                self.ctx,
                farewell_of=self.speeches.farewell_of,
                speech_done_at=self.speeches.done_at,
            )
            self._owner = self.hub.owner = owner
            return run

        run = await self.active.hand_over(
            build,
            # the handoff that led here is over; its gates sit on top of the old chain's
            begun=self._typed_input.handoff_over,
            # the app's own instances may run again (in the next chain, if it shares them)
            old_closed=old_owner.middleware_instances.release,
        )
        self.ctx.carried.drop_untaken("the next agent's chain has no middleware that takes it")
        self._caller_voice.follow(self.ctx.model_input)
        return run

    # -- events and errors ---------------------------------------------------------------------
    def emit(self, event: ResilientEvent, *, exc: BaseException | None = None) -> None:
        """Count, trace, log and emit one of the library's events (:class:`.EventHub`)."""
        self.hub.emit(event, exc=exc)

    def report_error(
        self, mw: Named | str, hook: str, exc: BaseException, action: str = "continued_without_it"
    ) -> None:
        """One ``middleware_error`` event for a failing piece, named."""
        self.hub.report_error(mw, hook, exc, action)

    def report(self) -> CallReport:
        """What the chain saw and did in this session so far."""
        return self.hub.report()

    # -- what the active agent does (supervision.Supervisor) -----------------------------------
    def agent_entering(self, agent: Agent) -> None:
        """An agent's activity started: the handoff that led to it is over."""
        self._typed_input.handoff_over()
        self._caller_voice.follow(self.ctx.model_input)

    @contextlib.contextmanager
    def entering(self) -> Iterator[None]:
        """An agent's ``on_enter`` runs inside this block (``ConversationState.entering``)."""
        state = self.ctx.state
        state.entering += 1
        try:
            yield
        finally:
            state.entering -= 1

    def agent_exiting(self, agent: Agent) -> None:
        """An agent's activity drains: the session closes, or a handoff begins."""
        if is_closing(agent):
            self.stop_after_close()
        else:
            self._typed_input.handoff_begins()

    async def user_turn(
        self, app_hook: UserTurnHook, turn_ctx: ChatContext, new_message: ChatMessage
    ) -> None:
        """Run ``app_hook`` (the agent's ``on_user_turn_completed``) through the active chain."""
        run = self.run
        if run is None:
            await app_hook(turn_ctx, new_message)
            return
        await run.user_turn(app_hook, turn_ctx, new_message)

    def inference(
        self, app_node: LlmNode, chat_ctx: ChatContext, tools: list[Any], model_settings: Any
    ) -> Any:
        """Run ``app_node`` (the agent's ``llm_node``) through the active chain."""
        run = self.run
        if run is None:
            return app_node(chat_ctx, tools, model_settings)
        return run.inference(app_node, chat_ctx, tools, model_settings)

    def reply_audio(self) -> ReplyAudio | None:
        """The session's ``ReplyAudio`` if a middleware asked for it (the TTS is observed)."""
        if self._stopped:
            return None
        return ReplyAudio.wanted(self.ctx)

    def model_audio(self) -> ModelAudio | None:
        """The session's ``ModelAudio`` if a middleware asked for it (the model is observed)."""
        if self._stopped:
            return None
        return ModelAudio.wanted(self.ctx)

    async def run_tool(self, call: ToolCall, run_body: Callable[[ToolCall], Awaitable[Any]]) -> Any:
        """Run one tool call of the active agent through the active chain.

        An unexpected exception reaches the LLM as the chain's owner words it
        (``ResilientAgent(tool_error_message=...)``), whichever agent's tool raised it.
        """
        run = self.run

        async def run_call() -> Any:
            if run is None or self._stopped:
                return await run_body(call)
            return await self.tools.run(run, call, run_body)

        return await worded_tool_errors(call, run_call, self.owner.tool_error_message)

    # -- what livekit's events tell the runtime (session_listeners.ListenerHost) ---------------
    def agent_switched(self) -> None:
        """Livekit switched activities (its new agent starts next): supervise the new agent."""
        try:
            agent = self.session.current_agent
        except RuntimeError:
            return
        if agent is not self.ctx.agent:
            self.ctx.previous_agent, self.ctx.agent = self.ctx.agent, agent
        attach = getattr(agent, "attach_runtime", None)
        if callable(attach):
            attach(self)  # a ResilientAgent: it activates its own chain as it enters
            return
        try:
            self.supervision.supervise(agent)
        except Exception as exc:
            self.report_error(CORE, "supervise", exc, "ran_unsupervised")

    def session_closed(self) -> None:
        """Livekit closed the session: stop, and tell a hang-up decision that waits."""
        self._stopping = asyncio.get_running_loop().create_task(self.stop())
        run = self.run
        if run is not None and run.shutdown_gate is not None:
            run.shutdown_gate.session_closed()
        # livekit ends agent_session right after this event, before the stop's call_summary
        record_report(self.report(), self.session)

    # -- the stop ------------------------------------------------------------------------------
    @property
    def stop_started(self) -> bool:
        """Whether the stop has begun (livekit's close was seen, or the stop was asked for)."""
        return self._stop_begun or self._stopping is not None

    def stop_after_close(self, bound_s: float = _CLOSE_EVENT_BOUND_S) -> None:
        """The session is closing: keep going until livekit's ``close``, then stop.

        A close event that does not come within ``bound_s`` (livekit's teardown failed) stops
        the runtime anyway; tool bodies still running into the close are cancelled and named.
        """
        if self.stop_started or self._close_fallback is not None:
            return
        tool_bound_s = self.owner.tool_close_bound_s

        async def stop_without_close_event() -> None:
            # a tool whose speech livekit already interrupted (and gave up on) is past saving
            await asyncio.sleep(_INTERRUPTED_TOOL_GRACE_S)
            self.tools.cancel_hung(interrupted_only=True)
            await asyncio.sleep(max(0.0, tool_bound_s - _INTERRUPTED_TOOL_GRACE_S))
            self.tools.cancel_hung(interrupted_only=False)
            await asyncio.sleep(max(0.0, bound_s - tool_bound_s))
            self.hub.log.warning("session_close_not_seen", after_s=bound_s, action="stopped_anyway")
            await self.stop()

        self._close_fallback = asyncio.get_running_loop().create_task(
            stop_without_close_event(), name="resilient_agent.close_fallback"
        )

    async def stop(self) -> None:
        """Close the active chain, release the session, and log the call summary (once)."""
        if self._stop_begun:
            return
        self._stop_begun = True
        try:
            await self._stop()
        finally:
            self._stopped = True
            if self._stopped_event is not None:
                self._stopped_event.set()
            self._gates.restore_all()

    async def _stop(self) -> None:
        fallback = self._close_fallback
        if fallback is not None and fallback is not asyncio.current_task():
            fallback.cancel()
        self._typed_input.handoff_over()
        self.supervision.release()
        self._audio.close()
        self._listeners.unsubscribe()
        run = self.run
        try:
            if run is not None:
                await run.close("session_end")
        finally:
            self.ctx.carried.drop_untaken("the session ended")
            for shared in self.ctx.objects.clear():
                # the listeners a shared object added for the whole session (by itself)
                self.ctx.release(shared)
            self.owner.middleware_instances.release()
            summary = self.hub.report()
            self.hub.log.info("call_summary", **summary.model_dump(exclude={"type"}))

    async def until_stopped(self) -> None:
        """Wait until the stop is over; at once from a task the stop itself waits for."""
        current = asyncio.current_task()
        if current in (self._stopping, self._close_fallback):
            return
        if self.run is not None and self.run.runs_in_queue(current):
            return
        if self._stopped:
            return
        if self._stopped_event is None:
            self._stopped_event = asyncio.Event()
        await self._stopped_event.wait()
