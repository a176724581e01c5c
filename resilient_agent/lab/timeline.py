"""One lab call as a timeline: what the caller said, typed and heard, and what the session did.

:func:`extract_timeline` turns a finished :class:`~resilient_agent.testing.runner.CallWorld` and
its :class:`~resilient_agent.testing.contracts.CallOutcome` into plain dataclasses in call-relative
seconds (rounded to the millisecond), so the world can be dropped right after the run.
:meth:`CallTimeline.as_dict` is the record ``resilient-agent lab --timeline`` writes, and
:mod:`.html_report` draws it.

Speech handles are numbered ``S1``, ``S2``... in creation order because livekit's handle ids are
random: the same call must give the same timeline on every run.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from livekit.agents import llm as lk_llm

from ..testing.clock import SAME_INSTANT_S
from .timeline_model import (
    TIMELINE_FORMAT,
    CallTimeline,
    HeardRun,
    LLMTrack,
    Mark,
    MarkKind,
    NoiseSpan,
    PlayoutSpan,
    SpeechTrack,
    StateSpan,
    ToolTrack,
    TypedTrack,
    UtteranceTrack,
    WordMark,
    WordStatus,
    write_timelines,
)

if TYPE_CHECKING:
    from ..testing.audio import PlayedSegment
    from ..testing.contracts import CallOutcome
    from ..testing.recorder import PlayoutStart, RecordedSpeech
    from ..testing.runner import CallWorld
    from ..testing.scenario import Typed

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
    "extract_timeline",
    "write_timelines",
]

_WORD = re.compile(r"[\w']+")


def _t(seconds: float) -> float:
    return round(seconds, 3)


def _opt_t(seconds: float | None) -> float | None:
    return None if seconds is None else _t(seconds)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def _state_spans(changes: Sequence[tuple[float, str]], initial: str) -> tuple[StateSpan, ...]:
    spans: list[StateSpan] = []
    state, since = initial, 0.0
    for at, new_state in changes:
        if new_state == state:
            continue
        spans.append(StateSpan(state, _t(since), _t(at)))
        state, since = new_state, at
    spans.append(StateSpan(state, _t(since), None))
    # livekit may pass through a state for no time at all; nobody can see or hover that
    return tuple(s for s in spans if s.end is None or s.end > s.start)


def _utterances(world: CallWorld, outcome: CallOutcome) -> tuple[UtteranceTrack, ...]:
    """Every utterance, its words' fate and its latency as the contracts judged them."""
    verdicts = [v for v in outcome.inputs if v.kind == "utterance"]
    transcribed = {(w.utterance, w.index) for _, _, heard in world.stt.finals for w in heard}
    merged = _merged_turns(world)
    tracks = []
    for index, (utterance, verdict) in enumerate(
        zip(world.scenario.utterances, verdicts, strict=True)
    ):
        step = (utterance.end - utterance.start) / len(verdict.words)
        marks = []
        for position, word in enumerate(verdict.words):
            status: WordStatus
            if not word.lost:
                status = "reached_llm"
            elif (index, position) in transcribed:
                status = "lost_after_stt"
            else:
                status = "lost_before_stt"
            marks.append(
                WordMark(
                    text=word.text,
                    start=_t(utterance.start + position * step),
                    end=_t(utterance.start + (position + 1) * step),
                    status=status,
                    reached_llm_at=word.reached_llm_at,
                )
            )
        number = index + 1
        partners = sorted({n for group in merged if number in group for n in group} - {number})
        tracks.append(
            UtteranceTrack(
                number=number,
                start=_t(utterance.start),
                end=_t(utterance.end),
                text=utterance.text,
                expect_reply=utterance.expect_reply,
                words=tuple(marks),
                reply_latency_s=verdict.reply_latency_s,
                merged_with=tuple(partners),
            )
        )
    return tuple(tracks)


def _typed(world: CallWorld, outcome: CallOutcome) -> tuple[TypedTrack, ...]:
    """Every typed message, its lost words and latency as the contracts judged them."""
    verdicts = [v for v in outcome.inputs if v.kind == "typed"]
    tracks = []
    for message, verdict in zip(world.scenario.typed, verdicts, strict=True):
        reached = [w.reached_llm_at for w in verdict.words if w.reached_llm_at is not None]
        tracks.append(
            TypedTrack(
                number=verdict.number,
                at=_t(message.at),
                text=message.text,
                expect_reply=message.expect_reply,
                lost=tuple(w.text for w in verdict.words if w.lost),
                reached_llm_at=min(reached, default=None),
                reply_latency_s=verdict.reply_latency_s,
            )
        )
    return tuple(tracks)


def _typed_in_turn(typed: Sequence[Typed], at: float, said: set[str]) -> tuple[int, ...]:
    """Typed messages (1-based) that had arrived by ``at`` and whose words the turn holds."""
    return tuple(
        number
        for number, message in enumerate(typed, start=1)
        if message.at <= at + SAME_INSTANT_S and _words(message.text) <= said
    )


def _noise(world: CallWorld) -> tuple[NoiseSpan, ...]:
    return tuple(NoiseSpan(_t(n.start), _t(n.end), n.rms) for n in world.scenario.noise)


def _turn_utterances(world: CallWorld) -> list[tuple[float, str, tuple[int, ...]]]:
    """Each committed user turn with the utterances (1-based) whose words it carries.

    A turn is made of the STT finals since the previous turn; a final's words know their
    utterance, and the turn's text must still contain them (livekit may drop a final).
    """
    t0 = world.t0
    finals = [(at - t0, heard) for at, _, heard in world.stt.finals]
    turns = []
    since = float("-inf")
    for at, role, text in world.recorder.items:
        if role != "user":
            continue
        said = _words(text)
        numbers = sorted(
            {
                word.utterance + 1
                for heard_at, heard in finals
                if since < heard_at <= at + SAME_INSTANT_S
                for word in heard
                if word.text.lower().strip(".,?!") in said
            }
        )
        turns.append((at, text, tuple(numbers)))
        since = at + SAME_INSTANT_S
    return turns


def _merged_turns(world: CallWorld) -> list[tuple[int, ...]]:
    return [numbers for _, _, numbers in _turn_utterances(world) if len(numbers) > 1]


def _playout_owner(starts: Sequence[PlayoutStart], segment: PlayedSegment) -> PlayoutStart | None:
    # a segment's start is stamped together with livekit's playback_started; a resume after a
    # pause that came before any audio moves both, so the last start at or before it is its own
    assert segment.started_at is not None
    owner = None
    for start in starts:
        if start.at <= segment.started_at + SAME_INSTANT_S:
            owner = start
    return owner


def _speeches(world: CallWorld) -> tuple[SpeechTrack, ...]:
    recorder = world.recorder
    sentences = world.tts.sentences
    playouts: dict[str, list[PlayoutSpan]] = {}
    for segment in world.audio_out.segments:
        if segment.started_at is None:
            continue
        owner = _playout_owner(recorder.playouts, segment)
        heard = [sentences.get(i, "") for i, (_, s, _) in segment.sentences.items() if s > 0]
        span_protected = (
            None
            if owner is None or owner.allow_interruptions is None
            else not owner.allow_interruptions
        )
        span = PlayoutSpan(
            start=_t(segment.started_at),
            end=_opt_t(segment.ended_at),
            played_s=_t(segment.played),
            interrupted=segment.interrupted,
            protected=span_protected,
            text=" ".join(t for t in heard if t),
            runs=_heard_runs(segment, recorder.resumes, span_protected),
        )
        playouts.setdefault(owner.speech_id if owner and owner.speech_id else "", []).append(span)
    tracks = []
    for number, record in enumerate(recorder.speeches.values(), start=1):
        spans = tuple(playouts.get(record.id, ()))
        tracks.append(
            SpeechTrack(
                label=f"S{number}",
                source=record.source,
                text=_speech_text(world, record) or " ".join(s.text for s in spans),
                protected_at_creation=not record.allow_interruptions,
                protected_when_done=(
                    None
                    if record.allow_interruptions_when_done is None
                    else not record.allow_interruptions_when_done
                ),
                created_at=_t(record.created_at),
                scheduled_at=_opt_t(record.scheduled_at),
                interrupted_at=_opt_t(record.interrupted_at),
                done_at=_opt_t(record.done_at),
                interrupted=record.interrupted,
                playouts=spans,
            )
        )
    return tuple(tracks)


def _heard_runs(
    segment: PlayedSegment, resumes: Sequence[PlayoutStart], first: bool | None
) -> tuple[HeardRun, ...]:
    """The stretches the caller heard; each after the first is protected as at its resume."""
    runs = []
    for index, run in enumerate(segment.runs):
        protected = first
        if index > 0:
            resume = next((r for r in resumes if abs(r.at - run.started_at) < SAME_INSTANT_S), None)
            if resume is not None and resume.allow_interruptions is not None:
                protected = not resume.allow_interruptions
        runs.append(HeardRun(_t(run.started_at), _t(run.ended_at), protected))
    return tuple(runs)


def _speech_text(world: CallWorld, record: RecordedSpeech) -> str:
    handle = world.recorder.handles.get(record.id)
    if handle is None:
        return ""
    texts = [
        item.text_content or ""
        for item in handle.chat_items
        if isinstance(item, lk_llm.ChatMessage) and item.role == "assistant"
    ]
    return " ".join(t for t in texts if t)


def _cancelled_at(at: float, speeches: Sequence[SpeechTrack]) -> float | None:
    """When the generation a request made at ``at`` served was cancelled, None if never.

    A request is made inside the reply task of a ``generate_reply`` speech handle alive at that
    instant (the latest one created); livekit cancels the task's generation when the handle is
    interrupted, or finishes it with the handle.
    """
    owner = None
    for speech in speeches:
        if speech.source != "generate_reply" or speech.created_at > at + SAME_INSTANT_S:
            continue
        if speech.done_at is None or speech.done_at + SAME_INSTANT_S >= at:
            owner = speech
    if owner is None:
        return None
    return owner.interrupted_at if owner.interrupted_at is not None else owner.done_at


def _llm_requests(world: CallWorld, speeches: Sequence[SpeechTrack]) -> tuple[LLMTrack, ...]:
    scripted = world.llm
    tracks = []
    for request in scripted.requests:
        # the request keeps the answer, not the rule: the rule that says the same is its timing
        ttft, duration = scripted.fallback_ttft, 0.5
        for rule in scripted.rules:
            names = tuple(c.name for c in rule.tool_calls)
            if rule.text == request.reply and names[: len(request.tool_calls)] == (
                request.tool_calls
            ):
                ttft, duration = rule.ttft, rule.duration
                break
        if request.last_tool is not None:
            answers = f"tool: {request.last_tool}"
        else:
            answers = f"user: {request.last_user_text or ''}"
        at = _t(request.at - world.t0)
        tracks.append(
            LLMTrack(
                at=at,
                ttft_s=ttft,
                duration_s=max(ttft, duration),
                answers=answers,
                reply=request.reply,
                tool_calls=request.tool_calls,
                hung=request.hung,
                cancelled_at=_cancelled_at(at, speeches) if request.hung else None,
            )
        )
    return tuple(tracks)


def _tools(world: CallWorld) -> tuple[ToolTrack, ...]:
    return tuple(
        ToolTrack(run.name, run.arguments, _t(run.started_at), _opt_t(run.ended_at), run.status)
        for run in world.recorder.tool_runs
    )


def _marks(world: CallWorld) -> tuple[Mark, ...]:
    marks = [
        Mark(_t(at - world.t0), "stt_final", text, f"STT final transcript: {text!r}")
        for at, text, _ in world.stt.finals
    ]
    for at, text, numbers in _turn_utterances(world):
        typed = () if numbers else _typed_in_turn(world.scenario.typed, at, _words(text))
        who = "+".join(f"u{n}" for n in numbers) or "+".join(f"t{n}" for n in typed) or "?"
        if len(numbers) > 1:
            detail = f"user turn committed, merging {who} into one: {text!r}"
            marks.append(Mark(_t(at), "merged_turn", f"{who} merged", detail))
        else:
            marks.append(Mark(_t(at), "user_turn", who, f"user turn committed ({who}): {text!r}"))
    for at, level, message in world.logs.records:
        detail = f"livekit {logging.getLevelName(level)}: {message}"
        marks.append(Mark(_t(at), "livekit_log", _clip(message, 40), detail))
    for at, reason in world.job.shutdowns:
        marks.append(Mark(_t(at), "hang_up", "job shutdown", f"job.shutdown(reason={reason!r})"))
    for at in world.job.room_deletions:
        marks.append(Mark(_t(at), "room_deleted", "room deleted", "job.delete_room()"))
    recorder = world.recorder
    if recorder.closed_at is not None:
        by = "by the app" if world.closed_by_app else "by the lab at the end of the script"
        marks.append(
            Mark(
                _t(recorder.closed_at),
                "session_closed",
                "session closed",
                f"session closed {by} (reason: {recorder.close_reason})",
            )
        )
    if not world.closed_by_app:
        marks.append(Mark(_t(world.ended_at), "script_end", "end of script", "the script ends"))
    return tuple(sorted(marks, key=lambda m: m.at))


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _race_events(outcome: CallOutcome) -> tuple[Mark, ...]:
    marks = []
    for event in outcome.race_events:
        at = event.get("at_s", event.get("at"))
        kind = str(event.get("kind") or "race")
        action = event.get("action")
        reported = event.get("event", event.get("type"))
        mark_kind: MarkKind
        if reported == "race_handled" or (reported is None and action is not None):
            mark_kind, label = "race_handled", f"{kind} → {action}"
        elif reported == "race_detected":
            mark_kind, label = "race_detected", f"{kind} detected"
        else:
            mark_kind, label = "race_event", f"{reported or 'event'}: {kind}"
        detail = json.dumps(event, sort_keys=True, default=str)
        if not isinstance(at, (int, float)):
            # an event without a time still belongs in the report; the start is honest about it
            at, detail = 0.0, "(reported without a time) " + detail
        marks.append(Mark(_t(float(at)), mark_kind, label, detail))
    return tuple(marks)


def _activity_end(
    utterances: Sequence[UtteranceTrack],
    typed: Sequence[TypedTrack],
    states: Iterable[StateSpan],
    speeches: Sequence[SpeechTrack],
    tools: Sequence[ToolTrack],
    requests: Sequence[LLMTrack],
    marks: Sequence[Mark],
    closed_by_app: bool,
) -> float:
    times = [0.0]
    times += [u.end for u in utterances]
    times += [t.at for t in typed]
    times += [s.start for s in states]
    for speech in speeches:
        times += [t for t in (speech.created_at, speech.done_at) if t is not None]
        times += [p.end if p.end is not None else p.start for p in speech.playouts]
    times += [t.end if t.end is not None else t.start for t in tools]
    for request in requests:
        if request.hung:
            times.append(request.cancelled_at if request.cancelled_at is not None else request.at)
        else:
            times.append(request.at + request.duration_s)
    # the lab's own close at the end of the script is not something the call did
    own = {"script_end"} if closed_by_app else {"script_end", "session_closed"}
    times += [m.at for m in marks if m.kind not in own]
    return _t(max(times))


def extract_timeline(
    world: CallWorld,
    outcome: CallOutcome,
    *,
    agent: str,
    agent_label: str,
    onset: float | None = None,
) -> CallTimeline:
    """The timeline of one finished call.

    Args:
        world: The call, as :func:`~resilient_agent.testing.runner.run_scenario` returned it.
        outcome: Its verdict.
        agent: ``module:Class`` of the agent base class it ran on.
        agent_label: The class name, for captions.
        onset: The moved utterance's onset in a ``--sweep`` run.
    """
    scenario = world.scenario
    recorder = world.recorder
    utterances = _utterances(world, outcome)
    typed = _typed(world, outcome)
    user_states = _state_spans(recorder.user_states, "listening")
    agent_states = _state_spans(recorder.agent_states, "initializing")
    speeches = _speeches(world)
    tools = _tools(world)
    requests = _llm_requests(world, speeches)
    marks = _marks(world)
    race_events = _race_events(outcome)
    vad: str = scenario.vad
    if scenario.vad_fault.mode != "healthy":
        vad += f", fault {scenario.vad_fault.mode} on utterance {scenario.vad_fault.utterance + 1}"
    activity_end = _activity_end(
        utterances,
        typed,
        [*user_states, *agent_states],
        speeches,
        tools,
        requests,
        [*marks, *race_events],
        world.closed_by_app,
    )
    return CallTimeline(
        scenario=scenario.name,
        family=scenario.family,
        description=scenario.description,
        control=scenario.control,
        agent=agent,
        agent_label=agent_label,
        onset=onset,
        passed=outcome.passed,
        reasons=tuple(outcome.reasons),
        reply_latency_s=outcome.reply_latency_s,
        lost_words=outcome.lost_words,
        hung_up=outcome.hung_up,
        vad=vad,
        scripted_duration=scenario.duration,
        ended_at=_t(world.ended_at),
        activity_end=activity_end,
        close_deadlocked=world.close_deadlocked,
        utterances=utterances,
        user_states=user_states,
        agent_states=agent_states,
        speeches=speeches,
        tools=tools,
        llm_requests=requests,
        marks=marks,
        race_events=race_events,
        typed=typed,
        noise=_noise(world),
    )
