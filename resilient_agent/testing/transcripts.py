"""The real-speech word contract: what reached the LLM matches the reference transcription.

With a recognizer that mishears, each utterance's ``text`` is its reference transcription (see
:class:`~resilient_agent.testing.real_speech.RealSpeech`). What reached the LLM is the user
text of each LLM request; it is aligned word by word (Levenshtein) with the references of every
utterance in order, and each utterance's word error rate counts the substitutions and deletions
of its words and the extra words just before them; an utterance is judged by the latest request
made after it began that carried any of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .contracts import CallEvidence
    from .runner import CallWorld

__all__ = [
    "UtteranceTranscript",
    "transcripts_match_reference",
    "utterance_transcripts",
]

_WORD = re.compile(r"[\w']+")
# after an utterance ends, how long the live STT may still be finishing its words
_LIVE_GRACE_S = 1.5


def _tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


@dataclass(frozen=True)
class UtteranceTranscript:
    """One utterance of a real-speech call, as said, heard live, given to the LLM, and expected.

    Attributes:
        number: 1-based, in script order.
        said: What its recording says (the script).
        reference: What the recognizer transcribes from the same audio when nothing is withheld.
        live: The final transcripts livekit's own STT stream produced while it was said (and
            up to 1.5 s after), joined.
        reached_llm: The words of the LLM's context aligned with it (recovered words included).
        word_error_rate: Between ``reference`` and ``reached_llm``.
    """

    number: int
    said: str
    reference: str
    live: str
    reached_llm: str
    word_error_rate: float

    def as_json(self) -> dict[str, object]:
        """The record a lab result's JSON carries."""
        return {
            "utterance": self.number,
            "said": self.said,
            "live": self.live,
            "reached_llm": self.reached_llm,
            "reference": self.reference,
            "word_error_rate": round(self.word_error_rate, 3),
        }


def _align(reference: list[str], hypothesis: list[str]) -> list[tuple[int | None, int | None]]:
    """Pairs (reference index, hypothesis index) of a minimal edit alignment, in order."""
    rows, cols = len(reference) + 1, len(hypothesis) + 1
    cost = [[0] * cols for _ in range(rows)]
    for i in range(rows):
        cost[i][0] = i
    for j in range(cols):
        cost[0][j] = j
    for i in range(1, rows):
        for j in range(1, cols):
            same = reference[i - 1] == hypothesis[j - 1]
            cost[i][j] = min(
                cost[i - 1][j - 1] + (0 if same else 1),
                cost[i - 1][j] + 1,
                cost[i][j - 1] + 1,
            )
    pairs: list[tuple[int | None, int | None]] = []
    i, j = rows - 1, cols - 1
    while i > 0 or j > 0:
        same = i > 0 and j > 0 and reference[i - 1] == hypothesis[j - 1]
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (0 if same else 1):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            pairs.append((i - 1, None))
            i -= 1
        else:
            pairs.append((None, j - 1))
            j -= 1
    pairs.reverse()
    return pairs


def _judge(
    reference: list[str], owner: list[int], hypothesis: list[str], count: int
) -> tuple[list[int], list[list[str]]]:
    """Per utterance, its errors and the hypothesis words aligned with it.

    Words the hypothesis has beyond the references belong to the utterance whose words come
    next (recovered words are merged before the turn that carries them), or to the last one.
    """
    errors = [0] * count
    reached: list[list[str]] = [[] for _ in range(count)]
    pairs = _align(reference, hypothesis)
    following = [0] * len(pairs)
    upcoming = owner[-1] if owner else 0
    for position in range(len(pairs) - 1, -1, -1):
        ref_index = pairs[position][0]
        if ref_index is not None:
            upcoming = owner[ref_index]
        following[position] = upcoming
    for position, (ref_index, hyp_index) in enumerate(pairs):
        utterance = owner[ref_index] if ref_index is not None else following[position]
        if ref_index is None or hyp_index is None or reference[ref_index] != hypothesis[hyp_index]:
            errors[utterance] += 1
        if hyp_index is not None:
            reached[utterance].append(hypothesis[hyp_index])
    return errors, reached


def _live(world: CallWorld, index: int) -> str:
    utterances = world.scenario.utterances
    start = utterances[index].start
    until = utterances[index].end + _LIVE_GRACE_S
    if index + 1 < len(utterances):
        until = min(until, utterances[index + 1].start)
    return " ".join(
        text for at, text, final in world.recorder.transcripts if final and start <= at <= until
    )


def utterance_transcripts(world: CallWorld) -> list[UtteranceTranscript]:
    """Per utterance of a call: said, heard live, reached the LLM, reference, word error rate.

    Every LLM request's user words are aligned with the references of all utterances; an
    utterance is judged by the latest request, made after it began, that carried any of its
    words: what the LLM last saw of it (a handoff may start a new context without it). With
    several references (real speech), the closest one counts.
    """
    real = world.scenario.real_speech
    utterances = world.scenario.utterances
    texts = [u.text for u in utterances]
    best: list[tuple[float, str, str]] = [(1.0, "", text) for text in texts]
    for index, utterance in enumerate(utterances):
        candidates = real.candidates(index, utterance.text) if real is not None else (texts[index],)
        scores = []
        for candidate in candidates:
            scores.append((*_latest_carrying(world, texts, index, candidate), candidate))
        best[index] = min(scores, key=lambda score: score[0])
    said = real.said if real is not None else tuple(texts)
    return [
        UtteranceTranscript(
            number=index + 1,
            said=said[index],
            reference=best[index][2],
            live=_live(world, index),
            reached_llm=best[index][1],
            word_error_rate=best[index][0],
        )
        for index in range(len(utterances))
    ]


def _latest_carrying(
    world: CallWorld, texts: list[str], index: int, candidate: str
) -> tuple[float, str]:
    """Utterance ``index``'s word error rate against ``candidate``, and its words, in the LLM.

    Judged in the latest request made after it began that carried any of its words; (1.0, "")
    if none did.
    """
    reference: list[str] = []
    owner: list[int] = []
    for position, text in enumerate(texts):
        words = _tokens(candidate if position == index else text)
        reference += words
        owner += [position] * len(words)
    expected = _tokens(candidate)
    result = (1.0, "")
    start = world.scenario.utterances[index].start
    for request in world.llm.requests:
        if request.at - world.t0 < start:
            continue
        hypothesis = [w for text in request.user_texts for w in _tokens(text)]
        errors, reached = _judge(reference, owner, hypothesis, len(texts))
        if set(reached[index]) & set(expected):
            result = (errors[index] / max(1, len(expected)), " ".join(reached[index]))
    return result


def transcripts_match_reference(evidence: CallEvidence) -> list[str]:
    """Real speech: what reached the LLM is within the WER tolerance of each reference.

    Scripted calls are judged word by word instead (:func:`every_word_reaches_the_llm`).
    """
    real = evidence.world.scenario.real_speech
    if real is None:
        return []
    tolerance = real.word_error_tolerance
    return [
        f"utterance {t.number}: the LLM got {t.reached_llm!r} for {t.reference!r} "
        f"(word error rate {t.word_error_rate:.2f} > {tolerance:.2f})"
        for t in utterance_transcripts(evidence.world)
        if t.word_error_rate > tolerance
    ]
