"""The contracts every lab call is judged by, computed from what the caller experienced.

* every utterance or typed message that expects a reply is answered audibly and completely,
  starting within the scenario's ``reply_bound`` after the caller stopped (or the message
  arrived);
* every word the caller said or typed reaches the LLM;
* ``user_state`` is not stuck at ``speaking`` when the call is over;
* no speech handle is left unfinished;
* livekit never force-cancels a speech (``speech not done in time after interruption``);
* no LLM answer is heard twice to the end (a turn answered twice);
* the call ends if and only if the farewell was heard to the end and the caller said nothing
  after it began;
* a protected speech never starts over the caller: of a speech that disallowed interruptions
  when its audio began, or when it resumed after a pause, at most
  ``Scenario.talk_over_tolerance`` seconds play while an utterance that was already under way
  goes on.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .recorder import INTERRUPTION_TIMEOUT_LOG

if TYPE_CHECKING:
    from .runner import CallWorld
    from .scenario import CallerInput, Scenario

__all__ = [
    "CallOutcome",
    "HeardSentence",
    "TalkOver",
    "evaluate",
    "heard_sentences",
    "protected_talk_over",
]

# A sentence counts as heard to the end when no more than one frame of it is missing.
_HEARD_TOLERANCE_S = 0.015
# livekit's playback_started and the recorder's stamp of it share one instant.
_SAME_INSTANT_S = 1e-3
_WORD = re.compile(r"[\w']+")


@dataclass(frozen=True)
class HeardSentence:
    """One synthesized sentence as the caller heard it.

    Attributes:
        id: The TTS sentence id.
        text: The sentence.
        synthesized_at: Call seconds when synthesis was requested.
        started_at: Call seconds when it began to play, None if it never did.
        heard: Seconds of it that played.
        length: Seconds it lasts.
    """

    id: int
    text: str
    synthesized_at: float
    started_at: float | None
    heard: float
    length: float

    @property
    def complete(self) -> bool:
        """Whether the caller heard it to the end."""
        return self.started_at is not None and self.heard >= self.length - _HEARD_TOLERANCE_S


@dataclass
class CallOutcome:
    """The verdict on one call and the figures behind it.

    Attributes:
        passed: Whether every contract held.
        reasons: One line per broken contract.
        reply_latency_s: The slowest answer among the utterances answered (end of speech to
            first audio of the answer), None if none was answered.
        lost_words: Words the caller said that never reached the LLM.
        end_user_state: ``user_state`` when the scripted call was over.
        unfinished_handles: Speech handles not done by then.
        interruption_timeouts: ``speech not done in time after interruption`` logs.
        hung_up: Whether the app ended the call.
        farewell_heard: Whether the farewell played to the end.
        race_events: Races the agent under test reported (filled by ``ResilientAgent``).
        reply_latencies_s: Per utterance, then per typed message, that expects a reply, its
            latency (None if unanswered).
        talked_over_s: The most protected speech that played over a caller who was already
            speaking when it began or resumed (see :func:`protected_talk_over`).
    """

    passed: bool
    reasons: list[str]
    reply_latency_s: float | None
    lost_words: int
    end_user_state: str
    unfinished_handles: int
    interruption_timeouts: int
    hung_up: bool
    farewell_heard: bool
    race_events: list[dict[str, Any]] = field(default_factory=list)
    reply_latencies_s: list[float | None] = field(default_factory=list)
    talked_over_s: float = 0.0


@dataclass(frozen=True)
class TalkOver:
    """A protected speech that began, or resumed after a pause, while the caller was speaking.

    Attributes:
        utterance: Index of the utterance under way when the speech's audio began or resumed.
        began_at: Call seconds when livekit began to play the speech (``playback_started``), or
            when its audio resumed.
        seconds: Seconds of the speech that played from then until the caller stopped.
        on: ``start`` when its audio began over the caller, ``resume`` when it resumed over them.
    """

    utterance: int
    began_at: float
    seconds: float
    on: Literal["start", "resume"] = "start"


def protected_talk_over(world: CallWorld) -> list[TalkOver]:
    """Every protected segment that began or resumed over a speaking caller, and how much played.

    A segment's audio begins at its ``playback_started`` and resumes after each pause (the
    speaker's ``on_resumed``, recorded in ``CallRecorder.resumes``); it is protected at such an
    instant when the speech livekit was playing disallowed interruptions then. The caller is
    speaking when the instant falls inside an utterance. Per segment and utterance, what counts
    is the audio that actually played (pauses excluded) from the first such protected instant
    until the utterance ended.
    """
    found = []
    for segment in world.audio_out.segments:
        if segment.started_at is None:
            continue
        owner = None
        for start in world.recorder.playouts:
            if start.at <= segment.started_at + _SAME_INSTANT_S:
                owner = start
        starts: list[tuple[float, Literal["start", "resume"]]] = []
        if owner is not None and owner.allow_interruptions is False:
            starts.append((segment.started_at, "start"))
        ended_at = segment.ended_at if segment.ended_at is not None else math.inf
        starts += [
            (resume.at, "resume")
            for resume in world.recorder.resumes
            if segment.started_at <= resume.at <= ended_at + _SAME_INSTANT_S
            and resume.allow_interruptions is False
        ]
        for index, utterance in enumerate(world.scenario.utterances):
            inside = [(at, on) for at, on in starts if utterance.start < at < utterance.end]
            if not inside:
                continue
            at, on = min(inside)
            heard = segment.heard_between(at, utterance.end)
            found.append(TalkOver(index, round(at, 3), round(heard, 3), on))
    return found


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def heard_sentences(world: CallWorld) -> list[HeardSentence]:
    """Every sentence the TTS synthesized, with how much of it the caller heard."""
    played: dict[int, tuple[float, float, float]] = {}
    for segment in world.audio_out.segments:
        if segment.started_at is None:
            continue
        for sentence_id, (offset, heard, length) in segment.sentences.items():
            if heard > 0:
                # a pause before the sentence (livekit's, or a middleware's) delays it
                at = segment.time_at(float(offset))
                began = at if at is not None else segment.started_at + float(offset)
                played[sentence_id] = (began, heard, length)
    t0 = world.t0
    result = []
    for sentence_id, text in world.tts.sentences.items():
        start, heard, length = played.get(sentence_id, (None, 0.0, world.tts.duration_of(text)))
        result.append(
            HeardSentence(
                id=sentence_id,
                text=text,
                synthesized_at=world.tts.synthesized_at[sentence_id] - t0,
                started_at=start,
                heard=heard,
                length=length,
            )
        )
    return result


def _labelled_inputs(scenario: Scenario) -> list[tuple[str, CallerInput]]:
    """Every utterance and typed message, with the label its broken contracts are reported by."""
    labelled: list[tuple[str, CallerInput]] = [
        (f"utterance {number} ({u.start:.1f}-{u.end:.1f}s)", u)
        for number, u in enumerate(scenario.utterances, start=1)
    ]
    labelled += [
        (f"typed message {number} (at {t.at:.1f}s)", t)
        for number, t in enumerate(scenario.typed, start=1)
    ]
    return labelled


def evaluate(world: CallWorld) -> CallOutcome:
    """Judge one finished call against the contracts."""
    scenario = world.scenario
    reasons: list[str] = []
    sentences = heard_sentences(world)
    t0 = world.t0
    requests = [(r.at - t0, r) for r in world.llm.requests]

    # Each sentence belongs to the latest LLM answer, made before it was synthesized, that says it.
    owned: dict[int, list[HeardSentence]] = {}
    for sentence in sentences:
        owner = None
        for index, (at, request) in enumerate(requests):
            if at <= sentence.synthesized_at and sentence.text and sentence.text in request.reply:
                owner = index
        if owner is not None:
            owned.setdefault(owner, []).append(sentence)

    latencies: list[float] = []
    per_utterance: list[float | None] = []
    lost_words = 0
    for label, utterance in _labelled_inputs(scenario):
        seen = [
            (index, at, request)
            for index, (at, request) in enumerate(requests)
            if at >= utterance.start
        ]
        reached: set[str] = set()
        for _, _, request in seen:
            for text in request.user_texts:
                reached |= _words(text)
        missing = [w for w in utterance.words if w.lower().strip(".,?!") not in reached]
        if missing:
            lost_words += len(missing)
            reasons.append(f"{label}: {len(missing)} word(s) never reached the LLM")
        if not utterance.expect_reply:
            continue
        answers = []
        for index, _, request in seen:
            if not (_words(utterance.text) <= {w for t in request.user_texts for w in _words(t)}):
                continue
            spoken = owned.get(index, [])
            if spoken and all(s.complete for s in spoken):
                first = min(s.started_at for s in spoken if s.started_at is not None)
                if first >= utterance.end:
                    answers.append(first - utterance.end)
        if not answers:
            reasons.append(f"{label}: never answered audibly to the end")
            per_utterance.append(None)
            continue
        latency = min(answers)
        latencies.append(latency)
        per_utterance.append(round(latency, 3))
        bound = (
            utterance.reply_within if utterance.reply_within is not None else (scenario.reply_bound)
        )
        if latency > bound:
            reasons.append(f"{label}: answered after {latency:.2f}s (bound {bound:.1f}s)")

    # the same answer to the same conversation, heard twice: one turn was answered twice (a
    # caller who repeats themselves makes a new conversation, whose answer may be the same)
    heard_in_full: dict[tuple[str, tuple[str, ...]], int] = {}
    for owner, spoken in owned.items():
        for sentence in spoken:
            if sentence.complete:
                key = (sentence.text, requests[owner][1].user_texts)
                heard_in_full[key] = heard_in_full.get(key, 0) + 1
    for (text, _), times in heard_in_full.items():
        if times > 1:
            reasons.append(f"answer heard {times} times: {text!r}")

    if world.end_user_state == "speaking":
        reasons.append("user_state stuck at 'speaking'")
    unfinished = len(world.unfinished_handles)
    if unfinished:
        reasons.append(f"{unfinished} speech handle(s) never finished")
    timeouts = world.logs.count(INTERRUPTION_TIMEOUT_LOG)
    if timeouts:
        reasons.append(f"{timeouts} x '{INTERRUPTION_TIMEOUT_LOG}'")

    if world.close_deadlocked:
        reasons.append("the session could not be closed (deadlock)")

    talk_over = protected_talk_over(world)
    tolerance = scenario.talk_over_tolerance
    for over in talk_over:
        if tolerance is not None and over.seconds > tolerance:
            verb = "began" if over.on == "start" else "resumed"
            reasons.append(
                f"protected speech {verb} at {over.began_at:.2f}s over utterance "
                f"{over.utterance + 1} and played {over.seconds:.2f}s over the caller "
                f"(tolerance {tolerance:.1f}s)"
            )

    hung_up = world.job.hung_up_at is not None or world.closed_by_app
    farewell_heard = False
    expected_hang_up = False
    if scenario.farewell is not None:
        # TTS may split the farewell into sentences: it is heard when every part played out
        parts = [s for s in sentences if s.text and s.text in scenario.farewell]
        said = _words(" ".join(s.text for s in parts))
        farewell_heard = bool(parts) and _words(scenario.farewell) <= said
        farewell_heard = farewell_heard and all(s.complete for s in parts)
        if farewell_heard:
            began = min(s.started_at for s in parts if s.started_at is not None)
            spoke_after = any(u.end > began for u in scenario.caller_inputs)
            expected_hang_up = not spoke_after
    if hung_up and not expected_hang_up:
        why = (
            "the farewell was not heard to the end"
            if not farewell_heard
            else ("the caller spoke after the farewell began")
        )
        if scenario.farewell is None:
            why = "no farewell was planned"
        reasons.append(f"call hung up although {why}")
    elif expected_hang_up and not hung_up:
        reasons.append("farewell heard and caller silent, but the call was not ended")

    return CallOutcome(
        passed=not reasons,
        reasons=reasons,
        reply_latency_s=round(max(latencies), 3) if latencies else None,
        lost_words=lost_words,
        end_user_state=world.end_user_state,
        unfinished_handles=unfinished,
        interruption_timeouts=timeouts,
        hung_up=hung_up,
        farewell_heard=farewell_heard,
        race_events=list(world.race_events),
        reply_latencies_s=per_utterance,
        talked_over_s=max((o.seconds for o in talk_over), default=0.0),
    )
