"""A livekit session report read into a replay plan: what the caller, the LLM and the tools did.

The input is the JSON of livekit 1.8's ``SessionReport.to_dict()`` (what ``on_session_end``
gets from ``JobContext.make_session_report()``). Times are seconds from the report's first
event. A report that cannot be read raises :class:`ReportError` naming the field; what the
report does not say and the plan had to assume is listed in :attr:`ReplayPlan.assumptions`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# a lab call's report says when its script ended and the lab closed the session; a production
# call has no such end: every close is the caller's or the app's
from ..._engine.pending_words import TYPED_EXTRA
from ..._session.cut_in import CUT_IN_EXTRA
from ...testing.session_report import SCRIPT_END_TAG
from ...testing.vad import VADFault
from .cut_in_turns import TurnCut, cut_into, word_count_by
from .faults import FaultPlan, ProviderError, fault_plan, provider_error, sentence_count
from .handoffs import Handoff, TaskEntry, WorkflowReader, every_task
from .latency import ProviderLatency, provider_latency
from .pipeline_evidence import (
    hung_request_assumption,
    hung_requests,
    lost_playout_assumption,
    lost_playouts,
    retry_after_refusals,
    silent_stt_assumption,
    silent_stt_from,
)
from .realtime import (
    SERVER_SILENCE_S,
    RealtimeFlavour,
    is_model_message,
    last_word_heard,
    realtime_flavour,
    request_before,
    silence_assumption,
    speech_window,
)
from .realtime_evidence import (
    ModelLine,
    ToolReply,
    app_replies,
    asked_again,
    asked_again_assumption,
    barge_in_assumption,
    barge_ins,
    cut_by_errors,
    cut_length_assumption,
    end_call_assumption,
    hung_assumption,
    hung_replies,
    is_livekit_end_call,
    whole_assumption,
)
from .typed import (
    TypedMessage,
    TypedReading,
    read_typed,
    typed_replies,
    untyped_words,
    without_typed,
)
from .untranscribed import late_final_turn, split, split_noise, withheld_from, words_after

__all__ = [
    "AppSay",
    "CallerTurn",
    "LLMAnswer",
    "ReplayPlan",
    "ReportError",
    "ToolCallPlan",
    "ToolRunPlan",
    "ToolSay",
    "load_plan",
    "read_plan",
    "read_report",
]

SUPPORTED_SDK = "1.8."
# livekit backdates a turn's end to the VAD's end of speech; anything further back is disorder
_OUT_OF_ORDER_S = 5.0
# the lab's ttft when a report carries no llm_node_ttft
_DEFAULT_TTFT_S = 0.3
_DEFAULT_MIN_INTERRUPTION_S = 0.5
# words a caller says per second, for a turn nobody transcribed
_WORDS_PER_SECOND = 2.5
# a turn whose words leave this much of it out before or after them held noise, not speech
_WORDS_INSIDE_S = 1.0
# the caller's close is the room's: livekit closes the session for the caller
_CALLER_CLOSES = frozenset({"participant_disconnected"})
# a line the session closed this soon after was the app's goodbye (the close followed it)
_GOODBYE_CLOSE_S = 1.0
# livekit waits at most this long for the caller's last words before it closes a session
# (``session_close_transcript_timeout``'s default)
_SESSION_CLOSE_WAIT_S = 2.0


class ReportError(ValueError):
    """A report the replay cannot use; the message names the field and what is wrong."""


@dataclass(frozen=True)
class CallerTurn:
    """One stretch of the caller's speech, as the VAD saw it.

    Attributes:
        start: Seconds from the start of the call.
        end: Seconds from the start of the call (its last words, when it never ended).
        heard: The words the STT transcribed in it (finals), in order; empty when none were.
        unheard: How many words were said that the report has no transcript of (assumed).
        ended: Whether livekit saw it end (a VAD that never ends a turn leaves it speaking).
        said: When its words were said, by the transcripts' times, where that leaves much of
            the turn out (noise the VAD heard as speech around them); None: over the whole turn.
        noise: It has no transcript and goes on from the turn before with no pause (a commit
            split the VAD's speech): the noise the VAD heard as speech, no words (``unheard``
            placeholders stand for its audio where the replay has no recording).
        unheard_after: How many words were said after the heard ones that the report has no
            transcript of (assumed): the agent began an uninterruptible line over the caller
            and livekit withheld the rest of the turn from the STT.
        windows: Where its words were said, (start, end, how many) in order, when livekit's
            ``user_turn_limit`` cut into it (see :mod:`.cut_in_turns`), or a typed message's
            claim ended it while the recording has the caller speaking on (see
            :mod:`.typed_claims`); empty: as ``said`` says.
    """

    start: float
    end: float
    heard: tuple[str, ...]
    unheard: int = 0
    ended: bool = True
    said: tuple[float, float] | None = None
    noise: bool = False
    unheard_after: int = 0
    windows: tuple[tuple[float, float, int], ...] = ()


@dataclass(frozen=True)
class ToolCallPlan:
    """A tool call the LLM made.

    Attributes:
        name: The function tool.
        arguments: Its JSON arguments.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LLMAnswer:
    """One LLM answer, with what it answered.

    Attributes:
        at: Seconds when the request was made.
        after_user: The user message it answered, when the context ended in one.
        after_tool: The tool whose output it answered.
        text: What the assistant said (empty when it only called tools).
        tool_calls: The tools it called.
        ttft: Seconds to its first token.
        duration: Seconds until its tool calls were out.
        on_enter: The agent whose entry it answered (a task's ``on_enter`` asking its
            question), when it answered no user message or tool output after that entry.
        silent_before: How many times a realtime model answered the same context with no
            audio before (Gemini's silent turn, asked again), inferred.
        after_line: The model's own line its context ended in (a reply asked for again right
            after its server cut that line, nothing from the caller or a tool since).
        hung: The answer never came (a realtime model's reply the agent waited for until the
            close, inferred): the replay's model hangs on that context.
        cut_by_error: The realtime model's server failed as this answer's generation ended
            (at ``at + duration``): ``text`` is the part that played (inferred).
        hangs_until: A realtime model's reply the app asked for again (at ``at``) after the
            first one hung (inferred): the replay's model hangs on this context until then.
        played: With ``cut_by_error``: seconds its line played (the agent's speaking time of
            it in the report), which the replay's line lasts.
        fails_after: A realtime reply that came whole and whose server failed this many
            seconds after it was asked for, as it played (inferred).
    """

    at: float
    after_user: str | None
    after_tool: str | None
    text: str
    tool_calls: tuple[ToolCallPlan, ...]
    ttft: float
    duration: float
    on_enter: str | None = None
    silent_before: int = 0
    after_line: str | None = None
    hung: bool = False
    cut_by_error: bool = False
    hangs_until: float | None = None
    played: float | None = None
    fails_after: float | None = None


@dataclass(frozen=True)
class ToolSay:
    """A line a tool said while it ran (``session.say``).

    Attributes:
        offset: Seconds from the tool's start.
        text: The words.
        protected: Said with ``allow_interruptions=False`` (inferred, see the assumptions).
        awaited: The tool waited for it to be said (it ended after the line did); a line still
            playing when the tool ended was not awaited.
        cut_in: The app meant it to play over the caller (``resilient_agent.cut_in()``: its
            message's ``extra`` says so).
    """

    offset: float
    text: str
    protected: bool
    awaited: bool = True
    cut_in: bool = False


@dataclass(frozen=True)
class ToolRunPlan:
    """One run of a function tool.

    Attributes:
        name: The function tool.
        started: Seconds from the start of the call.
        duration: Seconds it ran; None if it never ended.
        output: What it returned to the LLM.
        is_error: It raised.
        says: Lines it said while it ran.
        hangs_up_after: Seconds from its start when the app closed the session, if it did.
        agent: The agent whose tool it is (None when the report has no handoffs).
        tasks: The ``AgentTask``s it awaited, in order (offsets from its start).
        hands_off_to: The agent it returned (a plain handoff), if it did.
        exit_after: With ``hands_off_to``: seconds the agent it left took to hand over after
            it ended (its ``on_exit``).
        completes_task: It completed the task it belongs to as it ended.
        reply_required: Its output asked the LLM for a reply (livekit's ``reply_required``;
            a tool that returned nothing asks for none).
        protects_after: Seconds from its start when it called ``ctx.disallow_interruptions()``
            (inferred: livekit resumed the speech the caller had paused, while they spoke).
        livekit_end_call: It was livekit's ``EndCallTool`` and the goodbye it asked for never
            came (inferred, see :mod:`.realtime_evidence`): the replay runs livekit's, which
            hangs up once the goodbye's speech is done.
    """

    name: str
    started: float
    duration: float | None
    output: str
    is_error: bool = False
    says: tuple[ToolSay, ...] = ()
    hangs_up_after: float | None = None
    agent: str | None = None
    tasks: tuple[TaskEntry, ...] = ()
    hands_off_to: str | None = None
    exit_after: float = 0.0
    completes_task: bool = False
    reply_required: bool = True
    protects_after: float | None = None
    livekit_end_call: bool = False


@dataclass(frozen=True)
class AppSay:
    """A line the app said outside any tool (``session.say``, a greeting).

    Attributes:
        at: Seconds from the start of the call.
        text: The words.
        protected: Said with ``allow_interruptions=False`` (inferred).
        agent: The agent that had the call when it was said (None when the report has no
            handoffs): a task's line is said by the task.
        done_at: Seconds from the start of the call when it was said (or cut).
        on_turn: The caller's message whose turn it was said on (from ``on_user_turn_completed``,
            inferred: it began as that message was committed), if it was.
        cut_in: The app meant it to play over the caller (``resilient_agent.cut_in()``: its
            message's ``extra`` says so).
    """

    at: float
    text: str
    protected: bool
    agent: str | None = None
    done_at: float | None = None
    on_turn: str | None = None
    cut_in: bool = False


@dataclass(frozen=True)
class ReplayPlan:
    """Everything a replay reproduces of one call.

    Attributes:
        sdk_version: The livekit-agents version that wrote the report.
        turns: The caller's turns.
        answers: The LLM's answers, in the order they were requested.
        tool_runs: Every tool run, in the order they started.
        app_says: Lines the app said outside tools.
        said: What the agent said, in order (assistant messages), with whether each was
            interrupted.
        user_messages: What the LLM was given of the caller's words, in order (user messages).
        close_at: Seconds when the session closed; None if the report has no close.
        close_reason: livekit's close reason.
        end_at: Seconds of the last event before the close.
        script_end: A lab call's: when its script ended (see :data:`SCRIPT_END_TAG`).
        hang_up_after_line: The line the app closed the session right after, if it did.
        close_transcript_timeout: Seconds livekit waited for the caller's last words when the
            app closed the session after a line (``session_close_transcript_timeout``, which the
            report's options leave out), None when the report cannot tell.
        farewell: The last line the agent said before the app closed the session.
        options: The report's ``options``.
        handoffs: Every ``agent_handoff``, the first agent's included.
        timed_handoffs: Plain handoffs no tool made (``session.update_agent``): (seconds, the
            new agent).
        protected_tasks: Tasks built with ``allow_interruptions=False`` (inferred).
        faults: How the providers failed, from the report's ``error`` events.
        assumptions: What the report did not say and the plan assumed, one line each.
        typed: The caller's typed chat messages (see :mod:`.typed`), not among ``turns``.
        hang_up_pad: Seconds the recorded agent waited between asking to hang up and hanging up
            (given, see :func:`load_plan`): the replay asks that much earlier and waits what the
            agent it runs on does not.
        turn_limit: livekit's ``user_turn_limit`` ``max_words`` that cut into a caller's turn
            (inferred: the words counted at the cut), None when none was cut into.
        realtime: The realtime model's provider (``openai``, ``gemini``) when a realtime model
            heard the caller and spoke (see :mod:`.realtime`); None for a pipeline call. Its
            turns' ``said`` are where the model heard their words.
        greeting_protected: The greeting was made uninterruptible (a realtime call's, inferred
            from its recording by :mod:`.realtime_call`).
        agent_speaking: When the agent spoke: (began, stopped) each time, by its
            ``agent_state_changed`` (``math.inf`` when it never stopped).
        barge_ins: When the caller began to speak and Gemini cut its line for it, with none of
            their words transcribed before the close (inferred, see :mod:`.realtime_evidence`).
        said_at: When the agent began to say each line of ``said`` (see
            :meth:`_Reader._line_began`), None for a line it never played.
        latency: The providers' latencies the report measured, where they differ from the
            lab's (see :mod:`.latency`).
        vad_spans: Each spoken user message's speech as livekit's VAD measured it, (its
            ``started_speaking_at``, ``stopped_speaking_at``) in call seconds.
        vad_fault: The caller's turn (its index) in which the VAD failed, how, and when the
            recording's caller went quiet in it, inferred from the recording (see
            :mod:`.vad_evidence`); None when none did.
    """

    sdk_version: str
    turns: tuple[CallerTurn, ...]
    answers: tuple[LLMAnswer, ...]
    tool_runs: tuple[ToolRunPlan, ...]
    app_says: tuple[AppSay, ...]
    said: tuple[tuple[str, bool], ...]
    user_messages: tuple[str, ...]
    close_at: float | None
    close_reason: str | None
    end_at: float
    options: Mapping[str, Any]
    script_end: float | None = None
    hang_up_after_line: str | None = None
    close_transcript_timeout: float | None = None
    farewell: str | None = None
    handoffs: tuple[Handoff, ...] = ()
    timed_handoffs: tuple[tuple[float, str], ...] = ()
    protected_tasks: tuple[str, ...] = ()
    faults: FaultPlan = field(default_factory=FaultPlan)
    assumptions: tuple[str, ...] = ()
    hang_up_pad: float = 0.0
    typed: tuple[TypedMessage, ...] = ()
    turn_limit: int | None = None
    realtime: RealtimeFlavour | None = None
    greeting_protected: bool = False
    agent_speaking: tuple[tuple[float, float], ...] = ()
    barge_ins: tuple[float, ...] = ()
    said_at: tuple[float | None, ...] = ()
    latency: ProviderLatency = field(default_factory=ProviderLatency)
    vad_spans: tuple[tuple[float, float], ...] = ()
    vad_fault: tuple[int, VADFault, float] | None = None

    @property
    def first_agent(self) -> str | None:
        """The id of the agent that took the call first, if the report says."""
        return self.handoffs[0].new if self.handoffs else None

    @property
    def app_hung_up(self) -> bool:
        """Whether the app (not the caller, not the end of a lab script) closed it."""
        return _closed_by_app(self.close_reason, self.close_at, self.script_end)

    @property
    def caller_left(self) -> bool:
        """Whether the caller left the room."""
        return self.close_reason in _CALLER_CLOSES


def read_report(path: Path) -> Any:
    """The JSON value in the report file at ``path``.

    Raises:
        ReportError: The file is missing or not JSON.
    """
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ReportError(f"{path}: cannot read it ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: not JSON ({exc})") from None


def read_plan(path: Path) -> ReplayPlan:
    """The plan of the report JSON at ``path``.

    Raises:
        ReportError: The file is missing, not JSON, or not a livekit 1.8 report.
    """
    return load_plan(read_report(path))


def load_plan(report: Any, *, hang_up_pad: float = 0.0) -> ReplayPlan:
    """The plan of a ``SessionReport.to_dict()`` value.

    Args:
        report: The report.
        hang_up_pad: Seconds the recorded agent waited between asking to hang up and hanging up
            (``ResilientAgent``'s ``ConditionalHangup`` waits 0.3 s after a heard farewell); the
            report has only the close, so it is the user's to give.

    Raises:
        ReportError: A field is missing, has the wrong type, or the events are out of order.
    """
    return _Reader(report, hang_up_pad).plan()


# the options a replay passes on to its session, with their types
_NUMBER_OPTIONS = ("min_interruption_duration", "min_interruption_words", "max_tool_steps")
_FLAG_OPTIONS = ("allow_interruptions", "discard_audio_if_uninterruptible")


def _check_options(options: Mapping[str, Any]) -> None:
    for key in _NUMBER_OPTIONS:
        if key in options:
            _field(options, key, (int, float), "options.")
            if options[key] < 0:
                raise ReportError(f"options.{key}: negative ({options[key]})")
    for key in _FLAG_OPTIONS:
        if key in options:
            _field(options, key, bool, "options.")


def _closed_by_app(reason: str | None, close_at: float | None, script_end: float | None) -> bool:
    if reason is None or close_at is None or reason in _CALLER_CLOSES:
        return False
    return script_end is None or close_at < script_end - 1e-3


def _script_end(tags: Any) -> float | None:
    for tag in tags if isinstance(tags, list) else ():
        if isinstance(tag, str) and tag.startswith(SCRIPT_END_TAG):
            try:
                return float(tag[len(SCRIPT_END_TAG) :])
            except ValueError:
                return None
    return None


def _untranscribed_prefix(
    start: float, end: float, heard: int, first_at: float | None, stopped_at: float | None
) -> int:
    """Words said over the agent before the first transcribed one, when none of them was.

    livekit withholds the caller's audio from the STT while protected speech plays: when the
    first transcript of a turn that began over the agent comes only after the agent stopped,
    the words said until then were never transcribed. They are counted at the pace of the
    words heard after it.
    """
    if not heard or first_at is None or stopped_at is None:
        return 0
    if not start < stopped_at < min(first_at, end):
        return 0
    pace = (end - stopped_at) / heard
    return int((stopped_at - start) / pace)


def _words_said(
    start: float, end: float, heard: int, times: Sequence[tuple[float, int]]
) -> tuple[float, float] | None:
    """When a turn's ``heard`` words were said, by its transcripts, if well inside the turn.

    An STT with interim transcripts sends one as each word is half said: the first word's and
    the last word's (the first transcript with all of them) bound the words, half a word's
    length further out. None when they fill the turn (within :data:`_WORDS_INSIDE_S`), or the
    transcripts are not one growing run of the words.
    """
    counts = [count for _, count in times]
    if heard < 2 or counts != sorted(counts) or heard not in counts:
        return None
    first = times[0][0]
    last = times[counts.index(heard)][0]
    half = (last - first) / (heard - 1) / 2
    said = (max(start, first - half), min(end, last + half))
    if half <= 0 or (said[0] - start < _WORDS_INSIDE_S and end - said[1] < _WORDS_INSIDE_S):
        return None
    return round(said[0], 3), round(said[1], 3)


def _before_later_words(
    words: list[str], later: Sequence[list[Any]], committed: float
) -> list[str]:
    """``words`` of a user message without the transcribed words of later turns it ends with.

    livekit commits a turn whose words were withheld together with the turns after it: the
    message's last words are theirs (their own transcripts), not the withheld turn's.
    """
    heard = [word for turn in later if turn[0] < committed for word in turn[2]]
    while heard and len(words) > len(heard) and words[-len(heard) :] != heard:
        heard = heard[1:]
    if heard and len(words) > len(heard):
        return words[: -len(heard)]
    return words


def _marked_cut_in(extra: Any) -> bool:
    """Whether a line's chat ``extra`` says it was a cut-in (``ResilientAgent`` marks them)."""
    return isinstance(extra, Mapping) and extra.get(CUT_IN_EXTRA) is True


def _marked_typed(extra: Any) -> tuple[str, ...]:
    """The typed texts a user message's chat ``extra`` names (``ResilientAgent`` merged them)."""
    typed = extra.get(TYPED_EXTRA) if isinstance(extra, Mapping) else None
    if not isinstance(typed, list):
        return ()
    return tuple(t for t in typed if isinstance(t, str) and t.split())


def _contains(words: Sequence[str], run: Sequence[str]) -> bool:
    """Whether ``run`` is in ``words``, its words one after the other."""
    return any(list(words[i : i + len(run)]) == list(run) for i in range(len(words) - len(run) + 1))


def _seconds_metric(metrics: Any, key: str) -> float | None:
    """A message's metric in seconds, None when it has none."""
    value = metrics.get(key) if isinstance(metrics, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ReportError(f"{where}{key}: missing")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ReportError(f"{where}{key}: expected {_kind_name(kind)}, got {value!r:.60}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


@dataclass
class _Call:
    """A tool call as the events tell it."""

    call_id: str
    group: str
    name: str
    arguments: Mapping[str, Any]
    started: float
    agent: str | None = None
    ended: float | None = None
    output: str = ""
    is_error: bool = False
    reply_required: bool = True


@dataclass
class _Said:
    """An assistant message as the events tell it."""

    text: str
    interrupted: bool
    created: float
    added: float
    item_id: str
    from_llm: bool | None
    ttft: float | None
    cut_in: bool = False
    # seconds until its first sentence reached the TTS (livekit's llm_node_ttfs)
    ttfs: float | None = None
    # the TTS's time to first byte (livekit's tts_node_ttfb)
    ttfb: float | None = None


class _Reader:
    """One pass over a report's events."""

    def __init__(self, report: Any, hang_up_pad: float = 0.0) -> None:
        self.hang_up_pad = hang_up_pad
        if not isinstance(report, Mapping):
            raise ReportError("the report: expected a JSON object (SessionReport.to_dict())")
        self.report = report
        self.assumptions: list[str] = []
        self.t0 = 0.0
        # [start, end | None, heard words, first transcript at | None, when the agent it began
        # over stopped speaking (True while it speaks, None if it did not, or was heard over)]
        self.turns: list[list[Any]] = []
        # turn index: each transcript of its words, (when, how many words)
        self.word_times: dict[int, list[tuple[float, int]]] = {}
        # turn index: each transcript, (when, how many words, final)
        self.transcripts: dict[int, list[tuple[float, int, bool]]] = {}
        self.turn_limit: int | None = None
        # calls of a function the agent did not have, by call id (see _unknown_calls)
        self.unknown_calls: dict[str, _Call] = {}
        # turn index: when the end of the turn reached the session (its stamp is earlier)
        self.end_arrived: dict[int, float] = {}
        self.agent_state = "initializing"
        self.user_messages: list[tuple[float, str]] = []
        # the user messages an STT wrote (the very entries of user_messages: chat-only ones are
        # sorted in among them later)
        self.spoken_messages: list[tuple[float, str]] = []
        # the user messages that merge typed and spoken words: the typed texts their extra names
        self.typed_marks: dict[tuple[float, str], tuple[str, ...]] = {}
        # the STT's delay from the end of each spoken turn to its final transcript
        self.transcription_delays: list[float] = []
        self.typed = TypedReading((), frozenset(), frozenset())
        self.said: list[_Said] = []
        self.calls: dict[str, _Call] = {}
        self.speeches: list[tuple[float, str]] = []
        self.close_at: float | None = None
        self.close_reason: str | None = None
        self.script_end: float | None = None
        self.transcript_times: list[float] = []
        # interim transcripts: (seconds, text)
        self.interims: list[tuple[float, str]] = []
        # turn index: when the STT died in it, for a turn whose words it flushed after that
        self.flushed: dict[int, float] = {}
        self.close_wait: float | None = None
        self.farewell: str | None = None
        self.end_at = 0.0
        self.flow = WorkflowReader()
        self.index = 0
        self.last_ended: tuple[str, str | None, float] | None = None
        # (seconds, event index) of what an LLM request answers: user messages and tool
        # outputs; and of the handoffs into an agent, with the agent
        self.context_marks: list[tuple[float, int]] = []
        self.entry_marks: list[tuple[float, int, str]] = []
        self.say_agents: list[str | None] = []
        self.stopped_speaking: list[float] = []
        self.started_speaking: list[float] = []
        self.errors: list[ProviderError] = []
        # ids of the chat items the events added, and each event's seconds
        self.item_ids: set[str] = set()
        self.event_times: list[float] = []
        # a realtime model's call: its provider, and when its answers could have been asked for
        self.realtime = realtime_flavour(report) if isinstance(report, Mapping) else None
        self.requests: list[float] = [0.0]
        # turn index: the model's last interim transcript of it (Gemini's, word by word)
        self.realtime_interims: dict[int, str] = {}
        # the agent's states, (seconds, state); what a realtime report shows by its absences
        self.agent_states: list[tuple[float, str]] = []
        self.cut_lines: dict[str, float] = {}
        # a whole line its server's error came during: when the error came
        self.whole_lines: dict[str, float] = {}
        self.hung: dict[str, ToolReply] = {}
        self.barge_ins: list[float] = []
        self.vad_spans: list[tuple[float, float]] = []
        # a reply asked for again after the first hung: when asked again, when first
        self.asked_again: dict[float, float] = {}

    def plan(self) -> ReplayPlan:
        version = _field(self.report, "sdk_version", str, "")
        if not version.startswith(SUPPORTED_SDK):
            raise ReportError(
                f"sdk_version: {version!r} is not livekit-agents {SUPPORTED_SDK}x, whose "
                "report shape the replay reads"
            )
        events = _field(self.report, "events", list, "")
        if not events:
            raise ReportError("events: empty (write the report with include_events=True)")
        options = self.report.get("options")
        if not isinstance(options, Mapping):
            self.assumptions.append("options: missing; livekit's defaults assumed")
            options = {}
        _check_options(options)
        self.script_end = _script_end(self.report.get("tags"))
        self._read_events(events)
        self._chat_only_messages(self.report.get("chat_history"))
        self.flow.entries(self.close_at)
        self._take_typed()
        turns = self._caller_turns()
        if self.realtime is not None:
            self.assumptions.append(silence_assumption(self.realtime))
            self._realtime_absences(turns)
            latency = ProviderLatency()
        else:
            latency = provider_latency(
                [s.ttfb for s in self.said if s.ttfb is not None], self.transcription_delays
            )
            self.assumptions.extend(latency.assumptions)
        # RoomIO's text input interrupts first: a line a message was typed over and that
        # played on refused it, as a line a caller's withheld words were said over
        over = (*turns, *(CallerTurn(m.at, m.at, (), unheard=1) for m in self.typed.messages))
        recovered = {p: self._recovered_line(p) for p in ("llm", "tts")}
        says = self._says(options, over, [r for r in recovered.values() if r is not None])
        answers = self._answers() if self.realtime is None else self._realtime_answers(turns)
        runs = self._tool_runs(says, over, options, answers)
        goodbye = self._goodbye(runs)
        protected = self._protected_tasks(options, over, runs)
        unsaid = recovered["tts"]
        faults = fault_plan(
            self.errors, None if unsaid is None else unsaid.text, self._stt_silent_from(turns)
        )
        self.assumptions.extend(faults.assumptions)
        if self.realtime is None:
            faults = self._pipeline_absences(faults, answers)
        if _closed_by_app(self.close_reason, self.close_at, self.script_end):
            self.assumptions.append(
                f"the agent hung up {self.hang_up_pad:g} s after it asked to (--hang-up-pad; "
                "the report has only the close: ResilientAgent waits 0.3 s after a heard farewell)"
            )
        return ReplayPlan(
            sdk_version=version,
            turns=turns,
            answers=answers,
            tool_runs=tuple(runs),
            app_says=tuple(says),
            said=tuple((s.text, s.interrupted) for s in self.said),
            said_at=tuple(self._line_began(i) for i in range(len(self.said))),
            latency=latency,
            user_messages=tuple(text for _, text in self.user_messages),
            close_at=self.close_at,
            close_reason=self.close_reason,
            end_at=round(self.end_at, 3),
            options=dict(options),
            script_end=self.script_end,
            hang_up_after_line=goodbye,
            close_transcript_timeout=self.close_wait,
            farewell=self.farewell,
            handoffs=tuple(self.flow.handoffs),
            timed_handoffs=tuple(self.flow.timed),
            protected_tasks=protected,
            faults=faults,
            assumptions=tuple(self.assumptions),
            hang_up_pad=self.hang_up_pad,
            typed=self.typed.messages,
            turn_limit=self.turn_limit,
            realtime=self.realtime,
            agent_speaking=tuple(self._speaking()),
            barge_ins=tuple(self.barge_ins),
            vad_spans=tuple(self.vad_spans),
        )

    def _realtime_absences(self, turns: Sequence[CallerTurn]) -> None:
        """What the realtime report shows by its absences (see :mod:`.realtime_evidence`)."""
        assert self.realtime is not None
        lines = [
            ModelLine(s.item_id, s.text, s.created, s.added, self._line_done(s), s.interrupted)
            for s in self.said
            if s.from_llm is not False
        ]
        errors = self.errors
        asked = app_replies(self.report["events"])
        self.errors, self.cut_lines, whole = cut_by_errors(self.realtime, errors, lines, asked)
        for line in lines:
            if line.key in whole:
                self.whole_lines[line.key] = whole[line.key]
                self.assumptions.append(whole_assumption(line, whole[line.key]))
        replies = [
            ToolReply(c.call_id, c.name, c.output, c.ended, c.reply_required)
            for c in self.calls.values()
            if c.ended is not None
        ]
        close = self.close_at
        for reply in hung_replies(replies, lines, self.agent_states, close, errors):
            assert close is not None
            self.hung[reply.key] = reply
            self.assumptions.append(hung_assumption(reply, close))
            if is_livekit_end_call(reply.name, reply.output):
                self.assumptions.append(end_call_assumption(reply))
        self.asked_again = {again: first for first, again in asked_again(self.report["events"])}
        starts = [t.start for t in turns if t.heard]
        for at, line in barge_ins(self.realtime, lines, starts, close):
            self.barge_ins.append(at)
            self.assumptions.append(barge_in_assumption(at, line.text))

    def _pipeline_absences(self, faults: FaultPlan, answers: Sequence[LLMAnswer]) -> FaultPlan:
        """What the pipeline report shows by its absences (see :mod:`.pipeline_evidence`)."""
        replies = [at for at, source in self.speeches if source == "generate_reply"]
        breakers = [
            *(at for at, _ in self.context_marks),
            *(at for at, _, _ in self.entry_marks),
            *(e.at for e in self.errors),
            *(t for turn in self.turns for t in turn[:2] if t is not None),
        ]
        answered = [s.created for s in self.said if s.from_llm is not False]
        hangs: dict[tuple[str | None, str | None], float] = {}
        for request in hung_requests(replies, answered, self.agent_states, breakers):
            answer = next((a for a in answers if abs(a.at - request.again) < 1e-3), None)
            if answer is None or (answer.after_user, answer.after_tool) in hangs:
                continue
            hangs[(answer.after_user, answer.after_tool)] = request.until
            context = (
                f"the output of {answer.after_tool}"
                if answer.after_tool is not None
                else repr(answer.after_user)
            )
            self.assumptions.append(hung_request_assumption(request, context))
        interrupted = [
            (s.text, s.created, s.added) for s in self.said if s.interrupted and s.from_llm
        ]
        committed = [at for at, _ in self.user_messages]
        lost = lost_playouts(interrupted, committed, [at for at, _ in self.speeches])
        self.assumptions.extend(lost_playout_assumption(line) for line in lost)
        provider = faults.faults
        if provider.stt_silent_at is None and provider.stt_dies_at is None:
            heard = [
                (t[0], t[1], i in self.transcripts, bool(t[2]))
                for i, t in enumerate(self.turns)
                if t[1] is not None
            ]
            silent = silent_stt_from(heard, self.agent_states)
            if silent is not None:
                provider = dataclasses.replace(provider, stt_silent_at=silent)
                self.assumptions.append(silent_stt_assumption(silent))
        return dataclasses.replace(
            faults,
            faults=provider,
            llm_hangs=hangs or None,
            lost_playout_report=bool(lost),
        )

    def _take_typed(self) -> None:
        """The typed messages out of the caller's turns (see :mod:`.typed`)."""
        if self.realtime is not None:
            # a realtime model's server hears the caller: its turns are not RoomIO's claims
            # (typed messages on a realtime model are not read yet)
            return
        replies = [at for at, source in self.speeches if source == "generate_reply"]
        parts = {
            index: self.typed_marks[message]
            for index, message in enumerate(self.user_messages)
            if message in self.typed_marks
        }
        spoken = frozenset(
            index
            for index, message in enumerate(self.user_messages)
            if any(message is s for s in self.spoken_messages)
        )
        self.typed = read_typed(self.turns, replies, self.user_messages, spoken, parts)
        kept = [i for i in range(len(self.turns)) if i not in self.typed.claims]
        self.word_times = {
            kept.index(i): times for i, times in self.word_times.items() if i in kept
        }
        self.transcripts = {
            kept.index(i): times for i, times in self.transcripts.items() if i in kept
        }
        self.turns = [self.turns[i] for i in kept]
        if self.typed.messages:
            self.assumptions.append(
                f"{len(self.typed.messages)} typed chat message(s), through RoomIO's default text "
                "input (it interrupts the agent, then asks for a reply); a message that never "
                "reached the chat is typed again as one placeholder word"
            )

    def _protected_tasks(
        self, options: Mapping[str, Any], turns: Sequence[CallerTurn], runs: Sequence[ToolRunPlan]
    ) -> tuple[str, ...]:
        """Tasks whose question the caller spoke over without interrupting it (or lost words).

        A task built with ``allow_interruptions=False`` (``GetEmailTask(...)``) says its
        answers protected; the report does not record it, so it is inferred as for a line.
        """
        tasks = {t.agent for r in runs for t in every_task(r.tasks)}
        min_duration = float(options.get("min_interruption_duration", _DEFAULT_MIN_INTERRUPTION_S))
        found: list[str] = []
        for said in self.said:
            entered = self._entered(said.created) if said.from_llm is not False else None
            if entered is None or entered not in tasks or said.interrupted or entered in found:
                continue
            starts = [t for t in self.started_speaking if t <= said.added + 1e-3]
            began = starts[-1] if starts else said.created
            over = sum(max(0.0, min(t.end, said.added) - max(t.start, began)) for t in turns)
            withheld = any(t.unheard and began <= t.start < said.added for t in turns)
            if over >= min_duration or withheld:
                found.append(entered)
                self.assumptions.append(
                    f"at {began:.2f} s: the caller spoke over the question of the task {entered} "
                    "and did not interrupt it: the task was built with allow_interruptions=False "
                    "(the report does not record it)"
                )
        return tuple(found)

    def _read_events(self, events: Sequence[Any]) -> None:
        latest = -math.inf
        for index, event in enumerate(events):
            where = f"events[{index}]."
            if not isinstance(event, Mapping):
                raise ReportError(f"events[{index}]: expected an object")
            kind = _field(event, "type", str, where)
            stamp = _field(event, "created_at", (int, float), where)
            if index == 0:
                self.t0 = float(stamp)
            at = float(stamp) - self.t0
            if at < latest - _OUT_OF_ORDER_S:
                raise ReportError(
                    f"{where}created_at: {at - latest:.3f} s before an earlier event "
                    f"({kind}): the events are out of order"
                )
            latest = max(latest, at)
            self.index = index
            self.event_times.append(at)
            if kind != "close":
                self.end_at = max(self.end_at, at)
            self._read_event(kind, event, at, where)

    def _read_event(self, kind: str, event: Mapping[str, Any], at: float, where: str) -> None:
        if kind == "user_state_changed":
            state = _field(event, "new_state", str, where)
            if state == "speaking":
                self.turns.append(
                    [at, None, [], None, True if self.agent_state == "speaking" else None]
                )
            elif self.turns and self.turns[-1][1] is None:
                # livekit stamps a turn's end back to the end of speech; it arrived after
                # every event before it
                self.end_arrived[len(self.turns) - 1] = max(self.end_at, at)
                self.turns[-1][1] = at
                if self.realtime == "openai":
                    self.requests.append(at)  # the server committed the turn and answers it
        elif kind == "agent_state_changed":
            if self.agent_state == "speaking":
                self.stopped_speaking.append(at)
            self.agent_state = str(_field(event, "new_state", str, where))
            self.agent_states.append((at, self.agent_state))
            if self.agent_state == "speaking":
                self.started_speaking.append(at)
                turn = self.turns[-1] if self.turns else None
                if turn is not None and turn[1] is None and turn[3] is None and turn[4] is None:
                    # the agent began over a caller not yet transcribed: as if it spoke first
                    turn[4] = True
            # the agent stopped speaking over a caller not yet transcribed: when it did
            if self.agent_state != "speaking" and self.turns and self.turns[-1][4] is True:
                self.turns[-1][4] = at
        elif kind == "user_input_transcribed":
            transcript = _field(event, "transcript", str, where)
            final = _field(event, "is_final", bool, where)
            owner = self._transcript_turn(transcript, at, final)
            self.transcript_times.append(at)
            if not final:
                self.interims.append((at, transcript))
            if self.turns and transcript.split():
                times = self.word_times.setdefault(owner, [])
                times.append((at, len(transcript.split())))
                self.transcripts.setdefault(owner, []).append((at, len(transcript.split()), final))
            if self.turns and self.turns[owner][3] is None and transcript.split():
                self.turns[owner][3] = at
                if self.agent_state == "speaking":
                    self.turns[owner][4] = None  # the agent still speaks: the caller is heard
            if final:
                self._heard(transcript, at, owner)
            elif self.realtime is not None and self.turns and transcript.split():
                self.realtime_interims[len(self.turns) - 1] = transcript
        elif kind == "conversation_item_added":
            self._item(_field(event, "item", Mapping, where), at, where + "item.")
        elif kind == "tool_execution_updated":
            self._tool_update(_field(event, "update", Mapping, where), at, where + "update.")
        elif kind == "function_tools_executed":
            outputs = _field(event, "function_call_outputs", list, where)
            self._unknown_calls(event.get("function_calls"), outputs, at)
            self.requests.append(at)  # the outputs go to the model, which answers them
            for i, output in enumerate(outputs):
                self.context_marks.append((at, self.index))
                if isinstance(output, Mapping):
                    self._tool_output(output, f"{where}function_call_outputs[{i}].")
        elif kind == "speech_created":
            source = _field(event, "source", str, where)
            self.speeches.append((at, source))
            if self.realtime == "openai" or event.get("user_initiated") is True:
                self.requests.append(at)
            if source == "say":
                self.say_agents.append(self.flow.current)
        elif kind == "error":
            self._error(event, at)
        elif kind == "close":
            self.close_at = round(at, 3)
            reason = _field(event, "reason", str, where)
            self.close_reason = str(getattr(reason, "value", reason))

    def _error(self, event: Mapping[str, Any], at: float) -> None:
        """A provider's failure, with what the replay needs to fail it again."""
        error = provider_error(event, at)
        if error is None:
            return
        if error.provider == "llm":
            # a retry is asked right after the error before it
            marks = [m for m, _ in self.context_marks if m <= at + 1e-3]
            marks += [e.at for e in self.errors if e.provider == "llm"]
            marks.sort()
            error = dataclasses.replace(
                error,
                context=self.user_messages[-1][1] if self.user_messages else None,
                since_context=round(at - marks[-1], 3) if marks else at,
                answered_before=any(s.from_llm is not False for s in self.said),
            )
        elif error.provider == "tts":
            error = dataclasses.replace(
                error,
                context=self.user_messages[-1][1] if self.user_messages else None,
                sentences_before=sentence_count([s.text for s in self.said]),
            )
        self.errors.append(error)

    def _transcript_turn(self, transcript: str, at: float, final: bool) -> int:
        """The index of the caller turn a transcript belongs to: the latest, unless it came late."""
        latest = len(self.turns) - 1
        if not final or latest < 1 or not transcript.split():
            return latest
        died = next((e.at for e in self.errors if e.provider == "stt" and not e.recoverable), None)
        if died is not None and any(died < t for t in self.transcript_times):
            died = None  # the STT answered again after it died: a new stream's words
        owner = late_final_turn(
            at, transcript.split(), [(t[0], t[1]) for t in self.turns], self.interims, died
        )
        if owner is None:
            return latest
        if died is not None:
            self.flushed[owner] = died
            self.assumptions.append(
                f"at {at:.2f} s: the transcript {transcript!r} came after the STT died at "
                f"{died:.2f} s: the words it had heard of the turn at {self.turns[owner][0]:.2f} s"
            )
        else:
            self.assumptions.append(
                f"at {at:.2f} s: the final {transcript!r} came after the caller's speech was "
                f"split at {self.turns[latest][0]:.2f} s: the words of the turn before"
            )
        return owner

    def _heard(self, transcript: str, at: float, owner: int = -1) -> None:
        words = transcript.split()
        if not words:
            return
        if not self.turns:
            # an STT final with no VAD turn before it: the words were said just before
            self.assumptions.append(
                f"at {at:.2f} s: a transcript with no caller turn before it; a turn of its "
                "words ending then assumed"
            )
            self.turns.append([max(0.0, at - len(words) / _WORDS_PER_SECOND), at, [], at, None])
            owner = -1
        self.turns[owner][2].extend(words)

    def _item(self, item: Mapping[str, Any], at: float, where: str) -> None:
        if item.get("type") == "agent_handoff":
            self._handoff(item, at, where)
            return
        if item.get("type") != "message":
            return
        self.item_ids.add(str(item.get("id", "")))
        role = _field(item, "role", str, where)
        content = _field(item, "content", list, where)
        text = " ".join(c for c in content if isinstance(c, str))
        created = item.get("created_at")
        created_at = float(created) - self.t0 if isinstance(created, int | float) else at
        if role == "user":
            metrics = item.get("metrics")
            message = (created_at, text)
            if isinstance(metrics, Mapping) and (
                "stt_metadata" in metrics or "started_speaking_at" in metrics
            ):
                self.spoken_messages.append(message)
            delay = metrics.get("transcription_delay") if isinstance(metrics, Mapping) else None
            if isinstance(delay, int | float):
                self.transcription_delays.append(float(delay))
            span = [
                _seconds_metric(metrics, k) for k in ("started_speaking_at", "stopped_speaking_at")
            ]
            if span[0] is not None and span[1] is not None:
                self.vad_spans.append((round(span[0] - self.t0, 3), round(span[1] - self.t0, 3)))
            self._mark_typed(created_at, text, item.get("extra"))
            self.user_messages.append(message)
            self.context_marks.append((at, self.index))
        elif role == "assistant":
            metrics = item.get("metrics")
            ttft = metrics.get("llm_node_ttft") if isinstance(metrics, Mapping) else None
            spoken = self.realtime is not None and is_model_message(metrics)
            from_llm = None if not isinstance(metrics, Mapping) else ttft is not None or spoken
            if spoken and isinstance(metrics, Mapping):
                created_at = self._model_began(metrics, at)
            self.said.append(
                _Said(
                    text=text,
                    interrupted=bool(item.get("interrupted", False)),
                    # a stamp before the call (not wall time) says nothing of when it began
                    created=created_at if created_at >= 0 else at,
                    added=at,
                    item_id=str(item.get("id", "")),
                    from_llm=from_llm,
                    ttft=float(ttft) if isinstance(ttft, int | float) else None,
                    cut_in=_marked_cut_in(item.get("extra")),
                    ttfs=_seconds_metric(metrics, "llm_node_ttfs"),
                    ttfb=_seconds_metric(metrics, "tts_node_ttfb"),
                )
            )

    def _line_began(self, index: int) -> float | None:
        """When the agent began to say line ``index``, None if it never played.

        A line is added to the chat once it played out or was cut, and only one plays at a
        time: it began with the agent's first start of speech after the line before it was
        added (its ``started_speaking_at`` is the audio output's own clock, which a report
        does not say).
        """
        said = self.said[index]
        after = self.said[index - 1].added if index else float("-inf")
        starts = [t for t in self.started_speaking if after < t <= said.added + 1e-3]
        return round(starts[0], 3) if starts else None

    def _model_began(self, metrics: Mapping[str, Any], added: float) -> float:
        """When the realtime model began to say a message added at ``added``.

        Its ``started_speaking_at`` when that is a time of the call, else the agent's last
        start of speech by then (a message is added once it played out or was cut).
        """
        began = metrics.get("started_speaking_at")
        if isinstance(began, int | float) and 0.0 <= float(began) - self.t0 <= added + 1e-3:
            return float(began) - self.t0
        starts = [t for t in self.started_speaking if t <= added + 1e-3]
        return starts[-1] if starts else added

    def _mark_typed(self, at: float, text: str, extra: Any) -> None:
        """Note which words of a user message were typed, when its ``extra`` names them."""
        typed = _marked_typed(extra)
        if typed:
            self.typed_marks[(at, text)] = typed

    def _chat_only_messages(self, history: Any) -> None:
        """The caller's messages the chat has and no event added, at their ``created_at``.

        A middleware that recovers withheld words (``ResilientAgent``) may commit them into the
        chat itself (beside a tool's output) rather than through livekit's turn: the report's
        chat history has the message, its events do not.
        """
        items = history.get("items") if isinstance(history, Mapping) else None
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, Mapping) or item.get("type") != "message":
                continue
            if item.get("role") != "user" or str(item.get("id", "")) in self.item_ids:
                continue
            created = item.get("created_at")
            content = item.get("content")
            if not isinstance(created, int | float) or not isinstance(content, list):
                continue
            text = " ".join(c for c in content if isinstance(c, str))
            at = float(created) - self.t0
            if not text.split() or at < 0:
                continue
            self._mark_typed(at, text, item.get("extra"))
            self.user_messages.append((at, text))
            self.user_messages.sort(key=lambda message: message[0])
            # ordered as the last event by then
            index = sum(1 for t in self.event_times if t <= at + 1e-3) - 1
            self.context_marks.append((at, index))
            self.context_marks.sort()
            self.assumptions.append(
                f"at {at:.2f} s: a caller's message in the chat that no event added (a "
                f"middleware committed it): {text!r}"
            )

    def _handoff(self, item: Mapping[str, Any], at: float, where: str) -> None:
        new = _field(item, "new_agent_id", str, where)
        old = item.get("old_agent_id")
        if old is not None and not isinstance(old, str):
            raise ReportError(f"{where}old_agent_id: expected str, got {old!r:.60}")
        running = {
            c.call_id: c.started
            for c in self.calls.values()
            if c.ended is None and c.agent == old and old is not None
        }
        since = self.flow.handoffs[-1].at if self.flow.handoffs else 0.0
        bare = [
            (c.call_id, c.agent, c.ended)
            for c in self.calls.values()
            if c.agent == old
            and c.ended is not None
            and c.ended >= since
            and not c.reply_required
            and not c.output
        ]
        last_bare = max(bare, key=lambda b: b[2]) if bare and old is not None else None
        if last_bare is not None:
            # livekit hands over once the speech playing is done: the old agent's on_exit
            # took only the time after that
            spoken = [d.added for d in self.said if last_bare[2] <= d.added <= at + 1e-3]
            last_bare = (last_bare[0], last_bare[1], max([last_bare[2], *spoken]))
        self.flow.handoff(at, old, new, running, self.last_ended, last_bare)
        if old is not None:
            self.entry_marks.append((at, self.index, new))
        self.requests.append(at)

    def _tool_update(self, update: Mapping[str, Any], at: float, where: str) -> None:
        kind = _field(update, "type", str, where)
        if kind == "tool_call_started":
            call = _field(update, "function_call", Mapping, where)
            inner = where + "function_call."
            call_id = _field(call, "call_id", str, inner)
            raw = call.get("arguments") or "{}"
            try:
                arguments = json.loads(raw)
            except (TypeError, json.JSONDecodeError):
                raise ReportError(f"{inner}arguments: not JSON ({raw!r:.60})") from None
            self.calls[call_id] = _Call(
                call_id=call_id,
                group=str(call.get("id", call_id)).split("/fnc_")[0],
                name=_field(call, "name", str, inner),
                arguments=arguments if isinstance(arguments, Mapping) else {},
                started=at,
                agent=self.flow.current,
            )
        elif kind == "tool_call_ended":
            call_id = _field(update, "call_id", str, where)
            if call_id in self.calls:
                self.calls[call_id].ended = at
                self.last_ended = (call_id, self.calls[call_id].agent, at)

    def _unknown_calls(self, calls: Any, outputs: Sequence[Any], at: float) -> None:
        """The LLM's calls of a function the agent did not have: livekit answered them.

        livekit runs no tool for them (no ``tool_execution_updated``) and gives the LLM an
        error output of its own: the replayed LLM calls the same name, and livekit answers it
        again; the agent is not given such a tool.
        """
        answered = {
            str(o.get("call_id")): o for o in outputs if isinstance(o, Mapping) and o.get("call_id")
        }
        for call in calls if isinstance(calls, list) else ():
            if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
                continue
            call_id = str(call.get("call_id", ""))
            if not call_id or call_id in self.calls or call_id not in answered:
                continue
            try:
                arguments = json.loads(call.get("arguments") or "{}")
            except (TypeError, json.JSONDecodeError):
                arguments = {}
            output = answered[call_id]
            self.unknown_calls[call_id] = _Call(
                call_id=call_id,
                group=str(call.get("id", call_id)).split("/fnc_")[0],
                name=call["name"],
                arguments=arguments if isinstance(arguments, Mapping) else {},
                started=at,
                agent=self.flow.current,
                ended=at,
                output=str(output.get("output", "")),
                is_error=bool(output.get("is_error", False)),
            )

    def _tool_output(self, output: Mapping[str, Any], where: str) -> None:
        call_id = _field(output, "call_id", str, where)
        if call_id in self.calls:
            self.calls[call_id].output = str(output.get("output", ""))
            self.calls[call_id].is_error = bool(output.get("is_error", False))
            self.calls[call_id].reply_required = output.get("reply_required") is not False

    def _committed_words(self) -> None:
        """Words of a turn with no transcript event that reached the chat all the same.

        A middleware that recovers withheld words (``ResilientAgent``) commits them as a user
        message without livekit's ``user_input_transcribed``: the message has the words.
        """
        transcribed = {word for turn in self.turns for word in turn[2]}
        # a message that names its typed words has the caller's words beside them
        rest = self._untyped()
        used: set[int] = {i for i in self.typed.user_messages if i not in rest}
        for position, turn in enumerate(self.turns):
            if turn[2]:
                if not self._committed_prefix(turn):
                    self._committed_suffix(turn)
                transcribed.update(turn[2])
                continue
            for index, (at, text) in enumerate(self.user_messages):
                words = rest.get(index, text.split())
                if index in used or at < turn[0] or not set(words) - transcribed:
                    continue
                used.add(index)
                # a message committed after later turns holds their transcribed words too
                own = _before_later_words(words, self.turns[position + 1 :], at)
                if len(own) < len(words):
                    own = self._give_untranscribed(own, self.turns[position + 1 :], at)
                words = own
                turn[2].extend(words)
                transcribed.update(words)
                self.assumptions.append(
                    f"at {turn[0]:.2f} s: the caller's words taken from the chat's user message "
                    "(no transcript event of them)"
                )
                break

    def _give_untranscribed(
        self, words: list[str], later: Sequence[list[Any]], at: float
    ) -> list[str]:
        """``words`` less the last ones the next turn said over the agent, untranscribed.

        The message of a withheld turn committed with the next one holds the next turn's words
        the STT never got (said while the agent spoke): they are the next turn's, before its
        transcribed words.
        """
        following = next((t for t in later if t[0] < at and t[2]), None)
        if following is None or following[1] is None or not isinstance(following[4], float):
            return words
        start, end, heard, first_at, stopped_at = following
        count = _untranscribed_prefix(start, end, len(heard), first_at, stopped_at)
        if not 0 < count < len(words):
            return words
        following[2] = [*words[-count:], *heard]
        following[4] = None  # its words are all known: no placeholders
        self.assumptions.append(
            f"at {start:.2f} s: {count} word(s) said over the agent before the transcribed ones "
            "taken from the chat's user message (no transcript event of them)"
        )
        return words[:-count]

    def _committed_suffix(self, turn: list[Any]) -> None:
        """Words said after a turn's transcribed ones that reached the chat all the same.

        livekit withholds the caller's audio while a protected line plays: a middleware that
        recovers it commits the whole turn, the transcribed words first.
        """
        heard = turn[2]
        for at, text in self._spoken_user_messages():
            words = text.split()
            if at < turn[0] or len(words) <= len(heard) or words[: len(heard)] != heard:
                continue
            suffix = words[len(heard) :]
            if self._holds_another_turn(suffix, turn):
                continue  # a turn after, committed with this one
            following = self._continued_by(turn)
            if following is not None and not following[2] and following[0] < at:
                # a commit split the caller's speech after the transcribed words: the rest
                # was said in the turn that goes on from it
                following[2] = suffix
                self.assumptions.append(
                    f"at {following[0]:.2f} s: {len(suffix)} word(s) of the turn that goes on "
                    "from the one before taken from the chat's user message (no transcript "
                    "event of them)"
                )
                return
            turn[2] = [*heard, *suffix]
            self.assumptions.append(
                f"at {turn[0]:.2f} s: {len(suffix)} word(s) after the transcribed ones taken "
                "from the chat's user message (no transcript event of them)"
            )
            return

    def _continued_by(self, turn: list[Any]) -> list[Any] | None:
        """The turn that begins as ``turn`` ends (a commit split the caller's speech), if one."""
        index = next(i for i, other in enumerate(self.turns) if other is turn)
        after = self.turns[index + 1] if index + 1 < len(self.turns) else None
        if after is None or turn[1] is None or not split(turn[1], after[0]):
            return None
        return after

    def _holds_another_turn(self, words: Sequence[str], turn: list[Any]) -> bool:
        """Whether ``words`` hold the words of a turn other than ``turn``, in their order.

        A message committed with another turn holds that turn's words one after the other; a
        word the caller merely says again (``a``, ``please``) is not another turn's.
        """
        typed = [m.text.split() for m in self.typed.messages if m.text is not None]
        return any(
            other is not turn and other[2] and _contains(words, other[2]) for other in self.turns
        ) or any(_contains(words, t) for t in typed if t)

    def _spoken_user_messages(self) -> list[tuple[float, str]]:
        """The user messages that were not typed (of one that names its typed words, the rest)."""
        rest = self._untyped()
        return [
            (at, " ".join(rest[i])) if i in rest else (at, text)
            for i, (at, text) in enumerate(self.user_messages)
            if i not in self.typed.user_messages or rest.get(i)
        ]

    def _untyped(self) -> dict[int, list[str]]:
        """The user messages that name their typed words: index to the caller's words in them."""
        return {
            index: untyped_words(text, self.typed_marks[(at, text)])
            for index, (at, text) in enumerate(self.user_messages)
            if (at, text) in self.typed_marks
        }

    def _committed_prefix(self, turn: list[Any]) -> bool:
        """Words said before a turn's transcribed ones that reached the chat all the same."""
        heard = turn[2]
        for at, text in self._spoken_user_messages():
            words = text.split()
            if at < turn[0] or len(words) <= len(heard) or words[-len(heard) :] != heard:
                continue
            # a message typed before the turn and held by the agent, committed with it
            prefix = without_typed(words[: -len(heard)], self.typed.messages)
            if not prefix or self._holds_another_turn(prefix, turn):
                continue  # a turn before, committed with this one
            turn[2] = [*prefix, *heard]
            turn[4] = None  # no words to count as lost
            self.assumptions.append(
                f"at {turn[0]:.2f} s: {len(prefix)} word(s) before the transcribed ones taken "
                "from the chat's user message (no transcript event of them)"
            )
            return True
        return False

    def _caller_turns(self) -> tuple[CallerTurn, ...]:
        cuts = self._turn_cuts()
        self._committed_words()
        over = self._words_over_cuts(cuts)
        turns: list[CallerTurn] = []
        previous_end = -math.inf
        for index, (start, end, heard, first_at, stopped_at) in enumerate(self.turns):
            if not heard and index in self.realtime_interims:
                # the model's turn never had a final transcript (Gemini's, answered by a reply
                # to a tool's output): its interim words are what it heard
                heard = self.realtime_interims[index].split()
                # the model had them in its conversation all the same: what it answered
                self.user_messages.append((start, self.realtime_interims[index]))
                self.user_messages.sort(key=lambda message: message[0])
                self.assumptions.append(
                    f"at {start:.2f} s: the caller's words taken from the model's last interim "
                    "transcript (no final one)"
                )
            continues = start <= previous_end
            if continues:
                # livekit backdates a turn's start to the VAD's: it cannot run into the turn before
                self.assumptions.append(
                    f"at {start:.2f} s: the caller's turn starts before the one before it ended "
                    f"({previous_end:.2f} s); it starts just after"
                )
                start = previous_end + 0.01
            # livekit ends a turn still open when the session closes: it never ended
            ended = end is not None and (self.close_at is None or end < self.close_at - 1e-3)
            end = end if ended else None
            if end is None:
                end = self._last_words(start, heard)
                self.assumptions.append(
                    f"at {start:.2f} s: the caller's turn never ended (the VAD never said so); "
                    f"its words end at {end:.2f} s and the replay's VAD never ends it either"
                )
            end = max(end, start + 0.05)
            stopped = stopped_at if isinstance(stopped_at, float) else None
            # the STT had the audio until livekit withheld it, and transcribed none of it
            withheld = (
                withheld_from(start, stopped, self.started_speaking, [t for t, _ in self.speeches])
                if stopped is not None and self.realtime is None
                else start
            )
            unheard = _untranscribed_prefix(withheld, end, len(heard), first_at, stopped)
            if unheard:
                self.assumptions.append(
                    f"at {start:.2f} s: the caller spoke over the agent and the first transcript "
                    f"came late; {unheard} placeholder word(s) before the transcribed ones"
                    + (
                        f", said from {withheld:.2f} s (when livekit withheld the audio)"
                        if withheld > start
                        else ""
                    )
                )
            if not heard and self.realtime is not None:
                # the model heard no word of it: nothing of the caller's to replay
                self.assumptions.append(
                    f"at {start:.2f} s: the model transcribed nothing of the caller's "
                    f"{end - start:.2f} s turn: its server's own speech event (Gemini reports one "
                    "as its reply begins) or sound with no word; the replayed model makes it "
                    "itself"
                )
            elif not heard:
                unheard = max(1, round((end - start) * _WORDS_PER_SECOND))
                self.assumptions.append(
                    f"at {start:.2f} s: no transcript of the caller's {end - start:.2f} s turn; "
                    f"{unheard} placeholder words in it"
                )
            said = (
                _words_said(start, end, len(heard), self.word_times.get(index, []))
                or self._said_before_handoff(index, start, end)
                if ended and not unheard
                else None
            )
            if self.realtime is not None and heard:
                # the model's server heard them: where is its VAD's to say (see .realtime)
                said = speech_window(
                    self.realtime,
                    start,
                    end,
                    len(heard),
                    self.word_times.get(index, []),
                    ended,
                )
            elif heard and unheard and withheld > start:
                said = (round(withheld, 3), round(end, 3))  # no word before livekit withheld
            after = (
                self._withheld_suffix(index, start, end, heard)
                if ended and not unheard and self.realtime is None
                else 0
            )
            windows: tuple[tuple[float, float, int], ...] = ()
            cut = cuts.get(index) if ended and not unheard else None
            if cut is not None:
                said, after, windows = None, *self._cut_turn(cut, end, over.get(index, 0))
            elif index in self.flushed and heard:
                after = words_after(start, end, len(heard), self.flushed[index])
                if after:
                    self.assumptions.append(
                        f"at {self.flushed[index]:.2f} s: the STT died inside the caller's turn; "
                        f"{after} placeholder word(s) after the ones it heard"
                    )
            elif after:
                self.assumptions.append(
                    f"at {start:.2f} s: the agent's line began over the caller after their "
                    f"transcribed words and nothing more of the turn was transcribed; {after} "
                    "placeholder word(s) after the transcribed ones"
                )
            noise = not heard and (continues or self._noise_split(index))
            if noise and not continues:
                self.assumptions.append(
                    f"at {start:.2f} s: the untranscribed turn goes on into the next with no pause "
                    "and the agent silent: noise the VAD heard as speech, split by a commit (a "
                    "recording plays it with no words)"
                )
            elif noise:
                self.assumptions.append(
                    f"at {start:.2f} s: the untranscribed turn goes on from the one before with no "
                    "pause: noise the VAD heard as speech (a recording plays it with no words)"
                )
            turns.append(
                CallerTurn(
                    round(start, 3),
                    round(end, 3),
                    tuple(heard),
                    unheard,
                    ended,
                    None if after else said,
                    noise,
                    after,
                    windows,
                )
            )
            previous_end = end
        return tuple(turns)

    def _said_before_handoff(
        self, index: int, start: float, end: float
    ) -> tuple[float, float] | None:
        """When a turn's words were said, if another agent took the call as its final came.

        livekit's new agent ends the caller's turn as it takes the call, here in the instant of
        the turn's final transcript: the words ended the STT's delay before (the report's
        ``transcription_delay`` of the other turns), not where the turn ends.
        """
        times = self.word_times.get(index, [])
        if not times or not self.transcription_delays or abs(times[-1][0] - end) > 1e-3:
            return None
        if not any(h.old is not None and abs(h.at - end) <= 1e-3 for h in self.flow.handoffs):
            return None
        return round(start, 3), round(end - statistics.median(self.transcription_delays), 3)

    def _turn_cuts(self) -> dict[int, TurnCut]:
        """The turns livekit's ``user_turn_limit`` cut into, by index (sets ``turn_limit``).

        The limit is the fewest words counted at a cut; a final that reached it without a cut
        says the count is not livekit's: then none is taken as a cut.
        """
        replies = [at for at, source in self.speeches if source == "generate_reply"]
        answered = [s.created for s in self.said if not s.interrupted and s.from_llm is not False]
        cuts: dict[int, TurnCut] = {}
        for index, (start, end, heard, _, _) in enumerate(self.turns):
            cut = (
                cut_into(
                    start,
                    # a cut comes before the end of speech reached livekit: the VAD's is late
                    max(end, self.end_arrived.get(index, end)),
                    heard,
                    self.transcripts.get(index, []),
                    self._spoken_user_messages(),  # a typed message is no cut
                    replies,
                    answered,
                )
                if end is not None
                else None
            )
            if cut is not None:
                cuts[index] = cut
        if not cuts:
            return {}
        finals = [(at, n) for times in self.transcripts.values() for at, n, final in times if final]
        resets = [*self.started_speaking, *(at for at, _ in self.user_messages)]
        limit = min(word_count_by(cut.at, finals, resets) for cut in cuts.values())
        at_cuts = {cut.at for cut in cuts.values()}
        if any(
            word_count_by(at, finals, resets) >= limit
            for at, _ in finals
            if all(abs(at - c) > 1e-3 for c in at_cuts)
        ):
            return {}
        self.turn_limit = limit
        return cuts

    def _words_over_cuts(self, cuts: Mapping[int, TurnCut]) -> dict[int, int]:
        """The words said over each cut-in that the chat has, put after the turn's (by index).

        livekit withheld them from the STT; a middleware recovered them and committed a message
        of their own once the turn was over, before the caller's next turn: words no transcript
        has.
        """
        found: dict[int, int] = {}
        for index, cut in cuts.items():
            turn = self.turns[index]
            following = self.turns[index + 1][0] if index + 1 < len(self.turns) else math.inf
            for at, text in self.user_messages:
                words = text.split()
                if not turn[1] <= at < following or not words:
                    continue
                if any(other[2] and _contains(words, other[2]) for other in self.turns):
                    continue  # a transcribed turn's words: livekit's own commit
                turn[2] = [*turn[2][: cut.transcribed], *words]
                found[index] = len(words)
                break
        return found

    def _cut_turn(
        self, cut: TurnCut, end: float, known: int
    ) -> tuple[int, tuple[tuple[float, float, int], ...]]:
        """A cut turn's placeholders after its words, and the windows its words were said in."""
        over = cut.words_over(end, known)
        after = over[2] if over is not None and not known else 0
        said_over = (
            "nothing said over it"
            if over is None
            else f"{after} placeholder word(s) said over it"
            if after
            else "the words said over it are the chat's message's"
        )
        self.assumptions.append(
            f"at {cut.at:.2f} s: the caller's words so far were committed mid-turn and answered "
            f"by an uninterrupted reply: livekit's user_turn_limit cut in (max_words="
            f"{self.turn_limit}, the words counted then); {said_over}"
        )
        return after, cut.windows if over is None else (*cut.windows, over)

    def _noise_split(self, index: int) -> bool:
        """Whether the untranscribed turn ``index`` starts one long sound a commit split."""
        after = self.turns[index + 1] if index + 1 < len(self.turns) else None
        return split_noise(
            (self.turns[index][0], self.turns[index][1]),
            None if after is None else (after[0], bool(after[2])),
            self._speaking(),
        )

    def _speaking(self) -> list[tuple[float, float]]:
        """When the agent spoke: (began, stopped) each time (``math.inf``: it never stopped)."""
        return [
            (began, next((t for t in self.stopped_speaking if t >= began), math.inf))
            for began in self.started_speaking
        ]

    def _withheld_suffix(self, index: int, start: float, end: float, heard: Sequence[str]) -> int:
        """Words of a turn said after its transcribed ones, withheld from the STT, if any.

        The agent began to speak inside the turn once all its transcribed words were in, and
        spoke on to its end with nothing more transcribed: livekit withheld the caller's audio
        under an uninterruptible line (an interruptible one would have been cut, the words
        transcribed). They are counted at the pace of the words before the line began.
        """
        times = self.word_times.get(index, [])
        if not heard or not times or max(count for _, count in times) != len(heard):
            return 0  # words the chat has beyond the transcripts: nothing withheld is unknown
        full = min(at for at, count in times if count == len(heard))
        for began in self.started_speaking:
            if not start < began < end or began < full:
                continue
            stops = [t for t in self.stopped_speaking if t > began]
            if stops and stops[0] < end:
                return 0  # the agent stopped while the caller still spoke
            pace = (began - start) / len(heard)
            return round((end - began) / pace) if pace > 0 else 0
        return 0

    def _last_words(self, start: float, heard: Sequence[str]) -> float:
        """When the words of a turn that never ended were over: its last transcript's time.

        A final transcript that came as the session closed was flushed by the close, not said
        then: the words ended about half an interim's spacing after the last interim before it.
        """
        times = sorted(at for at in self.transcript_times if at >= start)
        if not times or not heard:
            return start + 1.0
        if self.close_at is not None and times[-1] >= self.close_at - 1e-3 and len(times) > 2:
            before = times[:-1]
            spacing = (before[-1] - before[0]) / (len(before) - 1)
            return round(before[-1] + spacing / 2, 3)
        return times[-1]

    def _goodbye(self, runs: Sequence[ToolRunPlan]) -> str | None:
        """The line the app closed the session right after (a hang-up after its goodbye)."""
        if self.close_at is None or self.close_reason in _CALLER_CLOSES:
            return None  # the caller left: livekit closes the session its own time later
        if self.script_end is not None and self.close_at >= self.script_end - 1e-3:
            # the lab closed it when its script ended: livekit waited that long for the
            # caller's last words
            self.close_wait = round(self.close_at - self.script_end, 3)
            return None
        if not _closed_by_app(self.close_reason, self.close_at, self.script_end):
            return None
        before = [s for s in self.said if s.added <= self.close_at + 1e-3]
        self.farewell = before[-1].text if before else None
        if any(r.hangs_up_after is not None or r.livekit_end_call for r in runs):
            return None  # a tool closed it
        done = self._line_done(before[-1]) if before else None
        # an interrupted goodbye is cut as the agent stops speaking; livekit may wait as long
        # as session_close_transcript_timeout's default for the caller's words then
        within = _SESSION_CLOSE_WAIT_S if before and before[-1].interrupted else _GOODBYE_CLOSE_S
        if done is not None and self.close_at - done <= within:
            # livekit waits for the caller's last words before it closes (at most
            # session_close_transcript_timeout): how long it waited says what that option was
            self.close_wait = round(max(0.0, self.close_at - done - self.hang_up_pad), 3)
            self.assumptions.append(
                f"at {self.close_at:.2f} s: the app closed the session after its line "
                f"{before[-1].text!r}; livekit waited {self.close_wait:.2f} s for the caller's "
                "last words (session_close_transcript_timeout)"
            )
            return before[-1].text
        self.assumptions.append(
            f"at {self.close_at:.2f} s: the app closed the session; the replay closes it then"
        )
        return None

    def _line_done(self, said: _Said) -> float:
        """When the agent stopped saying ``said`` (was cut, when it was interrupted).

        livekit adds an interrupted line's message only once the caller's words are in.
        """
        if not said.interrupted:
            return said.added
        stops = [t for t in self.stopped_speaking if t <= said.added + 1e-3]
        return stops[-1] if stops else said.added

    def _stt_silent_from(self, turns: Sequence[CallerTurn]) -> float | None:
        """When the STT stopped answering without an error, if it did.

        From a turn livekit did not withhold (the agent was not speaking during it), every
        turn to the end of the call went untranscribed: the STT took the audio and answered
        nothing (a half-open socket).
        """
        speaking = self._speaking()
        silent: float | None = None
        for turn in turns:
            if turn.heard:
                silent = None
                continue
            spoken_over = any(a < turn.end and turn.start < b for a, b in speaking)
            if silent is None and not spoken_over:
                silent = turn.start
        return silent

    def _recovered_line(self, provider: str) -> _Said | None:
        """The line the agent said to recover from a failure of ``provider``, if one.

        A line not from the LLM, said after an error and before the caller's next message,
        is the agent's recovery (a middleware's), not the app's: the failed answer
        said again after the TTS failed, or a fallback line after the LLM did.
        """
        for said in self.said:
            if said.from_llm is not False:
                continue
            failed = [e.at for e in self.errors if e.provider == provider and e.at < said.added]
            if failed and not any(failed[-1] < at < said.added for at, _ in self.user_messages):
                return said
        return None

    def _says(
        self,
        options: Mapping[str, Any],
        turns: Sequence[CallerTurn],
        recovered: Sequence[_Said] = (),
    ) -> list[AppSay]:
        """Lines the app said (assistant messages not from the LLM), in order."""
        min_duration = options.get("min_interruption_duration", _DEFAULT_MIN_INTERRUPTION_S)
        say_times = [at for at, source in self.speeches if source == "say"]
        say_agents = list(self.say_agents)
        says: list[AppSay] = []
        unsure = False
        for said in self.said:
            if said.from_llm is None:
                unsure = True
            if said.from_llm is not False:
                continue
            at = say_times.pop(0) if say_times else said.created
            agent = say_agents.pop(0) if say_agents else self.flow.current
            if any(said is r for r in recovered):
                continue  # the agent's recovery from a provider's failure, not the app's
            over = sum(max(0.0, min(t.end, said.added) - max(t.start, at)) for t in turns)
            # words lost from a turn that began while it played: livekit withheld them
            withheld = any(t.unheard and at <= t.start < said.added for t in turns)
            protected = not said.interrupted and (over >= float(min_duration) or withheld)
            # begun as a caller's message was committed: said from on_user_turn_completed
            turn = next((m for t, m in self.user_messages if abs(t - at) <= 1e-3), None)
            says.append(
                AppSay(
                    round(at, 3),
                    said.text,
                    protected,
                    agent,
                    round(said.added, 3),
                    turn,
                    cut_in=said.cut_in,
                )
            )
        if unsure:
            self.assumptions.append(
                "chat items without metrics: every assistant message taken as the LLM's"
            )
        if any(s.on_turn is not None for s in says):
            self.assumptions.append(
                "a line the app began as the caller's message was committed was said from "
                "on_user_turn_completed"
            )
        if any(s.protected for s in says):
            self.assumptions.append(
                "a line the caller spoke over (or lost words over) and did not interrupt was said "
                "with allow_interruptions=False (the report does not record it)"
            )
        return says

    def _protected_at(self, started: float, end: float) -> float | None:
        """When a running tool protected the speech the caller had paused, if it did.

        livekit pauses an interruptible speech the caller speaks over, and resumes it while
        they still speak only when it becomes uninterruptible (``disallow_interruptions()``
        releases the pause); on its own it resumes after the caller stopped.
        """
        for resumed in self.started_speaking:
            paused = [t for t in self.stopped_speaking if started <= t < resumed]
            if not started < resumed < end or not paused:
                continue
            if any(paused[-1] < at <= resumed for at, _ in self.speeches):
                continue  # another speech began: not a resume
            if any(
                turn[0] <= paused[-1] and (turn[1] is None or turn[1] > resumed)
                for turn in self.turns
            ):
                return resumed
        return None

    def _protected_from_start(
        self, call: _Call, turns: Sequence[CallerTurn], options: Mapping[str, Any]
    ) -> bool:
        """Whether a tool made the answer that called it uninterruptible as it started.

        The answer's text (a preamble) still played when the tool started; the caller spoke
        over it from then without interrupting it (or lost words over it): livekit had not
        paused it, so it was uninterruptible before they spoke (``disallow_interruptions()``
        at the tool's start, the earliest it can be).
        """
        min_duration = float(options.get("min_interruption_duration", _DEFAULT_MIN_INTERRUPTION_S))
        for said in self.said:
            if said.item_id != call.group or said.from_llm is False or said.interrupted:
                continue
            if not said.created <= call.started < said.added:
                continue
            window = (call.started, said.added)
            over = sum(max(0.0, min(t.end, window[1]) - max(t.start, window[0])) for t in turns)
            withheld = any(t.unheard and window[0] <= t.start < window[1] for t in turns)
            return over >= min_duration or withheld
        return False

    def _kept_over_the_caller(
        self,
        call: _Call,
        turns: Sequence[CallerTurn],
        options: Mapping[str, Any],
        answers: Sequence[LLMAnswer],
    ) -> bool:
        """Whether the reply awaiting a tool outlived the caller speaking while the tool ran.

        livekit interrupts the interruptible reply that awaits a tool when the caller says words
        long enough while nothing plays (noise with no words only pauses it), and an
        interrupted reply says nothing of the tool's output. The LLM answered this tool's
        output all the same: the tool made its reply uninterruptible
        (``disallow_interruptions()``), at its start at the latest.
        """
        if call.ended is None or not any(a.after_tool == call.name for a in answers):
            return False
        if any(call.started - 1e-3 <= h.at <= call.ended + 1e-3 for h in self.flow.handoffs):
            return False  # another agent had the call meanwhile: the caller spoke to it
        if any(said.item_id == call.group and said.interrupted for said in self.said):
            return False  # the reply was interrupted (its output came back as a background's)
        min_duration = float(options.get("min_interruption_duration", _DEFAULT_MIN_INTERRUPTION_S))
        speaking = [
            (start, next((t for t in self.stopped_speaking if t >= start), math.inf))
            for start in self.started_speaking
        ]
        for turn in turns:
            a, b = max(turn.start, call.started), min(turn.end, call.ended)
            if b - a < min_duration or not turn.heard:
                continue  # livekit only pauses the reply for speech with no words in it
            heard_over = sum(max(0.0, min(b, y) - max(a, x)) for x, y in speaking)
            if b - a - heard_over >= min_duration:
                return True
        return False

    def _tool_runs(
        self,
        says: list[AppSay],
        turns: Sequence[CallerTurn],
        options: Mapping[str, Any],
        answers: Sequence[LLMAnswer] = (),
    ) -> list[ToolRunPlan]:
        runs: list[ToolRunPlan] = []
        claimed: set[int] = set()
        for call in sorted(self.calls.values(), key=lambda c: c.started):
            end = call.ended if call.ended is not None else math.inf
            # a line a task said while the tool awaiting it ran is the task's
            mine = [
                s
                for s in says
                if call.started - 1e-3 <= s.at < end
                and id(s) not in claimed
                and (s.agent is None or s.agent == call.agent)
            ]
            claimed.update(id(s) for s in mine)
            hangs_up = None
            # a tool that shut the session down as it ended (in its finally) or while it ran:
            # livekit closes it at most session_close_transcript_timeout later
            if (
                self.close_at is not None
                and call.started <= self.close_at <= end + _SESSION_CLOSE_WAIT_S
                and _closed_by_app(self.close_reason, self.close_at, self.script_end)
                # a line said after it ended: the close followed that line, not the tool
                and not any(end < s.added <= self.close_at + 1e-3 for s in self.said)
            ):
                asked = min(self.close_at, end)
                hangs_up = round(asked - call.started, 3)
                self.close_wait = (
                    round(max(0.0, self.close_at - asked - self.hang_up_pad), 3)
                    if asked < self.close_at
                    else None
                )
                self.assumptions.append(
                    f"at {asked:.2f} s: the tool {call.name} closed the session"
                )
            protected_at = self._protected_at(call.started, end)
            if protected_at is not None:
                self.assumptions.append(
                    f"at {protected_at:.2f} s: the agent resumed its speech over the speaking "
                    f"caller: the tool {call.name} called disallow_interruptions() then"
                )
            elif self._protected_from_start(call, turns, options):
                protected_at = call.started
                self.assumptions.append(
                    f"at {call.started:.2f} s: the caller spoke over the answer that called the "
                    f"tool {call.name} without interrupting it: the tool called "
                    "disallow_interruptions() as it started (the report does not record it)"
                )
            elif self._kept_over_the_caller(call, turns, options, answers):
                protected_at = call.started
                self.assumptions.append(
                    f"at {call.started:.2f} s: the caller spoke while the tool {call.name} ran and "
                    "its output was answered all the same: the tool called "
                    "disallow_interruptions() as it started (the report does not record it)"
                )
            runs.append(
                ToolRunPlan(
                    name=call.name,
                    started=round(call.started, 3),
                    duration=None if call.ended is None else round(call.ended - call.started, 3),
                    output=call.output,
                    is_error=call.is_error,
                    says=tuple(
                        ToolSay(
                            round(s.at - call.started, 3),
                            s.text,
                            s.protected,
                            awaited=s.done_at is None or s.done_at <= end + 1e-3,
                            cut_in=s.cut_in,
                        )
                        for s in mine
                    ),
                    hangs_up_after=hangs_up,
                    agent=call.agent,
                    tasks=tuple(self.flow.tasks.get(call.call_id, ())),
                    hands_off_to=self.flow.returned_by.get(call.call_id),
                    exit_after=self.flow.exit_after.get(call.call_id, 0.0),
                    completes_task=call.call_id in self.flow.completers,
                    reply_required=call.reply_required,
                    protects_after=(
                        None if protected_at is None else round(protected_at - call.started, 3)
                    ),
                    livekit_end_call=call.call_id in self.hung
                    and is_livekit_end_call(call.name, call.output),
                )
            )
        # the says a tool made are the tool's; the rest stay the app's
        says[:] = [s for s in says if id(s) not in claimed]
        return runs

    def _answers(self) -> tuple[LLMAnswer, ...]:
        groups: dict[str, list[_Call]] = {}
        for call in [*self.calls.values(), *self.unknown_calls.values()]:
            groups.setdefault(call.group, []).append(call)
        answers: list[LLMAnswer] = []
        for said in self.said:
            if said.from_llm is False:
                continue
            calls = groups.pop(said.item_id, [])
            entered = self._entered(said.created)
            answer = self._answer(said.created, said.text, said.ttft, calls, entered, said.ttfs)
            # livekit's ttft counts from the refused request; the answer is the retry's
            retried = retry_after_refusals(answer.at, answer.ttft, self.errors)
            answers.append(
                dataclasses.replace(
                    answer,
                    ttft=round(answer.ttft - retried, 3),
                    duration=round(answer.duration - retried, 3),
                )
            )
        for calls in groups.values():
            first = min(c.started for c in calls)
            asked = [at for at, source in self.speeches if at <= first and source != "say"]
            at = asked[-1] if asked else first
            answers.append(self._answer(at, "", None, calls, self._entered(at)))
        answers.sort(key=lambda a: a.at)
        replies = typed_replies(
            [(a.at, a.on_enter is not None, a.after_user) for a in answers], self.typed.messages
        )
        for index, text in replies.items():
            answers[index] = dataclasses.replace(answers[index], after_user=text, after_tool=None)
        return tuple(answers)

    def _realtime_answers(self, turns: Sequence[CallerTurn]) -> tuple[LLMAnswer, ...]:
        """A realtime model's answers: each message it spoke with the tool calls of its response.

        No LLM node times them: each was asked for by the last request before it began to play
        (the server's end of a turn, tool outputs, an entry, ``generate_reply``); a response's
        tool calls come while its audio plays, before the next message begins.
        """
        requests = list(self.requests)
        if self.realtime == "gemini":
            # Gemini's server answers a turn after the silence that ends its words; audio held
            # and sent at once carries that silence: answered as its last word is heard
            requests += [t.said[1] + SERVER_SILENCE_S for t in turns if t.said and t.ended]
            requests += [last_word_heard(times) for times in self.word_times.values() if times]
        spoken = [s for s in self.said if s.from_llm is not False]
        calls = sorted(self.calls.values(), key=lambda c: c.started)
        taken: set[str] = set()
        answers: list[LLMAnswer] = []
        for position, said in enumerate(spoken):
            following = spoken[position + 1].created if position + 1 < len(spoken) else math.inf
            own = [
                c
                for c in calls
                if c.call_id not in taken
                and said.created - 1e-3 <= c.started < min(said.added + 1e-3, following)
            ]
            taken.update(c.call_id for c in own)
            at = request_before(said.created, requests)
            answer = self._answer(at, said.text, said.created - at, own, self._heard_entry(at))
            before = spoken[position - 1] if position else None
            silent = self._silent_turns(answer, requests, before)
            answer = dataclasses.replace(answer, silent_before=silent)
            first = next((f for a, f in self.asked_again.items() if abs(a - at) < 1e-3), None)
            if first is not None and not silent:
                answer = dataclasses.replace(answer, hangs_until=answer.at)
                self.assumptions.append(asked_again_assumption(first, at))
            if said.item_id in self.cut_lines:
                # its stream ran until the server's error: what played is all it sent
                until = round(max(answer.ttft, self.cut_lines[said.item_id] - at), 3)
                played = round(self._line_done(said) - said.created, 3)
                answer = dataclasses.replace(
                    answer, duration=until, cut_by_error=True, played=played
                )
                self.assumptions.append(cut_length_assumption(said.text, said.created, played))
            if said.item_id in self.whole_lines:
                failed = round(self.whole_lines[said.item_id] - at, 3)
                answer = dataclasses.replace(answer, fails_after=failed)
            if before is not None and before.item_id in self.cut_lines and self._last(before, at):
                answer = dataclasses.replace(
                    answer, after_user=None, after_tool=None, after_line=before.text
                )
            answers.append(answer)
        for call in calls:
            if call.call_id in taken:
                continue
            # a response with tool calls and nothing said
            group = [c for c in calls if c.call_id not in taken and c.started - call.started < 1e-3]
            taken.update(c.call_id for c in group)
            # asked before the call was made (its own output comes as it is made)
            at = request_before(call.started - 2e-3, requests)
            answers.append(self._answer(at, "", None, group, self._heard_entry(at)))
        for reply in self.hung.values():
            answer = self._answer(reply.ended, "", None, [])
            answers.append(dataclasses.replace(answer, hung=True))
        answers.sort(key=lambda a: a.at)
        return tuple(answers)

    def _last(self, said: _Said, at: float) -> bool:
        """Whether a request at ``at`` had ``said`` last (no caller's message or tool since)."""
        return not any(said.added - 1e-3 < mark <= at + 1e-3 for mark, _ in self.context_marks)

    def _silent_turns(
        self, answer: LLMAnswer, requests: Sequence[float], before: _Said | None
    ) -> int:
        """How many Gemini turns answered ``answer``'s context with no audio before it.

        Its context was asked for before (a request after the line before, and after the
        caller's message it answers) and the server ended that turn with nothing said (the
        caller's turn ended, which Gemini reports as its reply is done): the agent asked again.
        """
        if self.realtime != "gemini" or answer.after_user is None:
            return 0
        since = max(
            [before.added if before is not None else 0.0]
            + [t for t, m in self.user_messages if m == answer.after_user and t <= answer.at]
        )
        earlier = [r for r in set(requests) if since - 1e-3 <= r < answer.at - 1e-3]
        ends = [t[1] for t in self.turns if t[1] is not None]
        silent = [
            r for r in sorted(earlier) if any(r - 1e-3 <= end <= answer.at + 1e-3 for end in ends)
        ]
        if silent:
            self.assumptions.append(
                f"at {silent[0]:.2f} s: the model's turn ended with nothing said and the agent "
                "asked again: a reply with no audio (Gemini's silent turn)"
            )
        return min(len(silent), 1)

    def _heard_entry(self, at: float) -> str | None:
        """The agent whose entry a realtime answer asked at ``at`` answered, if it did.

        Not when the caller's words since the entry asked for it: the model heard them (audio
        held from the agent before and sent to the one entering) and the user message is added
        only when the server ends the turn.
        """
        entered = self._entered(at)
        entries = [e[0] for e in self.entry_marks if e[0] <= at + 1e-3]
        if entered is None or not entries:
            return entered
        heard = any(entries[-1] - 1e-3 <= t <= at + 1e-3 for t, _ in self.user_messages)
        return None if heard else entered

    def _entered(self, at: float) -> str | None:
        """The agent whose entry an answer asked at ``at`` answered, if it answered one.

        It did when its context ended in a handoff: no user message or tool output came
        between the last handoff by then and ``at``.
        """
        by = at + 1e-3
        entries = [e for e in self.entry_marks if e[0] <= by]
        if not entries:
            return None
        entry = entries[-1]
        if any((entry[0], entry[1]) < m and m[0] <= by for m in self.context_marks):
            return None
        return entry[2]

    def _answer(
        self,
        at: float,
        text: str,
        ttft: float | None,
        calls: Sequence[_Call],
        entered: str | None = None,
        ttfs: float | None = None,
    ) -> LLMAnswer:
        user = [(t, m) for t, m in self.user_messages if t <= at + 1e-3]
        # in the order they ended: the last one before the request is what it answered
        outputs = sorted(
            (
                (c.ended, c.name)
                for c in [*self.calls.values(), *self.unknown_calls.values()]
                if c.ended is not None
            ),
            key=lambda pair: pair[0],
        )
        tool = [(t, n) for t, n in outputs if t <= at + 1e-3]
        last_user = user[-1] if user else None
        last_tool = tool[-1] if tool else None
        after_tool = None
        after_user = None
        if last_tool is not None and (last_user is None or last_tool[0] >= last_user[0]):
            after_tool = last_tool[1]
        elif last_user is not None:
            after_user = last_user[1]
        ttft_s = ttft if ttft is not None else _DEFAULT_TTFT_S
        first_call = min((c.started for c in calls), default=None)
        duration = max(ttft_s, first_call - at) if first_call is not None else ttft_s + 0.2
        if first_call is None and ttfs is not None and sentence_count([text]) == 1:
            # a one-sentence answer reaches the TTS as its stream ends: when livekit measured
            duration = max(ttft_s, ttfs)
        return LLMAnswer(
            at=round(at, 3),
            after_user=after_user,
            after_tool=after_tool,
            text=text,
            tool_calls=tuple(ToolCallPlan(c.name, c.arguments) for c in calls),
            ttft=round(ttft_s, 3),
            duration=round(duration, 3),
            on_enter=entered,
        )
