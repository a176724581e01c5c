"""The conversation as the chain sees it: a snapshot hooks read synchronously."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from livekit.agents import AgentSession

from .audio import FrameCallback, ModelInputHold
from .carry import Carried, SessionObjects
from .events import RaceDetectedEvent, RaceHandledEvent, ResilientEvent
from .fanout import FanOut
from .log import get_logger
from .pending_words import PendingWords
from .requests import SpeechInfo, ToolCall
from .services import Services
from .subscriptions import Emitter, ErrorReport, Subscriptions

if TYPE_CHECKING:
    from livekit.agents import Agent

__all__ = ["CloseReason", "ConversationState", "MiddlewareContext"]

_T = TypeVar("_T")

logger = get_logger("state")

CloseReason = Literal["handoff", "session_end"]
"""Why a chain closes: the next ``ResilientAgent`` of the session entered, or the session ended."""

UserState = Literal["speaking", "listening", "away"]
VOICE_GAP_S = 0.55
"""With server turns, a caller whose line carried a voice this recently is still speaking: the
silence a VAD waits for before it ends a turn (words have shorter pauses)."""
AgentState = Literal["initializing", "idle", "listening", "thinking", "speaking"]


@dataclass
class ConversationState:
    """Kept up to date synchronously, in livekit's own event order, before any hook runs.

    Attributes:
        user_state: The caller's state.
        agent_state: The agent's state.
        tools_in_flight: Tool calls that entered and did not exit yet, by a per-call key.
        entering: ``on_enter`` hooks of the session's agents still running: app code that may
            say a line, then await an ``AgentTask``, as a tool may.
        speeches: Speeches created and not done yet, by handle id.
        pending_words: The caller's words not delivered to the LLM yet, the session's one
            model of them (see :mod:`resilient_agent._engine.pending_words`): each final transcript
            until a user message holds it or a middleware merges it into a turn or an inference.
        user_speech_starts: ``time.time()`` of the caller's recent starts of speech.
        server_turns: The active agent's realtime model detects the caller's turns on its
            server: ``user_state`` is the server's word (Gemini Live reports the caller speaking
            while its own reply plays), so whether the caller spoke is read from the caller's
            own audio instead (:attr:`caller_voiced_at`).
        caller_voiced_at: ``time.time()`` when the caller's line last carried a voice, kept
            while the active agent runs a realtime model (see
            :mod:`resilient_agent._session.caller_voice`).
    """

    user_state: UserState = "listening"
    agent_state: AgentState = "initializing"
    tools_in_flight: dict[int, ToolCall] = field(default_factory=dict)
    entering: int = 0
    speeches: dict[str, SpeechInfo] = field(default_factory=dict)
    pending_words: PendingWords = field(default_factory=PendingWords)
    user_speech_starts: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    server_turns: bool = False
    caller_voiced_at: float = float("-inf")

    @property
    def pending_user_fragments(self) -> list[str]:
        """The texts of :attr:`pending_words` still to reach the LLM, oldest first."""
        return [f.text for f in self.pending_words.undelivered()]

    @property
    def caller_speaking(self) -> bool:
        """Whether the caller is speaking now: ``user_state``, or their voice with server turns."""
        if self.server_turns:
            return time.time() - self.caller_voiced_at <= VOICE_GAP_S
        return self.user_state == "speaking"

    def user_spoke_since(self, moment: float) -> bool:
        """Whether the caller is speaking, or started to speak after ``moment`` (``time.time()``).

        With :attr:`server_turns`, whether the caller's line carried a voice after ``moment``
        or within the last ``VOICE_GAP_S`` (a caller speaking now).
        """
        if self.server_turns:
            return self.caller_voiced_at >= moment or self.caller_speaking
        return self.user_state == "speaking" or any(t >= moment for t in self.user_speech_starts)

    @property
    def protected_speeches(self) -> list[SpeechInfo]:
        """Live speeches that do not allow interruptions right now."""
        return [s for s in self.speeches.values() if not s.handle.allow_interruptions]


class Named(Protocol):
    """Anything with a ``display_name`` (every ``Middleware``)."""

    @property
    def display_name(self) -> str:
        """The name events and logs carry."""
        ...


def name_of(by: Named | str) -> str:
    """The name a middleware (or a named part of the core) is reported under."""
    return by if isinstance(by, str) else by.display_name


def _log_error(by: Named | str, hook: str, exc: BaseException, action: str) -> None:
    logger.error("middleware_error", middleware=name_of(by), hook=hook, action=action, exc_info=exc)


@dataclass
class MiddlewareContext:
    """What every hook receives first: the session, the agent, the state and an emitter.

    One context per session: it outlives handoffs, so what it holds (the state, the audio
    observation, :attr:`carried`, :attr:`objects`) follows the call from agent to agent.

    Attributes:
        session: The livekit session.
        agent: The agent or task active now, whatever its class (a plain ``Agent`` or one of
            livekit's workflow tasks is supervised by the chain that handed control to it).
        state: The conversation snapshot.
        emit: Emits one of our events on the agent's emitter (prefer :meth:`race_detected`
            and :meth:`race_handled`).
        observe_audio: Registers a callback shown every frame of the caller's audio with the
            loop time it passed at; returns False when the session has no audio input.
        stop_observing_audio: Unregisters a callback ``observe_audio`` registered (no frame
            reaches it until it is registered again); nothing happens for one it does not hold.
        hold_input_through_handoff: Called by a leaving agent's middleware in a handoff: until
            the returned release is called, typed input survives livekit's handoff (see
            :mod:`resilient_agent._livekit.handoff_gates`) and the callback gets the text of
            each user input livekit refused to answer meanwhile.
        model_input: The active agent's realtime model input, to hold and send later (see
            :mod:`resilient_agent._session.model_input`); None outside a session's runtime.
        previous_agent: The agent or task that was active before :attr:`agent`, if any.
        carried: State a closing chain leaves its successor (:meth:`carry`, :meth:`take`).
        objects: Objects the session's middleware share (:meth:`shared`).
        report_error: Told ``(middleware, hook, exception, action)`` when a middleware fails
            outside a hook (a listener added with :meth:`listen`); the session's runtime
            reports it as a ``middleware_error``. None: logged.
        fanout: Registers the session's listeners (the core's and those added with
            :meth:`listen`) on livekit's emitters, one registration for listeners added one
            after another (see :mod:`resilient_agent._engine.fanout`).
        subscriptions: The listeners middleware added with :meth:`listen`.
        services: The services middleware offer with :meth:`provide`.
    """

    session: AgentSession[Any]
    agent: Agent
    state: ConversationState
    emit: Callable[[ResilientEvent], None]
    observe_audio: Callable[[FrameCallback], bool] = lambda _callback: False
    stop_observing_audio: Callable[[FrameCallback], None] = lambda _callback: None
    hold_input_through_handoff: Callable[[Callable[[str], None]], Callable[[], None]] = (
        lambda _keep: lambda: None
    )
    model_input: ModelInputHold | None = None
    previous_agent: Agent | None = None
    carried: Carried = field(default_factory=Carried)
    objects: SessionObjects = field(default_factory=SessionObjects)
    report_error: ErrorReport | None = None
    fanout: FanOut = field(default_factory=FanOut)
    subscriptions: Subscriptions = field(init=False)
    services: Services = field(default_factory=Services)

    def __post_init__(self) -> None:
        self.subscriptions = Subscriptions(lambda: self.report_error or _log_error, self.fanout)

    def listen(
        self, emitter: Emitter, event: str, handler: Callable[[Any], Any], *, by: Named
    ) -> Callable[[], None]:
        """Add a livekit listener inside the fault boundary, removed when ``by`` closes.

        A handler that raises is reported as ``by``'s ``middleware_error``
        (``hook="listener:<event>"``) and the emitter goes on; see
        :mod:`resilient_agent._engine.subscriptions`.

        Args:
            emitter: The session, an audio output, any livekit emitter.
            event: The event's name, e.g. ``"error"``.
            handler: Called with the event, synchronously, inside livekit's call.
            by: The middleware the listener belongs to.

        Returns:
            Removes the listener earlier than ``by``'s close.
        """
        return self.subscriptions.listen(emitter, event, handler, by=by)

    def provide(self, kind: type[_T], service: _T, *, by: Named | None = None) -> None:
        """Offer ``service`` to the session's other middleware as ``kind``, until ``by`` closes.

        Args:
            kind: The class other middleware ask for (``service`` is an instance of it).
            service: What they get.
            by: The middleware offering it; by default ``service`` itself.
        """
        self.services.provide(kind, service, by if by is not None else service)

    def service(self, kind: type[_T]) -> _T | None:
        """The service a middleware of this session offers as ``kind``, or None."""
        return self.services.get(kind)

    def release(self, by: object) -> None:
        """Remove ``by``'s listeners and withdraw its services (the core calls it at its close)."""
        self.subscriptions.release(by)
        self.services.release(by)

    def carry(self, key: str, value: Any, on_untaken: Callable[[Any], None] | None = None) -> None:
        """In ``aclose(ctx, "handoff")``: leave ``value`` for the next chain's ``setup``.

        Args:
            key: Usually the middleware's name.
            value: What the successor takes with :meth:`take`.
            on_untaken: Called with ``value`` when nobody takes it (the next chain lacks that
                middleware, or the session ends first), to release it and log what it drops.
        """
        self.carried.carry(key, value, on_untaken)

    def take(self, key: str) -> Any | None:
        """In ``setup``: what the previous chain of this session left under ``key``, once."""
        return self.carried.take(key)

    def shared(self, key: str, build: Callable[[], _T | None]) -> _T | None:
        """The session's one object under ``key`` (built by ``build`` on first use).

        An object that listens for the whole session, across handoffs, adds its listeners with
        ``listen(..., by=<the object>)``: they are removed when the session ends.
        """
        return self.objects.get_or_build(key, build)

    def race_detected(
        self,
        by: Named | str,
        kind: str,
        *,
        details: Mapping[str, Any] | None = None,
        counts: Mapping[str, int] | None = None,
    ) -> None:
        """Report a race: one ``race_detected`` event, one log record, one count in the report.

        Args:
            by: The middleware that saw it (or its name).
            kind: Which race, e.g. ``"speech_over_speaking_user"``.
            details: Ids and timings; never transcripts.
            counts: Counters to add to ``CallReport.counters``.
        """
        self.emit(
            RaceDetectedEvent(
                kind=kind,
                middleware=name_of(by),
                details=dict(details or {}),
                counts=dict(counts or {}),
            )
        )

    def race_handled(
        self,
        by: Named | str,
        kind: str,
        action: str,
        *,
        details: Mapping[str, Any] | None = None,
        counts: Mapping[str, int] | None = None,
    ) -> None:
        """Report an action on a race: one ``race_handled`` event, log record and count.

        Args:
            by: The middleware that acted (or its name).
            kind: Which race.
            action: What it did, e.g. ``"merged_into_next_turn"``.
            details: Ids and timings; never transcripts.
            counts: Counters to add to ``CallReport.counters``.
        """
        self.emit(
            RaceHandledEvent(
                kind=kind,
                action=action,
                middleware=name_of(by),
                details=dict(details or {}),
                counts=dict(counts or {}),
            )
        )
