"""Records what happened in one lab call, from public session events and livekit's logs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_args

from livekit.agents import AgentSession
from livekit.agents.voice import events as lk_events
from livekit.agents.voice.speech_handle import SpeechHandle

from .._livekit.compat import speech_interrupted_future, speech_scheduled_future

__all__ = ["CallRecorder", "LivekitLogCapture", "PlayoutStart", "RecordedSpeech", "ToolRun"]

INTERRUPTION_TIMEOUT_LOG = "speech not done in time after interruption"
# Session events recorded as they come, with their details (beside the ones with their own list).
_OTHER_SESSION_EVENTS: tuple[lk_events.EventTypes, ...] = (
    "user_transcription_timeout",
    "agent_false_interruption",
    "error",
    "close",
)
# Every session event livekit's SessionReport keeps (it drops metrics_collected; debug_message is
# livekit's own chatter): the lab's calls can be written as livekit's report.
_REPORTED_EVENTS: tuple[lk_events.EventTypes, ...] = tuple(
    e for e in get_args(lk_events.EventTypes) if e not in ("metrics_collected", "debug_message")
)


@dataclass
class RecordedSpeech:
    """One speech handle's life.

    Attributes:
        id: The handle id.
        source: ``say`` or ``generate_reply``.
        created_at: Loop seconds at creation.
        allow_interruptions: As created.
        done_at: Loop seconds when it finished, None if it never did.
        interrupted: Whether it was interrupted.
        scheduled_at: Seconds when livekit queued it for playout, None if it never was.
        interrupted_at: Seconds when it was interrupted, None if it never was.
        allow_interruptions_when_done: ``allow_interruptions`` when it finished (a tool's
            ``disallow_interruptions()`` changes it during the handle's life).
    """

    id: str
    source: str
    created_at: float
    allow_interruptions: bool
    done_at: float | None = None
    interrupted: bool = False
    scheduled_at: float | None = None
    interrupted_at: float | None = None
    allow_interruptions_when_done: bool | None = None


@dataclass
class ToolRun:
    """One function tool execution, from dispatch to its terminal update.

    Attributes:
        call_id: The LLM's call id.
        name: The function tool.
        arguments: Its JSON arguments, as the LLM sent them.
        started_at: Seconds when livekit dispatched it.
        ended_at: Seconds when it returned, raised or was cancelled; None if it never ended.
        status: ``done``, ``error`` or ``cancelled``; None while it runs.
    """

    call_id: str
    name: str
    arguments: str
    started_at: float
    ended_at: float | None = None
    status: str | None = None


@dataclass(frozen=True)
class PlayoutStart:
    """Agent audio began to play, or played again after a pause.

    In :attr:`CallRecorder.playouts`, a segment's first audio (or its resume after a pause that
    preceded any audio); in :attr:`CallRecorder.resumes`, a resume of audio already under way.

    Attributes:
        at: Seconds since the call started.
        speech_id: The speech handle livekit was playing out, None if there was none.
        allow_interruptions: That handle's ``allow_interruptions`` at that moment.
    """

    at: float
    speech_id: str | None
    allow_interruptions: bool | None


@dataclass
class CallRecorder:
    """Listens to one session's public events; every list is in event order.

    Attributes:
        clock: Returns seconds since the call started.
        agent_events: Every session event as livekit emitted it, for livekit's ``SessionReport``
            (see :mod:`.session_report`).
    """

    clock: Callable[[], float]
    user_states: list[tuple[float, str]] = field(default_factory=list)
    agent_states: list[tuple[float, str]] = field(default_factory=list)
    speeches: dict[str, RecordedSpeech] = field(default_factory=dict)
    handles: dict[str, SpeechHandle] = field(default_factory=dict)
    transcripts: list[tuple[float, str, bool]] = field(default_factory=list)
    items: list[tuple[float, str, str]] = field(default_factory=list)
    tool_calls: list[tuple[float, str, str]] = field(default_factory=list)
    tool_runs: list[ToolRun] = field(default_factory=list)
    playouts: list[PlayoutStart] = field(default_factory=list)
    resumes: list[PlayoutStart] = field(default_factory=list)
    tool_outputs: list[tuple[float, str, str, bool]] = field(default_factory=list)
    session_events: list[tuple[float, str, str]] = field(default_factory=list)
    input_audio_kept: list[tuple[float, bool]] = field(default_factory=list)
    closed_at: float | None = None
    close_reason: str | None = None
    agent_events: list[Any] = field(default_factory=list)
    _session: AgentSession[Any] | None = field(default=None, init=False, repr=False, compare=False)
    _input_audio: Any = field(default=None, init=False, repr=False, compare=False)

    def attach(self, session: AgentSession[Any]) -> None:
        """Subscribe to ``session`` (after its audio output is set, to see playout starts)."""
        self._session = session
        self._input_audio = session.input.audio
        session.on("user_state_changed", self._on_user_state)
        session.on("agent_state_changed", self._on_agent_state)
        session.on("speech_created", self._on_speech_created)
        session.on("user_input_transcribed", self._on_transcribed)
        session.on("conversation_item_added", self._on_item)
        session.on("function_tools_executed", self._on_tools_executed)
        session.on("tool_execution_updated", self._on_tool_execution_updated)
        session.on("close", self._on_close)
        for event in _OTHER_SESSION_EVENTS:
            session.on(event, self._other_event_listener(event))
        for event in _REPORTED_EVENTS:
            # a function of ours, not the list's builtin ``append``: livekit's emit reads each
            # listener's signature at every event, and a builtin's is parsed from its text, a
            # class built each time: the lab's recorder would weigh on every call it measures
            session.on(event, self._on_reported_event)
        if session.output.audio is not None:
            session.output.audio.on("playback_started", self._on_playback_started)

    def _on_reported_event(self, ev: Any) -> None:
        self.agent_events.append(ev)

    def _on_user_state(self, ev: lk_events.UserStateChangedEvent) -> None:
        self.user_states.append((self.clock(), ev.new_state))
        if self._session is not None and self._input_audio is not None:
            # whether the app's audio input object is still the session's, each time it matters
            kept = self._session.input.audio is self._input_audio
            self.input_audio_kept.append((self.clock(), kept))

    def _other_event_listener(self, event: str) -> Callable[[Any], None]:
        def listener(ev: Any) -> None:
            details = ev.model_dump(exclude={"type", "created_at", "error", "source"})
            self.session_events.append((self.clock(), event, repr(sorted(details.items()))))

        return listener

    def _on_agent_state(self, ev: lk_events.AgentStateChangedEvent) -> None:
        self.agent_states.append((self.clock(), ev.new_state))

    def _on_speech_created(self, ev: lk_events.SpeechCreatedEvent) -> None:
        handle = ev.speech_handle
        record = RecordedSpeech(
            id=handle.id,
            source=ev.source,
            created_at=self.clock(),
            allow_interruptions=handle.allow_interruptions,
        )
        self.speeches[handle.id] = record
        self.handles[handle.id] = handle

        def _done(h: SpeechHandle) -> None:
            record.done_at = self.clock()
            record.interrupted = h.interrupted
            record.allow_interruptions_when_done = h.allow_interruptions

        handle.add_done_callback(_done)
        # livekit exposes no event for queueing or interruption; its private futures are the
        # only record (see _compat), and one that is missing just leaves None
        self._stamp_when_done(speech_scheduled_future(handle), record, "scheduled_at")
        self._stamp_when_done(speech_interrupted_future(handle), record, "interrupted_at")

    def _stamp_when_done(
        self, future: asyncio.Future[Any] | None, record: RecordedSpeech, stamp: str
    ) -> None:
        if future is None:
            return
        if future.done():
            setattr(record, stamp, record.created_at)
            return
        future.add_done_callback(lambda _f: setattr(record, stamp, self.clock()))

    def _on_transcribed(self, ev: lk_events.UserInputTranscribedEvent) -> None:
        self.transcripts.append((self.clock(), ev.transcript, ev.is_final))

    def _on_item(self, ev: lk_events.ConversationItemAddedEvent) -> None:
        item = ev.item
        if item.type == "message":
            self.items.append((self.clock(), item.role, item.text_content or ""))

    def _on_tools_executed(self, ev: lk_events.FunctionToolsExecutedEvent) -> None:
        for call, output in zip(ev.function_calls, ev.function_call_outputs, strict=False):
            status = "none" if output is None else ("error" if output.is_error else "ok")
            self.tool_calls.append((self.clock(), call.name, status))
            if output is not None:
                # what the LLM gets back
                self.tool_outputs.append((self.clock(), call.name, output.output, output.is_error))

    def _on_tool_execution_updated(self, ev: lk_events.ToolExecutionUpdatedEvent) -> None:
        update = ev.update
        if isinstance(update, lk_events.ToolCallStarted):
            call = update.function_call
            self.tool_runs.append(
                ToolRun(call.call_id, call.name, call.arguments, started_at=self.clock())
            )
        elif isinstance(update, lk_events.ToolCallEnded):
            for run in self.tool_runs:
                if run.call_id == update.call_id and run.ended_at is None:
                    run.ended_at = self.clock()
                    run.status = update.status

    def _on_playback_started(self, _ev: object) -> None:
        self.playouts.append(self._playout_start())

    def on_resumed(self) -> None:
        """The speaker plays a segment again after a pause (called by the lab's speaker).

        livekit has no event for it; what matters is whether the speech was protected at that
        instant (a tool's ``disallow_interruptions()`` protects it and resumes it at once).
        """
        self.resumes.append(self._playout_start())

    def _playout_start(self) -> PlayoutStart:
        speech = self._session.current_speech if self._session is not None else None
        return PlayoutStart(
            at=self.clock(),
            speech_id=speech.id if speech is not None else None,
            allow_interruptions=speech.allow_interruptions if speech is not None else None,
        )

    def _on_close(self, ev: lk_events.CloseEvent) -> None:
        self.closed_at = self.clock()
        self.close_reason = str(ev.reason.value if hasattr(ev.reason, "value") else ev.reason)

    def unfinished(self) -> list[RecordedSpeech]:
        """Speech handles that are not done."""
        return [r for r in self.speeches.values() if not self.handles[r.id].done()]

    def user_state(self) -> str:
        """The last user state seen (``listening`` before any event)."""
        return self.user_states[-1][1] if self.user_states else "listening"


class LivekitLogCapture(logging.Handler):
    """Keeps livekit-agents' warnings and errors raised during one call."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(level=logging.WARNING)
        self._clock = clock
        self.records: list[tuple[float, int, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record's time, level and message."""
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        self.records.append((self._clock(), record.levelno, message))

    def count(self, fragment: str) -> int:
        """How many captured messages contain ``fragment``."""
        return sum(1 for _, _, message in self.records if fragment in message)
