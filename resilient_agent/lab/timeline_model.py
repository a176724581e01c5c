"""The timeline records: one lab call in plain dataclasses, in call-relative seconds.

:func:`.timeline.extract_timeline` builds them; :meth:`CallTimeline.as_dict` is the record
``resilient-agent lab --timeline`` writes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "TIMELINE_FORMAT",
    "CallTimeline",
    "HeardRun",
    "LLMTrack",
    "Mark",
    "MarkKind",
    "NoiseSpan",
    "PlayoutSpan",
    "SpeechTrack",
    "StateSpan",
    "ToolTrack",
    "TypedTrack",
    "UtteranceTrack",
    "WordMark",
    "WordStatus",
    "write_timelines",
]

TIMELINE_FORMAT = 1
"""Version of the ``--timeline`` JSON layout; bumped when a field changes meaning."""

WordStatus = Literal["reached_llm", "lost_before_stt", "lost_after_stt"]
"""``reached_llm``: some LLM request saw it. ``lost_before_stt``: its audio never reached the
STT (livekit withheld it: protected speech, AEC warm-up). ``lost_after_stt``: transcribed, then
dropped before any LLM request (a discarded turn)."""

MarkKind = Literal[
    "stt_final",
    "user_turn",
    "merged_turn",
    "livekit_log",
    "hang_up",
    "room_deleted",
    "session_closed",
    "script_end",
    "race_detected",
    "race_handled",
    "race_event",
]
"""What a :class:`Mark` is. Every committed user turn is a ``user_turn``, or a ``merged_turn``
when it carries words of more than one utterance. Races the agent reported are
``race_detected``, ``race_handled`` (an action was taken) or ``race_event`` (anything else, such
as a middleware error)."""


# Word matching for telling which utterances a committed user turn carries.
def _t(seconds: float) -> float:
    return round(seconds, 3)


@dataclass(frozen=True)
class WordMark:
    """One word of an utterance and what became of it.

    Attributes:
        text: The word.
        start: Call seconds (words are spread evenly over their utterance, as the scripted
            microphone plays them).
        end: Call seconds.
        status: Whether it reached the LLM, and if not, where it was lost.
        reached_llm_at: Call seconds of the first LLM request that saw it.
    """

    text: str
    start: float
    end: float
    status: WordStatus
    reached_llm_at: float | None = None


@dataclass(frozen=True)
class UtteranceTrack:
    """Something the caller said.

    Attributes:
        number: 1-based, in script order (``utterance 2`` in the contracts' reasons).
        start: Call seconds.
        end: Call seconds.
        text: The words.
        expect_reply: Whether the agent must answer it.
        words: Each word with its fate.
        reply_latency_s: End of speech to first audio of its answer, None if unanswered (or
            not expected).
        merged_with: Numbers of other utterances committed in the same user turn.
    """

    number: int
    start: float
    end: float
    text: str
    expect_reply: bool
    words: tuple[WordMark, ...]
    reply_latency_s: float | None
    merged_with: tuple[int, ...] = ()

    @property
    def lost_words(self) -> int:
        """Words that never reached the LLM."""
        return sum(1 for w in self.words if w.status != "reached_llm")


@dataclass(frozen=True)
class TypedTrack:
    """A message the caller typed in the room's chat (``Scenario.typed``).

    The contracts judge it like an utterance that starts and ends when it arrives: its words
    must reach the LLM, and its answer is timed from its arrival.

    Attributes:
        number: 1-based, in script order (``typed message 1`` in the contracts' reasons).
        at: Call seconds it arrived.
        text: The message.
        expect_reply: Whether the agent must answer it.
        lost: Its words that never reached the LLM, in order (counted as the contracts count
            them).
        reached_llm_at: Call seconds of the first LLM request made after it arrived that saw
            any of its words, None if none did.
        reply_latency_s: Arrival to first audio of its answer, None if unanswered (or not
            expected).
    """

    number: int
    at: float
    text: str
    expect_reply: bool
    lost: tuple[str, ...]
    reached_llm_at: float | None
    reply_latency_s: float | None

    @property
    def lost_words(self) -> int:
        """Words that never reached the LLM."""
        return len(self.lost)


@dataclass(frozen=True)
class NoiseSpan:
    """Background noise on the caller's line (``Scenario.noise``): loud audio with no words.

    Attributes:
        start: Call seconds.
        end: Call seconds.
        rms: Loudness, int16 RMS (the scripted speech tones are about 2,100).
    """

    start: float
    end: float
    rms: float


@dataclass(frozen=True)
class StateSpan:
    """A stretch of one ``user_state`` or ``agent_state``.

    Attributes:
        state: The state.
        start: Call seconds.
        end: Call seconds of the next change, None if it lasted to the end of the recording.
    """

    state: str
    start: float
    end: float | None


@dataclass(frozen=True)
class HeardRun:
    """A stretch of a playout the caller actually heard, without a pause.

    Attributes:
        start: Call seconds it began to play.
        end: Call seconds it stopped (a pause, the end, or a cut).
        protected: Whether the speech disallowed interruptions when this stretch began (a
            speech may be protected while paused and resume protected), None if unknown.
    """

    start: float
    end: float
    protected: bool | None = None


@dataclass(frozen=True)
class PlayoutSpan:
    """Audio of one speech handle going out to the caller.

    livekit starts a playout (``playback_started``) when the first audio frame reaches the
    output; a paused output (a middleware holding a protected speech until the caller stops,
    or livekit pausing for a caller who speaks) keeps it silent. ``runs`` is what the caller
    heard; the rest of ``start``-``end`` the playout was held (before its first run) or paused
    (between runs).

    Attributes:
        start: Call seconds livekit started the playout.
        end: Call seconds playout finished or was cut, None if it never did.
        played_s: Seconds of audio that played.
        interrupted: Whether the buffer was cleared before it played out.
        protected: Whether the handle disallowed interruptions when playout began, None if no
            handle was current.
        text: The sentences it carried.
        runs: The stretches the caller heard, in order.
    """

    start: float
    end: float | None
    played_s: float
    interrupted: bool
    protected: bool | None
    text: str
    runs: tuple[HeardRun, ...] = ()

    @property
    def held_s(self) -> float:
        """Seconds from the start to the first audio the caller heard (0 if it never played)."""
        return _t(self.runs[0].start - self.start) if self.runs else 0.0

    @property
    def paused_s(self) -> float:
        """Seconds of silence between the runs the caller heard."""
        gaps = (later.start - earlier.end for earlier, later in itertools.pairwise(self.runs))
        return _t(sum(gaps))


@dataclass(frozen=True)
class SpeechTrack:
    """One speech handle's life.

    Attributes:
        label: ``S1``, ``S2``... in creation order.
        source: ``say`` or ``generate_reply``.
        text: What it said (its assistant message, else the sentences that played).
        protected_at_creation: Created with ``allow_interruptions=False``.
        protected_when_done: Disallowed interruptions when it finished (None if it never did).
        created_at: Call seconds.
        scheduled_at: Call seconds livekit queued it, None if it never was.
        interrupted_at: Call seconds it was interrupted, None if never.
        done_at: Call seconds it finished, None if it never did.
        interrupted: Whether it ended interrupted.
        playouts: Its audio, as played.
    """

    label: str
    source: str
    text: str
    protected_at_creation: bool
    protected_when_done: bool | None
    created_at: float
    scheduled_at: float | None
    interrupted_at: float | None
    done_at: float | None
    interrupted: bool
    playouts: tuple[PlayoutSpan, ...] = ()


@dataclass(frozen=True)
class ToolTrack:
    """One function tool execution.

    Attributes:
        name: The tool.
        arguments: Its JSON arguments.
        start: Call seconds it was dispatched.
        end: Call seconds it ended, None if it never did.
        status: ``done``, ``error``, ``cancelled``, or None while it ran.
    """

    name: str
    arguments: str
    start: float
    end: float | None
    status: str | None


@dataclass(frozen=True)
class LLMTrack:
    """One LLM request.

    Attributes:
        at: Call seconds it was made.
        ttft_s: Scripted seconds to the first token.
        duration_s: Scripted seconds until the whole answer is out (an interrupted generation
            stops earlier).
        answers: What the context ended in: ``user: <text>`` or ``tool: <name>``.
        reply: The text it answered (for a hung request: the text its rule would have said).
        tool_calls: Tools it called.
        hung: The request hung (``LLMRule(hangs_before=...)``): no token ever came, and
            ``ttft_s`` and ``duration_s`` are what its rule would have taken.
        cancelled_at: For a hung request, call seconds livekit cancelled it: when the speech
            handle whose reply it was generating was interrupted (or done), since livekit
            cancels the generation with it. None if that never happened before the recording
            ended, or for a request that did not hang.
    """

    at: float
    ttft_s: float
    duration_s: float
    answers: str
    reply: str
    tool_calls: tuple[str, ...]
    hung: bool = False
    cancelled_at: float | None = None


@dataclass(frozen=True)
class Mark:
    """Something that happened at one instant.

    Attributes:
        at: Call seconds.
        kind: What it is.
        label: A short caption.
        detail: The full text for hover and JSON.
    """

    at: float
    kind: MarkKind
    label: str
    detail: str = ""


@dataclass(frozen=True)
class CallTimeline:
    """One lab call, ready to draw or serialise.

    Attributes:
        scenario: The scenario name.
        family: Its race family.
        description: One sentence on what happens.
        control: Whether it is a control.
        agent: ``module:Class`` of the agent base class.
        agent_label: The class name.
        onset: The moved utterance's onset in a ``--sweep`` run, else None.
        passed: The verdict.
        reasons: One line per broken contract.
        reply_latency_s: The slowest answer, None if none.
        lost_words: Words that never reached the LLM.
        hung_up: Whether the app ended the call.
        vad: Which VAD ran and how it was scripted to fail.
        scripted_duration: Seconds of call the script lasts.
        ended_at: Call seconds the scripted call was over (or the app closed it).
        activity_end: Call seconds of the last thing that happened before the lab closed the
            session: a sensible end for a time axis.
        close_deadlocked: Whether closing the session did not finish within the bound.
        utterances: What the caller said.
        user_states: ``user_state`` over time.
        agent_states: ``agent_state`` over time.
        speeches: Every speech handle.
        tools: Every tool execution.
        llm_requests: Every LLM request.
        marks: Instants: STT finals, user turns, merges, livekit warnings, hang-ups, closes.
        race_events: Races the agent reported (``CallOutcome.race_events``), as :class:`Mark`,
            in the order reported; each mark's ``detail`` is the event as JSON.
        typed: What the caller typed in the chat, in script order.
        noise: Background noise on the caller's line.
    """

    scenario: str
    family: str
    description: str
    control: bool
    agent: str
    agent_label: str
    onset: float | None
    passed: bool
    reasons: tuple[str, ...]
    reply_latency_s: float | None
    lost_words: int
    hung_up: bool
    vad: str
    scripted_duration: float
    ended_at: float
    activity_end: float
    close_deadlocked: bool
    utterances: tuple[UtteranceTrack, ...]
    user_states: tuple[StateSpan, ...]
    agent_states: tuple[StateSpan, ...]
    speeches: tuple[SpeechTrack, ...]
    tools: tuple[ToolTrack, ...]
    llm_requests: tuple[LLMTrack, ...]
    marks: tuple[Mark, ...] = field(default_factory=tuple)
    race_events: tuple[Mark, ...] = field(default_factory=tuple)
    typed: tuple[TypedTrack, ...] = field(default_factory=tuple)
    noise: tuple[NoiseSpan, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        """The JSON record of this call (``--timeline``)."""
        record = dataclasses.asdict(self)
        record["lost_words_by_utterance"] = [u.lost_words for u in self.utterances]
        record["lost_words_by_typed"] = [t.lost_words for t in self.typed]
        return record


def write_timelines(timelines: Iterable[CallTimeline], path: Path) -> None:
    """Write ``{"format": 1, "calls": [...]}``, one record per call, for other tools."""
    payload = {"format": TIMELINE_FORMAT, "calls": [t.as_dict() for t in timelines]}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
