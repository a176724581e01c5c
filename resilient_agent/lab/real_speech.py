"""The catalog with real speech (``resilient-agent lab --speech real``).

Each race that makes sense with real audio becomes a real-speech variant: the caller's words are
an espeak-ng recording starting where the scripted utterance starts, livekit's embedded Silero
VAD hears them, PocketSphinx transcribes them, and the agent speaks with an espeak-ng voice. Each
utterance's text becomes its reference transcription (see
:mod:`resilient_agent.testing.real_speech`). A race is left out, with the reason, when real
audio cannot reproduce it: a scripted fault of the VAD, synthetic noise, a typed message, or a
recognizer that does not hear the word the scripted LLM answers to.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..testing import Scenario, Utterance
from ..testing.audio import SAMPLE_RATE
from ..testing.real_speech import CALLER_VOICE, RealSpeech, Voice, caller_recording
from ..testing.speech import load_wav
from .catalog import CATALOG

__all__ = [
    "LeftOut",
    "RealSpeechUnavailable",
    "real_speech_variants",
    "with_real_speech",
]

# The fastest a recording may be spoken to keep its scripted window (espeak-ng's default is 150).
_FIT_WORDS_PER_MINUTE = 200
# The fastest a recording may be spoken to end before the next utterance.
_MAX_WORDS_PER_MINUTE = 240
# A recording must end this long before the next utterance starts.
_GAP_S = 0.2


@dataclass(frozen=True)
class LeftOut:
    """A scenario that does not run with real speech.

    Attributes:
        scenario: Its name.
        why: The reason, in one sentence.
    """

    scenario: str
    why: str


def _phrases() -> tuple[str, ...]:
    """The recognizer's domain: every sentence a caller says in the catalog."""
    return tuple(sorted({u.text for s in CATALOG for u in s.utterances}))


def _not_with_real_audio(scenario: Scenario) -> str | None:
    if scenario.typed:
        return "a typed chat message, not speech"
    if scenario.vad_fault.mode != "healthy":
        return (
            f"a scripted VAD fault ({scenario.vad_fault.mode}): real speech is heard by livekit's "
            "embedded Silero VAD, which cannot be made to fail on cue"
        )
    if scenario.noise:
        return "synthetic noise: Silero does not take it for speech, so the stall never starts"
    return None


def _recorded(utterance: Utterance, room: float) -> tuple[Utterance, str] | str:
    """The utterance said by the caller's voice, fitted before ``room``; or why it cannot be.

    A recording keeps the scripted timing where the caller can say it a little faster (up to
    ``_FIT_WORDS_PER_MINUTE``): race windows were chosen for the scripted length. Otherwise it
    runs at its natural length, sped up only as far as needed to end before ``room``.
    """
    window = utterance.end - utterance.start
    natural = _length(utterance.text, CALLER_VOICE)
    rate = CALLER_VOICE.words_per_minute
    if natural > window:
        fitted = math.ceil(rate * natural / window)
        if fitted <= _FIT_WORDS_PER_MINUTE:
            rate = fitted
        elif utterance.start + natural > room:
            rate = math.ceil(rate * natural / (room - utterance.start))
            if rate > _MAX_WORDS_PER_MINUTE:
                return f"{utterance.text!r} cannot be said before the next utterance"
    voice = Voice(CALLER_VOICE.name, rate)
    path = caller_recording(utterance.text, voice)
    end = utterance.start + _length(utterance.text, voice)
    return dataclasses.replace(utterance, end=end, audio=str(path)), utterance.text


def _length(text: str, voice: Voice) -> float:
    return len(load_wav(caller_recording(text, voice))) / SAMPLE_RATE


def real_speech_variant(scenario: Scenario) -> Scenario | LeftOut:
    """The real-speech variant of ``scenario``, or why it is left out."""
    why = _not_with_real_audio(scenario)
    if why is not None:
        return LeftOut(scenario.name, why)
    real = RealSpeech(phrases=_phrases(), said=tuple(u.text for u in scenario.utterances))
    utterances: list[Utterance] = []
    alternatives: list[tuple[str, ...]] = []
    ordered = list(scenario.utterances)
    for index, utterance in enumerate(ordered):
        # the last one may run long: the call is then extended by as much
        room = ordered[index + 1].start - _GAP_S if index + 1 < len(ordered) else math.inf
        recorded = _recorded(utterance, room)
        if isinstance(recorded, str):
            return LeftOut(scenario.name, recorded)
        moved, said = recorded
        assert moved.audio is not None
        references = real.references(load_wav(Path(moved.audio)))
        reference = references[0]
        if not all(references):
            return LeftOut(scenario.name, f"the recognizer hears nothing in {said!r}")
        for rule in scenario.llm:
            keyword = rule.when_user_says
            if not keyword or keyword.lower() not in said.lower():
                continue
            for heard in references:
                if keyword not in heard:
                    return LeftOut(
                        scenario.name,
                        f"the recognizer hears {said!r} as {heard!r}: the LLM's rule for "
                        f"{keyword!r} would not answer it",
                    )
        alternatives.append(tuple(dict.fromkeys(r for r in references if r != reference)))
        utterances.append(dataclasses.replace(moved, text=reference))
    overrun = max((u.end - s.end for u, s in zip(utterances, ordered, strict=True)), default=0.0)
    return dataclasses.replace(
        scenario,
        utterances=tuple(utterances),
        vad="silero",
        real_speech=dataclasses.replace(real, alternatives=tuple(alternatives)),
        duration=scenario.duration + max(0.0, overrun),
    )


def real_speech_variants(
    chosen: Sequence[Scenario],
) -> tuple[list[Scenario], list[LeftOut]]:
    """The real-speech variants of ``chosen``, and the ones left out with their reasons."""
    variants: list[Scenario] = []
    left_out: list[LeftOut] = []
    for scenario in chosen:
        result = real_speech_variant(scenario)
        if isinstance(result, LeftOut):
            left_out.append(result)
        else:
            variants.append(result)
    return variants, left_out


class RealSpeechUnavailable(RuntimeError):
    """espeak-ng or pocketsphinx is missing; the message says how to install it."""


def with_real_speech(chosen: Sequence[Scenario], out: TextIO) -> list[Scenario]:
    """The real-speech variants of ``chosen``; one ``LEFT OUT`` line on ``out`` per race left out.

    Raises:
        RealSpeechUnavailable: espeak-ng or pocketsphinx is missing, or nothing can run.
    """
    started = time.perf_counter()
    try:
        variants, left_out = real_speech_variants(chosen)
    except (ImportError, RuntimeError) as exc:
        raise RealSpeechUnavailable(f"--speech real: {exc}") from exc
    for item in left_out:
        print(f"LEFT OUT  {item.scenario:<52} {item.why}", file=out, flush=True)
    if not variants:
        raise RealSpeechUnavailable("--speech real: none of the chosen scenarios runs with it")
    print(
        f"real speech: {len(variants)} scenario(s), {len(left_out)} left out; recordings and "
        f"reference transcriptions ready in {time.perf_counter() - started:.1f}s",
        file=out,
        flush=True,
    )
    return variants
