"""The contracts every lab call is judged by, computed from what the caller experienced.

* every utterance or typed message that expects a reply is answered audibly and completely,
  starting within the scenario's ``reply_bound`` after the caller stopped (or the message
  arrived); on a stack whose STT transcribes an utterance only after the VAD's end of speech,
  an utterance's bound counts from when its transcript could exist
  (``CallWorld.transcript_lag_s`` later);
* every word the caller said or typed reaches the LLM; with real speech (a recognizer that
  mishears), what reached the LLM for each utterance is within a word error rate of what the
  same recognizer transcribes from the same audio when nothing is withheld (its reference);
* ``user_state`` is not stuck at ``speaking`` when the call is over;
* no speech handle is left unfinished;
* livekit never force-cancels a speech (``speech not done in time after interruption``);
* no LLM answer is heard twice to the end (a turn answered twice);
* the call ends if and only if the farewell was heard to the end and the caller said nothing
  after it began;
* a protected speech never starts over the caller: of a speech that disallowed interruptions
  when its audio began, or when it resumed after a pause, at most
  ``Scenario.talk_over_tolerance`` seconds play while an utterance that was already under way
  goes on;
* every line of ``Scenario.protected_lines`` (the app asked for it uninterrupted) that was
  spoken is heard to the end;
* the function tools of ``Scenario.tools_complete`` each run to completion, in that order: what
  the caller said reached the code that acts on it (an email read back and confirmed, not saved
  unconfirmed).
* every output of a tool named in ``Scenario.tool_outputs`` is the one expected there (the lab:
  an own tool's mock answers what it returns for the arguments the LLM sent).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .recorder import INTERRUPTION_TIMEOUT_LOG
from .talk_over import TalkOver, protected_talk_over
from .transcripts import transcripts_match_reference, utterance_transcripts

if TYPE_CHECKING:
    from .runner import CallWorld
    from .scenario import CallerInput, Scenario

__all__ = [
    "CONTRACTS",
    "CallEvidence",
    "CallOutcome",
    "Contract",
    "HeardSentence",
    "InputVerdict",
    "TalkOver",
    "WordVerdict",
    "evaluate",
    "heard_sentences",
    "protected_talk_over",
]

# A sentence counts as heard to the end when no more than one frame of it is missing.
_HEARD_TOLERANCE_S = 0.015
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


@dataclass(frozen=True)
class WordVerdict:
    """One word the caller said or typed, and whether it reached the LLM.

    Attributes:
        text: The word as scripted.
        reached_llm_at: Call seconds of the first LLM request, made after its utterance began
            (or its message arrived), whose context carried it; None if none did: the word is
            lost.
    """

    text: str
    reached_llm_at: float | None

    @property
    def lost(self) -> bool:
        """Whether the word never reached the LLM."""
        return self.reached_llm_at is None


@dataclass(frozen=True)
class InputVerdict:
    """The contracts' verdict on one utterance or typed message: the one source of it.

    The lab's timeline and report read these rather than judging the call again.

    Attributes:
        kind: ``utterance`` or ``typed``.
        number: 1-based, in script order within its kind.
        label: How broken contracts name it (``utterance 2 (3.0-4.5s)``).
        words: Each word and whether it reached the LLM.
        reply_latency_s: End of speech (or arrival) to the first audio of its answer; None
            if it was not answered audibly to the end, or expects no reply.
    """

    kind: Literal["utterance", "typed"]
    number: int
    label: str
    words: tuple[WordVerdict, ...]
    reply_latency_s: float | None = None

    @property
    def lost_words(self) -> int:
        """Words that never reached the LLM."""
        return sum(1 for w in self.words if w.lost)


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
        inputs: Per utterance, then per typed message, the verdict on its words and answer.
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
    inputs: list[InputVerdict] = field(default_factory=list)


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


def _labelled_inputs(scenario: Scenario) -> list[tuple[InputVerdict, CallerInput]]:
    """Every utterance and typed message, with an empty verdict carrying its label."""
    labelled: list[tuple[InputVerdict, CallerInput]] = [
        (InputVerdict("utterance", n, f"utterance {n} ({u.start:.1f}-{u.end:.1f}s)", ()), u)
        for n, u in enumerate(scenario.utterances, start=1)
    ]
    labelled += [
        (InputVerdict("typed", n, f"typed message {n} (at {t.at:.1f}s)", ()), t)
        for n, t in enumerate(scenario.typed, start=1)
    ]
    return labelled


@dataclass
class CallEvidence:
    """What one finished call left behind, gathered once for every contract to read.

    Attributes:
        world: The call.
        sentences: Every synthesized sentence, as heard.
        requests: Every LLM request with its call seconds.
        owned: Per index into ``requests``, the sentences of its answer: each sentence belongs
            to the latest request, made before it was synthesized, whose reply says it.
        inputs: Per utterance, then per typed message, its verdict (filled by the word and
            reply contracts) and the input itself.
        talk_over: Protected speech that began or resumed over a speaking caller.
    """

    world: CallWorld
    sentences: list[HeardSentence]
    requests: list[tuple[float, Any]]
    owned: dict[int, list[HeardSentence]]
    inputs: list[tuple[InputVerdict, CallerInput]]
    talk_over: list[TalkOver]


def gather_evidence(world: CallWorld) -> CallEvidence:
    """The evidence every contract reads, with each input's words and answer judged."""
    sentences = heard_sentences(world)
    requests = [(r.at - world.t0, r) for r in world.llm.requests]
    owned: dict[int, list[HeardSentence]] = {}
    for sentence in sentences:
        owner = None
        for index, (at, request) in enumerate(requests):
            if at <= sentence.synthesized_at and sentence.text and sentence.text in request.reply:
                owner = index
        if owner is not None:
            owned.setdefault(owner, []).append(sentence)
    evidence = CallEvidence(world, sentences, requests, owned, _labelled_inputs(world.scenario), [])
    evidence.inputs = [
        (
            dataclasses.replace(
                verdict,
                words=_word_verdicts(evidence, caller_input),
                reply_latency_s=_reply_latency(evidence, caller_input),
            ),
            caller_input,
        )
        for verdict, caller_input in evidence.inputs
    ]
    evidence.talk_over = protected_talk_over(world)
    return evidence


def _word_verdicts(evidence: CallEvidence, said: CallerInput) -> tuple[WordVerdict, ...]:
    """Each word of ``said`` with the first request made after it began that carried it."""
    seen = [
        (at, {w for t in request.user_texts for w in _words(t)})
        for at, request in evidence.requests
        if at >= said.start
    ]
    verdicts = []
    for word in _expected_words(evidence, said):
        # tokenised as the contexts are: a typed "jane@example.com" is three tokens there
        key = _words(word) or {word.lower()}
        reached = next((at for at, words in seen if key <= words), None)
        verdicts.append(WordVerdict(word, None if reached is None else round(reached, 3)))
    return tuple(verdicts)


def _expected_words(evidence: CallEvidence, said: CallerInput) -> tuple[str, ...]:
    """The words ``said`` should bring to the LLM: its text, or its closest reference."""
    scenario = evidence.world.scenario
    if scenario.real_speech is None or said not in scenario.utterances:
        return said.words
    index = scenario.utterances.index(said)
    return tuple(utterance_transcripts(evidence.world)[index].reference.split())


def _reply_latency(evidence: CallEvidence, said: CallerInput) -> float | None:
    """End of ``said`` to the first audio of an answer heard to the end, None if none was.

    An answer is a request made after ``said`` began whose context holds all its words, and
    whose sentences all played to the end, starting after the caller stopped.
    """
    if not said.expect_reply:
        return None
    answers = []
    for index, (at, request) in enumerate(evidence.requests):
        if at < said.start:
            continue
        if not _mentions(said, {w for t in request.user_texts for w in _words(t)}, evidence):
            continue
        spoken = _last_said(evidence.owned.get(index, []))
        if spoken and all(s.complete for s in spoken):
            first = min(s.started_at for s in spoken if s.started_at is not None)
            if first >= said.end:
                answers.append(first - said.end)
    fallback = evidence.world.scenario.provider_faults.fallback_line
    if fallback is not None:
        # the fallback line heard to the end after the caller stopped answers them (a later
        # request whose context still holds the words answers them later, if at all)
        answers += [
            s.started_at - said.end
            for s in evidence.sentences
            if s.text
            and s.text in fallback
            and s.complete
            and s.started_at is not None
            and s.started_at >= said.end
        ]
    return round(min(answers), 3) if answers else None


def _last_said(spoken: list[HeardSentence]) -> list[HeardSentence]:
    """Each sentence of an answer as it was said last.

    A reply said again (the caller heard nothing of it the first time) is judged by its second
    saying.
    """
    last: dict[str, HeardSentence] = {}
    for sentence in spoken:
        last[sentence.text] = sentence
    return list(last.values())


def _partial_answer(evidence: CallEvidence, said: CallerInput) -> tuple[float, list[str]] | None:
    """The first reply heard in full that was built from only part of ``said``, if any.

    A request made after ``said`` began whose context carried some of its words but not all
    (a partial transcript), and whose sentences all played to the end: when it began to play,
    and the words of ``said`` it carried, in order. At least one carried word must be said by
    no other input, so that the context holds part of ``said`` and not just words it shares
    with another utterance.
    """
    expected = _expected_words(evidence, said)
    elsewhere = {w for _, other in evidence.inputs if other is not said for w in _words(other.text)}
    for index, (at, request) in enumerate(evidence.requests):
        if at < said.start:
            continue
        words = {w for t in request.user_texts for w in _words(t)}
        carried = [w for w in expected if (_words(w) or {w.lower()}) <= words]
        if len(carried) == len(expected) or not any(_words(w) - elsewhere for w in carried):
            continue
        spoken = evidence.owned.get(index, [])
        if spoken and all(s.complete for s in spoken):
            return min(s.started_at for s in spoken if s.started_at is not None), carried
    return None


def _mentions(said: CallerInput, words: set[str], evidence: CallEvidence) -> bool:
    """Whether a context with ``words`` carries ``said`` (real speech: within the tolerance)."""
    scenario = evidence.world.scenario
    real = scenario.real_speech
    if real is None or said not in scenario.utterances:
        return _words(said.text) <= words
    index = scenario.utterances.index(said)
    for reference in real.candidates(index, said.text):
        expected = _words(reference)
        if len(expected - words) <= real.word_error_tolerance * len(expected):
            return True
    return False


Contract = Callable[[CallEvidence], list[str]]
"""A contract: the evidence of one call in, one line per breach out (empty when it held)."""


def every_word_reaches_the_llm(evidence: CallEvidence) -> list[str]:
    """Every word the caller said or typed reaches the LLM (real speech: see the next one)."""
    if evidence.world.scenario.real_speech is not None:
        return []
    return [
        f"{verdict.label}: {verdict.lost_words} word(s) never reached the LLM"
        for verdict, _ in evidence.inputs
        if verdict.lost_words
    ]


def every_input_answered_in_time(evidence: CallEvidence) -> list[str]:
    """Every input that expects a reply is answered audibly to the end, within its bound."""
    reasons = []
    for verdict, said in evidence.inputs:
        if not said.expect_reply:
            continue
        latency = verdict.reply_latency_s
        if latency is None:
            reason = f"{verdict.label}: never answered audibly to the end"
            partial = _partial_answer(evidence, said)
            if partial is not None:
                at, carried = partial
                reason += (
                    f": the reply that played in full (at {at:.1f}s) answered only "
                    f"{' '.join(carried)!r} of it ({len(carried)} of "
                    f"{len(_expected_words(evidence, said))} words)"
                )
            reasons.append(reason)
            continue
        bound = said.reply_within
        if bound is None:
            bound = evidence.world.scenario.reply_bound
        # a spoken input's bound counts from when its transcript could exist (typed text is in)
        lag = evidence.world.transcript_lag_s if verdict.kind == "utterance" else 0.0
        if latency > bound + lag:
            why = f"bound {bound:.1f}s"
            if lag:
                why += f" + {lag:.2f}s for the STT's transcription after the end of speech"
            reasons.append(f"{verdict.label}: answered after {latency:.2f}s ({why})")
    return reasons


def no_answer_heard_twice(evidence: CallEvidence) -> list[str]:
    """No LLM answer is heard twice to the end for the same conversation.

    A caller who repeats themselves makes a new conversation, whose answer may be the same.
    """
    heard_in_full: dict[tuple[str, tuple[str, ...]], int] = {}
    for owner, spoken in evidence.owned.items():
        for sentence in spoken:
            if sentence.complete:
                key = (sentence.text, evidence.requests[owner][1].user_texts)
                heard_in_full[key] = heard_in_full.get(key, 0) + 1
    return [
        f"answer heard {times} times: {text!r}"
        for (text, _), times in heard_in_full.items()
        if times > 1
    ]


def user_state_not_stuck(evidence: CallEvidence) -> list[str]:
    """``user_state`` is not stuck at ``speaking`` when the call is over."""
    if evidence.world.end_user_state == "speaking":
        return ["user_state stuck at 'speaking'"]
    return []


def every_speech_finishes(evidence: CallEvidence) -> list[str]:
    """No speech handle is left unfinished."""
    unfinished = len(evidence.world.unfinished_handles)
    return [f"{unfinished} speech handle(s) never finished"] if unfinished else []


def no_forced_cancel(evidence: CallEvidence) -> list[str]:
    """No speech is force-cancelled by livekit after an interruption."""
    timeouts = evidence.world.logs.count(INTERRUPTION_TIMEOUT_LOG)
    return [f"{timeouts} x '{INTERRUPTION_TIMEOUT_LOG}'"] if timeouts else []


def session_closes(evidence: CallEvidence) -> list[str]:
    """Closing the session finishes."""
    if evidence.world.close_deadlocked:
        return ["the session could not be closed (deadlock)"]
    return []


def protected_speech_waits_for_caller(evidence: CallEvidence) -> list[str]:
    """A protected speech plays at most ``talk_over_tolerance`` over a caller already speaking."""
    tolerance = evidence.world.scenario.talk_over_tolerance
    if tolerance is None:
        return []
    return [
        f"protected speech {'began' if over.on == 'start' else 'resumed'} at "
        f"{over.began_at:.2f}s over utterance {over.utterance + 1} and played "
        f"{over.seconds:.2f}s over the caller (tolerance {tolerance:.1f}s)"
        for over in evidence.talk_over
        if over.seconds > tolerance
    ]


def protected_lines_play_whole(evidence: CallEvidence) -> list[str]:
    """Each line of ``Scenario.protected_lines`` that began to play was heard to the end."""
    expected = evidence.world.scenario.protected_lines
    if not expected:
        return []
    return [
        f"the protected line {sentence.text!r} was cut after {sentence.heard:.2f}s of "
        f"{sentence.length:.2f}s"
        for sentence in heard_sentences(evidence.world)
        if sentence.text in expected and sentence.started_at is not None and not sentence.complete
    ]


def tools_complete_in_order(evidence: CallEvidence) -> list[str]:
    """Each tool of ``Scenario.tools_complete`` ran to completion, each after the one before.

    A run counts when livekit reported it ``done`` (not an error, not cancelled); the n-th
    tool's first such end at or after the (n-1)-th's is the one taken, so other tools, and
    other runs of the same tools, may come between.
    """
    expected = evidence.world.scenario.tools_complete
    if not expected:
        return []
    done = sorted(
        (run.ended_at, run.name)
        for run in evidence.world.recorder.tool_runs
        if run.status == "done" and run.ended_at is not None
    )
    after = float("-inf")
    previous: str | None = None
    for name in expected:
        ended = next((at for at, ran in done if ran == name and at >= after), None)
        if ended is None:
            order = " -> ".join(expected)
            if previous is not None and any(ran == name for _, ran in done):
                return [f"tool {name} completed only before {previous} (expected {order})"]
            return [f"tool {name} never completed (expected {order})"]
        after, previous = ended, name
    return []


def tool_outputs_as_expected(evidence: CallEvidence) -> list[str]:
    """Every output of a tool named in ``Scenario.tool_outputs`` is the one expected there.

    The lab expects an own tool's mock to answer what it returns when called directly with the
    arguments the scripted LLM sends: a mock handed the wrong values (livekit's ``RunContext``
    as an argument) answers something else.
    """
    expected = evidence.world.scenario.tool_outputs
    return [
        f"tool {name} gave the LLM {output!r}"
        + (" (an error)" if is_error else "")
        + f", expected {expected[name]!r}"
        for _, name, output, is_error in evidence.world.recorder.tool_outputs
        if name in expected and (output != expected[name] or is_error)
    ]


def farewell_heard(evidence: CallEvidence) -> tuple[bool, bool]:
    """Whether the farewell played to the end, and whether the call should then end.

    TTS may split the farewell into sentences: it is heard when every part played out; the
    call should end when it was heard and the caller said nothing after it began.
    """
    farewell = evidence.world.scenario.farewell
    if farewell is None:
        return False, False
    parts = _last_farewell(evidence, farewell)
    said = _words(" ".join(s.text for s in parts))
    heard = bool(parts) and _words(farewell) <= said and all(s.complete for s in parts)
    if not heard:
        return False, False
    began = min(s.started_at for s in parts if s.started_at is not None)
    spoke_after = any(u.end > began for u in evidence.world.scenario.caller_inputs)
    return True, not spoke_after


_CLOSE_SLACK_S = 0.5
"""A close may take this long beyond livekit's own transcript wait (its teardown steps)."""


def hung_up(world: CallWorld) -> bool:
    """Whether the app ended the call.

    A job shut down after the scripted call was over (the lab's own close) or after the caller
    left (livekit's close) was not ended by the app.
    """
    at = world.job.hung_up_at
    # strictly before: the lab's own close begins at ended_at, and on a session whose close need
    # not wait for an STT (a realtime model) livekit's EndCallTool shuts the job down at that
    # same instant of the virtual clock
    by_app = at is not None and at < world.ended_at
    if at is not None and world.caller_left_at is not None and at >= world.caller_left_at:
        by_app = False
    return by_app or world.closed_by_app


def _last_farewell(evidence: CallEvidence, farewell: str) -> list[HeardSentence]:
    """The sentences of the last time the farewell was said (a vetoed hang-up says it again).

    A farewell is a run of synthesized sentences that are parts of it; another sentence, or a
    part once the run already holds every farewell word, begins the next run.
    """
    runs: list[list[HeardSentence]] = []
    current: list[HeardSentence] = []
    for sentence in evidence.sentences:
        is_part = bool(sentence.text) and sentence.text in farewell
        whole = _words(farewell) <= _words(" ".join(s.text for s in current))
        if current and (not is_part or whole):
            runs.append(current)
            current = []
        if is_part:
            current.append(sentence)
    if current:
        runs.append(current)
    return runs[-1] if runs else []


def _farewell_end(evidence: CallEvidence) -> float | None:
    farewell = evidence.world.scenario.farewell or ""
    parts = [s for s in _last_farewell(evidence, farewell) if s.complete]
    ends = [s.started_at + s.length for s in parts if s.started_at is not None]
    return max(ends) if ends else None


def hang_up_completes(evidence: CallEvidence) -> list[str]:
    """A heard farewell ends the call whole, in time: session closed, job shut down, room gone.

    The room is deleted once at most: each ``delete_room`` is a request to livekit's server.
    """
    job = evidence.world.job
    deleted_again = (
        [f"the room was deleted {len(job.room_deletions)} times"]
        if len(job.room_deletions) > 1
        else []
    )
    within = evidence.world.scenario.hang_up_within
    expected = farewell_heard(evidence)[1]
    end = _farewell_end(evidence)
    if within is None or not expected or end is None:
        return deleted_again
    steps = {
        "the session closed": job.session_closed_at,
        "the job shut down": job.shutdowns[0][0] if job.shutdowns else None,
        "the room was deleted": job.room_deletions[0] if job.room_deletions else None,
    }
    reasons = []
    for step, at in steps.items():
        if at is None:
            reasons.append(f"farewell heard, but never: {step}")
        elif at - end > within:
            reasons.append(f"{step} {at - end:.2f}s after the farewell (bound {within:.1f}s)")
    return reasons + deleted_again


def caller_leaving_closes_at_once(evidence: CallEvidence) -> list[str]:
    """When the caller leaves, livekit's close goes through, held by nobody."""
    world = evidence.world
    left = world.caller_left_at
    if left is None:
        return []
    # livekit's own close waits this long for the caller's last transcript
    own = float(world.scenario.session_options.get("session_close_transcript_timeout", 2.0))
    closed = world.job.session_closed_at
    if closed is None:
        return [f"the caller left at {left:.2f}s and the session never closed"]
    if closed - left > own + _CLOSE_SLACK_S:
        return [f"the session closed {closed - left:.2f}s after the caller left"]
    return []


def hang_up_follows_farewell(evidence: CallEvidence) -> list[str]:
    """The call ends if and only if the farewell was heard and the caller was silent after it.

    With ``Scenario.hang_up_without_farewell_within``, a farewell that never began to play
    must still end the call, within that bound of the caller's last word.
    """
    never_came = _farewell_never_came(evidence)
    if never_came is not None:
        return never_came
    heard, expected = farewell_heard(evidence)
    ended = hung_up(evidence.world)
    if ended and not expected:
        if evidence.world.scenario.farewell is None:
            why = "no farewell was planned"
        elif not heard:
            why = "the farewell was not heard to the end"
        else:
            why = "the caller spoke after the farewell began"
        return [f"call hung up although {why}"]
    if expected and not ended:
        return ["farewell heard and caller silent, but the call was not ended"]
    return []


def _farewell_never_came(evidence: CallEvidence) -> list[str] | None:
    """The verdict on a farewell that never began, when the scenario bounds that hang-up."""
    world = evidence.world
    scenario = world.scenario
    bound = scenario.hang_up_without_farewell_within
    if bound is None or scenario.farewell is None:
        return None
    if any(
        s.text == scenario.farewell and s.started_at is not None for s in heard_sentences(world)
    ):
        return None
    last_word = max((u.end for u in scenario.utterances), default=0.0)
    at = world.job.hung_up_at
    if not hung_up(world) or at is None:
        return [f"the farewell never came and the call was not ended (bound {bound:.1f}s)"]
    if at - last_word > bound:
        return [
            f"the farewell never came and the call ended {at - last_word:.2f}s after the "
            f"caller's last word (bound {bound:.1f}s)"
        ]
    return []


def every_inference_is_well_formed(evidence: CallEvidence) -> list[str]:
    """No request reaches the LLM with a context a provider would reject (the fake rejects it)."""
    world = evidence.world
    return [
        f"the LLM got a malformed context at {request.at - world.t0:.2f}s ({request.malformed})"
        for request in world.llm.requests
        if request.malformed is not None
    ]


def own_plugins_stay_in_the_lab(evidence: CallEvidence) -> list[str]:
    """No plugin of an agent started later in the call was left to reach its real provider.

    The lab could not redirect it (or, without a stack, it was a provider plugin): it was kept
    from its provider, the session's own played its part, and the call tells which.
    """
    return list(evidence.world.later_agents.refused)


CONTRACTS: tuple[Contract, ...] = (
    every_inference_is_well_formed,
    every_word_reaches_the_llm,
    transcripts_match_reference,
    every_input_answered_in_time,
    no_answer_heard_twice,
    user_state_not_stuck,
    every_speech_finishes,
    no_forced_cancel,
    session_closes,
    protected_speech_waits_for_caller,
    protected_lines_play_whole,
    tools_complete_in_order,
    tool_outputs_as_expected,
    hang_up_follows_farewell,
    hang_up_completes,
    caller_leaving_closes_at_once,
    own_plugins_stay_in_the_lab,
)
"""Every contract a lab call is judged by, in the order their breaches are reported."""


def evaluate(world: CallWorld) -> CallOutcome:
    """Judge one finished call against every contract in :data:`CONTRACTS`."""
    evidence = gather_evidence(world)
    reasons = [reason for contract in CONTRACTS for reason in contract(evidence)]
    verdicts = [verdict for verdict, _ in evidence.inputs]
    latencies = [v.reply_latency_s for v in verdicts if v.reply_latency_s is not None]
    return CallOutcome(
        passed=not reasons,
        reasons=reasons,
        reply_latency_s=max(latencies) if latencies else None,
        lost_words=sum(v.lost_words for v in verdicts),
        end_user_state=world.end_user_state,
        unfinished_handles=len(world.unfinished_handles),
        interruption_timeouts=world.logs.count(INTERRUPTION_TIMEOUT_LOG),
        hung_up=hung_up(world),
        farewell_heard=farewell_heard(evidence)[0],
        race_events=list(world.race_events),
        reply_latencies_s=[v.reply_latency_s for v, said in evidence.inputs if said.expect_reply],
        talked_over_s=max((o.seconds for o in evidence.talk_over), default=0.0),
        inputs=verdicts,
    )
