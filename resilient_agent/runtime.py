"""One supervisor per session: the chain follows the call into every agent and task.

The first ``ResilientAgent`` to enter a session starts a :class:`SessionRuntime` for the session's
life. It follows every change of activity (a handoff, an awaited ``AgentTask``, a task that
returns) and supervises whichever agent or task is active:

* a ``ResilientAgent`` runs its own chain: when one enters, the chain before it closes with
  ``reason="handoff"`` (its middleware :meth:`~.MiddlewareContext.carry` their state) and its own
  sets up (and :meth:`~.MiddlewareContext.take` it);
* a plain ``Agent`` or ``AgentTask`` (livekit's workflow tasks included) is served by the chain
  that handed control to it (see :mod:`.supervision`), unless :func:`~.supervision.unsupervised`.

The runtime owns what belongs to the session rather than to an agent: one context and
conversation state, one observation of the caller's audio (:mod:`.session_audio`: the session's
input stays the app's own object), the tool calls in flight, the record
of speeches, the call report, and the hold that makes ``session.aclose()`` wait for the chain's
stop. livekit calls event listeners synchronously inside its own tasks: the runtime updates the
state and runs decide hooks right there, and queues notify hooks for the active chain
(:mod:`.chain_run`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from livekit.agents import Agent, AgentSession, get_job_context, utils
from livekit.agents.llm import ChatContext, ChatMessage
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.speech_handle import SpeechHandle

from .caller_voice import CallerVoice
from .chain import MiddlewareChain
from .chain_run import ChainRun
from .close_hold import CloseHold
from .cut_in import cutting_in
from .events import MiddlewareErrorEvent, ResilientEvent, ResilientEventTypes, UnknownToolEvent
from .handoff_gates import HandoffGates
from .interception import Interceptor
from .listeners import event_listener
from .live import SessionInstances
from .log import get_logger
from .model_input import ModelInput
from .pending_words import Fragment
from .report import CallReport, CallReporter
from .requests import InferenceRequest, SpeechDecision, SpeechInfo, ToolCall, UserTurn
from .session_audio import SessionAudio
from .speech_record import SpeechRecord
from .state import ConversationState, MiddlewareContext, Named, name_of
from .supervision import AgentSupervision, LlmNode, UserTurnHook
from .tool_calls import ToolCalls, worded_tool_errors
from .tool_names import fix_for
from .tools import current_tool
from .tracing import RaceTelemetry, record_report

__all__ = ["ChainOwner", "SessionRuntime"]

logger = get_logger("runtime")

# the core's own steps are reported under this name
CORE = "ResilientAgent"
# How long a closing session may take from the agent's exit to livekit's close event (a protected
# speech still plays out, the last user turn is committed) before the runtime stops without it.
_CLOSE_EVENT_BOUND_S = 60.0
# How long into a close a tool body may go on after livekit interrupted its speech: livekit has
# already waited 5 s for it and cancelled the speech arbitrarily.
_INTERRUPTED_TOOL_GRACE_S = 1.0

_SESSION_EVENTS: tuple[lk_events.EventTypes, ...] = (
    "user_state_changed",
    "agent_state_changed",
    "user_input_transcribed",
    "conversation_item_added",
    "speech_created",
    "agent_false_interruption",
    "close",
)


class ChainOwner(Protocol):
    """A ``ResilientAgent``, as the runtime sees it."""

    events: utils.EventEmitter[ResilientEventTypes]
    tool_close_bound_s: float

    @property
    def tool_error_message(self) -> str | None:
        """What the LLM is told of an unexpected tool exception (None: livekit's wording)."""
        ...

    @property
    def middleware_instances(self) -> SessionInstances:
        """The agent's middleware recipes."""
        ...


def session_fields(call_id: str) -> dict[str, str]:
    """The ids every record of this session carries (room and job when a job runs).

    Raises:
        Exception: The job context is a stand-in without ``job``/``room``; the caller reports
            it and logs with the call id alone.
    """
    fields = {"call_id": call_id}
    try:
        job = get_job_context()
    except RuntimeError:
        return fields
    fields["job_id"] = job.job.id
    fields["room"] = job.room.name or job.job.room.name
    return fields


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
        self.owner = owner
        # the agent the call started with: its events carry the whole call, handoffs included
        self.root = owner
        self.reporter = CallReporter(utils.shortuuid("call_"))
        self.telemetry = RaceTelemetry(session, self.report)
        self.log = logger.bind(call_id=self.reporter.call_id)
        self.state = ConversationState(
            user_state=session.user_state, agent_state=session.agent_state
        )
        self._audio = SessionAudio(session)
        self._caller_voice = CallerVoice(self.state)
        self.ctx = MiddlewareContext(
            session=session,
            agent=owner,  # type: ignore[arg-type]
            state=self.state,
            emit=self.emit,
            observe_audio=self._audio.observe,
            stop_observing_audio=self._audio.stop_observing,
            hold_input_through_handoff=self._hold_input_through_handoff,
            report_error=self.report_error,
        )
        self.ctx.model_input = ModelInput(lambda: self.ctx.agent)
        self.speeches = SpeechRecord()
        self.tools = ToolCalls(session, self.state)
        self.supervision = AgentSupervision(self)
        self.run: ChainRun | None = None
        """The active chain's run (None before the first one is set up, and after the stop)."""
        # the session-wide gates (the close hold), and those of the handoff under way
        self._gates = Interceptor()
        self._handoff_interceptor = Interceptor()
        self._input_keepers: list[Callable[[str], None]] = []
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
        self._stopping: asyncio.Task[None] | None = None
        self._stop_begun = False
        self._stopped = False
        self._stopped_event: asyncio.Event | None = None
        self._close_fallback: asyncio.Task[None] | None = None
        self._activating: asyncio.Lock | None = None
        # events of a handoff between two chains (the old one closing, the new one not built)
        self._backlog: list[tuple[str, tuple[Any, ...], bool]] | None = None
        self._last_report: CallReport | None = None

    # -- the session's start and the chain's handoffs ------------------------------------------
    def start(self) -> None:
        """Follow the session's events and hold its close until the runtime stopped."""
        try:
            self.log = logger.bind(**session_fields(self.reporter.call_id))
        except Exception as exc:
            self.report_error(CORE, "log_fields", exc, "logged_with_call_id_only")
        for event in _SESSION_EVENTS:
            self.session.on(event, self._listeners[event])
        CloseHold(self.session, self).install(self._gates)

    async def activate(self, owner: ChainOwner, chain: MiddlewareChain | None = None) -> ChainRun:
        """Make ``owner``'s chain the session's: the active one closes (a handoff) first.

        The old chain closes before the new one is built, so the app's own middleware instances
        it ran are free for the new chain; the new chain's middleware take what the old one
        carried in their ``setup``. Events the session emits meanwhile are queued for the new
        chain, which sees them once its middleware are set up.

        Args:
            owner: The ``ResilientAgent`` entering.
            chain: Its chain; by default built from ``owner``'s middleware recipes.
        """
        if self._activating is None:
            self._activating = asyncio.Lock()
        async with self._activating:
            # the handoff that led here is over; its gates sit on top of the old chain's
            self._release_handoff_gates()
            old, old_owner = self.run, self.owner
            self.run = None
            if old is not None:
                # events from here on wait in the new chain's queues (see below)
                self._backlog = []
                await old.close("handoff")
                # the app's own instances may run again (in the next chain, if it shares them)
                old_owner.middleware_instances.release()
            if chain is None:
                chain = owner.middleware_instances.for_session(self.report_error)
            new = ChainRun(
                chain,
                self.ctx,
                farewell_of=self.speeches.farewell_of,
                speech_done_at=self.speeches.done_at,
            )
            new.start_queues()
            self.owner = owner
            new.submit("on_session_start")
            backlog, self._backlog = self._backlog, None
            self.run = new
            for hook, args, urgent in backlog or ():
                new.submit(hook, *args, urgent=urgent)
            await new.set_up()
            self.ctx.carried.drop_untaken("the next agent's chain has no middleware that takes it")
            self._follow_model()
            return new

    # -- events and errors ---------------------------------------------------------------------
    def emit(self, event: ResilientEvent, *, exc: BaseException | None = None) -> None:
        """The one place our events are counted and logged, then emitted.

        They go to the agent whose chain runs, and to the agent the call started with when that
        is another one, so that one agent's ``events`` tell the whole call.
        """
        self.reporter.record(event)
        self.telemetry.record(event)  # on livekit's current span, and measured
        # one structured record per race, action and failure, beside the event on our emitter
        fields = event.model_dump(exclude={"type", "created_at"})
        if isinstance(event, MiddlewareErrorEvent):
            self.log.error(event.type, exc_info=exc, **fields)
        elif isinstance(event, UnknownToolEvent):
            self.log.warning(event.type, fix=fix_for(event), **fields)
        else:
            self.log.info(event.type, **fields)
        self.owner.events.emit(event.type, event)
        if self.root is not self.owner:
            self.root.events.emit(event.type, event)

    def report_error(
        self, mw: Named | str, hook: str, exc: BaseException, action: str = "continued_without_it"
    ) -> None:
        """One ``middleware_error`` event for a failing piece, named."""
        event = MiddlewareErrorEvent(
            middleware=name_of(mw), hook=hook, error=repr(exc), action=action
        )
        self.emit(event, exc=exc)

    def report(self) -> CallReport:
        """What the chain saw and did in this session so far."""
        return self.reporter.report()

    # -- what the active agent does (supervision.Supervisor) -----------------------------------
    def agent_entering(self, agent: Agent) -> None:
        """An agent's activity started: the handoff that led to it is over."""
        self._release_handoff_gates()
        self._follow_model()

    def _follow_model(self) -> None:
        """Read the caller's voice from their audio while the active agent runs a realtime model.

        Its ``user_state`` is the server's word when the server detects turns, and the model
        hears nothing of the caller while its input is held.
        """
        model_input = self.ctx.model_input
        self.state.server_turns = model_input is not None and model_input.server_detects_turns
        if model_input is not None and model_input.available:
            self._audio.observe(self._caller_voice.on_frame)
        else:
            self._audio.stop_observing(self._caller_voice.on_frame)

    def agent_exiting(self, agent: Agent) -> None:
        """An agent's activity drains: the session closes, or a handoff begins."""
        if is_closing(agent):
            self.stop_after_close()
        elif self._input_keepers:
            # fresh gates for each handoff: they stop deferring interrupts at its switch
            self._release_handoff_gates()
            HandoffGates(self.session, self._keep_refused_input).install(self._handoff_interceptor)

    async def user_turn(
        self, app_hook: UserTurnHook, turn_ctx: ChatContext, new_message: ChatMessage
    ) -> None:
        """Run ``app_hook`` (the agent's ``on_user_turn_completed``) inside ``wrap_user_turn``."""
        run = self.run
        if run is None or not run.chain.handles("wrap_user_turn"):
            await app_hook(turn_ctx, new_message)
            return
        original_text = new_message.text_content or ""

        async def run_app_hook(turn: UserTurn) -> None:
            if turn.text != original_text:
                new_message.content = [turn.text]
            await app_hook(turn.turn_ctx, new_message)

        turn = UserTurn(text=original_text, message=new_message, turn_ctx=turn_ctx)
        await run.chain.wrap_user_turn(self.ctx, turn, run_app_hook)

    def inference(
        self, app_node: LlmNode, chat_ctx: ChatContext, tools: list[Any], model_settings: Any
    ) -> Any:
        """Run ``app_node`` (the agent's ``llm_node``) inside ``wrap_llm_request``."""
        run = self.run
        if run is None or not run.chain.handles("wrap_llm_request"):
            return app_node(chat_ctx, tools, model_settings)

        async def run_app_node(request: InferenceRequest) -> Any:
            # livekit awaits a coroutine result, then streams whatever the app's node returned
            return app_node(request.chat_ctx, request.tools, request.model_settings)

        request = InferenceRequest(chat_ctx=chat_ctx, tools=tools, model_settings=model_settings)
        return run.chain.wrap_llm_request(self.ctx, request, run_app_node)

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

    # -- typed input through a handoff ---------------------------------------------------------
    def _hold_input_through_handoff(self, keep: Callable[[str], None]) -> Callable[[], None]:
        """``keep`` gets the text of each input livekit refuses while a handoff drains."""
        self._input_keepers.append(keep)

        def release() -> None:
            if keep in self._input_keepers:
                self._input_keepers.remove(keep)

        return release

    def _keep_refused_input(self, text: str) -> None:
        keepers = self._input_keepers
        if keepers:
            keepers[-1](text)  # the active chain's keeper (the last to ask)
            return
        logger.warning(
            "user_input_lost",
            words=len(text.split()),
            why="livekit refused it during a handoff and no middleware keeps typed input",
        )

    def _release_handoff_gates(self) -> None:
        self._handoff_interceptor.restore_all()

    # -- livekit events (synchronous, inside livekit's tasks) ---------------------------------
    def _submit(self, hook: str, *args: Any, urgent: bool = False) -> None:
        run = self.run
        if run is not None:
            run.submit(hook, *args, urgent=urgent)
        elif self._backlog is not None:
            self._backlog.append((hook, args, urgent))

    def _on_user_state(self, ev: lk_events.UserStateChangedEvent) -> None:
        self.state.user_state = ev.new_state
        if ev.new_state == "speaking":
            self.state.user_speech_starts.append(time.time())
        self._submit("on_user_state", ev, urgent=ev.new_state == "speaking")

    def _on_agent_state(self, ev: lk_events.AgentStateChangedEvent) -> None:
        self.state.agent_state = ev.new_state
        self._submit("on_agent_state", ev)

    def _on_transcript(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        text = ev.transcript.strip()
        if ev.is_final and text:
            current = self.session.current_speech
            # said over an interruptible agent speech: fewer words than livekit's min_words
            # are a backchannel it keeps for the caller's next turn
            over = (
                current is not None
                and current.allow_interruptions
                and not current.interrupted
                and not current.done()
            )
            heard_at = asyncio.get_running_loop().time()
            self.state.pending_words.add(Fragment(text, heard_at, over_agent_speech=over))
        self._submit("on_user_transcript", ev)

    def _on_item(self, ev: lk_events.ConversationItemAddedEvent) -> None:
        item = ev.item
        if item.type == "message" and item.role == "user":
            self.state.pending_words.deliver_said(item.text_content or "")
        elif item.type == "agent_handoff":
            self._follow_handoff()
        self._submit("on_conversation_item", ev)

    def _follow_handoff(self) -> None:
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

    def _on_speech_created(self, ev: lk_events.SpeechCreatedEvent) -> None:
        info = SpeechInfo(
            handle=ev.speech_handle,
            source=ev.source,
            user_initiated=ev.user_initiated,
            tool=current_tool(),
            created_at=time.time(),
            cut_in=cutting_in(),
        )
        self.speeches.created(info)
        run = self.run
        if run is not None and run.chain.handles("decide_speech"):
            decision = run.chain.decide("decide_speech", self.ctx, info)
            if isinstance(decision, SpeechDecision):
                _apply_speech_decision(info.handle, decision)
        self.state.speeches[info.id] = info

        def _done(_: SpeechHandle) -> None:
            self.state.speeches.pop(info.id, None)
            self.speeches.finished(info)
            self._submit("on_speech_done", info)

        info.handle.add_done_callback(_done)
        self._submit("on_speech_created", info)
        if run is not None and run.shutdown_gate is not None:
            run.shutdown_gate.speech_created(info)

    def _on_false_interruption(self, ev: lk_events.AgentFalseInterruptionEvent) -> None:
        self._submit("on_false_interruption", ev)

    def _on_close(self, ev: lk_events.CloseEvent) -> None:
        self._submit("on_session_end", ev)
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
            self.log.warning("session_close_not_seen", after_s=bound_s, action="stopped_anyway")
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
        self._release_handoff_gates()
        self.supervision.release()
        self._audio.close()
        for event in _SESSION_EVENTS:
            with contextlib.suppress(Exception):
                self.session.off(event, self._listeners[event])
        run = self.run
        try:
            if run is not None:
                await run.close("session_end")
        finally:
            self.ctx.carried.drop_untaken("the session ended")
            self.ctx.objects.clear()
            self.owner.middleware_instances.release()
            summary = self.reporter.report()
            self.log.info("call_summary", **summary.model_dump(exclude={"type"}))

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
